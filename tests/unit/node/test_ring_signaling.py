"""Link requests and offers along the ring (evio.node.ring_signaling, decision 0064), over in-memory tunnels.

A ring of nodes, each linked to its successor and predecessor; every node's `RingSignaling` wraps a fake
server view that counts what went through it. The tunnels hand records on with `call_soon`, as a datagram
arrives on a later loop turn.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import random
import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from evio.clock import REAL_CLOCK, Clock
from evio.config.model import TopologyConfig
from evio.node import ring_signaling
from evio.node.ring_signaling import RING_TIMEOUT, ROUTED, RingSignaling
from evio.overlay import ring_signal as rs
from evio.overlay.adjacency import LinkType
from evio.overlay.negotiation import (
    ACTION_LINK,
    ACTION_RELEASE,
    LinkRequest,
    ReleaseRequest,
    decode_link_answer,
    decode_link_request,
    encode_link_answer,
    encode_link_request,
)
from evio.overlay.orchestrator import Orchestrator
from evio.overlay.ring_signal import DropReason
from evio.signal.errors import ErrorReason, HandlerRejected, RequestError
from evio.signal.interface import Handler, Signaling
from evio.signal.protocol import Body
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

OV = "ov1"
NOW = datetime.datetime.now(datetime.UTC)
CA_KEY, CA = make_overlay_ca("ov1 CA", NOW, 3650)
ANCHOR = TrustAnchor(OV, (CA,))
OFFER = "tunnel.offer"


class FakeServer:
    """The server view: requests through it are counted and served by the peer's handlers directly."""

    def __init__(self, fleet: Fleet, own: int) -> None:
        self.fleet, self.own = fleet, own
        self.handlers: dict[str, Handler] = {}
        self.requests: list[tuple[int, str]] = []
        self.revoked: frozenset[int] = frozenset()

    def register_handler(self, action: str, handler: Handler) -> None:
        self.handlers[action] = handler

    async def request(self, overlay: str, peer: int, action: str, body: Body, timeout: float | None = None) -> Body:
        self.requests.append((peer, action))
        return await self.fleet.servers[peer].handlers[action](overlay, self.own, body)

    def revoked_nodes(self, overlay: str) -> frozenset[int]:
        return self.revoked


class FakeTunnel:
    def __init__(self, fleet: Fleet, src: int, dst: int) -> None:
        self.fleet, self.src, self.dst = fleet, src, dst
        self.sent: list[bytes] = []

    def send_overlay_signal(self, payload: bytes) -> bool:
        self.sent.append(payload)
        payload = self.fleet.tamper(self.src, self.dst, payload)
        if payload:
            sink = self.fleet.sinks[self.dst]
            asyncio.get_running_loop().call_soon(sink, self.src, payload)
        return True


class FakeRelays:
    def __init__(self, fleet: Fleet, own: int) -> None:
        self.fleet, self.own = fleet, own

    def relay_signal_to(self, sink: Callable[[int, bytes], None]) -> None:
        self.fleet.sinks[self.own] = sink

    def signal_relays(self) -> dict[int, FakeTunnel]:
        return {p: self.fleet.tunnel(self.own, p) for p in self.fleet.links[self.own]}


class Fleet:
    def __init__(self, count: int, clock: Clock = REAL_CLOCK) -> None:
        self.ids = [(i + 1) << 120 for i in range(count)]
        self.links: dict[int, set[int]] = {n: set() for n in self.ids}
        for i, n in enumerate(self.ids):  # successor and predecessor
            succ = self.ids[(i + 1) % count]
            self.links[n].add(succ)
            self.links[succ].add(n)
        self.sinks: dict[int, Callable[[int, bytes], None]] = {}
        self.servers: dict[int, FakeServer] = {}
        self.nodes: dict[int, RingSignaling] = {}
        self._tunnels: dict[tuple[int, int], FakeTunnel] = {}
        self.tamper: Callable[[int, int, bytes], bytes] = lambda src, dst, payload: payload
        self.served: list[tuple[int, int, Body]] = []  # (at, from, body) of link requests handled
        self.keys: dict[int, Any] = {}  # node id -> its certificate key, as the host claims would have it
        for n in self.ids:
            key, cert = issue_node_certificate(CA_KEY, CA, [OV], n, NOW, 30)
            self.keys[n] = key.public_key()
            server = self.servers[n] = FakeServer(self, n)
            node = self.nodes[n] = RingSignaling(cast(Signaling, server), OV, n, cert, key, ANCHOR, clock)
            node.attach(FakeRelays(self, n))
            node.use_keys(self.keys.get)
            node.register_handler(ACTION_LINK, self._handler(n))
            node.register_handler(OFFER, self._handler(n))

    def tunnel(self, src: int, dst: int) -> FakeTunnel:
        return self._tunnels.setdefault((src, dst), FakeTunnel(self, src, dst))

    def _handler(self, at: int) -> Handler:
        async def handle(overlay: str, peer: int, body: Body) -> Body:
            if body.get("refuse"):
                raise HandlerRejected("not now")
            self.served.append((at, peer, body))
            return {"answer": body.get("n"), "by": f"{at:032x}"}

        return handle

    def server_requests(self) -> int:
        return sum(len(s.requests) for s in self.servers.values())

    def drops(self, reason: DropReason) -> int:
        return sum(n.drops[reason] for n in self.nodes.values())



