"""`evio netcheck --server`: are the server settings `evio server init` wrote still in effect (issue 24)?

On the server host, from what init saved (the command line reads ``server.json`` and hands over a
`ServerTarget`: this package does not import `evio.server`), one verdict each, in netcheck's shape:

* the XMPP server's config still has the listen backlog, and the shaper/limits and caches, init wrote;
* the running XMPP server's open-files limit covers the members (one descriptor per session: at 1,000
  members an ejabberd started by hand as root, with 1,024, failed every accept in a loop);
* the kernel's ``net.core.somaxconn`` is not below the backlog (the kernel silently caps a backlog to it);
* coturn's config keeps ``no-tcp-relay`` and every denied-peer range init writes.

Which process is the server (review21l L3: any local user could run a decoy named like it, `~/beam.smp -s
ejabberd <config>` with `ulimit -n 65536`, and have its limit reported as the server's):

1. only a process owned by root or the server's packaged user (every uid in `/proc/PID/status`), whose
   executable (`/proc/PID/exe`) is the server's installed one (`beam.smp`, a Lua interpreter for prosody) under
   a system directory, may stand for it; a process that looks like the server but is not is named in the
   verdict ("passed over"), never used;
2. of those: the one prosody's pidfile names (from its config); else the ones started with this config (on the
   command line, or ejabberdctl's EJABBERD_CONFIG_PATH); else the service manager's (systemd's MainPID of the
   unit, or the server below it: ejabberd's unit runs `sh -c ejabberdctl`); else all of them;
3. when several remain, the lowest open-files limit is judged and each process is named with its own.

The host is read through `HostReader` so the unit tests give a fake /proc.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import yaml

from evio.netcheck.findings import EXIT_OK, EXIT_UNREACHABLE, Verdict

BACKLOG = 1024  # what `evio server init` writes for both XMPP servers (evio.server.configs)
EJABBERD_CACHE_SIZE = 10000
OPEN_FILES_HEADROOM = 64  # the server's own descriptors beside one per member session
OPEN_FILES_SIZED = 4096  # below this, a storm of the ~1,000 members evio sizes for runs out (init writes 65,536)
# Where an installed server's executable lives: directories only root writes to (a user's copy is elsewhere).
SYSTEM_DIRS = ("/usr/", "/opt/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/nix/store/", "/snap/")
PASSED_OVER_SHOWN = 4  # look-alike processes named in a verdict, then a count


@dataclass(frozen=True)
class ServerTarget:
    """What init saved about this host (the fields of `ServerSettings` this check needs), and what it writes."""

    xmpp: str  # "prosody" or "ejabberd"
    xmpp_port: int
    prosody_config: str
    ejabberd_config: str
    turn_config: str
    denied_peer_ranges: tuple[str, ...]
    members: int  # members in every overlay's registry


class HostReader(Protocol):
    def read_text(self, path: str) -> str | None:
        """A file's text; None when it cannot be read."""

    def pids(self) -> list[int]: ...

    def cmdline(self, pid: int) -> list[str]: ...

    def environ(self, pid: int) -> dict[str, str]: ...

    def executable(self, pid: int) -> str | None:
        """The path `/proc/PID/exe` links to; None when it cannot be read (another user's process, unless root)."""

    def user_id(self, name: str) -> int | None:
        """The uid of a system user; None when there is none."""

    def service_main_pid(self, unit: str) -> int | None:
        """The main process of a running service unit; None when it is not running, or systemd does not run here."""


