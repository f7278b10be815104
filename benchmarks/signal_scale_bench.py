#!/usr/bin/env python3
"""The signaling plane at scale (issue 24): members that only sign in and signal, on prosody and ejabberd.

    .venv/bin/python benchmarks/signal_scale_bench.py                     # 100, 300 members, both servers
    .venv/bin/python benchmarks/signal_scale_bench.py --members 1000 --servers prosody
    .venv/bin/python benchmarks/signal_scale_bench.py --quick             # CI: 100 members only
    .venv/bin/python benchmarks/signal_scale_bench.py --members 1000 --servers prosody --presence linked
                                        # docs/decisions/0052: presence to linked peers only (a prototype)
    .venv/bin/python benchmarks/signal_scale_bench.py --members 1000 --servers ejabberd --presence linked \
        --crowd signalclient --crowd-processes 2 [--trace]
                                        # the shipped client (0059), the crowd in 2 processes (decision 0071);
                                        # --trace: where contact pairs still missing were lost, and a timeline

Run it under `flock /tmp/evio-heavy.lock` on a shared machine (root: prosody and ejabberd run as their own
servers on loopback, from a temporary directory, on free ports). Per server and member count, in order:

1. **login storm**: members 0 and 1 sign in first; then the other n-2 are started at once. Timed: until
   every member is signed in, and until every member knows every other (its `peers()` lists n-1);
   meanwhile member 0 sends remote-action requests to member 1 (`SignalClient.request`, what an offer
   and its answer are) one after the other: the round trip under the storm.
2. **settled**: the same round trip with all n online and quiet.
3. **a member added** while all are online, as `evio member add` does it (prosody: groups file and the
   admin shell's push; ejabberd: ejabberdctl register + srg_user_add), then signed in: until all n+1
   know each other (from the admin command's start; the command's own time beside it).
4. **a member removed** (`remove_from_group`: prosody's push and session end; ejabberd's srg_user_del and
   kick_user): until no member lists it.
5. **server restart** with every member online: until all are signed in again and know each other.

The members are evio's real `SignalClient` (evio/signal/client.py), all in this one process on one
asyncio loop, with the evio announcement in their presence, the roster fetch on login, keepalives and
the reconnect backoff as shipped. One change for the benchmark only: the client's TLS context is a
bare one made once (the members use plaintext on loopback here). The shipped client builds a fresh
default context per login, which loads the system CA store: 28 ms and ~0.9 MB per member, which would
make 1,000 members in one process measure Python, not the server. Plaintext logins with stored plain
passwords on both servers, so neither spends its CPU on TLS or SCRAM hashing: the figures are the
signaling itself. The servers' settings are those `evio server init` writes (backlog, caches,
Nagle off) with the listener made plaintext; `--ejabberd-packaged` uses ejabberd's packaged listener
and caches instead.

Server CPU (user+system seconds) and peak RSS (VmHWM) are read from /proc of the server process (after
a restart: of the new process, for the restart alone); the members' CPU is this process's (and the crowd's
processes', `--crowd-processes`), over the same span: when it nears the wall time, the members, not the
server, set the pace. "ran/waited for a CPU" (/proc/PID/task/*/schedstat) says how long the members' and
the server's threads ran and how long they were runnable but waited for a core the machine's other jobs
held: ran + waited near the wall time means CPU-bound. The load
average (1 min) is printed beside each row: the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import cProfile
import datetime
import json
import logging
import multiprocessing
import os
import pwd
import random
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Protocol, cast
from xml.sax.saxutils import escape

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from slixmpp import ClientXMPP

from evio.backoff import backoff_delay
from evio.node.sdn import free_tcp_port
from evio.server.configs import ejabberd_config, groups_text
from evio.server.xmpp_admin import EjabberdAdmin, ProsodyAdmin, XmppAdmin
from evio.signal import member_list
from evio.signal.client import SignalClient, SignalSettings
from evio.signal.endpoint import OverlayIdentity
from evio.signal.errors import RequestError
from evio.signal.events import PeerAdded, PeerRemoved
from evio.signal.pacing import LIMIT_FACTOR, LoginWatch, login_patience, return_delay
from evio.signal.protocol import FEATURES, NAMESPACE, Announcement, Membership, encode_announcement
from evio.testing.waiting import wait_until_blocking
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

DOMAIN = "overlay.test"
OVERLAY = "ov1"
ECHO = "bench.echo"
CLK_TCK = os.sysconf("SC_CLK_TCK")

log = logging.getLogger("signal_scale_bench")


# ---------------------------------------------------------------------------------------------- servers


class BenchServer(Protocol):
    name: str
    port: int

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def pid(self) -> int: ...
    def admin(self) -> XmppAdmin: ...


def _user(i: int) -> str:
    return f"m{i}"


def _password(i: int) -> str:
    return f"pw-m{i}"


class Prosody:
    """prosody 0.12 in the foreground from `directory`; accounts written as its internal_plain store files."""

    name = "prosody"

    def __init__(self, directory: Path, members: int, accounts: int) -> None:
        self.directory = directory
        self.port = free_tcp_port()
        self.config = directory / "prosody.cfg.lua"
        self.groups_file = directory / "groups.txt"
        self._proc: subprocess.Popen[bytes] | None = None
        (directory / "data").mkdir(parents=True)
        self.groups_file.write_text(groups_text({OVERLAY: [f"{_user(i)}@{DOMAIN}" for i in range(members)]}))
        # prosody's own store layout: data/<host, '.' escaped>/accounts/<user>.dat, a Lua table.
        store = directory / "data" / DOMAIN.replace(".", "%2e") / "accounts"
        store.mkdir(parents=True)
        for i in range(accounts):
            (store / f"{_user(i)}.dat").write_text(f'return {{\n\t["password"] = "{_password(i)}";\n}};\n')
        self.config.write_text("\n".join([
            "run_as_root = true",
            f'pidfile = "{directory}/prosody.pid"',
            f'data_path = "{directory}/data"',
            f'log = {{ error = "{directory}/prosody.err" }}',
            'interfaces = { "127.0.0.1" }',
            f"c2s_ports = {{ {self.port} }}",
            "c2s_direct_tls_ports = {}",
            "s2s_ports = {}",
            # As `evio server init` writes them (evio.server.configs.prosody_config):
            "network_settings = { tcp_backlog = 1024; nagle = false }",
            'authentication = "internal_plain"',
            "c2s_require_encryption = false",
            "allow_unencrypted_plain_auth = true",
            f'groups_file = "{self.groups_file}"',
            f'admin_socket = "{directory}/data/prosody.sock"',
            'modules_enabled = { "roster"; "saslauth"; "disco"; "ping"; "groups"; "admin_socket"; "admin_shell" }',
            f'VirtualHost "{DOMAIN}"',
            "",
        ]))  # fmt: skip

    def start(self) -> None:
        with open(self.directory / "prosody.out", "ab") as out:
            self._proc = subprocess.Popen(["prosody", "--config", str(self.config), "-F"], stdout=out,
                                          stderr=subprocess.STDOUT)  # fmt: skip
        proc = self._proc
        wait_until_blocking(lambda: _listening(self.port) or proc.poll() is not None, 20, what="prosody listening")
        if proc.poll() is not None:
            raise RuntimeError(f"prosody did not start: {(self.directory / 'prosody.out').read_text()[-2000:]}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def admin(self) -> XmppAdmin:
        return ProsodyAdmin(DOMAIN, self.config, self.groups_file)


class Ejabberd:
    """ejabberd 23.01 from `directory` (ejabberdctl --config-dir), its own Erlang node and distribution port.

    Accounts and the group are made through its HTTP API on loopback (one ejabberdctl call is an Erlang
    start, 0.4-0.9 s: 1,000 of them would take longer than the benchmark); the member added and removed
    during the run go through ejabberdctl, as `evio member add|remove` does.
    """

    name = "ejabberd"

    def __init__(self, directory: Path, members: int, accounts: int, packaged: bool) -> None:
        self.directory = directory
        self.members, self.accounts = members, accounts
        self.port = free_tcp_port()
        self.http_port = free_tcp_port()
        self.dist_port = free_tcp_port()
        self.node = f"sigscale{os.getpid()}@localhost"
        self.conf = directory / "conf"
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._seeded = False
        for sub in ("conf", "logs", "spool"):
            (directory / sub).mkdir(parents=True)
        (self.conf / "ejabberd.yml").write_text(yaml.safe_dump(self._config(packaged), sort_keys=False))
        (self.conf / "ejabberdctl.cfg").write_text("\n".join([
            f"ERLANG_NODE={self.node}",
            f"ERL_DIST_PORT={self.dist_port}",  # a fixed distribution port and no epmd on 0.0.0.0:4369
            "INET_DIST_INTERFACE=127.0.0.1",
            "ERL_EPMD_ADDRESS=127.0.0.1",
            "EJABBERD_BYPASS_WARNINGS=true",
            "",
        ]))  # fmt: skip
        shutil.copy("/etc/ejabberd/inetrc", self.conf / "inetrc")
        subprocess.run(["chown", "-R", "ejabberd:", str(directory)], check=True)

    def _config(self, packaged: bool) -> dict[str, object]:
        """What `evio server init` writes, with the listener plaintext on loopback and an HTTP API beside it."""
        config = yaml.safe_load(ejabberd_config(domain=DOMAIN, certfile="/dev/null"))
        del config["certfiles"]
        config["log_rotate_count"] = 0
        config["auth_password_format"] = "plain"
        listener = config["listen"][0]
        listener.update({"port": self.port, "ip": "127.0.0.1", "starttls_required": False})
        if packaged:
            # ejabberd's packaged listener and caches (issue 24's first ejabberd row).
            del listener["backlog"]
            for key in ("cache_size", "cache_life_time", "max_fsm_queue"):
                config.pop(key, None)
        config["listen"].append({"port": self.http_port, "ip": "127.0.0.1", "module": "ejabberd_http",
                                 "request_handlers": {"/api": "mod_http_api"}})  # fmt: skip
        config["api_permissions"]["bench http api"] = {"from": ["mod_http_api"], "who": "all", "what": "*"}
        config["modules"]["mod_http_api"] = {}
        return dict(config)

    def ctl_argv(self) -> list[str]:
        return ["ejabberdctl", "--config-dir", str(self.conf), "--logs", str(self.directory / "logs"),
                "--spool", str(self.directory / "spool")]  # fmt: skip

    def start(self) -> None:
        # Started as the ejabberd user, not through ejabberdctl's `su` from root: su's PAM session sets the
        # soft limit of open files to 1,024, and at 1,000 members ejabberd's listener then fails every accept
        # ("too many open files") in a loop that takes both cores. The packaged unit sets LimitNOFILE=65536.
        home = pwd.getpwnam("ejabberd").pw_dir
        with open(self.directory / "ejabberd.out", "ab") as out:
            self._proc = subprocess.Popen([*self.ctl_argv(), "foreground"], stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True, user="ejabberd", group="ejabberd",
                                          env={**os.environ, "HOME": home})  # fmt: skip
        proc = self._proc
        wait_until_blocking(lambda: _listening(self.port) and _listening(self.http_port) or proc.poll() is not None,
                            60, what="ejabberd listening")  # fmt: skip
        if proc.poll() is not None:
            raise RuntimeError(f"ejabberd did not start: {(self.directory / 'ejabberd.out').read_text()[-2000:]}")
        self._pid = _find_process("beam.smp", self.node)
        limit = _open_files(self._pid)
        if limit < 2 * self.accounts + 100:
            raise RuntimeError(f"ejabberd may open {limit} files, too few for {self.accounts} members")
        if not self._seeded:
            self._seed()
            self._seeded = True

    def _seed(self) -> None:
        for i in range(self.accounts):
            self._api("register", user=_user(i), host=DOMAIN, password=_password(i))
        self._api("srg_create", group=OVERLAY, host=DOMAIN, label=OVERLAY, description=f"evio overlay {OVERLAY}",
                  display=OVERLAY)  # fmt: skip
        for i in range(self.members):
            self._api("srg_user_add", user=_user(i), host=DOMAIN, group=OVERLAY, grouphost=DOMAIN)

    def _api(self, command: str, **args: str) -> object:
        request = urllib.request.Request(f"http://127.0.0.1:{self.http_port}/api/{command}",
                                         data=json.dumps(args).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read() or b"null")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        subprocess.run([*self.ctl_argv(), "stop"], capture_output=True, timeout=60)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        wait_until_blocking(lambda: not _listening(self.port), 30, what="ejabberd stopped")

    def pid(self) -> int:
        assert self._pid is not None
        return self._pid

    def admin(self) -> XmppAdmin:
        return EjabberdAdmin(DOMAIN, self.ctl_argv())


def _listening(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
    except OSError:
        return False
    return True


def _find_process(executable: str, marker: str) -> int:
    """The pid of the process running `executable` whose command line holds `marker` (ejabberd's beam)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].decode(errors="replace").endswith(executable) and marker.encode() in b" ".join(argv):
            return int(entry.name)
    raise RuntimeError(f"no {executable} process with {marker!r}")


def _open_files(pid: int) -> int:
    """The soft limit of open files of process `pid`."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise RuntimeError(f"no open files limit for {pid}")


@dataclass
class ProcessUsage:
    cpu: float  # user + system seconds
    peak_rss_mb: float  # VmHWM


def usage(pid: int) -> ProcessUsage:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14 and 15 of stat)
    hwm = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024
    return ProcessUsage(cpu, hwm)


def run_and_wait(pid: int) -> tuple[float, float]:
    """Seconds process `pid`'s threads ran and waited to run (runnable, no CPU free: a shared machine), summed."""
    ran = waited = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            fields = (task / "schedstat").read_text().split()
            ran, waited = ran + int(fields[0]), waited + int(fields[1])
    return ran / 1e9, waited / 1e9


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


# ---------------------------------------------------------------------------------------------- members


_BARE_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


# `--trace`: what each member of the crowd sent and received, to tell where a missing contact pair was lost.
TRACE: list[tuple[float, str, str, str, bool]] | None = None  # (time, event, member's bare JID, other JID, answer)


def _trace(event: str, member: str, other: str, answer: bool = False) -> None:
    if TRACE is not None:
        TRACE.append((time.perf_counter(), event, member, other, answer))


class BenchMember(SignalClient):
    """evio's SignalClient; only its TLS context is made once and its login is SASL PLAIN (see the module doc)."""

    def _send_directed(self, to: str, answer: bool) -> None:
        _trace("sent", self.settings.jid, to, answer)
        super()._send_directed(to, answer)

    def _presence_available(self, sender: str, announcement_json: str | None, identity_json: str | None = None,
                            answer: bool = False, members_json: str | None = None) -> None:  # fmt: skip
        _trace("heard", self.settings.jid, sender, answer)
        super()._presence_available(sender, announcement_json, identity_json, answer, members_json)

    def _presence_unavailable(self, sender: str, returning: bool = False) -> None:
        _trace("gone", self.settings.jid, sender)
        super()._presence_unavailable(sender, returning)

    def _session_up(self, own_jid: str) -> None:
        _trace("up", self.settings.jid, own_jid)
        super()._session_up(own_jid)

    def _session_down(self, reason: str) -> None:
        _trace("down", self.settings.jid, reason)
        super()._session_down(reason)

    def _ssl_context(self) -> ssl.SSLContext:
        return _BARE_TLS

    def _make_xmpp(self) -> ClientXMPP:
        # slixmpp's SCRAM computes the salted password in a Python loop: 4,096 HMACs, about 20 ms a login, which
        # 1,000 members in one process pay 1,000 times (20 s of this process's CPU at every storm). One member
        # on its own host pays it once; the server's side is the same either way (a stored or a plain password).
        xmpp = super()._make_xmpp()
        xmpp.plugin["feature_mechanisms"].use_mech = "PLAIN"
        return xmpp


@dataclass
class Member:
    index: int
    client: BenchMember
    known: set[str] = field(default_factory=set)  # bare JIDs of the peers it lists now

    @property
    def jid(self) -> str:
        return f"{_user(self.index)}@{DOMAIN}"

    @property
    def connected(self) -> bool:
        return self.client.connected

    @property
    def sessions(self) -> int:
        return self.client.sessions

    @property
    def failed_logins(self) -> int:
        return self.client.failed_logins

    @property
    def last_login(self) -> float:
        return self.client.last_login_seconds or 0.0


@dataclass
class Seen:
    """A member of the probe process, as last reported."""

    jid: str
    connected: bool = False
    sessions: int = 0
    failed_logins: int = 0
    last_login: float = 0.0
    known: set[str] = field(default_factory=set)


class MemberLike(Protocol):
    @property
    def jid(self) -> str: ...
    @property
    def connected(self) -> bool: ...
    @property
    def sessions(self) -> int: ...
    @property
    def failed_logins(self) -> int: ...
    @property
    def last_login(self) -> float: ...
    @property
    def known(self) -> set[str]: ...


def make_member(index: int, port: int, rng: random.Random, login_timeout: float, node_id: int | None = None,
                identity: OverlayIdentity | None = None) -> Member:  # fmt: skip
    """evio's SignalClient as member `index`; with `identity` (`--presence linked`), in trust mode with the overlay
    CA's member list: presence to its links alone, as shipped (decision 0059)."""
    settings = SignalSettings(
        jid=f"{_user(index)}@{DOMAIN}", server="127.0.0.1", port=port, password=_password(index),
        memberships={OVERLAY: rng.getrandbits(128) if node_id is None else node_id}, insecure_plaintext=True,
        login_timeout=login_timeout, identities={OVERLAY: identity} if identity is not None else {},
    )  # fmt: skip
    member = Member(index, BenchMember(settings, random.Random(rng.getrandbits(64))))

    def added(event: PeerAdded) -> None:
        member.known.add(event.jid.split("/", 1)[0])

    def removed(event: PeerRemoved) -> None:
        member.known.discard(event.jid.split("/", 1)[0])

    async def echo(_sender: str, _peer: int, body: object) -> object:
        return body

    member.client.subscribe(PeerAdded, added)
    member.client.subscribe(PeerRemoved, removed)
    member.client.register_handler(ECHO, echo)  # type: ignore[arg-type]
    return member


class RoundTrips:
    """Member 0 asks member 1, one request after the other, until stopped: the round trip of an offer."""

    def __init__(self, asker: Member, answerer: Member) -> None:
        self.asker, self.answerer = asker, answerer
        self.times: list[float] = []
        self.failures = 0
        self.reasons: dict[str, int] = {}  # why requests failed (RequestError's reason)
        self._task: asyncio.Task[None] | None = None

    def start(self, limit: int | None = None) -> None:
        self.times, self.failures, self.reasons = [], 0, {}
        self._task = asyncio.create_task(self._run(limit))

    async def _run(self, limit: int | None) -> None:
        peer = self.answerer.client.node_id(OVERLAY)
        while limit is None or len(self.times) + self.failures < limit:
            started = time.perf_counter()
            try:
                await self.asker.client.request(OVERLAY, peer, ECHO, {"sdp": "x" * 600}, timeout=30)
                self.times.append(time.perf_counter() - started)
            except RequestError as exc:
                self.failures += 1
                self.reasons[exc.reason.value] = self.reasons.get(exc.reason.value, 0) + 1
                await asyncio.sleep(0.05)
            await asyncio.sleep(0)  # one at a time, back to back

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def finish(self) -> None:
        if self._task is not None:
            await self._task



class LeanMember:
    """What `SignalClient` does with the server, without its peer table: the crowd of a big run.

    Log in (stream, SASL PLAIN, bind), fetch the roster, send the initial presence with the evio
    announcement (evio.signal.protocol), then read: a roster push is answered and applied, a member's
    presence is counted (a JID of the roster, subscription both, as SignalClient requires), any other
    iq is answered. Signing in again follows SignalClient's rules: `rules="shipped"` uses this tree's
    (evio.signal.pacing: the return spread with the members, a login given up when the server goes silent
    past a patience that follows its answers), `rules="before"` the previous release's (a return within
    [base/2, base], a login given up `login_timeout` after its start). No keepalive pings (one per 30 s).

    Why not SignalClient: its peer table recomputes every member's claim on every presence
    (evio.signal.peers.PeerTable._recompute, O(members)), so a storm of n logins costs each member
    O(n^2): 0.6 ms a presence at 40 members, ~15 ms at 1,000. One member on its own host pays that once;
    n of them in one process pay it n times (at 300 members the crowd, not the server, set the pace).
    """

    def __init__(self, index: int, port: int, node_id: int, rng: random.Random, rules: str, login_timeout: float,
                 links: frozenset[str] | None = None):  # fmt: skip
        self.index, self.port, self.rng, self.rules = index, port, rng, rules
        # `--presence linked` (docs/decisions/0052): the bare JIDs this member links with; its presence goes to
        # them alone (directed), and a link's first presence of a session is answered with ours.
        self.links = links
        self.members = 0  # `--presence linked`: the members the overlay CA lists (`listed`)
        self.silent = False  # `--presence silent`: the roster fetched, no presence sent (what the roster costs)
        self.answered: set[str] = set()  # full JIDs our directed presence went to in this session
        self.login_timeout = login_timeout
        self.jid = f"{_user(index)}@{DOMAIN}"
        self.announcement = encode_announcement(Announcement((Membership(OVERLAY, node_id),), FEATURES))
        self.connected = False
        self.sessions = 0
        self.failed_logins = 0
        self.last_login = 0.0
        self.last_slowest = 0.0
        self.failures: dict[str, int] = {}  # why logins failed: the step reached
        self.known: set[str] = set()
        self.roster: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self.client = self  # the crowd is started and stopped as SignalClients are

    async def start(self) -> None:
        self._task = asyncio.create_task(self._supervise())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _supervise(self) -> None:
        attempt, failed = 0, 0
        while True:
            was_up = await self._session(failed)
            failed = 0 if was_up else failed + 1
            self.failed_logins += 0 if was_up else 1
            attempt = 1 if was_up else attempt + 1
            base, cap = SignalSettings.reconnect_base, SignalSettings.reconnect_cap
            if was_up and self.rules == "shipped":
                delay = return_delay(self.rng, self.last_login, self.listed(), base, cap)
            else:
                delay = backoff_delay(attempt, self.rng, base, cap)
            await asyncio.sleep(delay)

    async def _session(self, failed_before: int) -> bool:
        loop = asyncio.get_running_loop()
        patience = self.login_timeout * min(3, 1 + failed_before)
        if self.rules == "shipped":
            patience = login_patience(self.login_timeout, failed_before, self.last_slowest)
        started = loop.time()
        watch = LoginWatch(started, patience, max(patience, self.login_timeout * LIMIT_FACTOR))
        deadline = (lambda: watch.deadline()) if self.rules == "shipped" else (lambda: started + patience)
        self.step = "tcp"
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), patience)
        except (OSError, TimeoutError) as exc:
            self._failed(type(exc).__name__)
            return False
        stream = _Stream(reader, writer)
        try:
            return await self._serve(stream, loop, watch, deadline, started)
        except (OSError, TimeoutError, ConnectionError, ET.ParseError) as exc:
            if not self.connected:
                self._failed(type(exc).__name__)
            return self.connected
        finally:
            self.connected = False
            self.known.clear()
            writer.close()

    def listed(self) -> int:
        """The members this member knows of, which spread its return: its roster's, or with `--presence linked`
        the overlay CA's list (`members`; 0: only the last login's time spreads it, `--spread login`)."""
        return len(self.roster) if self.links is None else self.members

    def _directed(self, stream: _Stream, to: str) -> None:
        self.answered.add(to)
        stream.send(f"<presence to='{_xml(to)}'><evio xmlns='{NAMESPACE}'>{_xml(self.announcement)}</evio></presence>")

    def _failed(self, why: str) -> None:
        key = f"{why} at {self.step}"
        self.failures[key] = self.failures.get(key, 0) + 1

    async def _serve(self, stream: _Stream, loop: asyncio.AbstractEventLoop, watch: LoginWatch,
                     deadline: Callable[[], float], started: float) -> bool:  # fmt: skip
        async def answer(test: Callable[[ET.Element], bool]) -> ET.Element:
            while True:
                element = await stream.next(deadline() - loop.time())
                watch.heard(loop.time())
                if test(element):
                    return element

        self.step = "features"
        stream.open()
        await answer(lambda e: e.tag.endswith("features"))
        self.step = "sasl"
        secret = base64.b64encode(f"\0{_user(self.index)}\0{_password(self.index)}".encode()).decode()
        stream.send(f"<auth xmlns='{_SASL}' mechanism='PLAIN'>{secret}</auth>")
        if not (await answer(lambda e: e.tag in (f"{{{_SASL}}}success", f"{{{_SASL}}}failure"))).tag.endswith("success"):
            return False
        self.step = "bind"
        stream.open()
        await answer(lambda e: e.tag.endswith("features"))
        stream.send(f"<iq type='set' id='bind'><bind xmlns='{_BIND}'><resource>evio-{self.index}</resource></bind></iq>")
        await answer(lambda e: e.get("id") == "bind")
        self.step = "roster"
        stream.send(f"<iq type='get' id='roster'><query xmlns='{_ROSTER}'/></iq>")
        roster = await answer(lambda e: e.get("id") == "roster")
        self.roster = {i.get("jid", "") for i in roster.iter(f"{{{_ROSTER}}}item") if i.get("subscription") == "both"}
        if not self.silent:
            stream.send(f"<presence><evio xmlns='{NAMESPACE}'>{_xml(self.announcement)}</evio></presence>")
        self.answered.clear()
        for peer in sorted(self.links or ()):
            self._directed(stream, peer)
        self.last_login = loop.time() - started
        self.last_slowest = watch.slowest
        self.connected = True
        self.sessions += 1
        while True:
            self._received(await stream.next(None), stream)

    def _received(self, element: ET.Element, stream: _Stream) -> None:
        tag = element.tag.rsplit("}", 1)[-1]
        sender = element.get("from", "")
        bare = sender.split("/", 1)[0]
        if tag == "presence" and self.links is not None:
            if element.get("type") == "unavailable":
                self.known.discard(bare)
                self.answered.discard(sender)
            elif element.get("type") is None and bare in self.links and "/" in sender:
                self.known.add(bare)
                if sender not in self.answered:
                    self._directed(stream, sender)
        elif tag == "presence":
            if element.get("type") == "unavailable":
                self.known.discard(bare)
            elif element.get("type") is None and bare in self.roster and bare != self.jid and "/" in sender:
                self.known.add(bare)
        elif tag == "iq" and element.get("type") in ("get", "set"):
            for item in element.iter(f"{{{_ROSTER}}}item"):  # a roster push
                jid = item.get("jid", "")
                if item.get("subscription") == "both":
                    self.roster.add(jid)
                else:
                    self.roster.discard(jid)
                    self.known.discard(jid)
            reply_to = f" to='{_xml(sender)}'" if sender else ""
            stream.send(f"<iq type='result' id='{_xml(element.get('id', ''))}'{reply_to}/>")
        elif tag == "error":
            raise ConnectionError("stream error")


