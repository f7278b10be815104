"""The lab's narrow interface to the host: namespaces, links, sysctls, nft, tc, processes.

`Host` is what the lab needs from the OS; `LinuxHost` does it for real and
evio/testing/lab_host.py fakes it. LinuxHost drives iproute2 and nft as
subprocesses rather than through pyroute2, because:

- pyroute2's sync API fails inside a running asyncio loop, and the lab is used from async integration tests;
- `ip -batch` applies a whole namespace's configuration in one process, which
  is as fast as netlink calls from Python at this scale;
- nftables has no pyroute2 equivalent, so `nft -f` is needed anyway;
- the commands in the log are what a person types to reproduce or inspect.

Sysctls are written from a short-lived thread that has entered the namespace
(`setns` changes only the calling thread): no process per namespace.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from evio.lab.errors import LabCommandError, LabPermissionError
from evio.lab.state import ProcessRecord
from evio.lab.wiring import IpBatch

log = logging.getLogger(__name__)

NETNS_DIR = Path("/run/netns")
_CLONE_NEWNET = 0x40000000
_COMMAND_TIMEOUT = 60.0
_REAP_WAIT = 3.0  # seconds; a normal init reaps at once, this VM's init about once a second
REQUIRED_TOOLS = ("ip", "nft", "tc", "prosody", "prosodyctl", "turnserver")

T = TypeVar("T")

# Every service this process started, whichever LinuxHost started it, so that any
# LinuxHost (e.g. the one in a later Lab.down) can reap it once it is stopped.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class Host(Protocol):
    """What the lab needs from the machine. Namespace None means the root namespace."""

    def check_ready(self) -> None:
        """Raise LabPermissionError unless root with every required tool installed."""

    def netns_list(self) -> list[str]: ...

    def ip_batch(self, batch: IpBatch, *, force: bool = False) -> None:
        """Run `ip -batch`; with force, keep going after a failing line and do not raise."""

    def tc_batch(self, netns: str, lines: Sequence[str]) -> None: ...

    def nft(self, netns: str, ruleset: str) -> None: ...

    def sysctl(self, netns: str, settings: Mapping[str, str]) -> None:
        """Write /proc/sys/<path> = value inside `netns`."""

    def raise_host_sysctls(self, floors: Mapping[str, int]) -> dict[str, int]:
        """Raise root-namespace /proc/sys/<path> integers to at least their floor, never lower one;
        return the ones raised, with their new values."""

    def root_links(self) -> list[str]:
        """Interface names in the root namespace."""

    def run(self, netns: str | None, argv: Sequence[str], *, input: str | None = None,
            timeout: float = _COMMAND_TIMEOUT, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run to completion, output captured; with check, raise LabCommandError on a non-zero exit."""

    def spawn(self, role: str, netns: str | None, argv: Sequence[str], log_path: Path) -> ProcessRecord:
        """Start a long-running process in its own session with output to `log_path`."""

    def is_running(self, record: ProcessRecord) -> bool:
        """True while that very process (pid and start time) is alive and not a zombie."""

    def processes_in(self, namespaces: Sequence[str]) -> list[ProcessRecord]:
        """Every process (except this one) whose network namespace is one of `namespaces`."""

    def stop(self, records: Sequence[ProcessRecord], grace: float) -> list[ProcessRecord]:
        """SIGTERM, then SIGKILL after `grace` seconds; return those still alive after that."""

    def listening(self, pid: int, proto: str, port: int) -> bool:
        """True if the namespace of `pid` has a `proto` ("tcp"/"udp") socket bound to `port`."""


