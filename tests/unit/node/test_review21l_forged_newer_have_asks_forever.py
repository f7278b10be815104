"""Review21l L4: one member makes every node flood an ask every 30 s, for as long as it likes, with two HAVEs per
two minutes naming a serial nobody holds: the ask "made after all" (review21j J5's residual) counts senders by the
member holding their Ethernet source MAC, and any member can send from another member's MAC.

Attack (a hostile member A): A broadcasts a HAVE of serial 2**63 from its own interface MAC and the same HAVE from
member V's interface MAC (a broadcast from a MAC A does not hold is refused learning, `NOT_ANNOUNCER`, but is
still flooded to every node's interface: checked on the fake network with the real switch), again every 100 s.
`SignedDocumentFlood.receive` keys each sender by `use_members` (`_ring_key`: the member whose host claims hold
the MAC), so the two frames are "two distinct members" (`NEWER_SENDERS`). Every node asks (rule 4); its ask is
given up when it hears another's (`ask_heard_elsewhere`), but `_recheck`, 2 s later, finds `_newer_confirmed()`
and asks after all, firm (no other ask cancels it), and re-arms itself after each ask for as long as the HAVEs are
younger than `NEWER_MEMORY` (120 s): every node asks at its back-off's ceiling (`HAVE_PERIOD`, 30 s) forever.

Impact: medium: n floods of n frames every 30 s for two frames per 100 s from A (a 1,000-node overlay: about
33,000 frames a second), the amplification review21c R3 closed ("a forged HAVE of a serial nobody holds costs
about one ask", `test_a_forged_have_of_a_serial_nobody_holds_costs_about_one_have_not_one_per_node`), reopened
by one member; and the honest nodes' asks crowd out nothing else only because the list does not exist.

Fixed (decision 0043, amended): a HAVE is a member's word only as far as the switch vouches for it. The switch
delivers a broadcast of the documents' flood only under the root of the member whose claims hold its source MAC
(`frb_receive._document_not_its_owners`, `Drop.DOCUMENT_NOT_ITS_OWNERS`), and the flood counts no HAVE sent to its
MAC alone (a unicast reaches the interface by flows no controller judges); a manifest a member signed counts as
that member's word. What a member can still do, on another's flood way (a copy under that member's root, which
`_plausible` lets through past it), is capped: at most `ASKS_AFTER_ALL` asks made after all while a node holds
one list. The attack is run here over the fake network with the real switches (a ring of 16, the members' host
claims signed and told), each node's interface reading the flood as the daemon does; the flood alone, V's MAC
delivered as a member on V's way could have it, shows the cap.
"""

from __future__ import annotations

import random

import pytest

from evio.node import revocation_flood as rf
from evio.node.revocation_flood import RevocationFlood
from evio.sdn import frb
from evio.sdn.flooding_bounds import root_bounds
from evio.sdn.switch_terms import Drop
from evio.signal import identity
from evio.signal.events import RevocationAdopted
from evio.testing.fake_flow_table import host_mac
from evio.testing.virtual_clock import VirtualClock
from tests.unit.node.test_revocation_flood import (
    ANCHOR,
    OV,
    SERVER_HOST,
    FakeSignaling,
    certificate,
    fleet,
    frames_of,
    node_id,
    signed,
)
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

FORGED = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.HAVE, 2**63, 0, 0)


class SwitchedFlood(RevocationFlood):
    """A node's revocation flood on its bridge's interface (port 1 of its switch on the fake network)."""

    def __init__(self, switched: SwitchedFleet, index: int, node: int) -> None:
        self.signaling = FakeSignaling()
        super().__init__(OV, f"evbr{index}", self.signaling, switched.clock,  # type: ignore[arg-type]
                         node_id=node_id(index), certificate=certificate(index), anchor=ANCHOR)
        self.signaling.subscribe(RevocationAdopted, self._adopted)
        self.switched, self.node, self.connected = switched, node, True
        self.mac = frb.parse_mac(host_mac(switched.net, node))
        self.sent = 0  # frames this node put on its interface

    def _send(self, frame: bytes, to: bytes = rf.BROADCAST) -> bool:
        self.sent += 1
        self.switched.send(self, to + self.mac + rf.ETHERTYPE.to_bytes(2, "big") + frame)
        return True


