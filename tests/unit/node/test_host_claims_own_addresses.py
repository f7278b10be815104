"""Each node names its own certified overlay address in its host announcements, and every other node tells its
switch (evio/node/host_claims.py, decision 0062), on an in-memory broadcast medium standing in for Bounded Flood."""

from __future__ import annotations

import datetime
import ipaddress
import time
from collections.abc import Callable, Mapping
from typing import Any

from evio.node import host_claims as hcf
from evio.node.host_claims import HostClaimsFlood
from evio.signal import host_claims
from evio.signal.overlay_addresses import IPAddress
from evio.testing.virtual_clock import VirtualClock
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

OV = "ov1"
NOW = datetime.datetime.now(datetime.UTC)
CA_KEY, CA = make_overlay_ca("ov1 CA", NOW, 30)
ANCHOR = TrustAnchor(OV, (CA,))


class FakeSignaling:
    def revocation_list(self, overlay: str) -> None:
        return None

    def peers(self, overlay: str) -> dict[int, str]:
        return {}

    def is_listed(self, overlay: str, node_id: int) -> bool:
        return False  # no member list (decision 0059) in these overlays

    def subscribe(self, event_type: type, callback: Callable[[Any], None]) -> Any:
        return self

    def cancel(self) -> None:
        pass


class Node(HostClaimsFlood):
    def __init__(self, nodes: list[Node], index: int, clock: VirtualClock, certified: bool = True) -> None:
        node_id = (index + 1) << 120
        self.address = ipaddress.IPv4Address(f"10.254.0.{index + 1}")
        key, cert = issue_node_certificate(CA_KEY, CA, [OV], node_id, NOW, 30,
                                           addresses={OV: [self.address]} if certified else None)  # fmt: skip
        self.mac = bytes([2, 0, 0, 0, 0, index + 1])
        self.addresses_told: list[Mapping[IPAddress, str]] = []
        super().__init__(OV, f"evbr{index}", node_id, TunnelCertificate(key, cert), ANCHOR, FakeSignaling(),  # type: ignore[arg-type]
                         lambda owners: None, clock, own_addresses=[self.address],
                         tell_addresses=self.addresses_told.append)  # fmt: skip
        self._sock = self  # type: ignore[assignment]
        self.nodes = nodes
        nodes.append(self)
        self.begin()

    # The socket: every frame reaches every other node; the interface's MAC is `mac`.
    def getsockname(self) -> tuple[str, int, int, int, bytes]:
        return (self.ifname, hcf.ETHERTYPE, 0, 1, self.mac)

    def sendto(self, frame: bytes, address: tuple[str, int, int, int, bytes]) -> None:
        for node in self.nodes:
            if node is not self:
                node.receive(frame, self.mac)


async def test_every_node_tells_its_switch_the_others_certified_addresses_with_their_bridge_macs() -> None:
    clock, nodes = VirtualClock(), []  # type: list[Node]
    a, b, c = (Node(nodes, i, clock) for i in range(3))
    for node in nodes:
        node.set_hosted(("02:00:00:00:99:0" + str(nodes.index(node)),))
    await clock.advance(hcf.OWNERS_INTERVAL)  # lists taken together are told together (review21i I2)
    assert a.addresses_told[-1] == {b.address: b.mac.hex(":"), c.address: c.mac.hex(":")}
    assert c.addresses_told[-1] == {a.address: a.mac.hex(":"), b.address: b.mac.hex(":")}
    assert a.status()["own_addresses"] == [str(a.address)] and a.status()["certified_addresses"] == 2


def test_an_address_the_certificate_does_not_name_is_not_announced() -> None:
    clock, nodes = VirtualClock(), []  # type: list[Node]
    a, b = Node(nodes, 0, clock), Node(nodes, 1, clock, certified=False)
    b.set_hosted(("02:00:00:00:99:01",))
    assert b.own_addresses == () and a.addresses_told == []
    assert a.counts["taken"] == 1


def test_an_attacker_announcing_the_victims_address_is_refused_and_never_told_to_the_switch() -> None:
    clock, nodes = VirtualClock(), []  # type: list[Node]
    a, victim, attacker = (Node(nodes, i, clock) for i in range(3))
    told_before = list(a.addresses_told)
    # The attacker signs, with its own certificate (which names its own address), a list naming the victim's
    # address: at its own MAC, and at the victim's.
    for mac in (attacker.mac.hex(":"), victim.mac.hex(":")):
        cert = attacker._certificate
        forged = host_claims.pack(cert.key, cert.cert, OV, attacker.node_id, int(time.time() * 1000) + len(mac),
                                  (mac,), ((victim.address, mac),))  # fmt: skip
        a.receive(forged, attacker.mac)
    assert a.counts["refused_address_not_certified"] == 2
    assert a.addresses_told == told_before
    victim.set_hosted(("02:00:00:00:99:01",))
    assert a.addresses_told[-1][victim.address] == victim.mac.hex(":")