class LinuxHost:
    """The real host: iproute2, nft, tc and /proc."""

    def check_ready(self) -> None:
        if os.geteuid() != 0:
            raise LabPermissionError(
                "needs root (it creates network namespaces, nftables rules and qdiscs); run it with sudo"
            )
        missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
        if missing:
            raise LabPermissionError(
                f"needs {', '.join(missing)} (packages iproute2 nftables prosody coturn); run scripts/bootstrap"
            )

    def netns_list(self) -> list[str]:
        try:
            return sorted(os.listdir(NETNS_DIR))
        except FileNotFoundError:
            return []

    def ip_batch(self, batch: IpBatch, *, force: bool = False) -> None:
        if not batch.lines:
            return
        argv = ["ip"] + (["-n", batch.netns] if batch.netns else []) + (["-force"] if force else []) + ["-batch", "-"]
        text = "\n".join(batch.lines) + "\n"
        if force:
            result = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT)
            if result.returncode != 0:
                log.debug("ignored: %s: %s", " ".join(argv), result.stderr.strip())
            return
        self._run(argv, input=text)

    def tc_batch(self, netns: str, lines: Sequence[str]) -> None:
        self._run(["tc", "-n", netns, "-batch", "-"], input="\n".join(lines) + "\n")

    def nft(self, netns: str, ruleset: str) -> None:
        self._run(["ip", "netns", "exec", netns, "nft", "-f", "-"], input=ruleset)

    def sysctl(self, netns: str, settings: Mapping[str, str]) -> None:
        def write() -> None:
            for path, value in settings.items():
                Path("/proc/sys", path).write_text(value)

        run_in(netns, write)

    def raise_host_sysctls(self, floors: Mapping[str, int]) -> dict[str, int]:
        raised = {}
        for path, floor in floors.items():
            file = Path("/proc/sys", path)
            if int(file.read_text()) < floor:
                file.write_text(str(floor))
                raised[path] = floor
        return raised

    def root_links(self) -> list[str]:
        return sorted(name for _, name in socket.if_nameindex())

    def run(self, netns: str | None, argv: Sequence[str], *, input: str | None = None,
            timeout: float = _COMMAND_TIMEOUT, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run(_in_netns(netns, argv), input=input, timeout=timeout, check=check)

    def spawn(self, role: str, netns: str | None, argv: Sequence[str], log_path: Path) -> ProcessRecord:
        full = _in_netns(netns, argv)
        with open(log_path, "ab") as out:
            # Own session: a Ctrl-C in the terminal reaches `evio lab up`, which then
            # stops the services itself, in order, instead of racing it.
            proc = subprocess.Popen(
                full, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        _CHILDREN[proc.pid] = proc
        # `ip netns exec` execs the command in place, so the pid is the service's own.
        starttime = _starttime(proc.pid)
        if starttime is None:  # already gone; is_running() will say so
            starttime = -1
        log.info("started %s pid %s: %s", role, proc.pid, " ".join(full))
        return ProcessRecord(role=role, pid=proc.pid, starttime=starttime, netns=netns, argv=tuple(argv))

    def _still_running(self, records: list[ProcessRecord]) -> list[ProcessRecord]:
        return [r for r in records if self.is_running(r)]

    def is_running(self, record: ProcessRecord) -> bool:
        self._reap()
        stat = _read_stat(record.pid)
        return stat is not None and stat[1] == record.starttime and stat[0] != "Z"

    def processes_in(self, namespaces: Sequence[str]) -> list[ProcessRecord]:
        wanted: dict[tuple[int, int], str] = {}
        for ns in namespaces:
            try:
                st = os.stat(NETNS_DIR / ns)
            except FileNotFoundError:
                continue
            wanted[(st.st_dev, st.st_ino)] = ns
        if not wanted:
            return []
        found = []
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            pid = int(entry)
            try:
                st = os.stat(f"/proc/{pid}/ns/net")
            except OSError:  # gone, or a kernel thread
                continue
            owner = wanted.get((st.st_dev, st.st_ino))
            if owner is None:
                continue
            stat = _read_stat(pid)
            if stat is None or stat[0] == "Z":
                continue
            found.append(ProcessRecord(role="found", pid=pid, starttime=stat[1], netns=owner, argv=_cmdline(pid)))
        return found

    def stop(self, records: Sequence[ProcessRecord], grace: float) -> list[ProcessRecord]:
        targets = [r for r in records if r.pid != os.getpid() and self.is_running(r)]
        alive = targets
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            for record in alive:
                log.debug("%s pid %s (%s)", sig.name, record.pid, record.role)
                try:
                    os.kill(record.pid, sig)
                except ProcessLookupError:
                    pass
            alive = _poll_until(functools.partial(self._still_running, alive), wait)
            if not alive:
                break
        # Services outlive `evio lab up`, so init inherits them and must reap them. Wait (briefly) for
        # that, so a process listing right after `down` shows no <defunct> entries of the lab either.
        _poll_until(lambda: [r for r in targets if self._exists(r)], _REAP_WAIT)
        return alive

    def _exists(self, record: ProcessRecord) -> bool:
        self._reap()
        stat = _read_stat(record.pid)
        return stat is not None and stat[1] == record.starttime

    def listening(self, pid: int, proto: str, port: int) -> bool:
        try:
            text = Path(f"/proc/{pid}/net/{proto}").read_text()
        except OSError:
            return False
        wanted = f":{port:04X}"
        for line in text.splitlines()[1:]:
            fields = line.split()
            # TCP: state 0A is LISTEN; UDP sockets are bound (state 07) once they can receive.
            if len(fields) > 3 and fields[1].endswith(wanted) and (proto != "tcp" or fields[3] == "0A"):
                return True
        return False

    def _reap(self) -> None:
        for pid, proc in list(_CHILDREN.items()):
            if proc.poll() is not None:
                del _CHILDREN[pid]

    def _run(
        self, argv: list[str], *, input: str | None = None, timeout: float = _COMMAND_TIMEOUT, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        log.debug("run: %s", " ".join(argv))
        try:
            result = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError as exc:
            raise LabCommandError(argv, 127, str(exc)) from exc
        except subprocess.TimeoutExpired as exc:
            raise LabCommandError(argv, -1, f"timed out after {timeout} s") from exc
        if check and result.returncode != 0:
            raise LabCommandError(argv, result.returncode, result.stderr or result.stdout, input)
        return result


def _in_netns(netns: str | None, argv: Sequence[str]) -> list[str]:
    return ["ip", "netns", "exec", netns, *argv] if netns else list(argv)


def _read_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of a process, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name in parentheses may itself contain spaces and ")".
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def _starttime(pid: int) -> int | None:
    stat = _read_stat(pid)
    return None if stat is None else stat[1]


def _cmdline(pid: int) -> tuple[str, ...]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ()
    return tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def _poll_until(check: Callable[[], list[ProcessRecord]], timeout: float) -> list[ProcessRecord]:
    deadline = time.monotonic() + timeout
    remaining = check()
    while remaining and time.monotonic() < deadline:
        time.sleep(0.01)
        remaining = check()
    return remaining


_libc = ctypes.CDLL(None, use_errno=True)


def run_in(netns: str, fn: Callable[[], T]) -> T:
    """Call `fn` in a new thread that has entered network namespace `netns`; return its result.

    Sockets `fn` creates stay in that namespace after it returns, and
    subprocesses it starts run there. The calling thread is not affected.
    """
    outcome: list[T] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            fd = os.open(NETNS_DIR / netns, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({netns}): {os.strerror(err)}")
            finally:
                os.close(fd)
            outcome.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            failure.append(exc)

    thread = threading.Thread(target=body, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def socket_in(netns: str, family: int = socket.AF_INET, type: int = socket.SOCK_DGRAM) -> socket.socket:
    """A socket created inside `netns` (usable from any thread afterwards)."""
    return run_in(netns, lambda: socket.socket(family, type))

