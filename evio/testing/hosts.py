"""Simulated Debian hosts: a network namespace each, with its own /etc/evio, /var/lib/prosody, ...

A test that types an operator's commands verbatim (`evio server init`, `evio join TOKEN`) needs every
host to have its own copy of the directories those commands write. A `Host` is a network namespace
plus a private view of the paths in `HOST_PATHS`; every command runs as

    ip netns exec NS  unshare --uts  sh -c 'mount -a -T FSTAB && hostname NAME && cd CWD && exec "$@"'  argv...

`ip netns exec` already gives each command a new mount namespace whose root is a slave of the real
one, so the binds made in it stay in it: the real root's mount table never shows them. The backing
directories live under the host's `root` (in the test's work directory) and `host.path("/etc/evio/x")`
names the real file behind a host path, so a test can read it. A mount point missing on the real
root (/etc/evio, /run/openvswitch, ...) is created for the bind and removed again by the last
harness that needs it (`evio.testing.mount_points`).

Commands run as root in /root (the host's own, with the real /root's subdirectories bound in, so
a venv whose interpreter lives under /root still runs), with the test's environment minus systemd's
variables and with this interpreter's bin directory first on PATH: `evio` is the evio under test.
Processes a host spawns run in their own process group; `stop_processes` ends them (SIGTERM to the
group, wait, SIGKILL) and then anything still left in the namespace, by PID.
Nothing here uses `evio.lab` (an import contract holds it): operator tests run without the lab.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pwd
import shlex
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evio.testing.waiting import holds_within

__all__ = ["HOST_PATHS", "Host", "HostCommandError", "HostPath", "HostProcess", "Namespace", "netns_list"]

log = logging.getLogger(__name__)

Seed = Literal["empty", "copy", "skeleton", "home"]


@dataclass(frozen=True)
class HostPath:
    """A path a host keeps to itself. seed: "empty" (a fresh dir or file with the real one's owner and
    mode), "copy" (the real root's contents, as the package left them), "skeleton" (the real dir's
    subdirectories, empty, with their owners: /var/log), "home" (fresh, with the real dir's
    subdirectories bound in: /root)."""

    path: str
    seed: Seed = "empty"
    is_file: bool = False


# What a Debian host with evio, prosody, ejabberd, coturn and Open vSwitch keeps per host. /var/run is
# a link to /run, so /run/openvswitch also covers OVS's default /var/run/openvswitch/db.sock.
HOST_PATHS: tuple[HostPath, ...] = (
    HostPath("/etc/evio"),
    HostPath("/etc/evio-server"),
    HostPath("/var/lib/evio"),
    HostPath("/run/evio"),
    HostPath("/etc/prosody", "copy"),
    HostPath("/var/lib/prosody"),
    HostPath("/run/prosody"),
    HostPath("/etc/ejabberd", "copy"),
    HostPath("/etc/default/ejabberd", "copy", is_file=True),  # /etc/ejabberd/ejabberdctl.cfg links here
    HostPath("/var/lib/ejabberd"),
    HostPath("/run/ejabberd"),
    HostPath("/etc/turnserver.conf", "copy", is_file=True),
    HostPath("/var/lib/turn"),
    HostPath("/etc/openvswitch", "copy"),  # Debian's conf.db is a link into /var/lib/openvswitch
    HostPath("/var/lib/openvswitch"),
    HostPath("/run/openvswitch"),
    HostPath("/var/log", "skeleton"),
    HostPath("/var/tmp"),  # coturn falls back to /var/tmp for its log; units have PrivateTmp
    HostPath("/run/systemd"),  # empty: tools see no systemd (no /run/systemd/system)
    # The operator's working directory: files written there stay on the host, while the real /root's
    # subdirectories (a pyenv behind the venv's python, say) still show. Not an overlay: two overlays
    # sharing an upper directory (two commands on one host) see each other's writes late, if at all.
    HostPath("/root", "home"),
    HostPath("/etc/hosts", "copy", is_file=True),
    HostPath("/etc/hostname", is_file=True),
)

# Variables that would make a tool believe it runs under systemd.
_SYSTEMD_ENV = ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "INVOCATION_ID", "JOURNAL_STREAM")


class HostCommandError(subprocess.CalledProcessError):
    """A command on a host exited non-zero; str() names the host and quotes its stderr."""

    def __init__(self, host: str, done: subprocess.CompletedProcess[str]) -> None:
        super().__init__(done.returncode, done.args, done.stdout, done.stderr)
        self.host = host

    def __str__(self) -> str:
        argv = " ".join(self.cmd) if isinstance(self.cmd, list) else str(self.cmd)
        return f"on {self.host}: `{argv}` exited {self.returncode}\nstdout: {self.stdout}\nstderr: {self.stderr}"


# -- processes ---------------------------------------------------------------------------------------


@dataclass
class HostProcess:
    """A process spawned on a host, in its own process group, its output in `log`."""

    host: str
    argv: tuple[str, ...]
    log: Path
    popen: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        """The last lines of its output, for a failure message."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM to its process group (a shell's children too), wait until no member runs, then
        SIGKILL; its exit code. Idempotent. The group is its own (start_new_session), so nothing
        else is signalled."""
        group = self.popen.pid

        def gone() -> bool:
            self.popen.poll()  # reap the leader as soon as it exits
            return not _group_members(group)

        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not _group_members(group):
                break
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                break
            holds_within(gone, timeout)
        return self.popen.wait(timeout)


# -- namespaces and hosts ------------------------------------------------------------------------------


class Namespace:
    """A network namespace on the real root's file system (routers, the public segment)."""

    def __init__(self, netns: str) -> None:
        self.netns = netns

    def create(self) -> None:
        _check(["ip", "netns", "add", self.netns])
        _check(["ip", "-n", self.netns, "link", "set", "lo", "up"])

    def ip(self, *lines: str) -> None:
        """`ip -n NS -batch -`: several iproute2 commands in one process."""
        _check(["ip", "-n", self.netns, "-batch", "-"], input="\n".join(lines) + "\n")

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def run(
        self, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.exec_argv(argv), input=input, capture_output=True, text=True, timeout=timeout)
        done.args = list(argv)
        if check and done.returncode != 0:
            raise HostCommandError(self.netns, done)
        return done

    def pids(self) -> list[int]:
        """Every process whose network namespace is this one (what `ip netns pids` finds)."""
        out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def end_processes(self, timeout: float = 5.0) -> list[int]:
        """SIGTERM, wait, SIGKILL every process left in the namespace (daemons that detached); their PIDs."""
        pids = self.pids()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            live = [pid for pid in pids if _alive(pid)]
            for pid in live:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            holds_within(functools.partial(_all_gone, live), timeout)
        return pids

    def add_veth(self, name: str, peer: Namespace, peer_name: str) -> None:
        """A veth pair from here (`name`) to `peer` (`peer_name`), both ends made in their namespaces:
        no name ever appears in the real root, so none can be left there."""
        _check(["ip", "link", "add", name, "netns", self.netns, "type", "veth",
                "peer", "name", peer_name, "netns", peer.netns])  # fmt: skip

    def delete(self) -> None:
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)


