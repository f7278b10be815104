#!/usr/bin/env python3
"""What one membership change costs the XMPP server (decision 0065): `evio member add` and `remove` at scale.

    .venv/bin/python benchmarks/member_change_bench.py                    # 100 and 300 members, prosody
    .venv/bin/python benchmarks/member_change_bench.py --members 1000
    .venv/bin/python benchmarks/member_change_bench.py --server ejabberd --members 1000 --no-group
                                                 # [--no-multicast: one ejabberdctl call per member, decision 0065, amended]

Run it under `flock /tmp/evio-heavy.lock` on a shared machine (root: prosody runs as a server of its own on
loopback, from a temporary directory, on a free port). Per member count:

1. **the overlay**: n members signed in, each evio's real `SignalClient` in the mode of decision 0059 (the
   overlay CA's member list is the membership; presence to the contacts `evio.signal.contacts` picks), with
   a certificate of the server host's overlay CA, all in this one process (`signal_scale_bench.BenchMember`).
   All of them are also in the overlay's roster group, as `evio member add` leaves them.
2. **a member added**: `evio.server.members.add_member`, the code `evio member add` runs, against the real
   prosody (its account made and its roster item pushed through prosody's admin shell, the new list handed to
   the members online); the new member then signs in with what its join token carries. Timed from the
   command's start: until every member holds the new list's serial ("all hold"), and until the new member and
   every contact it picked hold each other's presence ("linked").
3. **a member removed**: `remove_member`, as `evio member remove` runs it, of that new member: until no member
   holds it as a peer ("cut off", the revocation list) and every member holds the list without it ("all hold").

On ejabberd (`--server ejabberd`, as `evio server init` configures it, from a temporary directory) the admin
commands are `ejabberdctl` calls, each an Erlang start: they are counted, with their CPU (this process's
children) beside the server's own CPU (its beam process). With the multicast service (decision 0065, amended) a
message to every member online is one `send_stanza` per batch; `--no-multicast` sends one per member, as
before it.

The server's bytes are prosody's reads and writes (`rchar` + `wchar` of /proc/<pid>/io: its sockets, the admin
shell's chunk, its files) from the command's start until the conditions hold and prosody's counters then stay
still for 2 s. The members count what the server host's member-list messages brought them (`full` lists and
`change`s of decision 0065) and their asks. The load average (1 min) is printed beside each row: the machine
is shared. There is no overlay here (no Open vSwitch, no tunnels): a list that would spread over the overlay's
flood does not, so "all hold" is what the server and signaling carry alone.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from evio.server import members as server_members
from evio.server import token as join_token
from evio.server.configs import ejabberd_multicast_service, groups_text
from evio.server.settings import ServerSettings
from evio.server.xmpp_admin import EjabberdAdmin, ProsodyAdmin
from evio.signal import member_list
from evio.signal.client import SignalSettings
from evio.signal.endpoint import OverlayIdentity
from evio.tunnel.path.overlay_ca import issue_node_certificate
from evio.tunnel.path.trust import TrustAnchor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from signal_scale_bench import DOMAIN, OVERLAY, BenchMember, Ejabberd, Prosody, _password, _user, load1, usage, wait_for

log = logging.getLogger("member_change_bench")
T = TypeVar("T")


class CountingMember(BenchMember):
    """The shipped client; it counts the member-list messages it receives, by kind, and their bytes."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.received: Counter[str] = Counter()

    def _members_message(self, sender: str, text: str) -> None:
        kind = "ask" if '"ask"' in text[:64] else "change" if '"base"' in text else "full"
        self.received[kind] += 1
        self.received[f"{kind} bytes"] += len(text)
        super()._members_message(sender, text)


class NoRelay:
    """coturn is not part of this measurement."""

    def add_user(self, user: str, password: str) -> None:
        pass

    def remove_user(self, user: str) -> None:
        pass


def server_io(port: int) -> dict[str, int]:
    """Bytes prosody sent and received so far on each member's stream open now, by the member's address and
    port (the kernel's count per TCP socket, `ss -ti`: prosody's luasocket uses send/recv, which
    /proc/<pid>/io does not count)."""
    out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{port} )"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    counts: dict[str, int] = {}
    peer = ""
    for line in out.splitlines():
        if not line.startswith((" ", "\t")):
            peer = line.split()[-1]  # the first line of a socket: addresses, the peer's last
        counts[peer] = counts.get(peer, 0) + sum(int(b) for b in re.findall(r"bytes_(?:sent|received):(\d+)", line))
    return counts


