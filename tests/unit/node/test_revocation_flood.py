"""Revocation lists spread over the overlay (evio/node/revocation_flood.py), on an in-memory broadcast medium.

The medium stands in for Bounded Flood: a frame one node sends reaches every other node on it. Signature
checks are the signal endpoint's (tests/unit/signal/test_signal_identity.py); the fake here adopts any list that
parses and is newer, so these tests are about what goes on the wire, when, and what is bounded.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import pytest

from evio.node import revocation_flood as rf
from evio.node.revocation_flood import RevocationFlood
from evio.ratelimit import Rate
from evio.sdn.flood_shares import FloodShares
from evio.signal import identity, revocation_manifest
from evio.signal.events import RevocationAdopted
from evio.testing.virtual_clock import VirtualClock
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

OV = "ov1"
SERVER_HOST = "lab.test"  # the overlay's XMPP domain: what the endpoint names the server host's messages by
CA_KEY, CA_CERT = make_overlay_ca("ov1 CA", datetime.datetime.now(datetime.UTC), 3650)
ANCHOR = TrustAnchor(OV, (CA_CERT,))
_CERTS: dict[int, TunnelCertificate] = {}


def node_id(index: int) -> int:
    return 0x1000 + index


def certificate(index: int) -> TunnelCertificate:
    """Node `index`'s member certificate of the overlay CA (made once: P-256 keys take a while)."""
    if index not in _CERTS:
        now = datetime.datetime.now(datetime.UTC)
        _CERTS[index] = TunnelCertificate(*issue_node_certificate(CA_KEY, CA_CERT, [OV], node_id(index), now, 30))
    return _CERTS[index]


def frames_of(rl: identity.RevocationList, index: int = 0) -> list[bytes]:
    """The frames node `index` broadcasts `rl` in: its signed manifest, then the chunks."""
    text = identity.list_to_text(rl).encode()
    chunks = [text[i : i + rf.CHUNK] for i in range(0, len(text), rf.CHUNK)]
    cert = certificate(index)
    header = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.MANIFEST, rl.serial, 0, len(chunks))
    manifest = revocation_manifest.pack(cert.key, cert.cert, OV, header, node_id(index), chunks)
    return [manifest] + [rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.LIST, rl.serial, i, len(chunks)) + c
                         for i, c in enumerate(chunks)]  # fmt: skip


def signed(serial: int, revoked: int = 1) -> identity.RevocationList:
    until = int(time.time()) + 86400
    return identity.sign_list(CA_KEY, OV, serial, int(time.time()), {(n + 1) << 100: until for n in range(revoked)})


class FakeSignaling:
    def __init__(self) -> None:
        self.list: identity.RevocationList | None = None
        self.subscribers: list[Callable[[RevocationAdopted], None]] = []
        self.sources: list[str] = []

    def revocation_list(self, overlay: str) -> identity.RevocationList | None:
        return self.list

    def revocation_list_text(self, overlay: str) -> str | None:
        return identity.list_to_text(self.list) if self.list is not None else None

    def receive_revocation_list(self, text: str, source: str = "local") -> bool:
        rl = identity.load_list(text)
        if self.list is not None and rl.serial <= self.list.serial:
            return False
        self.list = rl
        self.sources.append(source)
        for callback in list(self.subscribers):
            callback(RevocationAdopted(OV, rl.serial, source, source == SERVER_HOST))
        return True

    def subscribe(self, event_type: type, callback: Callable[[RevocationAdopted], None]) -> Any:
        self.subscribers.append(callback)
        return self


class Medium:
    """Every frame sent reaches every other node: what Bounded Flood does for a broadcast; a frame to one MAC
    reaches that node alone (as a learned unicast does)."""

    def __init__(self) -> None:
        self.nodes: list[WiredFlood] = []
        self.frames: list[tuple[int, bytes]] = []
        self.destinations: list[bytes] = []  # of each frame in `frames`
        self.deliveries = 0  # frames handed to a node: a broadcast costs one per other node, a unicast one

    def send(self, sender: WiredFlood, frame: bytes, to: bytes = rf.BROADCAST) -> None:
        self.frames.append((sender.mac[-1], frame))
        self.destinations.append(to)
        for node in self.nodes:
            if node is not sender and node.connected and to in (rf.BROADCAST, node.mac):
                self.deliveries += 1
                node.receive(frame, sender.mac, to == rf.BROADCAST)


class WiredFlood(RevocationFlood):
    def __init__(self, medium: Medium, index: int, clock: VirtualClock) -> None:
        self.signaling = FakeSignaling()
        super().__init__(OV, f"evbr{index}", self.signaling, clock, node_id=node_id(index),  # type: ignore[arg-type]
                         certificate=certificate(index), anchor=ANCHOR)
        self.medium, self.mac, self.connected = medium, bytes([2, 0, 0, 0, 0, index]), True
        medium.nodes.append(self)
        self.signaling.subscribe(RevocationAdopted, self._adopted)

    def _send(self, frame: bytes, to: bytes = rf.BROADCAST) -> bool:
        self.medium.send(self, frame, to)
        return True


