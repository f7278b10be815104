"""`evio netcheck --server`: are the server settings `evio server init` wrote still in effect (issue 24)?

On the server host, from what init saved (the command line reads ``server.json`` and hands over a
`ServerTarget`: this package does not import `evio.server`), one verdict each, in netcheck's shape:

* the XMPP server's config still has the listen backlog, and the shaper/limits and caches, init wrote;
* the running XMPP server's open-files limit covers the members (one descriptor per session: at 1,000
  members an ejabberd started by hand as root, with 1,024, failed every accept in a loop);
* the kernel's ``net.core.somaxconn`` is not below the backlog (the kernel silently caps a backlog to it);
* coturn's config keeps ``no-tcp-relay`` and every denied-peer range init writes.

The host is read through `HostReader` so the unit tests give a fake /proc.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from evio.netcheck.findings import EXIT_OK, EXIT_UNREACHABLE, Verdict

BACKLOG = 1024  # what `evio server init` writes for both XMPP servers (evio.server.configs)
EJABBERD_CACHE_SIZE = 10000
OPEN_FILES_HEADROOM = 64  # the server's own descriptors beside one per member session
OPEN_FILES_SIZED = 4096  # below this, a storm of the ~1,000 members evio sizes for runs out (init writes 65,536)


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
        config_verdicts, backlog, pid = _ejabberd(target, host)
    else:
        config_verdicts, backlog, pid = _prosody(target, host)
    return ServerReport((*config_verdicts, _open_files(target, host, pid), _somaxconn(host, backlog), _coturn(target, host)))


# -- the XMPP server's config ----------------------------------------------------------------------------


def _lua_code(text: str) -> str:
    """The config without its comments (`--` to the end of the line; strings with `--` in them are rare here)."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _prosody(target: ServerTarget, host: HostReader) -> tuple[list[Verdict], int | None, int | None]:
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
    pid = _pid_from_file(host, pidfile.group(1)) if pidfile else None
    if pid is None:
        pid = _find_process(host, lambda argv: any(Path(a).name in ("prosody", "prosody.lua") for a in argv[:3]),
                            path)  # fmt: skip
    return out, backlog, pid


def _ejabberd(target: ServerTarget, host: HostReader) -> tuple[list[Verdict], int | None, int | None]:
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
    pid = _find_process(host, _ejabberd_node, path)
    return out, backlog, pid


def _ejabberd_node(argv: list[str]) -> bool:
    """The server's Erlang node (`-s ejabberd`), not an ejabberdctl call's (`-hidden ... -s ejabberd_ctl`)."""
    started = any(a == "-s" and b == "ejabberd" for a, b in zip(argv, argv[1:], strict=False))
    return bool(argv) and "beam" in Path(argv[0]).name and started and "-hidden" not in argv


def _pid_from_file(host: HostReader, pidfile: str) -> int | None:
    text = host.read_text(pidfile)
    if text is None or not text.strip().isdigit():
        return None
    pid = int(text.strip())
    return pid if host.cmdline(pid) else None  # a stale pidfile names no process


def _find_process(host: HostReader, matches: Callable[[list[str]], bool], config: str) -> int | None:
    """Several servers may run on one host: the one started with this config (on its command line, or in
    ejabberdctl's EJABBERD_CONFIG_PATH), else the first."""
    found = [(pid, argv) for pid in host.pids() if (argv := host.cmdline(pid)) and matches(argv)]
    for pid, argv in found:
        if any(config in a for a in argv) or host.environ(pid).get("EJABBERD_CONFIG_PATH") == config:
            return pid
    return found[0][0] if found else None


# -- the process, the kernel, coturn ---------------------------------------------------------------------


def open_files_soft_limit(limits: str) -> int | None:
    """The soft "Max open files" of a /proc/PID/limits text (None: unlimited or not there)."""
    for line in limits.splitlines():
        if line.startswith("Max open files"):
            soft = line[len("Max open files"):].split()[0]
            return int(soft) if soft.isdigit() else None
    return None


def _open_files(target: ServerTarget, host: HostReader, pid: int | None) -> Verdict:
    subject = f"{target.xmpp} open files"
    if pid is None:
        return Verdict("problem", subject, f"no running {target.xmpp} process found: start it "
                       f"(`systemctl start {target.xmpp}`)")  # fmt: skip
    limits = host.read_text(f"/proc/{pid}/limits")
    if limits is None:
        return Verdict("warning", subject, f"cannot read /proc/{pid}/limits (run as root)")
    soft = open_files_soft_limit(limits)
    fix = ("start it through systemd (ejabberd's unit sets LimitNOFILE=65536; `ejabberdctl start` as root "
           "gets 1,024)") if target.xmpp == "ejabberd" else (
           "`evio server init` writes LimitNOFILE=65536 in a prosody.service drop-in: `systemctl daemon-reload`, "
           "then restart prosody")  # fmt: skip
    if soft is None:
        return Verdict("ok", subject, f"process {pid}: unlimited")
    needed = target.members + OPEN_FILES_HEADROOM
    if soft < needed:
        return Verdict("problem", subject, f"process {pid} may open {soft} files, fewer than its {target.members} "
                       f"members need (one per session, and its own): accepts fail in a loop; {fix}")  # fmt: skip
    if soft < OPEN_FILES_SIZED:
        return Verdict("warning", subject, f"process {pid} may open {soft} files: enough for {target.members} "
                       f"members, not past about {soft - OPEN_FILES_HEADROOM}; {fix}")  # fmt: skip
    return Verdict("ok", subject, f"process {pid} may open {soft} files ({target.members} members)")


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
