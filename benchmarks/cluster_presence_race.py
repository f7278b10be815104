#!/usr/bin/env python3
"""Two first presences at the same moment on two ejabberd cluster nodes: how often both are lost (decision 0067).

    flock /tmp/evio-heavy.lock .venv/bin/python benchmarks/cluster_presence_race.py --rounds 150

No evio client: two plain slixmpp clients, `a` on cluster node 1 and `b` on node 2 (evio.testing.ejabberd_cluster,
root), in one roster group. Each round both send their first presence in the same loop turn and wait up to
`--wait` s for the other's. When one is missing, each side sends a probe to the other's bare JID, which is what
evio does a few seconds after a login, and waits again. Then both send `unavailable`, so the next presence is a
first one again. Printed: the rounds where a presence was lost, and how many a probe brought back.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from slixmpp import ClientXMPP

from evio.testing.ejabberd_cluster import DOMAIN, EjabberdCluster


class Client:
    def __init__(self, name: str, server: str) -> None:
        self.full_jid = f"{name}@{DOMAIN}/r"
        self.xmpp = ClientXMPP(self.full_jid, f"pw-{name}")
        self.xmpp.enable_plaintext, self.xmpp.enable_starttls, self.xmpp.enable_direct_tls = True, False, False
        self.xmpp.plugin["feature_mechanisms"].unencrypted_plain = True
        self.xmpp.auto_authorize = self.xmpp.auto_subscribe = False
        self.available: set[str] = set()
        self.unavailable: set[str] = set()
        self.started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.xmpp.add_event_handler("session_start", self._start)
        self.xmpp.add_event_handler("presence_available", lambda p: self.available.add(str(p["from"])))
        self.xmpp.add_event_handler("presence_unavailable", self._gone)
        host, port = server.rsplit(":", 1)
        self.xmpp.connect(host, int(port))

    async def _start(self, _: Any) -> None:
        await self.xmpp.get_roster()
        if not self.started.done():
            self.started.set_result(None)

    def _gone(self, presence: Any) -> None:
        self.unavailable.add(str(presence["from"]))
        self.available.discard(str(presence["from"]))


async def until(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return bool(condition())


async def race(cluster: EjabberdCluster, rounds: int, wait: float) -> None:
    a, b = Client("a", cluster.servers([1])[0]), Client("b", cluster.servers([2])[0])
    await asyncio.wait_for(asyncio.gather(a.started, b.started), 60)
    lost = healed = 0
    for round_ in range(1, rounds + 1):
        a.available.clear()
        b.available.clear()
        a.xmpp.send_presence()  # both first presences in the same loop turn
        b.xmpp.send_presence()
        both = lambda: b.full_jid in a.available and a.full_jid in b.available  # noqa: E731
        if not await until(both, wait):
            lost += 1
            seen = (b.full_jid in a.available, a.full_jid in b.available)
            for one, other, had in ((a, b, seen[0]), (b, a, seen[1])):
                if not had:
                    one.xmpp.send_presence(pto=other.full_jid.split("/")[0], ptype="probe")
            healed += await until(both, wait)
            print(f"round {round_}: a had b's presence {seen[0]}, b had a's {seen[1]}; after a probe: {both()}")
        a.unavailable.clear()
        b.unavailable.clear()
        a.xmpp.send_presence(ptype="unavailable")
        b.xmpp.send_presence(ptype="unavailable")
        await until(lambda: b.full_jid in a.unavailable and a.full_jid in b.unavailable, 1.0)
    one, five, _ = os.getloadavg()
    print(f"rounds {rounds}: a presence lost in {lost}, brought by a probe in {healed}; load {one:.2f} {five:.2f}")
    for client in (a, b):
        await asyncio.wait_for(client.xmpp.disconnect(), 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--wait", type=float, default=3.0, help="seconds to wait for a presence (default 3)")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="evio-race-"))  # not 0700: ejabberd runs as its own user
    try:
        directory.chmod(0o755)
        with EjabberdCluster(directory / "cluster", f"race{os.getpid()}") as cluster:
            cluster.add_members("ov1", {"a": "pw-a", "b": "pw-b"})
            asyncio.run(race(cluster, args.rounds, args.wait))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
