"""Review21r: a member spends another member's share of a node's unicast manifest checks by naming it, so the
honest member's unicast answers (a firm answer to an ask, rule 5) are dropped unchecked.

Attack: member A sends frames of ethertype 0x88B5 to node u's bridge MAC (flows ahead by destination, no controller
and no flood budget on the way, decision 0072), each a MANIFEST of the revocation list naming member V: V's node id
and V's certificate (public: V sends it in every manifest it floods), any newer serial, a spoiled signature, about
20 a second. `SignedDocumentFlood._manifest` budgets the check before making it (decision 0043 amended, review21o
O3), and `_check_key` gives a unicast the share of the node id it names once that certificate was found the CA's
here: every one of A's frames spends V's share (`SIGNER_CHECK_RATE`, 2 a second), and V's genuine manifest,
sent to u in answer, finds V's share empty and is dropped as `dropped_verify_rate` before its check. A names each
known member in turn (about 2 frames a second per member, 100 frames a second for 50 members) and every holder's
unicast answer to u is dropped.

Code path: `SignedDocumentFlood.receive` -> `_manifest` -> `_check_key` (the named `manifest.node_id`, found in
`self._certificates`) -> `FloodShares.allow(UNICAST_WAY, V's id)` -> `dropped_verify_rate`.

Impact: medium (a bounded denial against a chosen node at a low rate): u's catch-up by unicast (a firm answer goes
to one asker, at most once per `FIRM_INTERVAL`, 30 s, per holder) is cut off for as long as A keeps sending; u
then depends on a broadcast answer, which A cannot spend. Issue 21 asks a revocation to be honoured within 5 s.

Suggested fix: a share that an attacker cannot name into: key a unicast manifest by who delivered it, not by whom
it names (the source MAC's owner where the switch checks unicast sources, else the tunnel it came by), or check a
manifest naming a signer whose last unicast manifests failed their signature only after that signer's genuine ones
(a failed check for V's id does not spend V's share: a separate share for "named V, signature not yet seen good"),
so that only a signature that verified earns V's share.

Fixed (decision 0043, amended for review21o and review21r): a manifest's check is charged to whoever delivered it as
far as the frame tells, a unicast as a broadcast: the member whose host claims hold its source MAC (`_ring_key`), one
key for MACs nobody holds; never to the node id it names. A's frames spend A's share (or, from invented MACs, the
one key of the unknown), and V's answer from V's interface finds V's share whole. Its residual, A writing V's very
MAC as the source, is closed too (0043, amended again; the tests below the first): the switch hands every unicast of
the flood for its interface to the daemon with the tunnel it came by and the member it vouches sent it, and the check
is charged to that member, else to that tunnel's share.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter

import pytest
from cryptography.hazmat.primitives import serialization

from evio.node import document_flood as df
from evio.node import revocation_flood as rf
from evio.sdn import frb
from evio.sdn.boundary import DocumentUnicastIn, event_as_dict
from evio.sdn.switch_terms import DocumentUnicast, Drop
from evio.signal import revocation_manifest
from evio.testing.fake_flow_table import FakeNetwork
from evio.testing.fake_ofapp import FakeDatapath, FakeEvent, FakeMsg, connect, make_app, port_desc
from evio.testing.frames import eth
from evio.testing.node_fleet import Fleet
from evio.testing.virtual_clock import VirtualClock
from tests.unit.node.test_revocation_flood import OV, WiredFlood, certificate, fleet, frames_of, node_id, signed
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

RATE = 20  # A's frames a second, all naming V
SECONDS = 5  # issue 21's bound for a revocation


@pytest.mark.parametrize("claims", [True, False], ids=["host-claims", "no-host-claims"])
def test_a_member_naming_another_cannot_spend_its_unicast_check_share(claims: bool) -> None:
    async def run() -> None:
        _, nodes, clock = fleet(3)
        u, victim, attacker = nodes[0], 1, 2
        if claims:  # the daemon's case: senders known by the member whose host claims hold their MAC
            owners = {node.mac: node._node_id for node in nodes}
            for node in nodes:
                node.use_members(owners.get)
        for frame in frames_of(signed(3), index=victim):  # a list V broadcast: adopted, V's certificate found at u
            u.receive(frame, nodes[victim].mac, True)
        cert = certificate(victim)
        assert u.signaling.list is not None and u.signaling.list.serial == 3
        assert u._certificates.found(cert.cert.public_bytes(serialization.Encoding.DER), node_id(victim))
        genuine = frames_of(signed(4), index=victim)
        for second in range(SECONDS):
            for i in range(RATE):
                header = rf.HEADER.pack(rf.MAGIC, df.VERSION, df.MANIFEST, 100 + second * RATE + i, 0, 1)
                forged = revocation_manifest.pack(cert.key, cert.cert, OV, header, node_id(victim), [os.urandom(64)])
                u.receive(forged[:-4] + bytes(4), nodes[attacker].mac, False)  # V's id and cert, spoiled signature
                if i == RATE // 2:  # V answers u by unicast, once a second (far more often than FIRM_INTERVAL)
                    for frame in genuine:
                        u.receive(frame, nodes[victim].mac, False)
                await clock.advance(1.0 / RATE)
        counts = u.status()["counts"]
        print(f"after {SECONDS} s: adopted {counts.get('adopted', 0)}, dropped_verify_rate {counts.get('dropped_verify_rate', 0)}, "
              f"u's serial {u.signaling.list.serial if u.signaling.list else None}")
        assert counts["dropped_verify_rate"] > 0, "A's forgeries were all checked: the budget was not what held them"
        assert u.signaling.list is not None and u.signaling.list.serial == 4, "V's genuine answer was never checked"

    asyncio.run(run())


# -- the residual: A writes V's very MAC as the source (review21r finding 1, its open variant) ---------------------
#
# Attack: A sends node u unicast manifests naming V with V's interface MAC as their Ethernet source (public: V
# broadcasts from it) at its port's full packet-in rate. A unicast reaches u's interface by flows ahead by
# destination (0072), judged by no controller, and u's flood charged it to the member whose host claims hold its
# source MAC: V. Every one of A's frames spent V's share, so V's genuine answer was dropped as `dropped_verify_rate`.
# Here the real switch logic and fake flow tables of a ring of six carry the frames (`trusted_ring`): u = ids[0];
# V = ids[2], two hops away by ids[1]; W = ids[4], by ids[5]. Frames the bridge delivers to u's interface reach the
# flood as its socket reads them; frames the switch hands over (`document_unicasts`) as the daemon passes them on.

ATTACK_RATE = 1000  # A's frames a second: its port's whole packet-in rate at u (`switch.PACKET_IN_RATE`)
TICK = 0.01
LOCAL = 0xFFFFFFFE  # the bridge's own interface


def _forged_naming(index: int, count: int) -> list[bytes]:
    """`count` manifests of newer serials naming fleet member `index` (its id and certificate), signature spoiled."""
    cert = certificate(index)
    frames = []
    for i in range(count):
        header = rf.HEADER.pack(rf.MAGIC, df.VERSION, df.MANIFEST, 100 + i, 0, 1)
        forged = revocation_manifest.pack(cert.key, cert.cert, OV, header, node_id(index), [os.urandom(64)])
        frames.append(forged[:-4] + bytes(4))
    return frames


class _InterfaceOf:
    """Node u's bridge interface and daemon, as far as its revocation flood sees them."""

    def __init__(self, net: FakeNetwork, u: int, flood: WiredFlood) -> None:
        self.net, self.u, self.flood = net, u, flood
        self.switch = net.nodes[u].switch
        self.read = 0
        self.handed: list[DocumentUnicast] = []

    def deliver(self) -> None:
        delivered = self.net.nodes[self.u].received[1]
        for frame in delivered[self.read :]:  # what the flood's socket reads off the interface
            if frame[12:14] == df.ETHERTYPE.to_bytes(2, "big"):
                self.flood.receive(frame[14:], frame[6:12], frame[:6] == df.BROADCAST)
        self.read = len(delivered)
        queued = self.switch.document_unicasts  # what the switch hands the daemon (`DocumentUnicast` events)
        while queued:
            document = queued.popleft()
            self.handed.append(document)
            self.flood.switched(document.frame, document.peer, document.sender)