def _xml(text: str) -> str:
    return escape(text, {"'": "&apos;", '"': "&quot;"})


_SASL = "urn:ietf:params:xml:ns:xmpp-sasl"
_BIND = "urn:ietf:params:xml:ns:xmpp-bind"
_ROSTER = "jabber:iq:roster"


class _Stream:
    """An XMPP client stream: the stream header, then the top-level elements as they complete (expat)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._parser: ET.XMLPullParser | None = None
        self._depth = 0
        self._ready: list[ET.Element] = []

    def open(self) -> None:
        self._parser = ET.XMLPullParser(events=("start", "end"))
        self._depth = 0
        self._ready.clear()
        self.send(f"<?xml version='1.0'?><stream:stream to='{DOMAIN}' xmlns='jabber:client' "
                  "xmlns:stream='http://etherx.jabber.org/streams' version='1.0'>")  # fmt: skip

    def send(self, text: str) -> None:
        self.writer.write(text.encode())

    async def next(self, timeout: float | None) -> ET.Element:
        while not self._ready:
            if timeout is not None and timeout <= 0:
                raise TimeoutError
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                raise ConnectionError("the server closed the stream")
            assert self._parser is not None
            self._parser.feed(data)
            for event, item in cast(Iterator[tuple[str, ET.Element]], self._parser.read_events()):
                element = item
                if event == "start":
                    self._depth += 1
                else:
                    self._depth -= 1
                    if self._depth == 1:
                        self._ready.append(element)
                    elif self._depth == 0:
                        raise ConnectionError("the server ended the stream")
        return self._ready.pop(0)


class ProbePair:
    """Members 0 and 1 in a process of their own, member 0 asking member 1: the round trip then measures the
    server and the two members, not the event loop of the crowd (busy with every presence of a storm)."""

    def __init__(self, port: int, login_timeout: float) -> None:
        self._conn, child = multiprocessing.get_context("spawn").Pipe()
        self._proc = multiprocessing.get_context("spawn").Process(
            target=_probe_main, args=(child, port, login_timeout), daemon=True
        )
        self._proc.start()
        self.seen = [Seen(f"{_user(i)}@{DOMAIN}") for i in (0, 1)]
        self.times: list[float] = []
        self.failures = 0
        self.reasons: dict[str, int] = {}

    def ask(self, command: str, arg: object = None) -> object:
        self._conn.send((command, arg))
        return self._conn.recv()

    def refresh(self) -> None:
        states = self.ask("state")
        assert isinstance(states, list)
        for seen, state in zip(self.seen, states, strict=True):
            seen.connected, seen.sessions, seen.failed_logins, seen.last_login, known = state
            seen.known = set(known)

    async def trips(self, command: str, arg: object = None) -> None:
        """rtt_stop or rtt_wait: the times of the round trips since rtt_start."""
        result = await asyncio.to_thread(self.ask, command, arg)
        assert isinstance(result, tuple)
        self.times, self.failures, self.reasons = result

    def summary(self) -> str:
        why = ", ".join(f"{reason} {count}" for reason, count in sorted(self.reasons.items(), key=lambda r: -r[1]))
        return _summary(self.times, self.failures) + (f" [{why}]" if why else "")

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError):
            self.ask("stop")
        self._proc.join(30)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()


def _probe_main(conn: Connection, port: int, login_timeout: float) -> None:
    logging.basicConfig(level=logging.CRITICAL)
    asyncio.run(_probe(conn, port, login_timeout))


async def _probe(conn: Connection, port: int, login_timeout: float) -> None:
    rng = random.Random(1)
    pair = [make_member(i, port, rng, login_timeout) for i in (0, 1)]
    trips = RoundTrips(pair[0], pair[1])
    while True:
        command, arg = await asyncio.to_thread(conn.recv)
        if command == "start":
            for m in pair:
                await m.client.start()
            conn.send(None)
        elif command == "state":
            conn.send([(m.connected, m.sessions, m.failed_logins, m.last_login, sorted(m.known)) for m in pair])
        elif command == "rtt_start":
            trips.start(arg if isinstance(arg, int) else None)
            conn.send(None)
        elif command in ("rtt_stop", "rtt_wait"):
            await (trips.stop() if command == "rtt_stop" else trips.finish())
            conn.send((trips.times, trips.failures, trips.reasons))
        elif command == "stop":
            await asyncio.gather(*(m.client.stop() for m in pair), return_exceptions=True)
            conn.send(None)
            return


class ShardMember:
    """A member of the crowd that runs in a `CrowdShard`, as last reported."""

    def __init__(self, index: int) -> None:
        self.jid = f"{_user(index)}@{DOMAIN}"
        self.connected = False
        self.sessions = 0
        self.failed_logins = 0
        self.last_login = 0.0
        self.contacts_known = False  # it holds the presence of every contact it picked
        self.known: set[str] = set()


class CrowdShard:
    """`--crowd-processes K`: a K-th of the crowd (evio's SignalClients in trust mode, presence to contacts) in a
    process of its own, as the probe pair is. 998 members in one Python process put the members' own CPU (slixmpp,
    the proof checks: about 33 ms a member's storm, one core for all) on the storm's path, which on a shared
    2-core machine is served a third of a core: the run then measures that process, not the server. Real
    members each have a host of their own."""

    def __init__(self, port: int, login_timeout: float, ca: LinkedCa, trace: bool) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._proc = context.Process(target=_shard_main, args=(child, port, login_timeout, ca, trace), daemon=True)
        self._proc.start()
        self.members = [ShardMember(i) for i in ca.ids]

    @property
    def pid(self) -> int:
        assert self._proc.pid is not None
        return self._proc.pid

    def ask(self, command: str) -> object:
        self._conn.send((command, None))
        return self._conn.recv()

    def refresh(self) -> None:
        states = self.ask("state")
        assert isinstance(states, list)
        for member, state in zip(self.members, states, strict=True):
            member.connected, member.sessions, member.failed_logins, member.last_login, member.contacts_known = state

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError):
            os.kill(self.pid, signal.SIGCONT)  # held for a restart: it must hear "stop"
            self.ask("stop")
        self._proc.join(30)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()


def _shard_main(conn: Connection, port: int, login_timeout: float, ca: LinkedCa, trace: bool) -> None:
    global TRACE
    logging.basicConfig(level=logging.CRITICAL)
    TRACE = [] if trace else None
    asyncio.run(_shard(conn, port, login_timeout, ca))


async def _shard(conn: Connection, port: int, login_timeout: float, ca: LinkedCa) -> None:
    rng = random.Random(min(ca.ids))
    crowd = [make_member(i, port, rng, login_timeout, node, ident) for i, (node, ident) in issue_identities(ca).items()]
    conn.send(None)  # ready: the certificates are issued
    while True:
        command, _arg = await asyncio.to_thread(conn.recv)
        if command == "start":
            for m in crowd:
                await m.client.start()
            conn.send(None)
        elif command == "state":
            conn.send([(m.connected, m.sessions, m.failed_logins, m.last_login, _contacts_known(m)) for m in crowd])
        elif command == "views":
            conn.send(contact_views(crowd))
        elif command == "trace":
            conn.send(TRACE or [])
        elif command == "stop":
            await asyncio.gather(*(m.client.stop() for m in crowd), return_exceptions=True)
            conn.send(None)
            return


def _contacts_known(m: Member) -> bool:
    contacts = m.client.contacts(OVERLAY)
    return bool(contacts) and contacts <= m.client.peers(OVERLAY).keys()


def _failure_steps(crowd: Sequence[object]) -> str:
    """The lean crowd's failed logins by the step they reached: ' (TimeoutError at features 900, ...)'."""
    steps: dict[str, int] = {}
    for m in crowd:
        for key, count in getattr(m, "failures", {}).items():
            steps[key] = steps.get(key, 0) + count
    top = sorted(steps.items(), key=lambda item: -item[1])[:3]
    return f" ({', '.join(f'{key} {count}' for key, count in top)})" if top else ""


def _summary(times: Sequence[float], failures: int) -> str:
    if not times:
        return f"none ({failures} failed)"
    ms = sorted(t * 1000 for t in times)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    failed = f", {failures} failed" if failures else ""
    return f"{statistics.median(ms):.1f}/{p90:.1f} ms ({len(ms)}{failed})"


async def wait_for(
    condition: Callable[[], bool], timeout: float, refresh: Callable[[], None] | None = None, interval: float = 0.2
) -> float | None:
    """Seconds until `condition()` held, or None after `timeout` (`refresh` first, each time)."""
    started = time.perf_counter()
    while True:
        if refresh is not None:
            refresh()
        if condition():
            return time.perf_counter() - started
        if time.perf_counter() - started > timeout:
            return None
        await asyncio.sleep(interval)


# ---------------------------------------------------------------------------------------------- one run


def linked_identities(n: int, rng: random.Random) -> dict[int, tuple[int, OverlayIdentity]]:
    """`--presence linked --crowd signalclient`: members 2..n-1 in trust mode under one overlay CA, each with its
    node id, certificate and key, and the CA's member list of all of them (what `members.json` holds)."""
    return issue_identities(make_linked_ca(n, rng))


@dataclass
class LinkedCa:
    """The overlay CA of a `--presence linked --crowd signalclient` run, its member list and the members' node ids,
    in a form a crowd process can be handed (PEM, not key objects)."""

    ca_key_pem: bytes
    ca_cert_pem: bytes
    listed: member_list.MemberList
    ids: dict[int, int]  # member index -> node id

    def subset(self, indexes: Sequence[int]) -> LinkedCa:
        return LinkedCa(self.ca_key_pem, self.ca_cert_pem, self.listed, {i: self.ids[i] for i in indexes})


def make_linked_ca(n: int, rng: random.Random) -> LinkedCa:
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert = make_overlay_ca(f"{OVERLAY} CA", now, 30)
    ids = {i: rng.getrandbits(128) for i in range(2, n)}
    listed = member_list.sign_members(ca_key, OVERLAY, 1, int(time.time()),
                                      {node: f"{_user(i)}@{DOMAIN}" for i, node in ids.items()})  # fmt: skip
    key_pem = ca_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption())  # fmt: skip
    return LinkedCa(key_pem, ca_cert.public_bytes(serialization.Encoding.PEM), listed, ids)