async def flood_while_requesting(clock: VirtualClock, fleet: Fleet, attacker: int, relay: int, origin: int, target: int,
                                 junk: Callable[[int], bytes], drain: float, requests: int = 5) -> None:
    """The attacker sends `junk(i)` chunks to `relay` at 500 a second; after `drain` seconds, while it keeps on, the
    origin sends `requests` link requests to the target (timeout 0.5 s each). In virtual time: the flood's pace and
    the budgets' refills are the same under any load."""
    stop = asyncio.Event()

    async def flood() -> None:
        i = 0
        while not stop.is_set():
            for _ in range(5):
                fleet.tunnel(attacker, relay).send_overlay_signal(junk(i))
                i += 1
            await clock.sleep(0.01)

    async def ask() -> None:
        await clock.sleep(drain)
        for n in range(requests):
            await fleet.nodes[origin].request(OV, target, ACTION_LINK, {"n": n}, timeout=0.5)

    task = asyncio.create_task(flood())
    try:
        await clock.run(ask(), timeout=drain + requests * 2, what="the origin's requests under the flood")
    finally:
        stop.set()
        await clock.advance(0.02)
        await task

async def test_a_link_request_to_a_node_not_linked_goes_along_the_ring_and_not_through_the_server() -> None:
    fleet = Fleet(8)
    a, far = fleet.ids[0], fleet.ids[4]  # four hops either way
    answer = await fleet.nodes[a].request(OV, far, ACTION_LINK, {"n": 7})
    assert answer == {"answer": 7, "by": f"{far:032x}"}
    assert fleet.served == [(far, a, {"n": 7})]
    assert fleet.server_requests() == 0
    assert fleet.nodes[a].sent == {"ring": 1}
    assert sum(n.relayed for n in fleet.nodes.values()) >= 3 * 2  # 3 relays there, 3 back (a chunk each at least)
    assert fleet.nodes[far].served == {ACTION_LINK: 1}


async def test_an_offer_and_its_answer_large_enough_for_several_chunks_arrive_whole() -> None:
    fleet = Fleet(6)
    body = {"n": 1, "candidates": [f"candidate:{i} 1 udp {i * 7919} 10.{i}.0.1 {4000 + i} typ host" for i in range(32)],
            "pad": base64.b64encode(random.Random(1).randbytes(1500)).decode()}  # fmt: skip
    answer = await fleet.nodes[fleet.ids[0]].request(OV, fleet.ids[3], OFFER, body)
    assert answer["answer"] == 1
    assert fleet.served[0][2] == body
    assert len(fleet.tunnel(fleet.ids[0], fleet.ids[1]).sent + fleet.tunnel(fleet.ids[0], fleet.ids[5]).sent) > 1


async def test_a_refusal_comes_back_as_the_same_error_as_through_the_server() -> None:
    fleet = Fleet(5)
    with pytest.raises(RequestError) as refused:
        await fleet.nodes[fleet.ids[0]].request(OV, fleet.ids[2], ACTION_LINK, {"refuse": True})
    assert refused.value.reason is ErrorReason.REJECTED
    assert fleet.server_requests() == 0


async def test_actions_not_routed_and_nodes_without_links_go_through_the_server() -> None:
    fleet = Fleet(4)
    a, b = fleet.ids[0], fleet.ids[2]
    fleet.servers[b].handlers[ACTION_RELEASE] = fleet.servers[b].handlers[ACTION_LINK]
    assert ACTION_RELEASE not in ROUTED
    await fleet.nodes[a].request(OV, b, ACTION_RELEASE, {"n": 1})
    fleet.links[a].clear()
    await fleet.nodes[a].request(OV, b, ACTION_LINK, {"n": 2})
    assert fleet.servers[a].requests == [(b, ACTION_RELEASE), (b, ACTION_LINK)]
    assert fleet.nodes[a].fallbacks == {"no_links": 1}