def _ring_with_flood() -> tuple[FakeNetwork, list[int], dict[int, str], _InterfaceOf, VirtualClock]:
    net, ids, macs, _ = trusted_ring(6)
    _, floods, clock = fleet(1)
    flood = floods[0]
    owners = net.nodes[ids[0]].switch.mac_owners
    flood.use_members(lambda mac: owners.get(mac.hex(":")))  # the daemon's case: host claims held
    interface = _InterfaceOf(net, ids[0], flood)
    return net, ids, macs, interface, clock


async def _attack(net: FakeNetwork, clock: VirtualClock, interface: _InterfaceOf, attacker: int,
                  sources: list[str], answers: dict[float, tuple[int, str]]) -> dict[float, int | None]:
    """A sends ATTACK_RATE forgeries a second from `sources` in turn for SECONDS; at each time in `answers` the
    member there answers u by unicast with the newer list (serial 4). u's serial right after each answer."""
    u, macs_u = interface.u, interface.switch.ports[1].hw_addr
    assert macs_u is not None
    forged = _forged_naming(1, 50)
    genuine = frames_of(signed(4), index=1)
    serial_after: dict[float, int | None] = {}
    sent = 0
    for tick in range(int(SECONDS / TICK)):
        now = tick * TICK
        for _ in range(int(ATTACK_RATE * TICK)):
            frame = eth(macs_u, sources[sent % len(sources)], df.ETHERTYPE, forged[sent % len(forged)])
            net.from_neighbour(u, attacker, frame)
            sent += 1
        interface.deliver()
        for at, (member, mac) in answers.items():
            if at <= now < at + TICK:
                for payload in genuine:
                    net.inject(member, 1, eth(macs_u, mac, df.ETHERTYPE, payload))
                interface.deliver()
                held = interface.flood.signaling.list
                serial_after[at] = held.serial if held is not None else None
        net.now += TICK  # the switches' packet-in budgets (no flow ages out in this time)
        await clock.advance(TICK)
    return serial_after