def issue_identities(ca: LinkedCa) -> dict[int, tuple[int, OverlayIdentity]]:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = cast(ec.EllipticCurvePrivateKey, serialization.load_pem_private_key(ca.ca_key_pem, None))
    ca_cert = x509.load_pem_x509_certificate(ca.ca_cert_pem)
    anchor = TrustAnchor(OVERLAY, (ca_cert,))
    out = {}
    for i, node in ca.ids.items():
        key, cert = issue_node_certificate(ca_key, ca_cert, [OVERLAY], node, now, 30)
        out[i] = (node, OverlayIdentity(anchor, cert, key, members=ca.listed))
    return out


@dataclass(frozen=True)
class ContactView:
    """One member of the crowd as its contacts go: its JID, the contacts it picked, those it holds the presence of."""

    jid: str
    contacts: frozenset[int]
    present: frozenset[int]
    drops: dict[str, int]


def contact_views(crowd: Sequence[object]) -> dict[int, ContactView]:
    """node id -> ContactView, of the in-process crowd of SignalClients."""
    views = {}
    for m in crowd:
        client = cast(Member, m).client
        views[client.node_id(OVERLAY)] = ContactView(client.settings.jid, client.contacts(OVERLAY),
                                                     frozenset(client.peers(OVERLAY)),
                                                     {r.value: c for r, c in client.drops.counts.items()})  # fmt: skip
    return views


