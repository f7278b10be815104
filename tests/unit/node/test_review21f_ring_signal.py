"""Review21f: attacks on offers along the ring (decision 0064) by a member that relays them or sends its own.

The fleet of tests/unit/node/test_ring_signaling.py: a ring of RingSignaling nodes over in-memory tunnels,
with a relay's tamper hook. Each test is an attack and asserts what an honest node should see.
"""

from __future__ import annotations

import asyncio
import base64
import random
import time
import zlib

import pytest

from evio.node import ring_signaling
from evio.overlay import ring_signal as rs
from evio.overlay.negotiation import ACTION_LINK
from evio.overlay.ring_signal import DropReason
from evio.signal.protocol import Body
from evio.tunnel.path.overlay_ca import issue_node_certificate
from tests.unit.node.test_ring_signaling import CA, CA_KEY, NOW, OV, Fleet


def _header(payload: bytes, *, dst: int | None = None) -> bytes:
    chunk = rs.parse_chunk(payload)
    return rs.HEADER.pack(rs.VERSION, chunk.kind, chunk.hops, chunk.index, chunk.count, chunk.message_id,
                          (chunk.dst if dst is None else dst).to_bytes(16), chunk.src.to_bytes(16)) + chunk.data  # fmt: skip


@pytest.mark.parametrize("kind", ["error", "response"])
async def test_f1_a_relay_cannot_answer_in_the_targets_place(kind: str) -> None:
    """F1: a relay reads the txid of a request it carries and answers it itself, signed with its own
    certificate: the origin took any member's answer with that txid as the target's (a refusal, with no
    fallback to the server, or a body of the relay's choosing)."""
    fleet = Fleet(6)
    a, relay, c = fleet.ids[0], fleet.ids[1], fleet.ids[3]
    fleet.links[a].discard(fleet.ids[5])  # a's route to c leads through the relay
    key, cert = issue_node_certificate(CA_KEY, CA, [OV], relay, NOW, 30)

    def answer_first(src: int, dst: int, payload: bytes) -> bytes:
        chunk = rs.parse_chunk(payload)
        if src == a and dst == relay and chunk.kind == rs.DATA and chunk.dst == c:
            # The relay cannot read the txid since F8 (sealed to c): this one learned it anyway (the strongest relay).
            txid = next(iter(fleet.nodes[a]._waiting))
            forged = rs.RingMessage(kind, OV, relay, a, txid, time.time(), reason="rejected", text="no",
                                    body={"answer": 666, "by": f"{relay:032x}"} if kind == "response" else None)  # fmt: skip
            for piece in rs.chunks(rs.seal(forged, cert, key, fleet.keys[a]), 77, relay, a):
                asyncio.get_running_loop().call_soon(fleet.sinks[a], relay, piece)
        return payload

    fleet.tamper = answer_first
    answer = await fleet.nodes[a].request(OV, c, ACTION_LINK, {"n": 1}, timeout=2.0)
    assert answer == {"answer": 1, "by": f"{c:032x}"}


async def test_f1_a_request_readdressed_by_a_relay_is_not_served_by_the_new_target() -> None:
    """F1b: a relay rewrites the (unsigned) header's dst of a signed request it carries and hands it to
    another node, which served it as a request of the origin's to it (a link the origin never asked for)."""
    fleet = Fleet(6)
    a, relay, c, other = fleet.ids[0], fleet.ids[1], fleet.ids[3], fleet.ids[2]
    fleet.links[a].discard(fleet.ids[5])

    def readdress(src: int, dst: int, payload: bytes) -> bytes:
        chunk = rs.parse_chunk(payload)
        if src == a and dst == relay and chunk.kind == rs.DATA and chunk.dst == c:
            asyncio.get_running_loop().call_soon(fleet.sinks[other], relay, _header(payload, dst=other))
        return payload

    fleet.tamper = readdress
    await fleet.nodes[a].request(OV, c, ACTION_LINK, {"n": 2}, timeout=2.0)
    await asyncio.sleep(0.05)
    assert [(at, peer) for at, peer, _ in fleet.served] == [(c, a)]


def _large_body() -> Body:
    return {"n": 3, "pad": base64.b64encode(random.Random(3).randbytes(1500)).decode()}  # two chunks


