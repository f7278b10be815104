"""review21w3 finding 1: any local user makes the daemon build its whole status document as often as it likes, on the
daemon's event loop, through the metrics endpoint.

Attack: the metrics endpoint (`metrics.enabled`, off by default; on for every node an operator monitors) listens on
loopback without authentication (docs/reference.md says so: every local user can read it). Issue 21's low finding
capped its connections (16 at once) and bounded each request's time; nothing bounds how many requests follow one
another. Each `GET /metrics` runs `Node.status()` (every overlay's links, signaling counters, the members' names,
the attached ports' counters) and prometheus_client's text exposition synchronously on the daemon's loop, the loop
that also runs every tunnel's native rings (0077), liveness, ICE consent, DTLS, signaling and the controller's
commands. docs/reference.md measures a scrape of a real node with 16 tunnels at 2.1 ms (p95 3.3 ms): some 500
scrapes a second, 16 connections reopened in a loop by an unprivileged process, fill the loop, and every member whose
traffic this node carries or relays is slowed with it. Prometheus needs one scrape per `scrape_interval` (15 s by
default).

Measured: in this test (the client on the same loop, so it pays its own share) every request builds the status
document again: 320 requests, 320 builds, in 2.6 s at load 4.6 (a bound of 16 at once and 10 a second would have
allowed 42). The cost of one build on a real node is docs/reference.md's (2.1 ms median with 16 tunnels, p95 3.3 ms,
`benchmarks/ops_lab_bench.py`); the reviewer's loop-lateness measurement was queued on the heavy lock behind a CI run
(see the round's report).

Severity: medium at its low edge. Per request it costs the daemon some 2 ms, 120 times the accepted floor of a
stranger's forged 0x71 record (~17 us), so some 500 requests a second fill the loop, and nothing counts or bounds
them. Against it: metrics are off by default, the attacker must be a local user, and a local user can already fill
the loop through that accepted floor (some 60,000 datagrams a second to a tunnel port); what this adds is that 16
connections do it with no traffic to speak of, and Prometheus is refused meanwhile (the cap is full).

Suggested fix: serve a scrape from the last answer while it is younger than a second or so (one status build a
second whatever the request rate; below any usual `scrape_interval`), or a token bucket on answered scrapes
(`evio.ratelimit.TokenBucket`, a few at once and a few a second) with the rest answered `429` unbuilt and counted
beside `refused_connections`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from evio.node.metrics import MetricsServer

CONNECTIONS = 16  # MAX_CONNECTIONS: all one local user needs
REQUESTS = 320
BUILDS_AT_ONCE = 16  # what a bound may allow at once ...
BUILDS_PER_SECOND = 10.0  # ... and after: far above any Prometheus, far below what fills the loop


def _link(i: int) -> dict[str, Any]:
    return {"peer": f"{i:032x}", "peer_name": f"m{i}@example.org", "type": "successor", "state": "up", "path": "direct",
            "local_candidate": "host", "remote_candidate": "srflx", "tunnel_state": "up", "tx": {}, "rx": {}}


STATUS: dict[str, Any] = {"node_id": "0" * 32, "overlays": {"ov1": {"links": [_link(i) for i in range(16)]}}}


class CountingStatus:
    """The node's `status` as the metrics server calls it, counting each build."""

    def __init__(self) -> None:
        self.builds = 0

    def __call__(self) -> dict[str, Any]:
        self.builds += 1
        return STATUS


async def _scrape(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return raw


async def _scrape_many(port: int, count: int) -> list[bytes]:
    """`count` requests over `CONNECTIONS` connections at a time, each reopened as soon as it is answered."""
    answers: list[bytes] = []

    async def one_client(n: int) -> None:
        for _ in range(n):
            answers.append(await _scrape(port))

    await asyncio.gather(*(one_client(count // CONNECTIONS) for _ in range(CONNECTIONS)))
    return answers


async def test_a_local_user_scraping_in_a_loop_builds_the_status_a_bounded_number_of_times() -> None:
    status = CountingStatus()
    server = MetricsServer("127.0.0.1", 0, status)
    await server.start()
    try:
        started = time.monotonic()
        answers = await _scrape_many(server.bound_port, REQUESTS)
        elapsed = time.monotonic() - started
    finally:
        await server.stop()
    print(f"{len(answers)} requests in {elapsed:.2f} s: the status document built {status.builds} times")
    assert status.builds <= BUILDS_AT_ONCE + BUILDS_PER_SECOND * elapsed


async def test_a_prometheus_scraping_at_its_interval_gets_every_scrape_answered() -> None:
    """The honest case a bound must keep: one scraper, one request at a time, each answered with the metrics."""
    status = CountingStatus()
    server = MetricsServer("127.0.0.1", 0, status)
    await server.start()
    try:
        answers = [await _scrape(server.bound_port) for _ in range(3)]
    finally:
        await server.stop()
    assert all(a.startswith(b"HTTP/1.1 200 OK") and b'peer_name="m15@example.org"' in a for a in answers)
    assert status.builds >= 1