class ProcReader:
    """The real host: files as they are, processes from /proc."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.proc = proc

    def read_text(self, path: str) -> str | None:
        try:
            return Path(path).read_text(errors="replace")
        except OSError:
            return None

    def pids(self) -> list[int]:
        return sorted(int(p.name) for p in self.proc.iterdir() if p.name.isdigit())

    def cmdline(self, pid: int) -> list[str]:
        try:
            raw = (self.proc / str(pid) / "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            return []
        return [part.decode(errors="replace") for part in raw.split(b"\0") if part]

    def environ(self, pid: int) -> dict[str, str]:
        try:
            raw = (self.proc / str(pid) / "environ").read_bytes()
        except OSError:
            return {}
        pairs = (part.decode(errors="replace").partition("=") for part in raw.split(b"\0") if part)
        return {key: value for key, _, value in pairs}

    def executable(self, pid: int) -> str | None:
        try:
            return os.readlink(self.proc / str(pid) / "exe")
        except OSError:
            return None

    def user_id(self, name: str) -> int | None:
        try:
            return pwd.getpwnam(name).pw_uid
        except KeyError:
            return None

    def service_main_pid(self, unit: str) -> int | None:
        if not Path("/run/systemd/system").is_dir():  # sd_booted(3): systemd is not this host's init
            return None
        try:
            shown = subprocess.run(["systemctl", "show", "--property=MainPID", "--value", f"{unit}.service"],
                                   capture_output=True, text=True, timeout=10, check=False).stdout.strip()  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return None
        return int(shown) if shown.isdigit() and int(shown) > 0 else None  # 0: the unit runs nothing


@dataclass(frozen=True)
class ServerReport:
    verdicts: tuple[Verdict, ...]

    @property
    def problems(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.level == "problem"]

    @property
    def exit_status(self) -> int:
        return EXIT_UNREACHABLE if self.problems else EXIT_OK


def check_server(target: ServerTarget, host: HostReader) -> ServerReport:
    if target.xmpp == "ejabberd":
        config_verdicts, backlog, pidfile = _ejabberd(target, host)
    else:
        config_verdicts, backlog, pidfile = _prosody(target, host)
    found = server_processes(target, host, pidfile)
    return ServerReport((*config_verdicts, _open_files(target, host, found), _somaxconn(host, backlog),
                         _coturn(target, host)))  # fmt: skip


# -- the XMPP server's config ----------------------------------------------------------------------------


def _lua_code(text: str) -> str:
    """The config without its comments (`--` to the end of the line; strings with `--` in them are rare here)."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _prosody(target: ServerTarget, host: HostReader) -> tuple[list[Verdict], int | None, str | None]:
    """The config's verdicts, its listen backlog and the pidfile it names."""
    path = target.prosody_config
    subject = "prosody listen backlog"
    text = host.read_text(path)
    if text is None:
        return [Verdict("problem", subject, f"{path} cannot be read: run `evio server init` again")], None, None
    code = _lua_code(text)
    out: list[Verdict] = []
    settings = re.search(r"network_settings\s*=\s*\{([^}]*)\}", code)
    found = re.search(r"tcp_backlog\s*=\s*(\d+)", settings.group(1)) if settings else None
    backlog = int(found.group(1)) if found else None
    if backlog is None:
        out.append(Verdict("problem", subject, f"{path}: no tcp_backlog in network_settings: prosody keeps 128 pending "
                           f"connections; add `network_settings = {{ tcp_backlog = {BACKLOG} }}` (or run "
                           "`evio server init` again) and restart prosody"))  # fmt: skip
    elif backlog < BACKLOG:
        out.append(Verdict("problem", subject, f"{path}: tcp_backlog = {backlog}, below the {BACKLOG} init writes: set it "
                           f"to {BACKLOG} in network_settings and restart prosody"))  # fmt: skip
    else:
        out.append(Verdict("ok", subject, f"{path}: tcp_backlog = {backlog}"))
    if re.search(r"\blimits\s*=\s*\{[^}]*c2s\s*=\s*\{[^}]*rate", code):
        out.append(Verdict("ok", "prosody c2s limits", f"{path}: a c2s rate for members' bursts"))
    else:
        out.append(Verdict("warning", "prosody c2s limits", f"{path}: no c2s rate in `limits`: mod_limits' packaged 10 kb/s "
                           'holds a member\'s burst of offers for seconds; add `limits = { c2s = { rate = "256kb/s"; '
                           'burst = "2s" } }` (or run `evio server init` again)'))  # fmt: skip
    pidfile = re.search(r"""\bpidfile\s*=\s*["']([^"']+)["']""", code)
    return out, backlog, pidfile.group(1) if pidfile else None