async def test_f2_invented_senders_do_not_fill_a_nodes_reassembly() -> None:
    """F2: a member sends a node 32 first chunks of two-chunk messages from invented senders (the header's
    src is not authenticated until the message is whole); every slot stays taken for 5 s, so every
    multi-chunk offer to that node was refused (REASSEMBLY_FULL) and went to the server after the timeout.
    32 chunks per 5 s is well under the per-neighbour rate."""
    fleet = Fleet(6)
    attacker, target, origin = fleet.ids[0], fleet.ids[1], fleet.ids[3]
    rng = random.Random(5)
    for i in range(rs.REASSEMBLY_SLOTS):
        junk = rs.chunks(rng.randbytes(2 * rs.PIECE), i, rng.getrandbits(128), target)[0]
        fleet.nodes[target]._on_record(attacker, junk)
    answer = await fleet.nodes[origin].request(OV, target, "tunnel.offer", _large_body(), timeout=1.0)
    assert answer["answer"] == 3
    assert fleet.nodes[origin].sent == {"ring": 1}, fleet.nodes[origin].fallbacks


async def test_f3_one_member_cannot_take_every_request_slot_of_a_node() -> None:
    """F3: MAX_INFLIGHT (32) requests served at once is one budget for all senders: one member's 32 signed
    requests whose handling takes a while (an offer waits for candidates, 1-3 s) took it all, and every
    other member's request to that node was dropped (RATE_LIMITED) and went to the server after the timeout."""
    fleet = Fleet(6)
    attacker, target, origin = fleet.ids[0], fleet.ids[1], fleet.ids[3]
    release = asyncio.Event()
    plain = fleet.nodes[target]._handlers[ACTION_LINK]

    async def slow_for_attacker(overlay: str, peer: int, body: Body) -> Body:
        if peer == attacker:
            await release.wait()
        return await plain(overlay, peer, body)

    fleet.nodes[target]._handlers[ACTION_LINK] = slow_for_attacker
    key, cert = issue_node_certificate(CA_KEY, CA, [OV], attacker, NOW, 30)
    for i in range(32):
        request = rs.RingMessage("request", OV, attacker, target, f"rattack{i}", time.time(), ACTION_LINK, {"n": i})
        (piece,) = rs.chunks(rs.seal(request, cert, key, fleet.keys[target]), 1000 + i, attacker, target)
        fleet.nodes[target]._on_record(attacker, piece)
    try:
        answer = await fleet.nodes[origin].request(OV, target, ACTION_LINK, {"n": 99}, timeout=1.0)
        assert answer["answer"] == 99
        assert fleet.nodes[origin].sent == {"ring": 1}, fleet.nodes[origin].fallbacks
        assert fleet.nodes[target].drops[DropReason.RATE_LIMITED] == 32 - ring_signaling.MAX_INFLIGHT_PER_SENDER
    finally:
        release.set()
        await asyncio.sleep(0.05)


async def test_f8_a_relay_cannot_read_the_ice_password_of_an_offer_it_carries() -> None:
    """F8: the sealed message is signed, not encrypted: every relay on the route (any member near it) reads the
    offer's and the answer's ICE ufrag and password, which until now only the two ends and the server held. With
    them it sends the authenticated checks that make a node learn a peer-reflexive candidate at an address of its
    choosing while the tunnel is set up (review21c: bounded, but not refused): the tunnel's path through the relay,
    which then carries or drops it. Closed: the offer is sealed to the target's certificate key (from its host
    claims), the answer to the key of the certificate the offer carried."""
    fleet = Fleet(6)
    a, relay, c = fleet.ids[0], fleet.ids[1], fleet.ids[3]
    fleet.links[a].discard(fleet.ids[5])
    seen: list[bytes] = []

    def read(src: int, dst: int, payload: bytes) -> bytes:
        if dst == relay:
            data = rs.parse_chunk(payload).data
            try:
                data = zlib.decompress(data)  # what a relay read before F8 closed
            except zlib.error:
                pass
            seen.append(data)
        return payload

    fleet.tamper = read
    body = {"n": 8, "ice": {"ufrag": "abcd", "pwd": "the-ice-password-of-a-1234"}}
    answer = await fleet.nodes[a].request(OV, c, "tunnel.offer", body, timeout=2.0)
    assert answer["answer"] == 8 and fleet.nodes[a].sent == {"ring": 1}  # it went along the ring, through the relay
    assert seen and not any(b"the-ice-password-of-a-1234" in plain for plain in seen)