def missing_contacts(views: dict[int, ContactView]) -> str:
    """`--crowd signalclient --presence linked`: contacts a member has no presence of, as 'pairs (one-sided)':
    one-sided, the contact has ours (it lacks an answer); else neither has the other's."""
    missing = one_sided = 0
    for node, view in views.items():
        for contact in view.contacts - view.present:
            missing += 1
            other = views.get(contact)
            one_sided += other is not None and node in other.present
    return f"{missing} ({one_sided} one-sided)"


def trace_missing(views: dict[int, ContactView], trace: Sequence[tuple[float, str, str, str, bool]],
                  t0: float) -> list[str]:  # fmt: skip
    """`--trace`: each missing contact pair (X lacks Y's presence), by where it was lost, from the trace; and what
    the crowd sent and heard, by 2 s from the storm's start."""
    sent: dict[tuple[str, str], list[float]] = {}  # (from bare, to bare) -> times
    heard: dict[tuple[str, str], list[float]] = {}  # (member bare, from bare) -> times
    ups: dict[str, list[float]] = {}
    downs: dict[str, list[float]] = {}
    for at, event, member, peer, _answer in trace:
        other_bare = peer.split("/", 1)[0]
        if event == "sent":
            sent.setdefault((member, other_bare), []).append(at)
        elif event == "heard":
            heard.setdefault((member, other_bare), []).append(at)
        elif event == "up":
            ups.setdefault(member, []).append(at)
        elif event == "down":
            downs.setdefault(member, []).append(at)
    kinds: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    for node, view in views.items():
        x = view.jid
        for contact in view.contacts - view.present:
            other = views.get(contact)
            if other is None:
                continue
            y = other.jid
            y_sent = sent.get((y, x), [])
            x_up = ups.get(x, [])
            if heard.get((x, y)):
                kind = "heard, not kept"
            elif not y_sent:
                kind = "never sent" + (" (it holds ours)" if node in other.present else "")
            elif all(t < min(x_up, default=float("inf")) for t in y_sent):
                kind = "sent before it was up"
            else:
                kind = "sent while it was up, not heard"
            kinds[kind] = kinds.get(kind, 0) + 1
            ex = examples.setdefault(kind, [])
            if len(ex) < 4:
                ex.append(f"{x} lacks {y}: {y} sent at {[round(t - t0, 1) for t in y_sent]}, {x} up at "
                          f"{[round(t - t0, 1) for t in x_up]} down at {[round(t - t0, 1) for t in downs.get(x, [])]}; "
                          f"{x} sent to {y} at {[round(t - t0, 1) for t in sent.get((x, y), [])]}, {y} up at "
                          f"{[round(t - t0, 1) for t in ups.get(y, [])]}")  # fmt: skip
    drops: dict[str, int] = {}
    for view in views.values():
        for reason, number in view.drops.items():
            drops[reason] = drops.get(reason, 0) + number
    lines = [f"missing pairs by where they were lost: {kinds or 'none'}; the crowd's drops: {drops or 'none'}"]
    buckets: dict[int, dict[str, int]] = {}
    for at, event, _member, _other, answer in trace:
        if at >= t0:
            bucket = buckets.setdefault(int((at - t0) / 2), {})
            name = event + (" (answer)" if answer else "")
            bucket[name] = bucket.get(name, 0) + 1
    lines += [f"  {2 * b:3d}-{2 * b + 2:3d} s: {counts}" for b, counts in sorted(buckets.items())]
    for kind, ex in examples.items():
        lines += [f"  {kind}: {e}" for e in ex]
    return lines


