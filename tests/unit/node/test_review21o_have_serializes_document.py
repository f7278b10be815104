"""Review21o O2: every signed-document frame a node receives, a 22-byte HAVE included, costs it a serialization of
the whole document it holds (the member list, up to 1 MB; the revocation list): a member stalls the event loop of
every node it reaches with HAVEs at the flood rate, and of any node it sends unicast HAVEs to at any rate.

Attack: member A sends frames of ethertype 0x88B5 with a well-formed header (`EVML` or `EVRL`, version 1, HAVE, any
serial; 22 bytes), broadcast from its own MAC under its own root (the switch delivers them:
`_document_not_its_owners` holds; an adjacent node's switch delivers them locally before any flood budget, up to the
port's packet-in rate, `PACKET_IN_RATE` 1000/s; a node further on gets what each ingress port passes on,
`FLOOD_RATE` 100/s per root), or unicast to one node's bridge MAC (flows ahead by destination, 0072: no packet-in,
no budget). `SignedDocumentFlood.receive` reads `ours = self._serial()` for every frame, and `_serial()` is
`_held()[0]`, where `_held()` is `member_list.to_text(ml)` (`MemberListFlood`) or `identity.list_to_text(rl)`
(`RevocationFlood`): `json.dumps(..., indent=1)`, which runs Python's pure-Python encoder (`indent` turns off the C
one), over every entry of the list. LIST, PARTS and MANIFEST frames pay it too, honest ones included: a 1 MB member
list broadcast (874 chunks) costs each receiver 874 serializations of the list it holds.

Code path: `read_frames` (64 frames a wake-up) -> `SignedDocumentFlood.receive` -> `_serial` -> `_held` ->
`to_text` / `list_to_text`; also `_newer_confirmed`, `_send_server_copy`, `_complete`.

Measured (this machine, load 2.9-4.1, one unicast HAVE of u's own serial, in-process, the fleets of
tests/unit/node/test_member_list_flood.py and test_revocation_flood.py): member list of 8 members 131 us a frame,
500 members 4.9 ms, 2,000 members 12.6 ms, 10,000 members 98 ms; revocation list of 1 entry 61 us, 64 entries
0.43 ms, 256 (`MAX_REVOKED`) 1.6 ms. Delivered (the real switches on the fake network, `trusted_ring(8)` of
tests/unit/sdn/test_sdn_proactive_flows.py): 2,000 broadcast HAVEs from A's interface MAC in 1 s reached the
interfaces of A's two neighbours 1,667 times each and of the other five nodes 109-158 times. So in an overlay of 500 members A's broadcast HAVEs at 100/s take half of
every node's event loop (1000/s: five times an adjacent node's), at 2,000 members all of it; 200 unicast HAVEs a
second (35 kbit/s) take all of one chosen node's loop. Honest traffic pays it too: one whole member list broadcast
(an answer to a node that asked) costs every node that already holds it 0.27 s of its loop at 500 members (31
frames) and 1.60 s at 2,000 (121 frames). (The endpoint caches the same text per serial, `_member_text`, for
review21h H9; the floods' `_held` does not.) The loop also runs the node's tunnels' timers, ICE consent,
DTLS retransmissions and signaling: its tunnels fail.

Impact: high: one member takes a node's availability broadly (every node it reaches, overlay-wide with broadcasts,
at a cost to it of a few kbit/s), at any overlay size with unicast frames at a higher rate.

Suggested fix: keep the held document's serial (and its text, serialized once when adopted) instead of serializing
it per frame: `_serial()` from `ml.serial` / `rl.serial` without `to_text`, `_held()`'s text cached by serial; and a
per-sender budget on frames handed to `receive` (unicast ones above all, which no switch budget bounds).

Fixed (decision 0043, amended for review21o): the floods read the serial held off the list (`_serial`), and its text,
when a list goes out, from the endpoint, which makes it once per serial (`member_list_text`, `revocation_list_text`:
H9's cache, for both lists). A copy of the list held is known by its signed manifest: one by unicast, or listing
other chunks, is dropped before its signature check (`manifest_held`); a broadcast one costs one check and is
compared by its hashes. The check a manifest costs is budgeted (O3: test_review21o_unicast_manifests_unbudgeted.py).
Measured (load 6.3-6.7, before and after): a HAVE 9.6 ms -> 3 us at 500 members, 231 ms -> 5 us at 10,000; a
whole-list copy at a holder 320 ms -> 0.7 ms at 500 members.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from evio.node import document_flood as df
from evio.node import member_list_flood as mf
from evio.node import revocation_flood as rf
from evio.signal import identity, member_list, revocation_manifest
from tests.unit.node import test_member_list_flood as ml_fleet
from tests.unit.node import test_revocation_flood as rl_fleet

FRAMES = 200
ATTACKER_MAC = bytes([2, 0x66, 0, 0, 0, 1])


def _counting(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    calls = [0]
    real = getattr(module, name)

    def counted(*args: object) -> object:
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_members_haves_do_not_each_serialize_the_member_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(500)
    members = {rng.getrandbits(128): f"member{i}@x.test" for i in range(500)}
    held = member_list.sign_members(ml_fleet.CA_KEY, ml_fleet.OV, 5, int(time.time()), members)
    _, nodes, _ = ml_fleet.fleet(tmp_path, 2, held)
    u = nodes[0]
    have = mf.HEADER.pack(mf.MAGIC, df.VERSION, df.HAVE, held.serial, 0, 0)  # a HAVE of u's own serial
    serialized = _counting(monkeypatch, member_list, "to_text")
    started = time.perf_counter()
    for _ in range(FRAMES):
        u.receive(have, ATTACKER_MAC, False)  # unicast to u's MAC: flows ahead carry it, no budget
    spent = (time.perf_counter() - started) / FRAMES
    print(f"500 members: {spent * 1e6:.0f} us of u's loop a HAVE, {serialized[0]} serializations for {FRAMES} frames")
    assert serialized[0] == 0, f"{serialized[0]} serializations of the 500-member list for {FRAMES} HAVEs"
    assert u.counts["received_have"] == FRAMES


def test_a_members_haves_do_not_each_serialize_the_revocation_list(monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> tuple[int, float]:
        _, nodes, _ = rl_fleet.fleet(2)
        u = nodes[0]
        rl = rl_fleet.signed(3, revoked=identity.MAX_REVOKED)
        assert u.signaling.receive_revocation_list(identity.list_to_text(rl), "/etc/evio/trust/revoked.json")
        have = rf.RevocationFlood.HEADER.pack(rf.RevocationFlood.MAGIC, df.VERSION, df.HAVE, rl.serial, 0, 0)
        serialized = _counting(monkeypatch, identity, "list_to_text")  # wherever the flood would have it made
        started = time.perf_counter()
        for _ in range(FRAMES):
            u.receive(have, ATTACKER_MAC, True)  # broadcast from A's own MAC, under its root
        return serialized[0], (time.perf_counter() - started) / FRAMES

    serialized, spent = asyncio.run(run())
    print(f"{identity.MAX_REVOKED} revocations: {spent * 1e6:.0f} us of u's loop a HAVE, {serialized} serializations")
    assert serialized == 0, f"{serialized} serializations of the revocation list for {FRAMES} HAVEs"


def test_a_copy_of_the_member_list_held_costs_a_holder_one_check_and_no_serialization(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An honest whole-list broadcast (an answer to a node that asked) reaches every node that already holds it: each
    knows it by its manifest, one signature check, and counts it as heard (its own answer waits) without making the
    text of its list once; the same copy by unicast, or another text of the serial held, costs no check at all."""
    rng = random.Random(500)
    members = {rng.getrandbits(128): f"member{i}@x.test" for i in range(500)}
    held = member_list.sign_members(ml_fleet.CA_KEY, ml_fleet.OV, 5, int(time.time()), members)
    _, nodes, _ = ml_fleet.fleet(tmp_path, 2, held)
    u, v = nodes
    frames = ml_fleet.frames_of(held, index=1)  # v's copy of the list u holds
    other = member_list.sign_members(ml_fleet.CA_KEY, ml_fleet.OV, 5, int(time.time()), dict(list(members.items())[1:]))
    others = ml_fleet.frames_of(other, index=1)  # another text of the serial held
    serialized = _counting(monkeypatch, member_list, "to_text")
    checks = _counting(monkeypatch, revocation_manifest, "check")

    started = time.perf_counter()
    for frame in frames:
        u.receive(frame, v.mac, False)  # by unicast: nothing to learn
    unicast = time.perf_counter() - started
    assert (checks[0], u.counts["manifest_held"]) == (0, 1)
    for frame in others:
        u.receive(frame, v.mac, True)  # not ours: nothing to learn either
    assert (checks[0], u.counts["manifest_held"]) == (0, 2)
    assert u.counts["answer_quiet"] == 0

    started = time.perf_counter()
    for frame in frames:
        u.receive(frame, v.mac, True)
    broadcast = time.perf_counter() - started
    print(f"500 members, {len(frames)} frames: {unicast * 1e3:.2f} ms by unicast, {broadcast * 1e3:.2f} ms broadcast, "
          f"{checks[0]} signature checks, {serialized[0]} serializations")
    assert checks[0] == 1 and serialized[0] <= 1, "one check, and the text held made at most once (per serial)"
    older = mf.HEADER.pack(mf.MAGIC, df.VERSION, df.HAVE, held.serial - 1, 0, 0)
    u.receive(older, ATTACKER_MAC, True)  # an ask: the copy just heard answers it, so u's answer waits (rule 2)
    assert u.counts["answer_quiet"] == 1
