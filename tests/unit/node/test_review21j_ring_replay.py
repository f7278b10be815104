"""review21j J1: a member replays another member's signed ring chunks to spend that origin's relay budget.

Decision 0064 (amended for review21h H1) counts a chunk its origin signed against that origin's budget to the
next hop, and keeps a relay from relaying the same (src, message id, index) twice by remembering the last
RELAYED_SEEN (4096) of them. Nothing else bounds a copy: the signature covers no time, and the memory is a count
that any neighbour fills with chunks it signs itself (each is remembered before its budget is looked at). A member
on one of O's paths keeps O's chunks, turns the relay's memory over, and plays them to the relay again: each is
taken as O's own, so O's real offers through that relay find its budget spent and wait for the server.

Fixed (J1): full, the relay's memory forgets the oldest entry of the origin holding the most, so the attacker's own
chunks turn over its own entries: 10 of 10 replays relayed as O's before, 0 after (10 refused as copies).
Fixed (J6): the memory is looked up before the signature: 30 copies cost 30 checks before, 1 after."""

from __future__ import annotations

import random

import pytest

from evio.node.ring_signaling import ORIGIN_BURST, RELAYED_SEEN
from evio.overlay import ring_signal as rs
from evio.overlay.negotiation import ACTION_LINK
from evio.overlay.ring_signal import DropReason
from tests.unit.node.test_ring_signaling import OV, Fleet


class _Clock:
    """The relay's clock, moved by the test alone: no budget refills by luck."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t


async def test_replayed_chunks_of_another_origin_do_not_spend_its_budget_once_the_relay_forgot_them() -> None:
    fleet = Fleet(8)
    origin, attacker, relay, target = fleet.ids[0], fleet.ids[1], fleet.ids[2], fleet.ids[4]
    clock = _Clock()
    fleet.nodes[relay].clock = clock  # type: ignore[assignment]
    captured: list[bytes] = []

    def capture(src: int, dst: int, payload: bytes) -> bytes:
        chunk = rs.parse_chunk(payload)
        if src == attacker and dst == relay and chunk.src == origin and chunk.kind == rs.DATA:
            captured.append(payload)  # what the attacker relays for O, kept
        return payload

    fleet.tamper = capture
    for n in range(ORIGIN_BURST):  # O's link requests to T, by O -> attacker -> relay -> hop -> T
        await fleet.nodes[origin].request(OV, target, ACTION_LINK, {"n": n})
    fleet.tamper = lambda src, dst, payload: payload
    assert len(captured) == ORIGIN_BURST
    # Later O has a chord of its own to the relay (the attacker is no longer on its way to T).
    fleet.links[origin].add(relay)
    fleet.links[relay].add(origin)
    # The attacker turns the relay's memory over with chunks it signs itself, at its per-neighbour rate.
    own_key = fleet.nodes[attacker]._key
    rng = random.Random(7)
    for i in range(RELAYED_SEEN):
        junk = rs.chunks(rng.randbytes(64), 1_000_000 + i, attacker, fleet.ids[7], key=own_key)[0]
        fleet.nodes[relay]._on_record(attacker, junk)
        clock.t += 0.05  # 20 chunks/s: CHUNK_RATE, never over it
    clock.t += 10.0  # every budget full again
    replayed_before = fleet.nodes[relay].drops[DropReason.REPLAYED]
    relayed_signed = fleet.nodes[relay].relayed_signed
    for payload in captured:
        fleet.nodes[relay]._on_record(attacker, payload)
    taken = fleet.nodes[relay].relayed_signed - relayed_signed
    # O's own next request, straight from O: does the relay still pass it on?
    fresh = rs.chunks(b"\x00" * 200, 42, origin, target, key=fleet.nodes[origin]._key)[0]
    limited = fleet.nodes[relay].relay_rate_limited
    fleet.nodes[relay]._on_record(origin, fresh)
    print(f"replays relayed as O's: {taken} of {len(captured)}, refused as copies: "
          f"{fleet.nodes[relay].drops[DropReason.REPLAYED] - replayed_before}; "
          f"O's fresh chunk rate-limited: {fleet.nodes[relay].relay_rate_limited - limited}")
    assert taken == 0, f"{taken} replayed chunks of O relayed on O's budget"
    assert fleet.nodes[relay].relay_rate_limited == limited


async def test_a_members_requests_do_not_spend_the_targets_own_relay_budget() -> None:
    """T = ids[0] serves link requests; A = ids[4] sends T ORIGIN_BURST of them (each within A's own budget at every
    relay). T's answers, signed by T, go T -> R = ids[1] -> ids[2] -> ... -> A and are counted at R against T's
    budget to ids[2], the very budget T's own offers to ids[3] need: A's full rate is T's.

    Fixed: T serves a requester at most SERVE_RATE (a quarter of the origin rate, half its burst) requests; A's others are
    dropped at T (`rate_limited`) and fall back to the server. T's own chunk was rate-limited at R before, not after."""
    fleet = Fleet(8)
    target, relay, attacker, other = fleet.ids[0], fleet.ids[1], fleet.ids[4], fleet.ids[3]
    clock = _Clock()
    fleet.nodes[relay].clock = clock  # type: ignore[assignment]
    for n in range(ORIGIN_BURST):
        await fleet.nodes[attacker].request(OV, target, ACTION_LINK, {"n": n})
    assert sum(fleet.nodes[attacker].sent.values()) == ORIGIN_BURST  # those T no longer serves went to the server
    fresh = rs.chunks(b"\x00" * 200, 43, target, other, key=fleet.nodes[target]._key)[0]  # T's own offer to ids[3]
    limited = fleet.nodes[relay].relay_rate_limited
    fleet.nodes[relay]._on_record(target, fresh)
    print(f"T's own chunk to ids[3] after A's {ORIGIN_BURST} requests: rate-limited at R "
          f"{fleet.nodes[relay].relay_rate_limited - limited}")
    assert fleet.nodes[relay].relay_rate_limited == limited


async def test_a_copy_of_a_chunk_already_relayed_costs_no_signature_check(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = Fleet(8)
    origin, relay, target = fleet.ids[0], fleet.ids[1], fleet.ids[3]
    clock = _Clock()
    fleet.nodes[relay].clock = clock  # type: ignore[assignment]
    chunk = rs.chunks(b"\x00" * 200, 44, origin, target, key=fleet.nodes[origin]._key)[0]
    checks = 0
    signed_by = rs.chunk_signed_by

    def counting(*args: object) -> bool:
        nonlocal checks
        checks += 1
        return signed_by(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(rs, "chunk_signed_by", counting)
    for _ in range(30):  # within the neighbour's burst (CHUNK_BURST 40): a copy a relay (or O's neighbour) sends again
        fleet.nodes[relay]._on_record(origin, chunk)
    print(f"30 copies of one signed chunk: {checks} signature checks, "
          f"{fleet.nodes[relay].drops[DropReason.REPLAYED]} dropped as copies")
    assert fleet.nodes[relay].drops[DropReason.REPLAYED] == 29
    assert checks == 1
