"""Host announcements over the overlay (evio/node/host_claims.py), on an in-memory broadcast medium.

The medium stands in for Bounded Flood (every frame a node sends reaches every other node, by the tunnel to the
sender, as the switch tells: `HostClaimsFlood.flooded`), the certificates are
a test overlay CA's; what each node would tell its switch is recorded."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping
from typing import Any

from evio.node import host_claims as hcf
from evio.node.host_claims import HostClaimsFlood
from evio.signal import host_claims, identity
from evio.signal.events import RevocationAdopted
from evio.testing.virtual_clock import VirtualClock
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

OV = "ov1"
NOW = datetime.datetime.now(datetime.UTC)
CA_KEY, CA = make_overlay_ca("ov1 CA", NOW, 30)
ANCHOR = TrustAnchor(OV, (CA,))


class FakeSignaling:
    def __init__(self) -> None:
        self.list: identity.RevocationList | None = None
        self.members: set[int] = set()
        self.listed: set[int] = set()  # the overlay CA's member list (decision 0059), where there is one
        self.subscribers: list[Callable[[RevocationAdopted], None]] = []

    def revocation_list(self, overlay: str) -> identity.RevocationList | None:
        return self.list

    def peers(self, overlay: str) -> dict[int, str]:
        return dict.fromkeys(self.members, "member@example.org/evio")  # present members, as signaling knows them

    def is_listed(self, overlay: str, node_id: int) -> bool:
        return node_id in self.listed

    def subscribe(self, event_type: type, callback: Callable[[RevocationAdopted], None]) -> Any:
        self.subscribers.append(callback)
        return self

    def cancel(self) -> None:
        self.subscribers.clear()


class Medium:
    def __init__(self) -> None:
        self.nodes: list[Wired] = []
        self.frames = 0
        self.unicast = 0

    def send(self, sender: Wired, frame: bytes, to: bytes = hcf.BROADCAST) -> None:
        if to != hcf.BROADCAST:  # a frame to one node's bridge MAC: the switches carry it to that node only
            self.unicast += 1
            for node in self.nodes:
                if node.mac == to:
                    node.receive(frame, sender.mac)
            return
        self.frames += 1
        for node in self.nodes:  # every node adjacent to the sender: its flood, rooted at it, by its own tunnel
            if node is not sender:
                node.receive(frame, sender.mac, ingress=sender.node_id, root=sender.node_id)


class FakeSocket:
    def __init__(self, medium: Medium, node: Wired) -> None:
        self.medium, self.node = medium, node

    def sendto(self, frame: bytes, address: tuple[str, int, int, int, bytes]) -> None:
        self.medium.send(self.node, frame, address[4])


class Wired(HostClaimsFlood):
    def __init__(self, medium: Medium, index: int, clock: VirtualClock) -> None:
        node_id = (index + 1) << 120
        key, cert = issue_node_certificate(CA_KEY, CA, [OV], node_id, NOW, 30)
        self.told: list[Mapping[str, int]] = []
        self.signaling = FakeSignaling()
        super().__init__(OV, f"evbr{index}", node_id, TunnelCertificate(key, cert), ANCHOR,
                         self.signaling, self.told.append, clock)  # type: ignore[arg-type]
        self.mac = bytes([2, 0, 0, 0, 0, index])
        self._sock = FakeSocket(medium, self)  # type: ignore[assignment]
        medium.nodes.append(self)
        self.begin()


def fleet(n: int) -> tuple[Medium, list[Wired], VirtualClock]:
    clock, medium = VirtualClock(), Medium()
    nodes = [Wired(medium, i, clock) for i in range(n)]
    for node in nodes:
        node.signaling.members = {other.node_id for other in nodes if other is not node}
    return medium, nodes, clock


async def test_what_a_node_hosts_reaches_every_switch_once_and_changes_fold_into_one_announcement() -> None:
    medium, nodes, clock = fleet(4)
    nodes[0].set_hosted(("02:00:00:00:01:01",))
    assert [n.told[-1] for n in nodes[1:]] == [{"02:00:00:00:01:01": nodes[0].node_id}] * 3
    for i in range(5):  # a burst of changes within the interval: one announcement after it
        nodes[0].set_hosted(("02:00:00:00:01:01", f"02:00:00:00:02:0{i}"))
    assert medium.frames == 1
    await clock.advance(hcf.MIN_INTERVAL)
    assert medium.frames == 2
    assert nodes[3].told[-1] == {"02:00:00:00:01:01": nodes[0].node_id, "02:00:00:00:02:04": nodes[0].node_id}
    assert nodes[0].told == []  # its own, never from the overlay


async def test_a_forged_or_replayed_announcement_and_a_flood_of_them_are_counted_not_taken() -> None:
    medium, nodes, clock = fleet(3)
    nodes[1].set_hosted(("02:00:00:00:01:01",))
    victim_told = len(nodes[0].told)
    # A (node 2) signs an announcement naming node 1's id: its certificate does not name that id.
    cert = nodes[2]._certificate
    forged = host_claims.pack(cert.key, cert.cert, OV, nodes[1].node_id, int(time.time() * 1000) + 5, ())
    nodes[0].receive(forged, b"\x02\x66\x00\x00\x00\x01")
    assert nodes[0].counts["refused_certificate_refused"] == 1
    for _ in range(20):
        nodes[0].receive(forged, b"\x02\x66\x00\x00\x00\x01")
    assert nodes[0].counts["refused_again"] == 20  # the same bytes again: no check
    honest = nodes[1].counts["sent"]
    for _ in range(3):  # node 1's own announcement, replayed: not newer than the list held, no check
        nodes[0].receive(host_claims.pack(nodes[1]._certificate.key, nodes[1]._certificate.cert, OV,
                                          nodes[1].node_id, int(time.time() * 1000) - 60_000, ()), b"\x02\x66\0\0\0\2")
    assert honest == 1 and nodes[0].counts["unchanged"] == 3
    assert len(nodes[0].told) == victim_told


async def test_a_revoked_members_claims_go_when_the_list_comes() -> None:
    medium, nodes, clock = fleet(3)
    nodes[2].set_hosted(("02:00:00:00:03:03",))
    assert nodes[0].told[-1] == {"02:00:00:00:03:03": nodes[2].node_id}
    until = int(time.time()) + 86400
    nodes[0].signaling.list = identity.sign_list(CA_KEY, OV, 1, int(time.time()), {nodes[2].node_id: until})
    for callback in nodes[0].signaling.subscribers:
        callback(RevocationAdopted(OV, 1, "file"))
    assert nodes[0].told[-1] == {}  # at once, as the list is adopted
    await clock.advance(hcf.MIN_INTERVAL)
    nodes[2].set_hosted(("02:00:00:00:03:04",))
    assert nodes[0].counts["refused_revoked"] >= 1 and nodes[0].told[-1] == {}


def link(a: Wired, b: Wired) -> None:
    """A tunnel between `a` and `b` came up: each is told before its port joins the bridge, then announces."""
    a.peer_linked(b.node_id)
    b.peer_linked(a.node_id)
    a.announce()
    b.announce()


async def test_a_node_joining_late_gets_every_members_list_from_its_neighbours_only_and_paced() -> None:
    medium, nodes, clock = fleet(31)
    newcomer, old = nodes[-1], nodes[:-1]
    medium.nodes.remove(newcomer)  # not linked yet: it hears nothing of what the others announce now
    for i, node in enumerate(old):
        node.set_hosted((f"02:00:00:00:01:{i:02x}",))
    await clock.advance(hcf.MIN_INTERVAL)
    assert newcomer.claims.issued_ms(old[0].node_id) is None
    medium.nodes.append(newcomer)
    broadcasts = medium.frames
    newcomer.set_hosted(("02:00:00:00:02:01",))
    link(newcomer, old[0])  # the newcomer's two neighbours
    link(newcomer, old[1])
    # Its announcement of the link-ups waits out MIN_INTERVAL after the one it just made; then each neighbour
    # sends CATCHUP_BATCH lists a tick.
    await clock.advance(hcf.MIN_INTERVAL)
    assert newcomer.counts["taken"] <= 2 + 2 * hcf.CATCHUP_BATCH
    await clock.advance(2 * hcf.CATCHUP_TICK)
    assert len(newcomer.claims) == 31  # all 30 members' lists and its own, 1.2 s after it linked, not 10 minutes
    await clock.advance(hcf.OWNERS_INTERVAL)  # the switch is told of what they changed together (review21i I2)
    assert newcomer.told[-1] == {f"02:00:00:00:01:{i:02x}": node.node_id for i, node in enumerate(old)}
    # Its two neighbours sent it the 29 others' lists and their own, each once; nobody else passed anything on.
    assert [n.counts["catchup_sent"] for n in old[:2]] == [30, 30]
    assert all(n.counts["catchup_sent"] == 0 for n in old[2:])
    assert newcomer.counts["taken"] == 30 and newcomer.counts["unchanged"] >= 30  # a copy costs no check
    # The newcomer passed on what it held when each neighbour's announcement came: at most the lists it held.
    assert newcomer.counts["catchup_sent"] <= 2 * 31, newcomer.counts
    assert medium.unicast == 60 + newcomer.counts["catchup_sent"], newcomer.counts
    # Broadcasts: the newcomer's first and its link-ups' (folded into one), one of each neighbour's link-up.
    assert medium.frames - broadcasts == 4
    # The link flaps: a newer announcement within CATCHUP_PEER_INTERVAL earns nothing again.
    await clock.advance(hcf.MIN_INTERVAL)
    unicast = medium.unicast
    link(newcomer, old[0])
    await clock.advance(2 * hcf.MIN_INTERVAL)
    assert medium.unicast == unicast and old[0].counts["catchup_too_soon"] == 1


async def test_a_member_that_is_not_linked_to_the_sender_passes_nothing_on() -> None:
    medium, nodes, clock = fleet(4)
    for i, node in enumerate(nodes):
        node.set_hosted((f"02:00:00:00:01:{i:02x}",))
    await clock.advance(hcf.MIN_INTERVAL)
    nodes[3].set_hosted(("02:00:00:00:03:03",))  # a newer announcement, but no link of ours came up
    await clock.advance(1.0)
    assert medium.unicast == 0 and sum(n.counts["catchups"] for n in nodes) == 0


async def test_a_host_that_moved_is_told_as_its_new_nodes_after_alone_hold_with_nothing_announced() -> None:
    """review21e E4: once the old node stops naming a host the new node names too, the host is nobody's until the
    new node has been its only claimant for ALONE_HOLD; the switch is told then, by a timer, not at a refresh."""
    medium, nodes, clock = fleet(3)
    observer, old, new = nodes
    vm = "02:00:00:00:07:07"
    old.set_hosted((vm,))
    await clock.advance(hcf.MIN_INTERVAL)
    new.set_hosted((vm,))  # migrated: the new node names it before the old one's TAP goes
    assert observer.told[-1] == {vm: old.node_id}
    await clock.advance(hcf.MIN_INTERVAL)
    old.set_hosted(())
    assert observer.told[-1] == {} and vm in observer.claims.unheld
    await clock.advance(host_claims.ALONE_HOLD - 1)  # the refreshes within it change nothing
    assert observer.told[-1] == {}
    await clock.advance(1)
    assert observer.told[-1] == {vm: new.node_id}