def cut_short(fleet: Fleet) -> tuple[int, int, int]:
    """a's only way to c leads through b, whose successor link is gone: from b no peer is closer to c."""
    a, b, c = fleet.ids[0], fleet.ids[1], fleet.ids[3]
    fleet.links[b].discard(fleet.ids[2])
    fleet.links[fleet.ids[2]].discard(b)
    fleet.links[a].discard(fleet.ids[5])
    return a, b, c


async def test_an_offer_whose_route_ends_short_of_the_target_goes_through_the_server_at_once() -> None:
    fleet = Fleet(6)
    a, b, c = cut_short(fleet)
    started = time.monotonic()
    answer = await fleet.nodes[a].request(OV, c, OFFER, {"n": 3}, timeout=10.0)
    assert answer["answer"] == 3
    assert time.monotonic() - started < RING_TIMEOUT / 2  # not after the ring's timeout: b said UNREACHABLE
    assert fleet.nodes[a].fallbacks == {"unreachable": 1}
    assert fleet.servers[a].requests == [(c, OFFER)]
    assert fleet.nodes[b].drops[DropReason.NO_ROUTE] == 1


async def test_a_link_request_to_a_node_not_reachable_yet_is_tried_along_the_ring_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ring_signaling, "UNREACHABLE_WAIT", 5.0)
    fleet = Fleet(6)
    a, b, c = cut_short(fleet)
    asyncio.get_running_loop().call_later(0.3, lambda: (fleet.links[a].add(c), fleet.links[c].add(a)))  # a link came up
    answer = await fleet.nodes[a].request(OV, c, ACTION_LINK, {"n": 3}, timeout=10.0)
    assert answer["answer"] == 3
    assert fleet.servers[a].requests == [] and fleet.nodes[a].sent == {"ring": 1}
    assert fleet.nodes[a].waited == 1
    # Still unreachable after the wait: through the server.
    fleet.links[a].discard(c)
    fleet.links[c].discard(a)
    monkeypatch.setattr(ring_signaling, "UNREACHABLE_WAIT", 0.3)
    await fleet.nodes[a].request(OV, c, ACTION_LINK, {"n": 4}, timeout=10.0)
    assert fleet.servers[a].requests == [(c, ACTION_LINK)]
    assert fleet.nodes[a].fallbacks == {"unreachable": 1}


async def test_a_node_without_links_sends_one_link_request_through_the_server_and_the_next_along_the_ring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ring_signaling, "FIRST_LINK_WAIT", 5.0)
    fleet = Fleet(6)
    a, b, c = fleet.ids[0], fleet.ids[1], fleet.ids[3]
    for peer in list(fleet.links[a]):
        fleet.links[a].discard(peer)
        fleet.links[peer].discard(a)
    gate = asyncio.Event()
    server = fleet.servers[a]
    plain = FakeServer.request

    async def slow(self: FakeServer, overlay: str, peer: int, action: str, body: Body, timeout: float | None = None) -> Body:
        await gate.wait()  # our first link's request is still on its way through the server
        return await plain(self, overlay, peer, action, body, timeout)

    monkeypatch.setattr(FakeServer, "request", slow)
    first = asyncio.ensure_future(fleet.nodes[a].request(OV, b, ACTION_LINK, {"n": 1}))
    second = asyncio.ensure_future(fleet.nodes[a].request(OV, c, ACTION_LINK, {"n": 2}))
    await asyncio.sleep(0.3)
    fleet.links[a].add(b)  # the first link is up
    fleet.links[b].add(a)
    assert (await second)["answer"] == 2
    gate.set()
    assert (await first)["answer"] == 1
    assert server.requests == [(b, ACTION_LINK)]
    assert fleet.nodes[a].sent == {"server": 1, "ring": 1} and fleet.nodes[a].waited == 1


async def test_a_dropped_request_falls_back_to_the_server_after_the_ring_timeout() -> None:
    fleet = Fleet(6)
    a, c = fleet.ids[0], fleet.ids[3]
    fleet.tamper = lambda src, dst, payload: b""  # every relay drops
    answer = await fleet.nodes[a].request(OV, c, ACTION_LINK, {"n": 4}, timeout=0.3)
    assert answer["answer"] == 4
    assert fleet.nodes[a].fallbacks == {"no_answer": 1}
    assert fleet.servers[a].requests == [(c, ACTION_LINK)]


