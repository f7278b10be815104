#!/usr/bin/env python3
"""What one stranger's STUN datagram costs a node's event loop, and what it is answered (issue 21, M4).

    PYTHONPATH=<tree> .venv/bin/python benchmarks/stun_stranger_bench.py [--datagrams 20000] [--before-up]

Two tunnel endpoints (real aioice, DTLS, data path) in one process on
127.0.0.2, as the unit tests run them; a tunnel comes up, then a stranger's
socket sends Binding requests to one end's tunnel port in bursts of 200 (no
USERNAME, someone else's, and the right ufrag with the wrong password: what a
scanner sends), each burst waited out before the next. Reported: the event
loop thread's CPU time per datagram (``time.thread_time`` over the whole run,
an idle baseline of the same length subtracted) and the bytes answered.
``--before-up``: against an ICE agent that has gathered (aioice's own socket
endpoint, before the data path takes the socket). Run it with PYTHONPATH at
each tree to compare; nothing here depends on the fix's names.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
from pathlib import Path

REPO = Path(os.environ.get("PYTHONPATH", Path(__file__).resolve().parents[1]).split(":")[0])
sys.path.insert(0, str(REPO))

import aioice.ice  # noqa: E402
import aioice.stun  # noqa: E402

BURST = 200


def requests(ufrag: str) -> list[bytes]:
    out = []
    for username, key in ((None, None), ("nobody:else", b"x" * 22), (f"{ufrag}:peer", b"x" * 22)):
        m = aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.REQUEST, os.urandom(12))
        if username is not None:
            m.attributes["USERNAME"] = username
        if key is not None:
            m.add_message_integrity(key)
        out.append(bytes(m))
    return out


async def flood(target: tuple[str, int], ufrag: str, count: int, processed: object) -> tuple[float, float, int, int, int]:
    """Send ``count`` datagrams in bursts; returns (loop CPU s, wall s, bytes sent, datagrams answered, bytes answered)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.2", 0))
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    kinds = requests(ufrag)
    answered = answered_bytes = 0

    def drain() -> None:
        nonlocal answered, answered_bytes
        while True:
            try:
                answered_bytes += len(sock.recv(2048))
                answered += 1
            except BlockingIOError:
                return

    start_cpu, start_wall = time.thread_time(), time.monotonic()
    sent = sent_bytes = 0
    while sent < count:
        base = processed() + answered  # type: ignore[operator]
        n = min(BURST, count - sent)
        # Sent from another thread: only what receiving costs is counted in this one's CPU time.
        sent_bytes += await asyncio.to_thread(lambda n=n: sum(sock.sendto(kinds[i % 3], target) for i in range(n)))
        sent += n
        deadline = time.monotonic() + 5
        while processed() + answered < base + n and time.monotonic() < deadline:  # type: ignore[operator]
            await asyncio.sleep(0.001)
            drain()
    cpu, wall = time.thread_time() - start_cpu, time.monotonic() - start_wall
    drain()
    sock.close()
    return cpu, wall, sent_bytes, answered, answered_bytes


async def idle_cpu(seconds: float, bursts: int) -> float:
    """The loop polling as ``flood`` does and handing ``bursts`` empty jobs to a thread, nothing received."""
    start = time.thread_time()
    end = time.monotonic() + seconds
    for _ in range(bursts):
        await asyncio.to_thread(lambda: 0)
    while time.monotonic() < end:
        await asyncio.sleep(0.001)
    return time.thread_time() - start


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datagrams", type=int, default=20000)
    parser.add_argument("--before-up", action="store_true")
    args = parser.parse_args()
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.2"]
    from evio.tunnel.path import aioice_patches
    from evio.tunnel.path import ice as evio_ice

    if args.before_up:
        agent = evio_ice.IceAgent(evio_ice.IceConfig(relay=evio_ice.RelayPolicy.NEVER), True, "a", 0.0)
        await agent.gather()
        conn = agent.direct
        assert conn is not None
        target = ("127.0.0.2", conn.local_candidates[0].port)
        ufrag = conn.local_username
        processed = lambda: sum(agent.rejected().values()) + sum(aioice_patches.STUN_REJECTED.values())  # noqa: E731
        closers = [agent.close]
    else:
        from evio.testing.fake_tunnel_signaling import FakeTunnelSignalingHub
        from evio.testing.tunnel_nodes import FAST, A, B, make_node
        from evio.tunnel.config import TunnelSettings

        hub = FakeTunnelSignalingHub()
        config = TunnelSettings(ice=evio_ice.IceConfig(), liveness=FAST)
        a, b = make_node(hub, A, config), make_node(hub, B, config)
        await a.manager.connect(B)
        while not b.ups():
            await asyncio.sleep(0.01)
        tunnel_a, tunnel_b = a.manager.get(B), b.manager.get(A)
        assert tunnel_a is not None and tunnel_b is not None and tunnel_b.info.remote_addr is not None
        target = tunnel_b.info.remote_addr
        assert tunnel_a._ice is not None and tunnel_a._ice.direct is not None
        ufrag = tunnel_a._ice.direct.local_username

        def processed() -> int:
            stats = tunnel_a.stats()
            return sum(tunnel_a.inbound_rejects().values()) + sum(stats.drops.values())

        closers = [a.manager.close, b.manager.close]
    try:
        cpu, wall, sent_bytes, answered, answered_bytes = await flood(target, ufrag, args.datagrams, processed)
        # The idle baseline: the loop polling as ``flood`` does, nothing received, for as long.
        idle = await idle_cpu(wall, -(-args.datagrams // BURST))
    finally:
        for close in closers:
            await close()
    per = (cpu - idle) / args.datagrams
    print(f"tree {REPO}: {args.datagrams} stranger datagrams ({'before up' if args.before_up else 'live tunnel'}): "
          f"loop CPU {per * 1e6:.2f} us each ({cpu:.3f} s, idle baseline {idle:.3f} s); "
          f"answered {answered} datagrams, {answered_bytes} bytes for {sent_bytes} sent")


if __name__ == "__main__":
    asyncio.run(main())