def test_a_member_forging_the_victims_source_mac_off_its_way_cannot_spend_its_unicast_share() -> None:
    async def run() -> None:
        net, ids, macs, interface, clock = _ring_with_flood()
        u, attacker, relay, victim = ids[0], ids[5], ids[1], ids[2]  # A off V's way to u (V -> ids[1] -> u)
        entry = interface.switch.learning.lookup(macs[victim], net.now)
        assert entry is not None and entry.port == net.port_towards(u, relay)
        for frame in frames_of(signed(3), index=1):  # a list V broadcast: adopted at u
            interface.flood.receive(frame, frb.parse_mac(macs[victim]), True)
        assert interface.flood.signaling.list is not None and interface.flood.signaling.list.serial == 3
        serial_after = await _attack(net, clock, interface, attacker, [macs[victim]],
                                     {0.5 + s: (victim, macs[victim]) for s in range(SECONDS)})
        counts = interface.flood.status()["counts"]
        by_a = [d for d in interface.handed if d.peer == attacker]
        print(f"A off V's way, {ATTACK_RATE}/s from V's MAC for {SECONDS} s: u's serial after V's answers "
              f"{list(serial_after.values())}; dropped_verify_rate {counts.get('dropped_verify_rate', 0)}, "
              f"dropped_unsigned {counts.get('dropped_unsigned', 0)}; A's frames handed {len(by_a)}, "
              f"in V's name {sum(d.sender == victim for d in by_a)}")
        assert counts["dropped_verify_rate"] > 0, "A's forgeries were all checked: the budget was not what held them"
        assert by_a and not any(d.sender == victim for d in by_a), "a frame by A's tunnel counted as V's"
        assert any(d.peer == relay and d.sender == victim for d in interface.handed), "V's answer not counted as V's"
        assert serial_after[0.5] == 4, "V's first answer was not taken: A spent V's share"

    asyncio.run(run())


def test_a_member_on_the_victims_way_spends_only_what_passes_it_and_another_relays_member_is_answered() -> None:
    async def run() -> None:
        net, ids, macs, interface, clock = _ring_with_flood()
        attacker, victim, other = ids[1], ids[2], ids[4]  # A relays V's frames to u = ids[0]; W's come by ids[5]
        for frame in frames_of(signed(3), index=1):
            interface.flood.receive(frame, frb.parse_mac(macs[victim]), True)
        invented = "02:aa:bb:cc:dd:01"
        serial_after = await _attack(net, clock, interface, attacker, [macs[victim], macs[other], invented],
                                     {0.5: (other, macs[other])})
        by_a = [d for d in interface.handed if d.peer == attacker]
        named = Counter(d.frame[6:12].hex(":") for d in by_a if d.sender is not None)
        counts = interface.flood.status()["counts"]
        print(f"A on V's way, {ATTACK_RATE}/s from V's, W's and an invented MAC: counted as V's {named[macs[victim]]}, "
              f"as W's {named[macs[other]]}, as A's tunnel's {sum(d.sender is None for d in by_a)}; u's serial after "
              f"W's answer by ids[5] {serial_after[0.5]}; dropped_verify_rate {counts.get('dropped_verify_rate', 0)}")
        assert set(named) == {macs[victim]}, "only V's MAC, which learning places behind A, counts as its owner's"
        assert all(d.sender == victim for d in by_a if d.frame[6:12].hex(":") == macs[victim])
        assert serial_after[0.5] == 4, "W's answer by another relay was not taken at once"

    asyncio.run(run())