def without_frame_budget(node: RevocationFlood) -> RevocationFlood:
    """`node` reading every frame: the frame budget (`document_flood.FRAME_RATE`) holds a burst of thousands of
    senders at once, and the tests of the bounds behind it (the senders heard, the asks remembered) lift it."""
    unbounded = Rate(1e12, 10**12)
    node._frame_budget = FloodShares[bytes | None](unbounded, unbounded, unbounded.burst)
    return node


def lists_sent(medium: Medium) -> list[tuple[int, bytes]]:
    """The (sender, manifest) of each list broadcast on `medium`: one manifest, then its chunks."""
    return [(s, f) for s, f in medium.frames if rf.HEADER.unpack_from(f)[2] == rf.MANIFEST]


def fleet(n: int) -> tuple[Medium, list[WiredFlood], VirtualClock]:
    clock = VirtualClock()
    medium = Medium()
    return medium, [WiredFlood(medium, i, clock) for i in range(n)], clock


def test_a_list_dropped_on_one_node_reaches_every_node_in_one_broadcast_and_is_not_sent_again() -> None:
    medium, nodes, _ = fleet(5)
    rl = signed(3, revoked=120)  # several frames: the list's text is longer than one chunk
    assert nodes[0].signaling.receive_revocation_list(identity.list_to_text(rl), "/etc/evio/trust/revoked.json")
    chunks = -(-len(identity.list_to_text(rl).encode()) // rf.CHUNK)
    assert chunks > 1
    assert [n.signaling.list for n in nodes] == [rl] * 5
    assert [n.signaling.sources[-1].startswith("overlay 02:00:00:00:00:00") for n in nodes[1:]] == [True] * 4
    assert len(medium.frames) == chunks + 1, "a list adopted from the overlay was broadcast again"  # and its manifest


async def test_a_node_that_missed_the_list_gets_it_when_a_link_comes_up() -> None:
    medium, nodes, clock = fleet(4)
    nodes[3].connected = False  # cut off while the list went round
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(signed(2)), "file")
    assert nodes[3].signaling.list is None
    nodes[3].connected = True
    for _ in range(5):  # several links come up at once: one HAVE
        nodes[3].link_up()
    await clock.advance(rf.ANSWER_JITTER + 0.1)
    haves = [f for s, f in medium.frames if s == 3]
    assert len(haves) == 1
    assert nodes[3].signaling.list is not None and nodes[3].signaling.list.serial == 2
    # Every holder answered the HAVE at most once; the next HAVE within the interval is held back.
    answers = len(lists_sent(medium)) - 1  # less the first broadcast
    assert answers == 1, "every holder answered: the first answer should have stopped the others"
    assert sum(n.counts["answer_heard_elsewhere"] for n in nodes) == 2
    nodes[3].link_up()
    assert len([f for s, f in medium.frames if s == 3]) == 1
    await clock.advance(rf.HAVE_INTERVAL)
    assert len([f for s, f in medium.frames if s == 3]) == 2


async def test_an_older_list_passing_by_is_answered_with_the_newer_at_most_once_per_interval() -> None:
    medium, nodes, clock = fleet(2)
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(signed(5)), "file")
    assert nodes[1].signaling.list is not None
    sent = len(lists_sent(medium))
    old = identity.list_to_text(signed(4)).encode()
    frame = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.LIST, 4, 0, 1) + old
    for _ in range(10):
        nodes[0].receive(frame, b"\x02\x00\x00\x00\x00\x09")
    await clock.advance(rf.ANSWER_JITTER)
    assert len(lists_sent(medium)) - sent == 1  # one answer, nine held back
    assert nodes[0].counts["answer_held"] == 9


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"EVR", "dropped_short"),
        (b"XXXX" + bytes(12), "dropped_malformed"),
        (rf.HEADER.pack(rf.MAGIC, 9, rf.LIST, 1, 0, 1), "dropped_malformed"),
        (rf.HEADER.pack(rf.MAGIC, rf.VERSION, 7, 1, 0, 1), "dropped_malformed"),
        (rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.LIST, 1, 3, 2) + b"x", "dropped_malformed"),
        (rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.LIST, 1, 0, rf.MAX_CHUNKS + 1) + b"x", "dropped_oversize"),
        (rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.LIST, 1, 0, 2) + b"x" * (rf.CHUNK + 1), "dropped_malformed"),
    ],
)
def test_malformed_frames_are_counted_and_change_nothing(frame: bytes, reason: str) -> None:
    _, nodes, _ = fleet(1)
    nodes[0].receive(frame, b"\x02" * 6)
    assert nodes[0].counts[reason] == 1
    assert nodes[0].signaling.list is None and not nodes[0]._pending


