"""Host announcements over the overlay (evio/node/host_claims.py), on an in-memory broadcast medium.

The medium stands in for Bounded Flood (every frame a node sends reaches every other node), the certificates are
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
        self.subscribers: list[Callable[[RevocationAdopted], None]] = []

    def revocation_list(self, overlay: str) -> identity.RevocationList | None:
        return self.list

    def peers(self, overlay: str) -> dict[int, str]:
        return dict.fromkeys(self.members, "member@example.org/evio")  # present members, as signaling knows them

    def subscribe(self, event_type: type, callback: Callable[[RevocationAdopted], None]) -> Any:
        self.subscribers.append(callback)
        return self

    def cancel(self) -> None:
        self.subscribers.clear()


class Medium:
    def __init__(self) -> None:
        self.nodes: list[Wired] = []
        self.frames = 0

    def send(self, sender: Wired, frame: bytes) -> None:
        self.frames += 1
        for node in self.nodes:
            if node is not sender:
                node.receive(frame, sender.mac)


class FakeSocket:
    def __init__(self, medium: Medium, node: Wired) -> None:
        self.medium, self.node = medium, node

    def sendto(self, frame: bytes, address: object) -> None:
        self.medium.send(self.node, frame)


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