def test_the_switch_hands_over_unicasts_of_the_flood_for_its_interface_only() -> None:
    net, ids, macs, _ = trusted_ring(6)
    u, switch = ids[0], net.nodes[ids[0]].switch
    document = frames_of(signed(3), index=1)[0]
    # A broadcast still reaches the interface (in an FRB, judged by its root), and nothing is handed over.
    net.inject(ids[2], 1, eth(df.BROADCAST, macs[ids[2]], df.ETHERTYPE, document))
    assert eth(df.BROADCAST, macs[ids[2]], df.ETHERTYPE, document) in net.nodes[u].received[1]
    assert not switch.document_unicasts
    # A unicast through u to another node rides the flows as before: handed over at its end only.
    unicast = eth(macs[ids[1]], macs[ids[5]], df.ETHERTYPE, document)
    net.inject(ids[5], 1, unicast)
    assert not switch.document_unicasts and list(net.nodes[ids[1]].switch.document_unicasts) == [
        DocumentUnicast(unicast, u, ids[5])]
    assert unicast not in net.nodes[ids[1]].received[1], "delivered past the switch as well: charged by its MAC"
    # One from a host on a leaf port: handed over as nobody's word; behind a VLAN tag, or in u's own name, dropped.
    leaf = net.add_leaf(u, "site", "02:00:00:00:99:01")
    local = eth(macs[u], "02:00:00:00:99:02", df.ETHERTYPE, document)
    net.inject(u, leaf, local)
    assert list(switch.document_unicasts) == [DocumentUnicast(local, None, None)]
    switch.document_unicasts.clear()
    tag = b"\x81\x00\x00\x05" + df.ETHERTYPE.to_bytes(2, "big")
    net.from_neighbour(u, ids[1], frb.parse_mac(macs[u]) + frb.parse_mac(macs[ids[2]]) + tag + document)
    net.from_neighbour(u, ids[1], eth(macs[u], macs[u], df.ETHERTYPE, document))
    assert not switch.document_unicasts
    assert not [f for f in net.nodes[u].received[1] if f[6:12] == frb.parse_mac(macs[u])]
    assert switch.drops[Drop.DOCUMENT_TAGGED] == 1 and switch.drops[Drop.LOCAL_MAC_CLAIMED] >= 1


def test_the_adapter_hands_a_unicast_of_the_flood_to_the_daemon_with_its_tunnel_and_sends_it_nowhere() -> None:
    app, commands, sink, _ = make_app()
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100)
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(LOCAL, "evbr", "02:00:00:00:00:aa"), port_desc(5, "evot200", "02:00:00:00:00:05")])
    frame = eth("02:00:00:00:00:aa", "02:00:00:00:00:33", df.ETHERTYPE, frames_of(signed(3), index=1)[0])
    sent = len(dp.packet_outs())
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 5}, data=frame)))
    handed = [e for e in sink.events if isinstance(e, DocumentUnicastIn)]
    assert handed == [DocumentUnicastIn("red", frame, 200, None)]  # a MAC nobody holds: vouched for by nobody
    assert not [m for m in dp.packet_outs()[sent:] if bytes(m.data) == frame], "delivered to the interface as well"
    assert json.loads(json.dumps(event_as_dict(handed[0])))["frame"] == frame.hex()  # the lab controller's JSON lines


async def test_the_daemon_passes_a_handed_unicast_to_both_floods_with_its_tunnel_and_sender() -> None:
    fleet = Fleet(1)
    await fleet.start()
    stack = fleet.nodes[1].overlays["ov1"]
    kept = stack.revocations, stack.member_lists
    seen: list[tuple[str, bytes, int | None, int | None]] = []

    class Recorder:
        def __init__(self, kind: str) -> None:
            self.kind = kind

        def switched(self, frame: bytes, peer: int | None, sender: int | None) -> None:
            seen.append((self.kind, frame, peer, sender))

    try:
        stack.revocations, stack.member_lists = Recorder("revocation"), Recorder("member list")  # type: ignore[assignment]
        stack.controller_event(DocumentUnicastIn("ov1", b"frame", 200, 300))
        assert seen == [("revocation", b"frame", 200, 300), ("member list", b"frame", 200, 300)]
    finally:
        stack.revocations, stack.member_lists = kept
        await fleet.stop_all()
