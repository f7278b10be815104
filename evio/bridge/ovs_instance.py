"""A private ovsdb-server + ovs-vswitchd pair in one network namespace.

Each instance has its own run/db/log/etc directories under `base_dir`, so
several can run side by side (one per lab node). vswitchd runs inside the
namespace because the netdev datapath creates its TAPs (`ovs-netdev` and the
internal ports) in the namespace it runs in. Blocking calls: use it from a
thread or before an event loop starts.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path

from evio.bridge.commands import BridgeError, CommandError
from evio.bridge.ovs_paths import DB_SOCKET, VSWITCHD_PIDFILE

log = logging.getLogger(__name__)

VSWITCH_SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
_DAEMONS = ("ovs-vswitchd", "ovsdb-server")  # stop order: the switch before its database


class OvsInstance:
    def __init__(
        self,
        base_dir: Path,
        netns: str | None = None,
        userspace_tso: bool = True,
        schema: Path = VSWITCH_SCHEMA,
    ) -> None:
        self.base_dir = base_dir
        self.netns = netns
        self.userspace_tso = userspace_tso
        self.schema = schema
        self.run_dir = base_dir / "run"
        self.db_dir = base_dir / "db"
        self.log_dir = base_dir / "log"
        self.etc_dir = base_dir / "etc"
        if len(str(self.db_socket)) > 100:  # sun_path holds 108 bytes
            raise BridgeError(f"{self.db_socket} is too long for a Unix socket path")

    @property
    def db_socket(self) -> Path:
        return self.run_dir / DB_SOCKET

    @property
    def env(self) -> dict[str, str]:
        """Environment that points OVS tools at this instance."""
        return {
            **os.environ,
            "OVS_RUNDIR": str(self.run_dir),
            "OVS_DBDIR": str(self.db_dir),
            "OVS_LOGDIR": str(self.log_dir),
            "OVS_SYSCONFDIR": str(self.etc_dir),
        }

    def vsctl(self, *args: str) -> str:
        return self._run(["ovs-vsctl", "--timeout=10", f"--db=unix:{self.db_socket}", *args])

    def ofctl(self, *args: str) -> str:
        """ovs-ofctl (OpenFlow 1.3) against a bridge of this instance: ofctl("dump-flows", "br0")."""
        command, bridge, *rest = args
        return self._run(["ovs-ofctl", "-O", "OpenFlow13", command, f"unix:{self.run_dir / bridge}.mgmt", *rest])

    def pid(self, daemon: str) -> int | None:
        """The daemon's PID from its pidfile, if that process is still that daemon (pidfiles go stale)."""
        try:
            pid = int((self.run_dir / f"{daemon}.pid").read_text().strip())
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except (OSError, ValueError):
            return None
        return pid if comm == daemon else None

    def start(self) -> None:
        """Create the database and start both daemons; on any failure, stop what was started."""
        try:
            self.start_ovsdb()
            self.vsctl("--no-wait", "init")
            if self.userspace_tso:
                # Read by vswitchd at start only, so it goes in before vswitchd starts.
                self.vsctl("--no-wait", "set", "Open_vSwitch", ".", "other_config:userspace-tso-enable=true")
            self.start_vswitchd()
        except BaseException:
            self.stop()
            raise
        log.info("ovs instance started netns=%s dir=%s vswitchd=%s ovsdb=%s", self.netns, self.base_dir,
                 self.pid("ovs-vswitchd"), self.pid("ovsdb-server"))

    def start_ovsdb(self) -> None:
        """Start ovsdb-server on this instance's database (created if missing), e.g. again after it died."""
        for d in (self.run_dir, self.db_dir, self.log_dir, self.etc_dir):
            d.mkdir(parents=True, exist_ok=True)
        db = self.db_dir / "conf.db"
        if not db.exists():
            self._run(["ovsdb-tool", "create", str(db), str(self.schema)])
        self._run(self._in_netns([
            "ovsdb-server", str(db), f"--remote=punix:{self.db_socket}",
            f"--pidfile={self.run_dir / 'ovsdb-server.pid'}",
            f"--unixctl={self.run_dir / 'ovsdb-server.ctl'}",
            f"--log-file={self.log_dir / 'ovsdb-server.log'}",
            "-vconsole:off", "--detach", "--no-chdir",
        ]))  # fmt: skip

    def start_vswitchd(self) -> None:
        """Start ovs-vswitchd against this instance's ovsdb-server, e.g. again after it died."""
        self._run(self._in_netns([
            "ovs-vswitchd", f"unix:{self.db_socket}",
            f"--pidfile={self.run_dir / VSWITCHD_PIDFILE}",
            f"--unixctl={self.run_dir / 'ovs-vswitchd.ctl'}",
            f"--log-file={self.log_dir / 'ovs-vswitchd.log'}",
            "-vconsole:off", "--detach", "--no-chdir",
        ]))  # fmt: skip

    def kill(self, daemon: str) -> int | None:
        """SIGKILL one of the daemons (a crash, for fault tests) and wait until it is gone; its PID, if it ran."""
        if daemon not in _DAEMONS:
            raise ValueError(f"not an Open vSwitch daemon: {daemon!r}")
        pid = self.pid(daemon)
        if pid is None:
            return None
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 5.0)
        return pid

    def stop(self, timeout: float = 5.0) -> None:
        """Ask each daemon to exit, then signal it by PID if it does not; idempotent."""
        for daemon in _DAEMONS:
            pid = self.pid(daemon)
            if pid is None or not _alive(pid):
                continue
            try:
                self._run(["ovs-appctl", "-T", "5", "-t", str(self.run_dir / f"{daemon}.ctl"), "exit"])
            except CommandError as err:
                log.warning("ovs-appctl exit failed daemon=%s: %s", daemon, err)
            if not _wait_gone(pid, timeout):
                os.kill(pid, signal.SIGTERM)
                if not _wait_gone(pid, timeout):
                    os.kill(pid, signal.SIGKILL)
                    _wait_gone(pid, timeout)
            log.info("ovs daemon stopped daemon=%s pid=%s", daemon, pid)

    def __enter__(self) -> OvsInstance:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _in_netns(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv] if self.netns else argv

    def _run(self, argv: list[str]) -> str:
        try:
            done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise CommandError(argv, -1, str(err)) from err
        if done.returncode != 0:
            raise CommandError(argv, done.returncode, done.stderr)
        return done.stdout


def _alive(pid: int) -> bool:
    """True while `pid` runs. An exited daemon waiting for its reaper (a zombie) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state letter follows the parenthesised command name, which may itself hold spaces.
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return not _alive(pid)