def _flip_in_sealed_part(payload: bytes) -> bytes:
    """A relay cannot read the sealed part (review21f F8): it can only flip a byte of it (before the origin's
    signature of the chunk, if it has one)."""
    altered = bytearray(payload)
    altered[-1 - (rs.SIGNATURE if payload[1] & rs.SIGNED else 0)] ^= 1
    return bytes(altered)


async def test_a_relay_altering_a_request_gets_it_dropped_and_counted_not_served() -> None:
    fleet = Fleet(6)
    a, relay, c = fleet.ids[0], fleet.ids[1], fleet.ids[3]
    fleet.links[a].discard(fleet.ids[5])
    fleet.tamper = lambda src, dst, payload: _flip_in_sealed_part(payload) if src == relay else payload
    answer = await fleet.nodes[a].request(OV, c, ACTION_LINK, {"n": 5}, timeout=0.3)
    assert answer["answer"] == 5  # through the server in the end
    assert fleet.served == [(c, a, {"n": 5})]  # once: the altered copy was not served
    # the next relay checks the origin's signature of the chunk (review21h H1): the copy ends there
    assert fleet.nodes[fleet.ids[2]].drops[DropReason.BAD_SIGNATURE] == 1
    assert fleet.drops(DropReason.BAD_SIGNATURE) + fleet.drops(DropReason.UNREADABLE) == 1
    assert fleet.nodes[a].fallbacks == {"no_answer": 1}


async def test_a_replayed_request_is_dropped_and_counted() -> None:
    fleet = Fleet(4)
    a, b = fleet.ids[0], fleet.ids[2]
    captured: list[bytes] = []

    def keep(src: int, dst: int, payload: bytes) -> bytes:
        if dst == b and not captured:
            captured.append(payload)
        return payload

    fleet.tamper = keep
    await fleet.nodes[a].request(OV, b, ACTION_LINK, {"n": 6})
    fleet.nodes[b]._on_record(fleet.ids[1], captured[0])  # a relay sends it again
    await asyncio.sleep(0)
    assert fleet.nodes[b].drops[DropReason.REPLAYED] == 1
    assert len(fleet.served) == 1


async def test_a_revoked_sender_is_not_served() -> None:
    fleet = Fleet(4)
    a, b = fleet.ids[0], fleet.ids[2]
    fleet.servers[b].revoked = frozenset({a})
    fleet.servers[b].handlers[ACTION_LINK] = _refuse_all
    with pytest.raises(RequestError):
        await fleet.nodes[a].request(OV, b, ACTION_LINK, {"n": 1}, timeout=0.3)
    assert fleet.nodes[b].drops[DropReason.REVOKED] == 1
    assert fleet.served == []


async def _refuse_all(overlay: str, peer: int, body: Body) -> Body:
    raise RequestError(ErrorReason.REJECTED, "revoked")


async def test_a_neighbour_flooding_chunks_is_rate_limited() -> None:
    fleet = Fleet(4)
    a, b = fleet.ids[0], fleet.ids[1]
    junk = rs.chunks(b"junk", 1, a, fleet.ids[2])[0]
    for _ in range(200):
        fleet.nodes[b]._on_record(a, junk)
    await asyncio.sleep(0)
    assert fleet.nodes[b].drops[DropReason.RATE_LIMITED] >= 200 - 41
    assert fleet.nodes[b].relayed <= 41


async def test_a_chunk_out_of_hops_is_dropped_and_counted() -> None:
    fleet = Fleet(6)
    a, b = fleet.ids[0], fleet.ids[1]
    (piece,) = rs.chunks(b"x", 1, a, fleet.ids[3], hops=0)
    fleet.nodes[b]._on_record(a, piece)
    assert fleet.nodes[b].drops[DropReason.HOP_LIMIT] == 1
    assert fleet.nodes[b].relayed == 0


async def test_an_answer_nobody_waits_for_is_dropped() -> None:
    fleet = Fleet(4)
    a, b = fleet.ids[0], fleet.ids[1]
    key, cert = issue_node_certificate(CA_KEY, CA, [OV], a, NOW, 30)
    late = rs.RingMessage("response", OV, a, b, "rnobody", time.time(), body={})
    for piece in rs.chunks(rs.seal(late, cert, key, fleet.keys[b]), 9, a, b):
        fleet.nodes[b]._on_record(a, piece)
    await wait_until(lambda: fleet.nodes[b].drops[DropReason.UNEXPECTED] == 1, timeout=2)