class SwitchedFleet:
    """n floods over the fake network's real switches: a frame a node's interface sends enters its switch on port 1;
    what a switch delivers on port 1 of the flood's ethertype is read by that node's flood, whole frame and all."""

    def __init__(self, n: int) -> None:
        self.net, self.ids, _, _ = trusted_ring(n)
        self.clock = VirtualClock()
        self._time = self._expired = self.clock.now()
        self.floods = [SwitchedFlood(self, i, nid) for i, nid in enumerate(self.ids)]
        owners = {flood.mac: flood.node for flood in self.floods}  # the interfaces' MACs, as the claims hold them
        for flood in self.floods:
            flood.use_members(owners.get)
        self._read = {nid: len(self.net.nodes[nid].received[1]) for nid in self.ids}
        self._pumping = False

    def send(self, flood: SwitchedFlood, frame: bytes) -> None:
        self._sync()
        self.net.inject(flood.node, 1, frame)
        self.pump()

    def from_member(self, attacker: int, inner: bytes, root: int | None = None, successor_only: bool = False) -> None:
        """`attacker`'s daemon floods `inner` into its tunnels under its own root (each peer with the bound its
        switch would write; `successor_only`: to its successor alone, bounded there, as a root may choose), or,
        under `root`, to its successor alone, bounded at that root: the copy a member on the root's way could pass
        on (`_plausible` lets it through past the member)."""
        self._sync()
        at = self.ids.index(attacker)
        peers = [self.ids[(at + step) % len(self.ids)] for step in (1, -1)]
        if root is not None:
            self.net.from_neighbour(peers[0], attacker, frb.pack(frb.broadcast(inner, root, root, 2)))
        elif successor_only:
            bound = self.ids[(at + 2) % len(self.ids)]
            self.net.from_neighbour(peers[0], attacker, frb.pack(frb.broadcast(inner, attacker, bound, 1)))
        else:
            for peer, bound in root_bounds(attacker, peers).items():
                self.net.from_neighbour(peer, attacker, frb.pack(frb.broadcast(inner, attacker, bound, 1)))
        self.pump()

    def pump(self) -> None:
        """Hand every flood the frames its interface got, until none are left (a flood's answer sends more)."""
        if self._pumping:
            return  # the outer call reads what this send brought
        self._pumping = True
        try:
            progress = True
            while progress:
                progress = False
                for flood in self.floods:
                    got = self.net.nodes[flood.node].received[1]
                    while self._read[flood.node] < len(got):
                        frame = got[self._read[flood.node]]
                        self._read[flood.node] += 1
                        progress = True
                        if frame[12:14] == rf.ETHERTYPE.to_bytes(2, "big") and flood.connected:
                            flood.receive(frame[14:], frame[6:12], frame[:6] == rf.BROADCAST)
        finally:
            self._pumping = False

    def _sync(self) -> None:
        """The switches' clock follows the floods'; idle flows expire and learned MACs age once a virtual second
        (each expiry pass over 16 switches costs more than the 10 ms ticks of a test)."""
        now = self.clock.now()
        if now <= self._time:
            return
        if now - self._expired >= 1.0:
            self.net.advance(now - self._time)
            self._expired = now
        else:
            self.net.now += now - self._time
        self._time = now

    async def advance(self, seconds: float) -> None:
        await self.clock.advance(seconds)
        self._sync()

    def drops(self, reason: Drop) -> int:
        return sum(node.switch.drops[reason] for node in self.net.nodes.values())


async def test_a_member_saying_have_of_a_serial_nobody_holds_under_two_macs_costs_about_one_ask() -> None:
    n = 16
    switched = SwitchedFleet(n)
    floods = switched.floods
    victim, attacker = floods[0], floods[n - 1]
    honest = floods[: n - 1]
    attacker.connected = False  # A's own code sends and reads nothing of the flood; its switch relays as any
    victim.signaling.receive_revocation_list(identity.list_to_text(signed(5)), "file")
    await switched.advance(max(rf.REPEATS) + 0.01)
    assert all(flood.signaling.list is not None and flood.signaling.list.serial == 5 for flood in honest)
    before = sum(flood.sent for flood in honest)
    seconds, every = 600, 100.0
    for _ in range(int(seconds / every)):
        switched.from_member(attacker.node, rf.BROADCAST + attacker.mac + rf.ETHERTYPE.to_bytes(2, "big") + FORGED)
        switched.from_member(attacker.node, rf.BROADCAST + victim.mac + rf.ETHERTYPE.to_bytes(2, "big") + FORGED)
        await switched.advance(every)
    sent = sum(flood.sent for flood in honest) - before
    made = sum(flood.counts["ask_made_after_all"] for flood in honest)
    refused = switched.drops(Drop.DOCUMENT_NOT_ITS_OWNERS)
    print(f"A sent {2 * int(seconds / every)} HAVEs in {seconds} s; the {n - 1} honest nodes broadcast {sent}, "
          f"{made} asks made after all; the HAVEs from V's MAC refused by {refused} switches' deliveries")
    assert sent <= 2 * n  # R3's bound: about one ask, not one per node and back-off
    assert made == 0  # one member's word, whatever MAC it sends from
    assert refused >= int(seconds / every)  # at least A's neighbours' switches, each time
    assert sum(flood.counts["received_have"] for flood in honest) > 0  # A's own HAVEs did arrive