def _ejabberd(target: ServerTarget, host: HostReader) -> tuple[list[Verdict], int | None, str | None]:
    path = target.ejabberd_config
    subject = "ejabberd listen backlog"
    text = host.read_text(path)
    doc: Any = None
    if text is not None:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            return [Verdict("problem", subject, f"{path} is not YAML: {str(exc).splitlines()[0]}")], None, None
    if not isinstance(doc, dict):
        return [Verdict("problem", subject, f"{path} cannot be read: run `evio server init` again")], None, None
    out: list[Verdict] = []
    listen = doc.get("listen")  # (any YAML at all: a malformed file is a verdict, never a traceback)
    listeners = [x for x in listen if isinstance(x, dict) and x.get("module") == "ejabberd_c2s"] if isinstance(
        listen, list) else []
    listener = next((x for x in listeners if x.get("port") == target.xmpp_port), listeners[0] if listeners else None)
    backlog = listener.get("backlog") if listener else None
    backlog = backlog if isinstance(backlog, int) else None
    if listener is None:
        out.append(Verdict("problem", subject, f"{path}: no ejabberd_c2s listener: run `evio server init` again"))
    elif backlog is None or backlog < BACKLOG:
        have = "no backlog (ejabberd keeps 5 pending connections)" if backlog is None else f"backlog {backlog}"
        out.append(Verdict("problem", subject, f"{path}: the c2s listener on port {listener.get('port')} has {have}: add "
                           f"`backlog: {BACKLOG}` to it and restart ejabberd"))  # fmt: skip
    else:
        out.append(Verdict("ok", subject, f"{path}: c2s listener backlog {backlog}"))
    shaper = listener.get("shaper") if listener else None
    rules = doc.get("shaper_rules") or {}
    if isinstance(shaper, str) and isinstance(rules, dict) and shaper in rules:
        out.append(Verdict("ok", "ejabberd c2s shaper", f"{path}: c2s listener shaped by {shaper} ({rules[shaper]})"))
    else:
        out.append(Verdict("warning", "ejabberd c2s shaper", f"{path}: the c2s listener has no shaper rule of its own: "
                           "add `shaper: c2s_shaper` to it and `c2s_shaper: evio_fast` under shaper_rules "
                           "(or run `evio server init` again)"))  # fmt: skip
    cache = doc.get("cache_size")
    if isinstance(cache, int) and cache >= EJABBERD_CACHE_SIZE:
        out.append(Verdict("ok", "ejabberd caches", f"{path}: cache_size {cache}"))
    else:
        out.append(Verdict("warning", "ejabberd caches", f"{path}: cache_size {cache if cache is not None else 'unset'} "
                           f"(ejabberd's default keeps 1000 entries): set `cache_size: {EJABBERD_CACHE_SIZE}`"))  # fmt: skip
    return out, backlog, None


# -- which process is the server ------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerProcesses:
    """The processes taken for the XMPP server (several: each is reported), and the look-alikes passed over."""

    pids: tuple[int, ...]
    passed_over: tuple[str, ...] = ()  # "process 6100 (owned by uid 1000)"
    unverified: bool = False  # some were passed over only because their executable could not be read


def server_processes(target: ServerTarget, host: HostReader, pidfile: str | None) -> ServerProcesses:
    """The running XMPP server's processes, from sources a local user cannot forge (the head of this file)."""
    matches = _ejabberd_node if target.xmpp == "ejabberd" else _prosody_process
    config = target.ejabberd_config if target.xmpp == "ejabberd" else target.prosody_config
    service_uid = host.user_id(target.xmpp)  # the packaged user: `ejabberd`, `prosody`
    owners = {0} if service_uid is None else {0, service_uid}
    genuine: list[int] = []
    passed_over: list[str] = []
    unreadable = 0
    for pid in host.pids():
        argv = host.cmdline(pid)
        if not argv or not matches(argv):
            continue
        why = _not_the_server(host, pid, target.xmpp, owners)
        if why is None:
            genuine.append(pid)
        else:
            passed_over.append(f"process {pid} ({why})")
            unreadable += why.startswith("its executable cannot be read")
    named = _pid_from_file(host, pidfile) if pidfile is not None else None
    if named is not None and named not in genuine:  # a stale pidfile whose number another process took
        why = _not_the_server(host, named, target.xmpp, owners) or "not the server's command line"
        passed_over = [p for p in passed_over if not p.startswith(f"process {named} (")]  # named once, as the pidfile's
        passed_over.append(f"process {named} of pidfile {pidfile} ({why})")
        named = None
    chosen = [named] if named is not None else _of_config(host, genuine, config) or _of_service(
        host, genuine, target.xmpp) or genuine  # fmt: skip
    return ServerProcesses(tuple(chosen), tuple(passed_over), unverified=bool(unreadable) and not chosen)


def _prosody_process(argv: list[str]) -> bool:
    return any(Path(a).name in ("prosody", "prosody.lua") for a in argv[:3])