def link_sets(n: int) -> list[frozenset[str]]:
    """`--presence linked`: the bare JIDs each of the crowd (members 2..n-1) links with, symmetric.

    A ring by index with two successors and two predecessors, and a chord to the member 2^j ahead for
    every j from 2 up to half the ring (a Symphony overlay links with about log2 n; evio's default is a
    handful): about 2 + 2 log2 n links a member, 20 at 1,000, more than evio keeps."""
    crowd = list(range(2, n))
    size = len(crowd)
    links: list[set[int]] = [set() for _ in crowd]
    for pos in range(size):
        ahead = [1, 2, *(2**j for j in range(2, max(2, size.bit_length() - 1)))]
        for step in ahead:
            other = (pos + step) % size
            if other != pos:
                links[pos].add(other)
                links[other].add(pos)
    return [frozenset(f"{_user(crowd[o])}@{DOMAIN}" for o in peers) for peers in links]



@dataclass
class Row:
    server: str
    members: int
    figures: dict[str, str] = field(default_factory=dict)


async def run_one(server: BenchServer, n: int, args: argparse.Namespace) -> Row:
    row = Row(server.name, n)
    f = row.figures
    f["presence"] = args.presence
    f["crowd"] = args.crowd
    rng = random.Random(n)
    probe = ProbePair(server.port, args.login_timeout)
    linked = args.presence == "linked"
    shards: list[CrowdShard] = []
    if args.crowd_processes > 1:
        # The crowd in K processes of its own (CrowdShard); this one waits and counts.
        ca = make_linked_ca(n, rng)
        indexes = sorted(ca.ids)
        shards = [CrowdShard(server.port, args.login_timeout, ca.subset(indexes[k :: args.crowd_processes]),
                             args.trace) for k in range(args.crowd_processes)]  # fmt: skip
        for shard in shards:
            await asyncio.to_thread(shard._conn.recv)  # its certificates issued
    trusted = linked_identities(n, rng) if linked and args.crowd == "signalclient" and not shards else {}
    f["crowd"] = f"{args.crowd} in {len(shards)} processes" if shards else args.crowd

    def one(i: int) -> Member | LeanMember:
        if args.crowd == "signalclient":
            node, ident = trusted.get(i, (None, None))
            return make_member(i, server.port, rng, args.login_timeout, node, ident)
        return LeanMember(i, server.port, rng.getrandbits(128), random.Random(rng.getrandbits(64)), args.rules,
                          args.login_timeout)  # fmt: skip

    crowd: list[Member | LeanMember | ShardMember] = [m for sh in shards for m in sh.members] if shards else \
        [one(i) for i in range(2, n)]  # fmt: skip
    members: list[MemberLike] = [*probe.seen, *crowd]

    def refresh() -> None:
        probe.refresh()
        for shard in shards:
            shard.refresh()

    def views() -> dict[int, ContactView]:
        if not shards:
            return contact_views(crowd)
        out: dict[int, ContactView] = {}
        for shard in shards:
            out.update(cast(dict[int, ContactView], shard.ask("views")))
        return out

    def trace() -> list[tuple[float, str, str, str, bool]]:
        if not shards:
            return TRACE or []
        return [event for shard in shards for event in cast(list[tuple[float, str, str, str, bool]],
                                                            shard.ask("trace"))]  # fmt: skip

    def crowd_pids() -> list[int]:
        return [os.getpid(), *(shard.pid for shard in shards)]

    def crowd_cpu() -> float:
        return sum(usage(pid).cpu for pid in crowd_pids())

    def crowd_sched() -> tuple[float, float]:
        both = [run_and_wait(pid) for pid in crowd_pids()]
        return sum(r for r, _ in both), sum(w for _, w in both)
    for m in crowd:
        if isinstance(m, LeanMember):
            m.silent = args.presence == "silent"
    if linked and not trusted and not shards:
        for m, links in zip(crowd, link_sets(n), strict=True):
            assert isinstance(m, LeanMember)
            m.links = links
            m.members = n if args.spread == "members" else 0

    def all_know(group: Sequence[MemberLike]) -> Callable[[], bool]:
        if args.presence == "silent" and len(group) > 2:
            return lambda: all_know(probe.seen)() and all(m.connected for m in crowd)
        if shards and len(group) > 2:
            pair = all_know(probe.seen)
            return lambda: pair() and all(cast(ShardMember, m).contacts_known for m in crowd)
        if trusted and len(group) > 2:
            # The shipped client (0059): each of the crowd has the presence of every contact it picked from the
            # CA's member list (its ring neighbours and fingers, and those whose finger it is).
            pair = all_know(probe.seen)

            def contacts_known(m: MemberLike) -> bool:
                client = cast(Member, m).client
                return bool(client.contacts(OVERLAY)) and client.contacts(OVERLAY) <= client.peers(OVERLAY).keys()

            return lambda: pair() and all(contacts_known(m) for m in crowd)
        if linked and len(group) > 2:
            # The pair knows each other (their group of two); each of the crowd, its links (the whole
            # membership it has from the overlay CA's signed list, not from the server).
            pair = all_know(probe.seen)
            return lambda: pair() and all((cast(LeanMember, m).links or frozenset()) <= m.known for m in crowd)
        jids = {m.jid for m in group}
        # The cheap count first: a full check of 1,000 sets every poll would load the crowd's own loop.
        return lambda: all(len(m.known) >= len(jids) - 1 for m in group) and \
            all(len(m.known & jids) == len(jids) - 1 for m in group)  # fmt: skip

    def pairs(group: Sequence[MemberLike]) -> str:
        jids = {m.jid for m in group}
        return f"{sum(len(m.known & jids) for m in group) / (len(group) * (len(group) - 1)):.0%} of pairs"

    def count(what: Callable[[MemberLike], bool], timeout: float) -> str:
        return f"{sum(1 for m in members if what(m))} of {n} after {timeout:.0f} s"

    try:
        # 1. the storm, with two members online first (in the probe process) to time the round trip under it
        await asyncio.to_thread(probe.ask, "start")
        if await wait_for(all_know(probe.seen), 60, refresh) is None:
            raise RuntimeError("the first two members did not find each other in 60 s")
        probe.ask("rtt_start")
        before = usage(server.pid())
        members_cpu = crowd_cpu()
        sched_before = crowd_sched(), run_and_wait(server.pid())
        profile = cProfile.Profile() if args.profile else None
        if profile is not None:
            profile.enable()
        t0 = time.perf_counter()
        if shards:
            await asyncio.gather(*(asyncio.to_thread(shard.ask, "start") for shard in shards))
        for m in crowd:
            if not isinstance(m, ShardMember):
                await m.client.start()
        in_s = await wait_for(lambda: all(m.connected for m in members), args.timeout, refresh)
        f["signed in"] = f"{in_s:.1f} s" if in_s is not None else count(lambda m: m.connected, args.timeout)
        if trusted or shards:
            f["missing at signed in"] = missing_contacts(views())
        left = args.timeout - (time.perf_counter() - t0)
        know_s = await wait_for(all_know(members), max(left, 1.0), refresh)
        f["all know all"] = f"{time.perf_counter() - t0:.1f} s" if know_s is not None else \
            f"{pairs(members)} after {args.timeout:.0f} s"  # fmt: skip
        if profile is not None:
            profile.disable()
            profile.dump_stats(args.profile)
        if trusted or shards:
            f["missing at the end"] = missing_contacts(views())
        if args.trace and (trusted or shards):
            print("\n".join(trace_missing(views(), trace(), t0)), file=sys.stderr, flush=True)
        await probe.trips("rtt_stop")
        f["RTT storm p50/p90"] = probe.summary()
        logins = sorted(m.last_login for m in members)
        f["login p50/max"] = f"{statistics.median(logins):.1f}/{logins[-1]:.1f} s"
        storm_failures = sum(m.failed_logins for m in members)
        f["failed logins"] = f"{storm_failures}{_failure_steps(crowd)}"
        for m in crowd:
            if isinstance(m, LeanMember):
                m.failures.clear()
        after = usage(server.pid())
        f["server CPU"] = f"{after.cpu - before.cpu:.1f} s"
        f["members' CPU"] = f"{crowd_cpu() - members_cpu:.1f} s"
        sched_after = crowd_sched(), run_and_wait(server.pid())
        (m_ran, m_wait), (s_ran, s_wait) = ((a[0] - b[0], a[1] - b[1]) for a, b in zip(sched_after, sched_before,
                                                                                       strict=True))  # fmt: skip
        f["ran/waited for a CPU: members, server"] = f"{m_ran:.1f}/{m_wait:.1f} s, {s_ran:.1f}/{s_wait:.1f} s"
        f["load"] = f"{load1():.1f}"

        # 2. settled
        probe.ask("rtt_start", args.requests)
        await probe.trips("rtt_wait")
        f["RTT settled p50/p90"] = probe.summary()

        # 3. a member added, then 4. removed, while all are online (with the shared group only)
        admin = server.admin()
        if args.presence != "roster":
            final = usage(server.pid())
            f["server peak RSS"] = f"{final.peak_rss_mb:.0f} MB"
        else:
            newcomer = one(n)
            everyone = [*members, newcomer]
            t0 = time.perf_counter()
            await asyncio.to_thread(admin.add_to_group, _user(n), OVERLAY)
            command = time.perf_counter() - t0
            await newcomer.client.start()
            added = await wait_for(all_know(everyone), 120, refresh)
            f["add: all know"] = (f"{time.perf_counter() - t0:.1f} s (cmd {command:.1f} s)" if added is not None
                                  else count(lambda m: newcomer.jid in m.known, 120))  # fmt: skip
            t0 = time.perf_counter()
            await asyncio.to_thread(admin.remove_from_group, _user(n), OVERLAY)
            command = time.perf_counter() - t0
            gone = await wait_for(lambda: not any(newcomer.jid in m.known for m in members), 120, refresh)
            f["remove: none knows"] = (f"{time.perf_counter() - t0:.1f} s (cmd {command:.1f} s)" if gone is not None
                                       else count(lambda m: newcomer.jid not in m.known, 120))  # fmt: skip
            await newcomer.client.stop()
            final = usage(server.pid())
            f["server peak RSS"] = f"{final.peak_rss_mb:.0f} MB"

        # 5. restart with every member online
        if args.restart:
            refresh()
            sessions = {m.jid: m.sessions for m in members}
            # Stopped and started with the crowd's loop held: its members notice the end of their sessions at
            # the same moment, once the server listens again (as when a restarted server had closed all streams
            # at once). "signed in" counts from then; "all know" from the start command (the start included).
            for shard in shards:  # the crowd's processes held as this one's loop is
                os.kill(shard.pid, signal.SIGSTOP)
            server.stop()
            t0 = time.perf_counter()
            server.start()
            for shard in shards:
                os.kill(shard.pid, signal.SIGCONT)
            members_cpu = crowd_cpu()
            back = await wait_for(lambda: all(m.sessions > sessions[m.jid] and m.connected for m in members),
                                  args.timeout, refresh)  # fmt: skip
            f["restart: signed in"] = f"{back:.1f} s" if back is not None else \
                count(lambda m: m.sessions > sessions[m.jid], args.timeout)  # fmt: skip
            left = args.timeout - (time.perf_counter() - t0)
            know_s = await wait_for(all_know(members), max(left, 1.0), refresh)
            f["restart: all know"] = f"{time.perf_counter() - t0:.1f} s" if know_s is not None else pairs(members)
            f["restart: failed logins"] = f"{sum(m.failed_logins for m in members) - storm_failures}{_failure_steps(crowd)}"
            restarted = usage(server.pid())
            f["restart: CPU/RSS"] = f"{restarted.cpu:.1f} s/{restarted.peak_rss_mb:.0f} MB"
            f["restart: members' CPU"] = f"{crowd_cpu() - members_cpu:.1f} s"
            f["restart: load"] = f"{load1():.1f}"
    finally:
        await asyncio.gather(*(m.client.stop() for m in crowd if not isinstance(m, ShardMember)),
                             return_exceptions=True)  # fmt: skip
        for shard in shards:
            await asyncio.to_thread(shard.close)
        await asyncio.to_thread(probe.close)
    return row