async def test_a_member_on_anothers_flood_way_speaking_for_it_costs_a_few_asks_per_node_not_one_per_back_off() -> None:
    # What the switch cannot tell: A, V's successor, passes V's floods on to the rest of the ring, so a copy under
    # V's root from A is what V's own would be (the bound V writes, any hop count from 2). Each node past A then
    # hears two members say HAVE of the serial: each asks after all at most ASKS_AFTER_ALL times while it holds its
    # list, not once per back-off as long as A goes on.
    n = 16
    switched = SwitchedFleet(n)
    floods = switched.floods
    victim, attacker = floods[0], floods[1]
    honest = [flood for flood in floods if flood is not attacker]
    attacker.connected = False
    victim.signaling.receive_revocation_list(identity.list_to_text(signed(5)), "file")
    await switched.advance(max(rf.REPEATS) + 0.01)
    before = sum(flood.sent for flood in honest)
    halves: list[int] = []
    every = 100.0
    for _half in range(2):
        for _ in range(6):
            switched.from_member(attacker.node, rf.BROADCAST + attacker.mac + rf.ETHERTYPE.to_bytes(2, "big") + FORGED)
            switched.from_member(attacker.node, rf.BROADCAST + victim.mac + rf.ETHERTYPE.to_bytes(2, "big") + FORGED,
                                 root=victim.node)
            await switched.advance(every)
        halves.append(sum(flood.sent for flood in honest) - before - sum(halves))
    made = [flood.counts["ask_made_after_all"] for flood in honest]
    print(f"A's 24 HAVEs over 1,200 s, 12 of them under V's root past A: the {n - 1} honest nodes broadcast "
          f"{halves[0]} in the first 600 s, {halves[1]} in the next; asks made after all {sum(made)} "
          f"(at most {max(made)} a node)")
    assert max(made) <= rf.ASKS_AFTER_ALL
    assert sum(made) > 0  # the switch let these through: the cap, not the switch, bounds them
    assert halves[1] <= 2 * 6 * 2  # once the asks after all are spent: about one ask (and its follow-up) per HAVE


async def test_the_flood_alone_asks_after_all_a_few_times_per_node_whatever_macs_say_have() -> None:
    # The review's setting (the flood on the in-memory medium, V's MAC delivered to every node): the cap alone.
    n = 16
    medium, nodes, clock = fleet(n)
    honest, attacker, victim = nodes[: n - 1], nodes[n - 1], nodes[0]
    owners = {node.mac: node._node_id for node in nodes}
    for node in nodes:
        node.use_members(owners.get)
    attacker._send = lambda frame, to=rf.BROADCAST: True  # type: ignore[method-assign]
    honest[0].signaling.receive_revocation_list(identity.list_to_text(signed(5)), "file")
    await clock.advance(max(rf.REPEATS) + 0.01)
    sent: list[int] = []
    for _ in range(2):
        before = len(medium.frames)
        for _ in range(6):
            for node in honest:
                node.receive(FORGED, attacker.mac)
                node.receive(FORGED, victim.mac)
            await clock.advance(100.0)
        sent.append(len(medium.frames) - before)
    made = [node.counts["ask_made_after_all"] for node in honest]
    print(f"the flood alone, V's MAC delivered: {sent[0]} broadcasts in the first 600 s, {sent[1]} in the next; "
          f"{sum(made)} asks made after all")
    assert max(made) == rf.ASKS_AFTER_ALL
    assert sent[1] <= 2 * 6 * 2  # was 662 per 600 s, growing with time


async def test_a_have_sent_to_one_nodes_mac_names_no_newer_serial() -> None:
    # A unicast reaches a node's interface by the flows installed ahead, which no controller judges: any MAC in it.
    _, nodes, clock = fleet(2)
    owners = {node.mac: node._node_id for node in nodes}
    for node in nodes:
        node.use_members(owners.get)
    nodes[0].receive(FORGED, nodes[1].mac, False)
    await clock.advance(rf.ANSWER_JITTER + 0.01)
    assert nodes[0].counts["have_unicast_ignored"] == 1 and nodes[0].counts["sent_ask"] == 0
    assert nodes[0]._heard_senders() == 0