class Host(Namespace):
    """A simulated host: a network namespace, a host name and its own copy of `paths`."""

    def __init__(self, netns: str, hostname: str, root: Path, paths: Sequence[HostPath] = HOST_PATHS) -> None:
        super().__init__(netns)
        self.name = hostname
        self.root = root  # backing tree: root/etc/evio is the host's /etc/evio
        self.paths = tuple(paths)
        self.address = ""  # its own interface address, set by whoever wires it
        self.public_address = ""  # where the internet sees it: its NAT router's, or its own
        self.ipv6_address = ""  # its IPv6 address on the internet (no NAT for IPv6), if it has one
        self.processes: list[HostProcess] = []
        self._fstab = root.parent / f"{hostname}.fstab"
        self._logs = root.parent / f"{hostname}-logs"

    def __repr__(self) -> str:
        return f"Host({self.name!r}, netns={self.netns!r}, address={self.address!r})"

    # -- the private file system -------------------------------------------------------------------

    def seed(self) -> None:
        """Fill the backing tree as a fresh Debian install with the packages would have it; write the fstab."""
        self._logs.mkdir(parents=True, exist_ok=True)
        entries = []
        for hp in self.paths:
            backing = self.path(hp.path)
            _seed(Path(hp.path), backing, hp)
            if any(c.isspace() or c in ",:" for c in str(backing)):
                raise ValueError(f"fstab cannot hold a path with blanks, commas or colons: {backing}")
            if hp.seed == "home":
                # Its subdirectories first, onto their mount points in the backing tree, which then
                # goes over the real one with them (rbind): they are still the real root's.
                subdirs = [d for d in sorted(Path(hp.path).iterdir()) if d.is_dir() and not d.is_symlink()]
                entries += [f"{d} {backing / d.name} none bind,nofail 0 0\n" for d in subdirs if " " not in d.name]
                entries.append(f"{backing} {hp.path} none rbind 0 0\n")
            else:
                entries.append(f"{backing} {hp.path} none bind 0 0\n")
        self.path("/etc/hostname").write_text(self.name + "\n")
        with self.path("/etc/hosts").open("a") as hosts:
            hosts.write(f"127.0.1.1\t{self.name}\n")
        self._fstab.write_text("".join(entries))

    def path(self, host_path: str | os.PathLike[str]) -> Path:
        """The real file behind `host_path` on this host (which must lie in one of its private paths)."""
        p = Path(host_path)
        if not p.is_absolute():
            raise ValueError(f"not an absolute path: {p}")
        if not any(p == Path(hp.path) or Path(hp.path) in p.parents for hp in self.paths):
            raise ValueError(f"{p} is not private to a host: it is the real root's")
        return self.root / p.relative_to("/")

    def add_hosts_entry(self, address: str, *names: str) -> None:
        with self.path("/etc/hosts").open("a") as hosts:
            hosts.write(f"{address}\t{' '.join(names)}\n")

    # -- commands --------------------------------------------------------------------------------

    def exec_argv(self, argv: Sequence[str], *, cwd: str = "/root", user: str | None = None) -> list[str]:
        script = f'mount -a -T {shlex.quote(str(self._fstab))} && hostname {self.name} && cd "$1" && shift && exec "$@"'
        run_as = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"] if user else []
        return ["ip", "netns", "exec", self.netns, "unshare", "--uts", "--", "sh", "-c", script,
                self.name, cwd, *run_as, *argv]  # fmt: skip

    def env(self, extra: Mapping[str, str] | None = None, user: str | None = None) -> dict[str, str]:
        """The environment of an operator's root shell (or of a unit running as `user`): the test's,
        without systemd's variables, with this interpreter's bin directory (the `evio` under test) first."""
        env = {k: v for k, v in os.environ.items() if k not in _SYSTEMD_ENV}
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        account = pwd.getpwnam(user or "root")
        env.update(HOME=account.pw_dir, USER=account.pw_name, LOGNAME=account.pw_name)
        env.update(extra or {})
        return env

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 60.0,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = "/root",
        user: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` on this host and wait; HostCommandError if `check` and it exits non-zero."""
        done = subprocess.run(
            self.exec_argv(argv, cwd=cwd, user=user),
            input=input, capture_output=True, text=True, timeout=timeout, env=self.env(env, user),
        )  # fmt: skip
        done.args = list(argv)
        if check and done.returncode != 0:
            raise HostCommandError(self.name, done)
        return done

    def spawn(
        self,
        argv: Sequence[str],
        *,
        log: Path | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = "/root",
        user: str | None = None,
    ) -> HostProcess:
        """Start `argv` on this host in its own process group, stdout and stderr to `log`; ended by
        `stop_processes` (the harness calls it at cleanup) unless stopped before."""
        if log is None:
            log = self._logs / f"{Path(argv[0]).name}-{len(self.processes)}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            popen = subprocess.Popen(
                self.exec_argv(argv, cwd=cwd, user=user),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=self.env(env, user), start_new_session=True,
            )  # fmt: skip
        process = HostProcess(self.name, tuple(argv), log, popen)
        self.processes.append(process)
        return process

    def stop_processes(self, timeout: float = 10.0) -> None:
        """End what `spawn` started (newest first), then whatever is left in the namespace."""
        for process in reversed(self.processes):
            process.stop(timeout)
        self.end_processes()


def _seed(real: Path, backing: Path, hp: HostPath) -> None:
    backing.parent.mkdir(parents=True, exist_ok=True)
    if hp.seed == "home":
        backing.mkdir()
        _copy_owner(real, backing)
        for entry in real.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                (backing / entry.name).mkdir()  # a mount point for the real one
        return
    if hp.seed == "copy" and (real.exists() or real.is_symlink()):
        # cp -a keeps owners, modes and symlinks (prosody's certs, OVS's conf.db link) as the package left them
        _check(["cp", "-a", "--no-target-directory", str(real), str(backing)])
        _warn_if_modified(real)
        return
    if hp.is_file:
        backing.touch()
        _copy_owner(real, backing)
        return
    backing.mkdir(exist_ok=True)
    _copy_owner(real, backing)
    if hp.seed == "skeleton" and real.is_dir():
        for sub in real.iterdir():
            if sub.is_dir() and not sub.is_symlink():
                (backing / sub.name).mkdir(exist_ok=True)
                _copy_owner(sub, backing / sub.name)


def _warn_if_modified(real: Path) -> None:
    """Hosts should look freshly installed: say so if the real root's copy of a package's conffile
    was changed (by a command that should have run on a simulated host, say)."""
    for conffile, digest in _package_conffiles().items():
        path = Path(conffile)
        inside = path == real or real in path.parents
        if inside and path.is_file() and hashlib.md5(path.read_bytes()).hexdigest() != digest:
            log.warning("%s differs from what its package shipped: simulated hosts get this copy", path)


@functools.cache
def _package_conffiles() -> dict[str, str]:
    """Every installed package's conffiles with their md5 as shipped (dpkg's record)."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${Conffiles}\\n"], capture_output=True, text=True).stdout
    return {f[0]: f[1] for f in (line.split() for line in out.splitlines()) if len(f) >= 2 and f[0].startswith("/")}


def _copy_owner(real: Path, backing: Path) -> None:
    try:
        st = real.stat()
    except OSError:
        return
    os.chown(backing, st.st_uid, st.st_gid)
    os.chmod(backing, st.st_mode & 0o7777)


def _all_gone(pids: list[int]) -> bool:
    return not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    """True while `pid` runs; a zombie counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _group_members(group: int) -> list[int]:
    """The running (not zombie) processes of process group `group`."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[2]) == group and fields[0] not in ("Z", "X"):
                members.append(int(entry))
    return members


def netns_list() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _check(argv: Sequence[str], *, input: str | None = None) -> str:
    done = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise HostCommandError("the real root", done)
    return done.stdout