async def test_assemblies_are_bounded_in_number_and_time() -> None:
    _, nodes, clock = fleet(1)
    node = nodes[0]
    for signer in range(1, rf.MAX_PENDING + 4):  # manifests only, from many members
        node.receive(frames_of(signed(10 + signer, revoked=60), signer)[0], bytes([2, 0, 0, 0, 1, signer]))
    assert len(node._pending) == rf.MAX_PENDING
    assert node.counts["dropped_incomplete"] == 3
    await clock.advance(rf.ASSEMBLY_TIMEOUT + 1)
    node.receive(frames_of(signed(99, revoked=60), 1)[0], b"\x02" * 6)
    assert len(node._pending) == 1 and node.counts["dropped_incomplete"] == 3 + rf.MAX_PENDING


def test_a_list_that_does_not_parse_is_counted_not_raised() -> None:
    _, nodes, _ = fleet(1)
    cert, chunk = certificate(1), b"\xff\xfe"
    header = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.MANIFEST, 1, 0, 1)
    nodes[0].receive(revocation_manifest.pack(cert.key, cert.cert, OV, header, node_id(1), [chunk]), b"\x02" * 6)
    nodes[0].receive(rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.LIST, 1, 0, 1) + chunk, b"\x02" * 6)
    assert nodes[0].counts["dropped_malformed"] == 1 and not nodes[0]._pending


async def test_the_first_node_repeats_its_list_so_one_lost_copy_leaves_nobody_out() -> None:
    medium, nodes, clock = fleet(3)
    nodes[2].connected = False  # its copy of the first broadcast is lost; no link of its comes up
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(signed(4)), "file")
    nodes[2].connected = True
    await clock.advance(rf.REPEATS[0] + 0.01)
    assert nodes[2].signaling.list is not None and nodes[2].signaling.list.serial == 4
    await clock.advance(max(rf.REPEATS))
    assert nodes[0].counts["sent_repeat"] == len(rf.REPEATS)
    assert [s for s, _ in lists_sent(medium)] == [0] * (1 + len(rf.REPEATS)), "only the first node sends the list"


async def test_a_repeat_is_skipped_once_a_newer_list_went_out() -> None:
    medium, nodes, clock = fleet(2)
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(signed(4)), "file")
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(signed(5)), "file")
    await clock.advance(max(rf.REPEATS) + 0.01)
    serials = [rf.HEADER.unpack_from(f)[3] for _, f in lists_sent(medium)]
    assert serials == [4, 5] + [5] * len(rf.REPEATS)


async def test_a_node_that_missed_every_copy_with_no_link_coming_up_asks_after_a_periodic_have() -> None:
    medium, nodes, clock = fleet(4)
    nodes[3].connected = False
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(signed(6)), "file")
    await clock.advance(max(rf.REPEATS) + 0.01)
    nodes[3].connected = True
    assert nodes[3].signaling.list is None
    for node in nodes:
        node.arm_periodic_have()
    await clock.advance(1.5 * rf.HAVE_PERIOD + rf.ANSWER_JITTER + 0.01)
    assert nodes[3].signaling.list is not None and nodes[3].signaling.list.serial == 6


async def test_the_periodic_have_slows_down_with_the_nodes_heard_up_to_a_bound() -> None:
    medium, nodes, clock = fleet(1)
    node = without_frame_budget(nodes[0])
    have = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.HAVE, 0, 0, 0)
    for sender in range(45):
        node.receive(have, bytes([2, 0, 0, 0, 0, sender]))
    node.arm_periodic_have()
    sent = len(medium.frames)
    await clock.advance(0.5 * 45 - 0.01)
    assert len(medium.frames) == sent, "45 nodes heard: this node's HAVE waits at least 22.5 s"
    await clock.advance(45 + 0.02)
    assert len(medium.frames) >= sent + 1  # (a second one may follow within the same window)
    # However many senders come by (a member can invent them), the period stops at HAVE_PERIOD_MAX.
    for sender in range(rf.MAX_HEARD + 10):
        node.receive(have, sender.to_bytes(6, "big"))
    assert node._heard_senders() == rf.MAX_HEARD
    await clock.advance(1.5 * rf.HAVE_PERIOD_MAX + 0.01)
    assert len(medium.frames) >= sent + 2