@pytest.mark.parametrize("signer", [1, 2], ids=["the HAVE's sender", "another member"])
def test_a_signed_manifest_of_a_newer_serial_counts_as_its_signers_word(signer: int) -> None:
    _, nodes, _ = fleet(3)
    owners = {node.mac: node._node_id for node in nodes}
    node = nodes[0]
    node.use_members(owners.get)
    node.receive(rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.HAVE, 9, 0, 0), nodes[1].mac)
    assert not node._newer_confirmed()
    node.receive(frames_of(signed(9, revoked=120), signer)[0], b"\x02\x00\x00\x00\x07\x07")  # any MAC: signed
    assert node._newer_confirmed() == (signer != 1)


@pytest.mark.parametrize("attacking", [False, True], ids=["quiet", "A saying HAVE under two MACs"])
async def test_an_honest_list_still_reaches_every_node_over_the_switches_within_the_bound(attacking: bool) -> None:
    # The server host reached every member but X; the copies reach X over the switches within SERVER_COPY_JITTER.
    n = 16
    switched = SwitchedFleet(n)
    floods = switched.floods
    attacker, missed = floods[5], floods[11]
    attacker.connected = False
    rl = signed(4, revoked=3)
    for flood in floods:
        if flood is not missed and flood is not attacker:
            assert flood.signaling.receive_revocation_list(identity.list_to_text(rl), SERVER_HOST)
    took = None
    for tick in range(1, 601):
        await switched.advance(0.01)
        if attacking and tick % 50 == 0:
            for mac in (attacker.mac, floods[0].mac):
                switched.from_member(attacker.node, rf.BROADCAST + mac + rf.ETHERTYPE.to_bytes(2, "big") + FORGED)
        if missed.signaling.list == rl:
            took = tick / 100
            break
    print(f"X held the list after {took} s; lists sent {sum(f.counts['sent_list'] for f in floods)}")
    assert took is not None and took <= rf.SERVER_COPY_JITTER + 1
    assert all(flood.signaling.list == rl for flood in floods if flood is not attacker)


async def test_a_node_that_missed_every_copy_gets_the_list_over_the_switches_though_a_member_cancels_its_asks() -> None:
    # J5's residual over the real switches: X's interface missed every copy, and the holders' answer to A's first
    # HAVE of the old serial (they keep quiet after it, ANSWER_QUIET); the others' periodic HAVEs of the new serial
    # (their MACs under their roots) make X ask, and A, X's neighbour, says HAVE of X's old serial to X every 10 ms
    # from its own MAC, so each ask is given up; two members' HAVEs still make X ask after all, and the holders
    # answer it firmly.
    n = 16
    switched = SwitchedFleet(n)
    floods = switched.floods
    attacker, missed = floods[10], floods[11]
    attacker.connected = False
    missed.connected = False
    for i, flood in enumerate(floods):
        flood._rng = random.Random(1000 + i)
    rl = signed(6)
    floods[0].signaling.receive_revocation_list(identity.list_to_text(rl), "file")
    old_have = rf.BROADCAST + attacker.mac + rf.ETHERTYPE.to_bytes(2, "big") + rf.HEADER.pack(
        rf.MAGIC, rf.VERSION, rf.HAVE, 0, 0, 0)
    await switched.advance(max(rf.REPEATS) + 0.01)
    for _ in range(2):  # an ask and its repeat: answered by broadcast, then firmly (to A's MAC)
        switched.from_member(attacker.node, old_have)
        await switched.advance(rf.ANSWER_JITTER + 0.01)
    assert missed.signaling.list is None
    missed.connected = True
    for flood in floods:
        if flood is not attacker:
            flood.arm_periodic_have()
    missed._periodic_timer.cancel()  # type: ignore[union-attr] # X's own HAVE would ask too: not it that we test
    took = None
    for tick in range(1, int(1.5 * rf.HAVE_PERIOD / 0.01) + 1):  # 10 ms a tick: A's HAVEs, a root's flood budget
        await switched.advance(0.01)
        switched.from_member(attacker.node, old_have, successor_only=True)
        if missed.signaling.list == rl:
            took = tick * 0.01
            break
    print(f"X gave up {missed.counts['ask_heard_elsewhere']} asks, asked after all "
          f"{missed.counts['ask_made_after_all']} times, held the list {took} s after its interface came back")
    assert took is not None
    assert missed.counts["ask_heard_elsewhere"] >= 1 and missed.counts["ask_made_after_all"] >= 1