def _ejabberd_node(argv: list[str]) -> bool:
    """The server's Erlang node (`-s ejabberd`), not an ejabberdctl call's (`-hidden ... -s ejabberd_ctl`)."""
    started = any(a == "-s" and b == "ejabberd" for a, b in zip(argv, argv[1:], strict=False))
    return bool(argv) and "beam" in Path(argv[0]).name and started and "-hidden" not in argv


def _not_the_server(host: HostReader, pid: int, xmpp: str, owners: set[int]) -> str | None:
    """Why a process that looks like the server is not taken for it (None: it is). A local user can name any
    program `beam.smp` or `prosody` and give it any command line and limit, but not run it as root or as the
    server's user, nor place it where the packages install."""
    uids = _status_field(host.read_text(f"/proc/{pid}/status"), "Uid")
    if not uids or not all(u.isdigit() for u in uids):
        return "its owner cannot be read"
    strangers = sorted({int(u) for u in uids} - owners)
    if strangers:
        return f"owned by uid {strangers[0]}"
    exe = host.executable(pid)
    if exe is None:
        return "its executable cannot be read: run as root"
    exe = exe.removesuffix(" (deleted)")  # upgraded under it: still the installed server, the older one
    name = PurePosixPath(exe).name
    wanted = name in ("beam.smp", "beam") if xmpp == "ejabberd" else name.startswith("lua") or name == "prosody"
    if not (wanted and exe.startswith(SYSTEM_DIRS)):
        return f"runs {exe}, not an installed {xmpp}"
    return None


def _status_field(status: str | None, key: str) -> list[str]:
    """A field of a /proc/PID/status text, split (`Uid:` gives real, effective, saved, filesystem)."""
    for line in (status or "").splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return value.split()
    return []


def _pid_from_file(host: HostReader, pidfile: str) -> int | None:
    text = host.read_text(pidfile)
    if text is None or not text.strip().isdigit():
        return None
    pid = int(text.strip())
    return pid if host.cmdline(pid) else None  # a stale pidfile names no process


def _of_config(host: HostReader, pids: list[int], config: str) -> list[int]:
    """Several servers may run on one host: those started with this config (on the command line, or in
    ejabberdctl's EJABBERD_CONFIG_PATH)."""
    return [pid for pid in pids
            if any(config in a for a in host.cmdline(pid)) or host.environ(pid).get("EJABBERD_CONFIG_PATH") == config
            ]  # fmt: skip


def _of_service(host: HostReader, pids: list[int], unit: str) -> list[int]:
    """The service manager's: the unit's main process if it is the server, else the server's processes below it
    (ejabberd's unit runs `sh -c 'ejabberdctl foreground'`), else the main process itself (it has the unit's
    limits, which its children inherit)."""
    main = host.service_main_pid(unit)
    if main is None:
        return []
    return [pid for pid in pids if _descends_from(host, pid, main)] or [main]


def _descends_from(host: HostReader, pid: int, ancestor: int) -> bool:
    for _ in range(64):  # deeper than any service's tree; a loop in a racing /proc ends here too
        if pid == ancestor:
            return True
        parent = _status_field(host.read_text(f"/proc/{pid}/status"), "PPid")
        if not parent or not parent[0].isdigit() or int(parent[0]) <= 1:
            return False
        pid = int(parent[0])
    return False


# -- the process, the kernel, coturn ---------------------------------------------------------------------


def open_files_soft_limit(limits: str) -> int | None:
    """The soft "Max open files" of a /proc/PID/limits text (None: unlimited or not there)."""
    for line in limits.splitlines():
        if line.startswith("Max open files"):
            soft = line[len("Max open files"):].split()[0]
            return int(soft) if soft.isdigit() else None
    return None