def io_since(before: dict[str, int], port: int) -> int:
    """Bytes through prosody since `before` on the streams open now (a stream closed since is not counted:
    the removed member's, whose last bytes go with it)."""
    return sum(n - before.get(peer, 0) for peer, n in server_io(port).items())


async def io_settled(port: int, still: float = 2.0, limit: float = 20.0) -> None:
    """Once prosody's byte count has stayed still for `still` seconds (at most `limit` seconds)."""
    started = time.perf_counter()
    last, since = sum(server_io(port).values()), time.perf_counter()
    while time.perf_counter() - started < limit:
        await asyncio.sleep(0.25)
        now = sum(server_io(port).values())
        if now != last:
            last, since = now, time.perf_counter()
        elif time.perf_counter() - since >= still:
            break


def timed(command: Callable[..., T], *args: object) -> tuple[T, float]:
    """`command`'s result, and when it returned (`time.perf_counter`)."""
    return command(*args), time.perf_counter()


@dataclass
class Row:
    members: int
    figures: dict[str, str] = field(default_factory=dict)


def client(index: int, port: int, node_id: int, ident: OverlayIdentity, rng: random.Random,
           password: str | None = None) -> CountingMember:  # fmt: skip
    settings = SignalSettings(
        jid=f"{_user(index)}@{DOMAIN}", server="127.0.0.1", port=port, password=password or _password(index),
        memberships={OVERLAY: node_id}, insecure_plaintext=True, identities={OVERLAY: ident},
    )  # fmt: skip
    return CountingMember(settings, random.Random(rng.getrandbits(64)))