async def test_a_list_the_server_host_sent_to_every_member_online_goes_over_the_overlay_once() -> None:
    # The server host sends a removal's list to every member online (decision 0065); each used to flood it three
    # times: 3n floods reaching n nodes each. Two copies over the overlay serve the members the server missed.
    medium, nodes, clock = fleet(12)
    rl = signed(4, revoked=3)
    for node in nodes[:-1]:  # the last one the server did not reach (a stripping or flaky server)
        assert node.signaling.receive_revocation_list(identity.list_to_text(rl), SERVER_HOST)
    assert lists_sent(medium) == []  # none at once: each waits its random turn
    await clock.advance(rf.SERVER_COPY_JITTER + 0.1)
    assert len(lists_sent(medium)) == rf.SERVER_COPY_WITNESSES  # the first ones; the others heard them
    assert nodes[-1].signaling.list == rl
    assert sum(n.counts["server_copy_heard_elsewhere"] for n in nodes) == 11 - rf.SERVER_COPY_WITNESSES
    # each of those says it holds the list in one HAVE instead, for a node every copy missed (review21j J5)
    assert sum(n.counts["sent_server_copy_have"] for n in nodes) == 11 - rf.SERVER_COPY_WITNESSES
    await clock.advance(max(rf.REPEATS) + 1)
    assert len(lists_sent(medium)) == rf.SERVER_COPY_WITNESSES  # and no repeats


def haves_sent(medium: Medium, since: int = 0) -> int:
    return sum(1 for _, f in medium.frames[since:] if rf.HEADER.unpack_from(f)[2] == rf.HAVE)


async def settled_fleet(n: int) -> tuple[Medium, list[WiredFlood], VirtualClock]:
    """`n` nodes holding the same list, their periodic HAVEs armed and left alone until every one backed off to
    its longest period."""
    medium, nodes, clock = fleet(n)
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(signed(6)), "file")
    for node in nodes:
        node.arm_periodic_have()
    await clock.advance(4 * rf.HAVE_PERIOD_IDLE)
    return medium, nodes, clock


async def test_an_overlay_that_agrees_backs_its_periodic_have_off_to_the_idle_period() -> None:
    # Issue 23: an idle overlay sends at most one multicast per node a minute across the tunnels. Each periodic
    # HAVE is two frames (its follow-up, rule 5); every 30 s that was 4 per node a minute for one document.
    n = 16
    medium, nodes, clock = await settled_fleet(n)
    before, window = len(medium.frames), 3600.0
    await clock.advance(window)
    per_node_minute = haves_sent(medium, before) / n / (window / 60)
    print(f"{n} nodes that agree: {per_node_minute:.3f} HAVE frames per node a minute (was "
          f"{2 * 60 / rf.HAVE_PERIOD:.0f} at a {rf.HAVE_PERIOD:.0f} s period)")
    assert per_node_minute <= 2 * 60 / rf.HAVE_PERIOD_IDLE * 1.3
    assert len(medium.frames) - before == haves_sent(medium, before), "only HAVEs: nothing to answer"


async def test_a_node_that_missed_a_list_in_a_settled_overlay_gets_it_within_the_short_period() -> None:
    # The holders adopted the newer list: their periodic HAVEs go back to the short period, so a node that missed
    # every copy (and no link of its came up) hears of it as soon as before the back-off.
    medium, nodes, clock = await settled_fleet(8)
    late = nodes[7]
    late.connected = False
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(signed(7)), "file")
    await clock.advance(max(rf.REPEATS) + 0.01)
    late.connected = True
    start = clock.now()
    while late.signaling.list.serial != 7 and clock.now() - start < 2 * rf.HAVE_PERIOD_IDLE:
        await clock.advance(0.5)
    took = clock.now() - start
    print(f"the node that missed serial 7 had it {took:.1f} s (virtual) after it came back")
    assert late.signaling.list.serial == 7 and took <= 1.5 * rf.HAVE_PERIOD + rf.ANSWER_JITTER + 1.0


async def test_a_node_behind_cuts_the_others_back_off_short_and_its_sender_cannot_speed_them_up() -> None:
    # A HAVE of an older serial (a node that missed a list, or a member saying so every second) puts the holders
    # back at the short period: the node behind is answered, and hears of the newer serial, as soon as before the
    # back-off. A sender doing it every second holds the overlay at the rate every node had before, no higher.
    n = 8
    medium, nodes, clock = await settled_fleet(n)
    old = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.HAVE, 5, 0, 0)
    before, window = len(medium.frames), 600.0
    for _ in range(int(window)):
        for node in nodes:
            node.receive(old, bytes([2, 0, 0, 0, 1, 0]))
        await clock.advance(1.0)
    haves = haves_sent(medium, before)
    print(f"old-serial HAVEs every second for {window:.0f} s: {haves} HAVE frames from {n} nodes")
    assert haves >= n * window / rf.HAVE_PERIOD / 2  # at the short period again
    assert haves <= 2 * n * window / rf.HAVE_PERIOD * 1.3  # and no shorter (each with its follow-up)
