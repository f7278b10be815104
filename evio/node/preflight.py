"""What the daemon needs from the host, checked before it changes anything.

Each check gives a sentence that says what is missing and how to get it, so
`evio run` can exit at once with a clear message instead of failing half-way
through building a bridge. The host is reached through `HostProbe`, so the
rules are unit-tested without root (see tests/unit/node/test_node_parts.py).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from evio.bridge.ovs_paths import DB_SOCKET, VSWITCHD_PIDFILE, ovs_run_dir

TUN_DEVICE = Path("/dev/net/tun")
PROGRAMS = ("ovs-vsctl", "ip")
OS_KEN_MODULES = ("os_ken.base.app_manager", "os_ken.ofproto.ofproto_v1_3")
PROBE_TIMEOUT = 5


class HostProbe(Protocol):
    def euid(self) -> int: ...

    def which(self, program: str) -> str | None: ...

    def exists(self, path: Path) -> bool: ...

    def run(self, argv: Sequence[str]) -> tuple[int, str]:
        """Exit status and stderr of `argv` (status -1 if it could not run or timed out)."""
        ...

    def can_import(self, module: str) -> str | None:
        """None if `module` imports, else why not."""
        ...

    def read_text(self, path: Path) -> str | None: ...


class LinuxProbe:
    def euid(self) -> int:
        return os.geteuid()

    def which(self, program: str) -> str | None:
        return shutil.which(program)

    def exists(self, path: Path) -> bool:
        return path.exists()

    def run(self, argv: Sequence[str]) -> tuple[int, str]:
        try:
            done = subprocess.run(list(argv), capture_output=True, text=True, timeout=PROBE_TIMEOUT + 2, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return -1, str(exc)
        return done.returncode, done.stderr

    def can_import(self, module: str) -> str | None:
        if module.partition(".")[0] == "os_ken":
            from evio.sdn.osken_imports import trim_os_ken

            trim_os_ken()  # loaded here first: as the adapter loads it, OpenFlow 1.3 only
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - an import can fail in many ways; all mean "missing"
            return f"{type(exc).__name__}: {exc}"
        return None

    def read_text(self, path: Path) -> str | None:
        try:
            return path.read_text()
        except OSError:
            return None


@dataclass(frozen=True)
class PreflightProblem:
    what: str  # short name: root, tun, program, ovsdb, vswitchd, os-ken
    reason: str  # a sentence for the user

    def __str__(self) -> str:
        return self.reason


def preflight(probe: HostProbe) -> list[PreflightProblem]:
    """Every reason the daemon cannot run here (empty: go ahead)."""
    problems: list[PreflightProblem] = []
    if probe.euid() != 0:
        problems.append(PreflightProblem("root", "must run as root (it creates TAP devices and manages Open vSwitch bridges)"))
    if not probe.exists(TUN_DEVICE):
        problems.append(PreflightProblem("tun", f"{TUN_DEVICE} is missing (load the tun module: modprobe tun)"))
    missing = [p for p in PROGRAMS if probe.which(p) is None]
    for program in missing:
        package = "iproute2" if program == "ip" else "openvswitch-switch"
        problems.append(PreflightProblem("program", f"{program} not found on PATH (install the {package} package)"))
    if "ovs-vsctl" not in missing:
        status, err = probe.run(["ovs-vsctl", f"--timeout={PROBE_TIMEOUT}", "show"])
        if status != 0:
            problems.append(PreflightProblem(
                "ovsdb",
                f"cannot reach OVSDB at {ovs_run_dir() / DB_SOCKET} ({_first_line(err)}); "
                "start Open vSwitch (systemctl start openvswitch-switch)",
            ))
        else:
            why = vswitchd_missing(probe, ovs_run_dir())
            if why is not None:
                problems.append(PreflightProblem(
                    "vswitchd", f"ovs-vswitchd is not running ({why}); start Open vSwitch (systemctl start openvswitch-switch)"
                ))
    for module in OS_KEN_MODULES:
        why = probe.can_import(module)
        if why is not None:
            problems.append(PreflightProblem("os-ken", f"cannot import {module} ({why}); install os-ken (pip install os-ken)"))
            break
    return problems


def vswitchd_missing(probe: HostProbe, run_dir: Path) -> str | None:
    """None if the ovs-vswitchd named by the pidfile in `run_dir` runs, else why we think it does not.

    (The pidfile is how `ovs-appctl -t ovs-vswitchd` finds it too; a bridge
    change would otherwise wait for a switch that never comes.)
    """
    pidfile = run_dir / VSWITCHD_PIDFILE
    text = probe.read_text(pidfile)
    if text is None:
        return f"no {pidfile}"
    pid = text.strip()
    if not pid.isdigit():
        return f"{pidfile} holds no pid"
    comm = probe.read_text(Path(f"/proc/{pid}/comm"))
    if comm is None or comm.strip() != "ovs-vswitchd":
        return f"pid {pid} from {pidfile} is not running"
    return None


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "no output"