@contextlib.contextmanager
def bench_server(kind: str, n: int, args: argparse.Namespace) -> Iterator[BenchServer]:
    directory = Path(tempfile.mkdtemp(prefix=f"sigscale-{kind}-{n}-"))
    server: Prosody | Ejabberd
    group = 2 if args.presence == "linked" else n  # linked: the shared group holds the probe pair alone
    try:
        if kind == "prosody":
            server = Prosody(directory, group, n + 1)
        else:
            server = Ejabberd(directory, group, n + 1, args.ejabberd_packaged)
        server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        if args.keep:
            print(f"kept {directory}", file=sys.stderr)
        else:
            shutil.rmtree(directory, ignore_errors=True)


COLUMNS = ("presence", "crowd", "signed in", "missing at signed in", "all know all", "missing at the end", "login p50/max", "failed logins", "server CPU", "members' CPU",
           "ran/waited for a CPU: members, server", "server peak RSS",
           "RTT storm p50/p90", "RTT settled p50/p90", "add: all know", "remove: none knows", "load",
           "restart: signed in", "restart: all know", "restart: failed logins", "restart: CPU/RSS", "restart: members' CPU", "restart: load")


def table(rows: Sequence[Row]) -> list[str]:
    present = [c for c in COLUMNS if any(c in r.figures for r in rows)]
    head = ["server", "members", *present]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.server, str(r.members), *(r.figures.get(c, "") for c in present)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