def test_the_status_counts_are_plain_data() -> None:
    async def run() -> dict[str, Any]:
        fleet = Fleet(4)
        await fleet.nodes[fleet.ids[0]].request(OV, fleet.ids[2], ACTION_LINK, {"n": 1})
        return fleet.nodes[fleet.ids[0]].counts()

    counts = asyncio.run(run())
    assert counts["sent"] == {"ring": 1} and counts["drops"] == {}


async def test_a_request_to_a_node_whose_certificate_is_unknown_goes_through_the_server_then_along_the_ring() -> None:
    """review21f F8: what goes along the ring is sealed to the target's key; without it the server carries
    the request. An answer along the ring teaches the target's key (its certificate, checked against the CA)."""
    fleet = Fleet(6)
    a, c, d = fleet.ids[0], fleet.ids[3], fleet.ids[2]
    fleet.nodes[a]._key_lookups.clear()  # a has seen no presence or host claims of c yet
    answer = await fleet.nodes[a].request(OV, c, ACTION_LINK, {"n": 1})
    assert answer["answer"] == 1
    assert fleet.nodes[a].fallbacks == {"no_key": 1} and fleet.servers[a].requests == [(c, ACTION_LINK)]
    # c's key is known to d (as its host claims would be): d's request goes along the ring, sealed to c, and c
    # answers sealed to d's certificate key; then c asks d, whose key c learned from that request.
    assert await fleet.nodes[d].request(OV, c, ACTION_LINK, {"n": 2}) == {"answer": 2, "by": f"{c:032x}"}
    fleet.nodes[c]._key_lookups.clear()
    assert await fleet.nodes[c].request(OV, d, OFFER, {"n": 3}) == {"answer": 3, "by": f"{d:032x}"}
    assert fleet.nodes[d].sent == {"ring": 1} and fleet.nodes[c].sent == {"ring": 1}


async def test_a_linked_peers_key_is_learned_from_its_tunnel_and_kept_after_the_link_goes() -> None:
    fleet = Fleet(6)
    a, b = fleet.ids[0], fleet.ids[2]
    fleet.links[a].add(b)  # a chord
    fleet.links[b].add(a)
    fleet.nodes[a]._key_lookups.clear()
    fleet.tunnel(a, b).peer_key = fleet.keys[b]  # type: ignore[attr-defined]  # as the tunnel's DTLS check found it
    assert await fleet.nodes[a].request(OV, b, ACTION_LINK, {"n": 1}) == {"answer": 1, "by": f"{b:032x}"}
    fleet.links[a].discard(b)  # the chord goes: a's route to b leads through a's successor
    fleet.links[b].discard(a)
    assert await fleet.nodes[a].request(OV, b, OFFER, {"n": 2}) == {"answer": 2, "by": f"{b:032x}"}
    assert fleet.nodes[a].sent == {"ring": 2} and fleet.server_requests() == 0, fleet.nodes[a].fallbacks


# -- duplicates: a request that went along the ring and, late, through the server too (decision 0064, amended) --


def _orchestrator_at(fleet: Fleet, node: int) -> tuple[Orchestrator, list[int]]:
    """`node`'s real overlay state machine serving its link requests (both ways); the list counts the calls."""
    orch = Orchestrator(node, TopologyConfig(successors=2, long_distance=0), random.Random(1), time.monotonic(),
                        name=OV)  # fmt: skip
    orch.signal_connected(time.monotonic())
    for peer in fleet.ids:
        if peer != node:
            orch.peer_added(peer, time.monotonic())
    calls: list[int] = []

    async def handle(overlay: str, peer: int, body: Body) -> Body:
        calls.append(peer)
        answer, _ = orch.link_request(peer, decode_link_request(body), time.monotonic())
        return encode_link_answer(answer)

    fleet.nodes[node].register_handler(ACTION_LINK, handle)
    return orch, calls