def _open_files(target: ServerTarget, host: HostReader, found: ServerProcesses) -> Verdict:
    subject = f"{target.xmpp} open files"
    shown = "; ".join(found.passed_over[:PASSED_OVER_SHOWN])
    more = len(found.passed_over) - PASSED_OVER_SHOWN
    aside = f"; passed over: {shown}" + (f" and {more} more" if more > 0 else "") if found.passed_over else ""
    if not found.pids:
        if found.unverified:
            return Verdict("warning", subject, f"cannot tell which process is {target.xmpp}{aside}")
        return Verdict("problem", subject, f"no running {target.xmpp} process found: start it "
                       f"(`systemctl start {target.xmpp}`){aside}")  # fmt: skip
    limits: dict[int, int | None] = {}
    for pid in found.pids:
        text = host.read_text(f"/proc/{pid}/limits")
        if text is not None:
            limits[pid] = open_files_soft_limit(text)
    if not limits:
        return Verdict("warning", subject, f"cannot read /proc/{found.pids[0]}/limits (run as root){aside}")
    # Several servers' processes: the one with the fewest files fails first; each is named.
    pid, soft = min(limits.items(), key=lambda item: float("inf") if item[1] is None else item[1])
    if len(found.pids) > 1:
        each = ", ".join(f"{p} {'unreadable' if p not in limits else limits[p] or 'unlimited'}" for p in found.pids)
        aside = f" (the fewest of {len(found.pids)} {target.xmpp} processes: {each}){aside}"
    fix = ("start it through systemd (ejabberd's unit sets LimitNOFILE=65536; `ejabberdctl start` as root "
           "gets 1,024)") if target.xmpp == "ejabberd" else (
           "`evio server init` writes LimitNOFILE=65536 in a prosody.service drop-in: `systemctl daemon-reload`, "
           "then restart prosody")  # fmt: skip
    if soft is None:
        return Verdict("ok", subject, f"process {pid}: unlimited{aside}")
    needed = target.members + OPEN_FILES_HEADROOM
    if soft < needed:
        return Verdict("problem", subject, f"process {pid} may open {soft} files, fewer than its {target.members} "
                       f"members need (one per session, and its own): accepts fail in a loop; {fix}{aside}")  # fmt: skip
    if soft < OPEN_FILES_SIZED:
        return Verdict("warning", subject, f"process {pid} may open {soft} files: enough for {target.members} "
                       f"members, not past about {soft - OPEN_FILES_HEADROOM}; {fix}{aside}")  # fmt: skip
    return Verdict("ok", subject, f"process {pid} may open {soft} files ({target.members} members){aside}")


def _somaxconn(host: HostReader, backlog: int | None) -> Verdict:
    subject = "kernel net.core.somaxconn"
    # Per network namespace: this reads ours, which is the server's when both run on the host as usual.
    text = host.read_text("/proc/sys/net/core/somaxconn")
    if text is None or not text.strip().isdigit():
        return Verdict("warning", subject, "cannot read /proc/sys/net/core/somaxconn")
    value = int(text.strip())
    wanted = max(backlog or 0, BACKLOG)
    if value < wanted:
        return Verdict("problem", subject, f"{value}: the kernel caps the listen backlog of {wanted} to it; "
                       f"`sysctl -w net.core.somaxconn={wanted}` (and in /etc/sysctl.d to keep it)")  # fmt: skip
    return Verdict("ok", subject, f"{value}, not below the backlog {wanted}")


def _coturn(target: ServerTarget, host: HostReader) -> Verdict:
    subject, path = "coturn relay limits", target.turn_config
    text = host.read_text(target.turn_config)
    if text is None:
        return Verdict("problem", subject, f"{path} cannot be read: run `evio server init` again")
    options = {line.split("#", 1)[0].strip().replace(" ", "") for line in text.splitlines()}
    missing = []
    if "no-tcp-relay" not in options:
        missing.append("no-tcp-relay (a TCP relay is an open TCP proxy from this host)")
    denied = [r for r in target.denied_peer_ranges if f"denied-peer-ip={r}" not in options]
    if denied:
        missing.append(f"denied-peer-ip for {', '.join(denied)} (a relay could reach this host or its LAN)")
    if missing:
        return Verdict("problem", subject, f"{path}: missing " + "; ".join(missing) + ": run `evio server init` again "
                       "and restart coturn")  # fmt: skip
    return Verdict("ok", subject, f"{path}: no-tcp-relay, {len(target.denied_peer_ranges)} denied peer ranges")


# -- printing --------------------------------------------------------------------------------------------


def to_json(report: ServerReport) -> str:
    return json.dumps({"ok": report.exit_status == 0, "exit_status": report.exit_status,
                       "verdicts": [dataclasses.asdict(v) for v in report.verdicts]}, indent=2)  # fmt: skip


def render_text(report: ServerReport) -> str:
    lines = ["server settings"]
    width = max((len(v.subject) for v in report.verdicts), default=0)
    lines += [f"  {v.level:<8} {v.subject:<{width}}  {v.text}" for v in report.verdicts]
    problems = report.problems
    summary = "ok" if not problems else f"{len(problems)} problem(s): " + "; ".join(p.subject for p in problems)
    lines.append(f"verdict: {summary}")
    return "\n".join(lines)