async def run_one(n: int, args: argparse.Namespace) -> Row:
    row = Row(n)
    f = row.figures
    rng = random.Random(n)
    directory = Path(tempfile.mkdtemp(prefix=f"memberchange-{n}-"))
    directory.chmod(0o711)  # ejabberd runs as its own user from a directory below
    server: Prosody | Ejabberd
    if args.server == "ejabberd":
        server = Ejabberd(directory / "ejabberd", n if args.group else 0, n + 1, packaged=False)
    else:
        server = Prosody(directory / "prosody", n if args.group else 0, n + 1)
    crowd: list[CountingMember] = []
    try:
        server.start()
        if not args.group and isinstance(server, Prosody):
            # The group as `evio member add` writes it (the server host's deliver reads it), but not loaded by
            # prosody, which read the file empty at its start: no roster of n, no broadcast presence to n.
            server.groups_file.write_text(groups_text({OVERLAY: [f"{_user(i)}@{DOMAIN}" for i in range(n)]}))
        now = datetime.datetime.now(datetime.UTC)
        # The server host's side, as `evio server init` and `evio member add` leave it for n members.
        tls_ca = directory / "xmpp-ca.crt"
        tls_ca.write_text("")
        if isinstance(server, Prosody):
            settings = ServerSettings(domain=DOMAIN, xmpp="prosody", address="127.0.0.1", xmpp_port=server.port,
                                      prosody_config=str(server.config), groups_file=str(server.groups_file),
                                      xmpp_tls_ca=str(tls_ca))  # fmt: skip
        else:
            settings = ServerSettings(domain=DOMAIN, xmpp="ejabberd", address="127.0.0.1", xmpp_port=server.port,
                                      xmpp_tls_ca=str(tls_ca))  # fmt: skip
        registry = server_members.Registry(directory / "state")
        record = registry.create_overlay(OVERLAY, server_members.DEFAULT_POOL, now)
        ca_key, ca_cert = registry.ca(OVERLAY)
        anchor = TrustAnchor(OVERLAY, (ca_cert,))
        ids = {i: rng.getrandbits(128) for i in range(n)}
        for i, node in ids.items():
            record.members[_user(i)] = server_members.Member(_user(i), node, f"10.254.{i // 250}.{i % 250 + 1}/16",
                                                             "2026-11-28T00:00:00Z", "2026-12-28T00:00:00Z")  # fmt: skip
        registry.save(record)
        listed = server_members.write_member_list(registry, record, DOMAIN, now)
        for i, node in ids.items():
            key, cert = issue_node_certificate(ca_key, ca_cert, [OVERLAY], node, now, 30)
            crowd.append(client(i, server.port, node, OverlayIdentity(anchor, cert, key, members=listed), rng))
        f["list bytes"] = f"{len(member_list.to_text(listed)) / 1024:.0f} KB"

        # 1. all signed in and linked with their contacts
        t0 = time.perf_counter()
        for m in crowd:
            await m.start()

        def contacts_known(c: CountingMember) -> bool:
            return bool(c.contacts(OVERLAY)) and c.contacts(OVERLAY) <= c.peers(OVERLAY).keys()

        ready = await wait_for(lambda: all(m.connected for m in crowd) and all(contacts_known(m) for m in crowd),
                               args.timeout)  # fmt: skip
        f["storm"] = f"{ready:.1f} s" if ready is not None else "not settled"
        if ready is None:
            raise RuntimeError(f"{n} members did not sign in and find their contacts in {args.timeout:.0f} s")
        f["storm load"] = f"{load1():.1f}"
        await io_settled(server.port)

        # The admin shell's chunks (a unix socket, not counted by `ss -t`): the texts handed to prosody; on
        # ejabberd the ejabberdctl calls and their arguments.
        admin = server.admin()
        chunks = Counter[str]()
        if isinstance(admin, ProsodyAdmin):
            shell = admin._shell

            def counted(lua: str) -> str:
                chunks["bytes"] += len(lua)
                chunks["calls"] += 1
                return shell(lua)

            admin._shell = counted  # type: ignore[method-assign]
        else:
            assert isinstance(admin, EjabberdAdmin)
            admin.multicast = ejabberd_multicast_service(DOMAIN) if args.multicast else ""
            ctl = admin._ctl

            def counted_ctl(*argv: str, secret: str | None = None) -> str:
                chunks["bytes"] += sum(len(a) for a in argv)
                chunks["calls"] += 1
                chunks[argv[0]] += 1
                return ctl(*argv, secret=secret)

            admin._ctl = counted_ctl  # type: ignore[method-assign]

        def cpu_now() -> tuple[float, float]:
            """The server's CPU seconds and this process's children's (the ejabberdctl and prosodyctl runs)."""
            kids = resource.getrusage(resource.RUSAGE_CHILDREN)
            return usage(server.pid()).cpu, kids.ru_utime + kids.ru_stime

        def cpu_since(before: tuple[float, float]) -> str:
            now = cpu_now()
            return f"server {now[0] - before[0]:.1f} s, admin tool {now[1] - before[1]:.1f} s"

        def calls() -> str:
            text = f"{chunks['calls']} ({', '.join(f'{k} {v}' for k, v in sorted(chunks.items()) if k not in ('bytes', 'calls'))})"
            return text if args.server == "ejabberd" else str(chunks["calls"])

        def all_hold(group: list[CountingMember], at_least: int) -> Callable[[], bool]:
            return lambda: all((ml := c.listed_members(OVERLAY)) is not None and ml.serial >= at_least for c in group)

        # 2. a member added
        name = _user(n)
        before = server_io(server.port)
        cpu0 = cpu_now()
        t0 = time.perf_counter()
        # Read here, not with `read_member_list`: the tree before decision 0065 is measured too.
        serial = member_list.load((registry.overlay_dir(OVERLAY) / server_members.MEMBER_LIST_FILE).read_text()).serial + 1
        # The members are watched while the command runs: they may hold the list before it returns.
        adding = asyncio.create_task(asyncio.to_thread(timed, server_members.add_member, registry, settings, admin,
                                                       NoRelay(), OVERLAY, name, datetime.datetime.now(datetime.UTC)))
        hold_s = await wait_for(all_hold(crowd, serial), args.change_timeout)
        hold_at = time.perf_counter() - t0
        added, ended = await adding
        command = ended - t0
        token = join_token.decode(added.token, datetime.datetime.now(datetime.UTC))
        new_key = serialization.load_pem_private_key(token.key_pem.encode(), password=None)
        assert isinstance(new_key, ec.EllipticCurvePrivateKey)
        new_cert = x509.load_pem_x509_certificate(token.cert_pem.encode())
        newcomer = client(n, server.port, token.node_id,
                          OverlayIdentity(anchor, new_cert, new_key, members=member_list.load(token.member_list)), rng,
                          password=token.xmpp_password)  # fmt: skip
        assert member_list.load(token.member_list).serial == serial
        await newcomer.start()
        everyone = [*crowd, newcomer]

        def linked() -> bool:
            if not newcomer.connected or not contacts_known(newcomer):
                return False
            by_id = {m.node_id(OVERLAY): m for m in crowd}
            return all(token.node_id in by_id[c].peers(OVERLAY) for c in newcomer.contacts(OVERLAY))

        link_s = await wait_for(linked, max(1.0, args.change_timeout - (time.perf_counter() - t0)))
        took = time.perf_counter() - t0
        await io_settled(server.port)
        moved = io_since(before, server.port)
        f["add: cmd"] = f"{command:.1f} s"
        f["add: all hold"] = (f"{hold_at:.1f} s" if hold_s is not None else
                              f"{sum(all_hold([c], serial)() for c in crowd)} of {n}")  # fmt: skip
        f["add: linked"] = f"{took:.1f} s" if link_s is not None else "no"
        f["add: server bytes"] = f"{moved / 1e6:.2f} MB + admin {chunks['bytes'] / 1e6:.2f} MB"
        f["add: admin calls"] = calls()
        f["add: CPU"] = cpu_since(cpu0)
        chunks.clear()
        f["add: load"] = f"{load1():.1f}"
        received = sum((c.received for c in everyone), Counter())
        f["add: received"] = ", ".join(f"{k} {v / 1e6:.2f} MB" if "bytes" in k else f"{k} {v}"
                                       for k, v in sorted(received.items()))  # fmt: skip
        for c in everyone:
            c.received.clear()

        # 3. that member removed
        before = server_io(server.port)
        cpu0 = cpu_now()
        t0 = time.perf_counter()
        removing = asyncio.create_task(asyncio.to_thread(timed, server_members.remove_member, registry, admin,
                                                         NoRelay(), OVERLAY, name, datetime.datetime.now(datetime.UTC),
                                                         DOMAIN))  # fmt: skip
        cut_s = await wait_for(lambda: not any(token.node_id in c.peers(OVERLAY) for c in crowd), args.change_timeout)
        cut_at = time.perf_counter() - t0
        hold_s = await wait_for(all_hold(crowd, serial + 1), max(1.0, args.change_timeout - (time.perf_counter() - t0)))
        took = time.perf_counter() - t0
        _, ended = await removing
        command = ended - t0
        await io_settled(server.port)
        moved = io_since(before, server.port)
        f["remove: cmd"] = f"{command:.1f} s"
        f["remove: cut off"] = f"{cut_at:.1f} s" if cut_s is not None else "no"
        f["remove: all hold"] = (f"{took:.1f} s" if hold_s is not None
                                 else f"{sum(all_hold([c], serial + 1)() for c in crowd)} of {n}")  # fmt: skip
        f["remove: server bytes"] = f"{moved / 1e6:.2f} MB + admin {chunks['bytes'] / 1e6:.2f} MB"
        f["remove: admin calls"] = calls()
        f["remove: CPU"] = cpu_since(cpu0)
        f["remove: load"] = f"{load1():.1f}"
        received = sum((c.received for c in crowd), Counter())
        f["remove: received"] = ", ".join(f"{k} {v / 1e6:.2f} MB" if "bytes" in k else f"{k} {v}"
                                          for k, v in sorted(received.items()))  # fmt: skip
        await newcomer.stop()
    finally:
        await asyncio.gather(*(m.stop() for m in crowd), return_exceptions=True)
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--members", type=lambda s: [int(x) for x in s.split(",")], default=[100, 300])
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds the sign-in may take")
    parser.add_argument("--change-timeout", type=float, default=30.0, help="seconds a change may take to spread")
    parser.add_argument("--server", choices=("prosody", "ejabberd"), default="prosody")
    parser.add_argument("--no-multicast", dest="multicast", action="store_false",
                        help="ejabberd: one ejabberdctl send_stanza per member online (before decision 0065, amended)")
    parser.add_argument("--no-group", dest="group", action="store_false",
                        help="the server loads no roster group (prosody: the server host's groups file still lists "
                             "every member): no roster of n members, no presence broadcast to them")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rows = []
    for n in args.members:
        print(f"# {n} members ...", file=sys.stderr, flush=True)
        row = asyncio.run(run_one(n, args))
        rows.append(row)
        print(" | ".join(f"{k}: {v}" for k, v in row.figures.items()), file=sys.stderr, flush=True)
    columns = list(dict.fromkeys(k for r in rows for k in r.figures))
    print("| members | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for r in rows:
        print(f"| {r.members} | " + " | ".join(r.figures.get(c, "") for c in columns) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