async def test_a_ring_copy_of_a_link_request_coming_after_its_server_copy_and_a_release_agrees_to_no_link() -> None:
    # The ring copy is held by a relay beyond RING_TIMEOUT; its origin asks through the server, is accepted, then
    # lets the link go. Served when it finally comes, the ring copy made the target await a tunnel for a link its
    # origin no longer wanted (the churn lab's `not_negotiated` and full successor slots).
    fleet = Fleet(6)
    a, b = fleet.ids[0], fleet.ids[3]
    orch, calls = _orchestrator_at(fleet, b)
    held: list[tuple[int, int, bytes]] = []

    def hold(src: int, dst: int, payload: bytes) -> bytes:
        if dst != b:
            return payload
        held.append((src, dst, payload))
        return b""

    fleet.tamper = hold
    fleet.nodes[b]._wall = lambda: time.time() + RING_TIMEOUT  # the server copy comes RING_TIMEOUT after the first
    request = encode_link_request(LinkRequest(LinkType.SUCCESSOR, epoch=7))
    answer = await fleet.nodes[a].request(OV, b, ACTION_LINK, request, timeout=0.3)
    assert decode_link_answer(answer).accepted and fleet.nodes[a].fallbacks == {"no_answer": 1}
    orch.release_request(a, ReleaseRequest(LinkType.SUCCESSOR), time.monotonic())  # the origin let the link go
    assert not orch.expects_tunnel(a)
    fleet.tamper = lambda src, dst, payload: payload
    for src, dst, payload in held:
        fleet.sinks[dst](src, payload)
    await wait_until(lambda: fleet.nodes[a].late_answers == 1, timeout=5)
    assert calls == [a]  # served once
    assert not orch.expects_tunnel(a)
    assert fleet.nodes[b].duplicates == {"ring": 1}
    assert fleet.drops(DropReason.UNEXPECTED) == 0


async def test_an_offer_answered_slowly_along_the_ring_and_sent_again_through_the_server_is_answered_once() -> None:
    # A responder gathers its candidates for up to 8 s, past RING_TIMEOUT: the origin sends the same offer through
    # the server. Served again, the tunnel manager refused it ("being answered"), and the tunnel failed.
    fleet = Fleet(6)
    a, b = fleet.ids[0], fleet.ids[3]
    gate = asyncio.Event()
    calls: list[Body] = []

    async def slow(overlay: str, peer: int, body: Body) -> Body:
        calls.append(body)
        await gate.wait()
        return {"answer": body["n"], "copy": len(calls)}

    fleet.nodes[b].register_handler(OFFER, slow)
    asking = asyncio.create_task(fleet.nodes[a].request(OV, b, OFFER, {"n": 9, "tunnel": "t1"}, timeout=0.3))
    await wait_until(lambda: fleet.servers[a].requests == [(b, OFFER)], timeout=5)
    await wait_until(lambda: fleet.nodes[b].duplicates == {"server": 1}, timeout=5)
    gate.set()
    assert await asking == {"answer": 9, "copy": 1}
    assert len(calls) == 1
    await wait_until(lambda: fleet.nodes[a].late_answers == 1, timeout=5)  # the ring's answer, ignored
    assert fleet.drops(DropReason.UNEXPECTED) == 0


async def test_a_link_request_sent_again_later_with_the_same_body_is_served_again() -> None:
    # Not a duplicate: the origin asks again after its first request was answered (a retry, the same epoch).
    fleet = Fleet(6)
    a, b = fleet.ids[0], fleet.ids[3]
    _, calls = _orchestrator_at(fleet, b)
    request = encode_link_request(LinkRequest(LinkType.SUCCESSOR, epoch=7))
    await fleet.nodes[a].request(OV, b, ACTION_LINK, request)
    await fleet.servers[a].request(OV, b, ACTION_LINK, request)
    await fleet.nodes[a].request(OV, b, ACTION_LINK, request)
    assert calls == [a, a, a]
    assert fleet.nodes[b].duplicates == {}


async def test_an_answer_with_no_link_closer_to_the_requester_goes_back_the_way_its_request_came() -> None:
    # The churn lab: a node rejoining next to its predecessor on the ring has links only the other way round,
    # none closer to the predecessor than itself; its answers to the predecessor's offers were all dropped.
    fleet = Fleet(6)
    a, relay, b = fleet.ids[0], fleet.ids[3], fleet.ids[2]
    fleet.links = {n: set() for n in fleet.ids}
    for x, y in ((a, relay), (relay, b), (b, fleet.ids[4])):
        fleet.links[x].add(y)
        fleet.links[y].add(x)
    answer = await fleet.nodes[a].request(OV, b, OFFER, {"n": 5}, timeout=1.0)
    assert answer["answer"] == 5
    assert fleet.server_requests() == 0 and fleet.nodes[a].sent == {"ring": 1}
    assert fleet.nodes[b].answers_back == 1 and fleet.drops(DropReason.NO_ROUTE) == 0