async def main_async(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    for n in args.members:
        for kind in args.servers:
            print(f"# {kind}, {n} members ...", file=sys.stderr, flush=True)
            with bench_server(kind, n, args) as server:
                row = await run_one(server, n, args)
            rows.append(row)
            print("\n".join(table([row])[2:]), file=sys.stderr, flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--members", type=lambda s: [int(x) for x in s.split(",")], default=[100, 300],
                        help="comma-separated member counts (default 100,300; 1000 takes minutes on prosody)")
    parser.add_argument("--servers", type=lambda s: s.split(","), default=["prosody", "ejabberd"],
                        help="prosody,ejabberd (default both)")
    parser.add_argument("--quick", action="store_true", help="CI: 100 members only")
    parser.add_argument("--requests", type=int, default=200, help="settled round trips (default 200)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a phase may take (default 300)")
    parser.add_argument("--login-timeout", type=float, default=SignalSettings.login_timeout,
                        help="the members' login_timeout (default as shipped)")
    parser.add_argument("--crowd", choices=("lean", "signalclient"), default="lean",
                        help="members 2..n-1: a lean client (default) or evio's SignalClient (see LeanMember)")
    parser.add_argument("--rules", choices=("shipped", "before"), default="shipped",
                        help="the lean crowd's sign-in rules: this tree's pacing, or the release before it")
    parser.add_argument("--presence", choices=("roster", "linked", "silent"), default="roster",
                        help="roster: one shared group of all (as shipped); linked: the crowd's presence goes to its "
                             "links alone (docs/decisions/0052); silent: the shared group's roster, no presence")
    parser.add_argument("--spread", choices=("members", "login"), default="members",
                        help="--presence linked: the return after a restart spread with the members (as shipped) "
                             "or with the last login's time alone")
    parser.add_argument("--no-restart", dest="restart", action="store_false", help="skip the server restart")
    parser.add_argument("--ejabberd-packaged", action="store_true",
                        help="ejabberd with its packaged listener backlog and caches, not evio's")
    parser.add_argument("--keep", action="store_true", help="keep the servers' directories")
    parser.add_argument("--crowd-processes", type=int, default=1, metavar="K",
                        help="--presence linked --crowd signalclient: the crowd in K processes of its own (CrowdShard)")
    parser.add_argument("--profile", metavar="FILE", help="cProfile this process (the crowd) over the storm into FILE")
    parser.add_argument("--trace", action="store_true",
                        help="--presence linked --crowd signalclient: where the contact pairs still missing were lost")
    args = parser.parse_args()
    if args.quick:
        args.members = [100]
    for kind in args.servers:
        if kind not in ("prosody", "ejabberd"):
            parser.error(f"unknown server {kind!r} (prosody or ejabberd)")
    if args.crowd_processes > 1 and (args.presence != "linked" or args.crowd != "signalclient"):
        parser.error("--crowd-processes: with --presence linked --crowd signalclient only")
    if args.crowd_processes > 1 and args.profile:
        parser.error("--profile: the crowd in this process only (not with --crowd-processes)")
    if any(n < 3 for n in args.members):
        parser.error("--members: at least 3")
    if os.geteuid() != 0:
        parser.error("needs root (prosody and ejabberd run as servers of their own)")
    logging.basicConfig(level=logging.CRITICAL, format="%(levelname)s %(name)s: %(message)s")
    # SIGTERM unwinds like ^C: the servers of the run under way are stopped and their directories removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.trace:
        global TRACE
        TRACE = []
    rows = asyncio.run(main_async(args))
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
