"""Link-local multicast bounded per port in the switch (issue 23): the classifier, the bound, the counts."""

from __future__ import annotations

import ipaddress

import pytest

from evio.sdn import frb
from evio.sdn.boundary import AttachOverlay, DropCounts
from evio.sdn.flow_actions import PacketOut
from evio.sdn.link_local import LINK_LOCAL_MULTICAST_RATE, ROUTER_SOLICITATION_RATE, LinkLocalKind, link_local_kind
from evio.sdn.overlay_switch import OverlaySwitch
from evio.sdn.switch import BoundedFloodSwitch, Drop, PortKind, SwitchPort

H1 = "02:00:00:00:00:01"
H2 = "02:00:00:00:00:02"


def ipv6_frame(src: str, dst: str, next_header: int, payload: bytes) -> bytes:
    group = ipaddress.IPv6Address(dst).packed
    mac = b"\x33\x33" + group[-4:]
    header = (b"\x60\x00\x00\x00" + len(payload).to_bytes(2, "big") + bytes([next_header, 255])
              + ipaddress.IPv6Address(src).packed + group)
    return mac + frb.parse_mac(H1) + b"\x86\xdd" + header + payload


def icmpv6(src: str, dst: str, icmp_type: int) -> bytes:
    return ipv6_frame(src, dst, 58, bytes([icmp_type, 0, 0, 0]) + b"\x00" * 20)


ROUTER_SOLICITATION = icmpv6("fe80::1", "ff02::2", 133)
NEIGHBOUR_SOLICITATION = icmpv6("fe80::1", "ff02::1:ff00:2", 135)
DAD_PROBE = icmpv6("::", "ff02::1:ff00:1", 135)
# MLDv2 report: a hop-by-hop header (Router Alert) before the ICMPv6 header, type 143.
MLD_REPORT = ipv6_frame("fe80::1", "ff02::16", 0, bytes([58, 0, 5, 2, 0, 0, 1, 0]) + bytes([143, 0]) + b"\x00" * 26)
MDNS_V6 = ipv6_frame("fe80::1", "ff02::fb", 17, b"\x14\xe9\x14\xe9" + b"\x00" * 30)
MDNS_V4 = b"\x01\x00\x5e\x00\x00\xfb" + frb.parse_mac(H1) + b"\x08\x00" + b"\x45" + b"\x00" * 45
SSDP_V4 = b"\x01\x00\x5e\x7f\xff\xfa" + frb.parse_mac(H1) + b"\x08\x00" + b"\x45" + b"\x00" * 45  # 239.255.255.250
SITE_V6 = ipv6_frame("fd00::1", "ff05::2", 17, b"\x00" * 30)  # site-local scope: not this bound's
ARP = b"\xff" * 6 + frb.parse_mac(H1) + b"\x08\x06" + b"\x00" * 28


@pytest.mark.parametrize(
    ("frame", "kind"),
    [
        (ROUTER_SOLICITATION, LinkLocalKind.ROUTER_SOLICITATION),
        (MLD_REPORT, LinkLocalKind.LINK_LOCAL_MULTICAST),
        (MDNS_V6, LinkLocalKind.LINK_LOCAL_MULTICAST),
        (MDNS_V4, LinkLocalKind.LINK_LOCAL_MULTICAST),
        (NEIGHBOUR_SOLICITATION, None),  # address resolution passes as ARP does
        (DAD_PROBE, None),
        (ARP, None),
        (SSDP_V4, None),
        (SITE_V6, None),
        (ROUTER_SOLICITATION[:40], None),  # truncated
    ],
)
def test_which_frames_are_link_local_multicast(frame: bytes, kind: LinkLocalKind | None) -> None:
    assert link_local_kind(frame) is kind


def switch() -> BoundedFloodSwitch:
    sw = BoundedFloodSwitch(100, "02:aa:00:00:00:01")
    sw.port_added(SwitchPort(1, "evbr-ov1", PortKind.LEAF, None, H1), now=0)
    sw.port_added(SwitchPort(2, "vethc1", PortKind.LEAF), now=0)
    sw.port_added(SwitchPort(10, "evt200", PortKind.PEER, 200), now=0)
    return sw


def flooded(actions: list) -> bool:
    return any(isinstance(a, PacketOut) and a.port == 10 for a in actions)


def delivered_locally(actions: list, port: int) -> bool:
    return any(isinstance(a, PacketOut) and a.port == port and a.data[12:14] != b"\xc0\xc0" for a in actions)


@pytest.mark.parametrize(("frame", "rate"), [(ROUTER_SOLICITATION, ROUTER_SOLICITATION_RATE),
                                              (MDNS_V6, LINK_LOCAL_MULTICAST_RATE)])
def test_a_ports_link_local_multicast_is_flooded_within_its_rate_and_delivered_locally_beyond(
    frame: bytes, rate: tuple[float, int]
) -> None:
    sw = switch()
    _, burst = rate
    results = [sw.packet_in(1, frame, now=1.0) for _ in range(burst + 5)]
    assert [flooded(r) for r in results] == [True] * burst + [False] * 5
    assert all(delivered_locally(r, 2) for r in results)  # a router or mDNS responder on another local port
    assert sw.drops[Drop.LINK_LOCAL_LIMITED] == 5
    assert sw.port_drops[("evbr-ov1", Drop.LINK_LOCAL_LIMITED)] == 5
    # Another port has a budget of its own; this one's refills with time.
    assert flooded(sw.packet_in(2, frame, now=1.0))
    assert flooded(sw.packet_in(1, frame, now=1.0 + 1 / rate[0]))


def test_address_resolution_is_not_bounded_by_it() -> None:
    sw = switch()
    assert all(flooded(sw.packet_in(1, NEIGHBOUR_SOLICITATION, now=1.0)) for _ in range(100))
    assert sw.drops[Drop.LINK_LOCAL_LIMITED] == 0


def test_per_port_drops_reach_the_daemon_and_go_with_the_port() -> None:
    overlay = OverlaySwitch(AttachOverlay("ov1", 1, 100))
    overlay.port_up(1, "evbr-ov1", H1, now=0)
    overlay.port_up(2, "vethc1", H2, now=0)
    for _ in range(ROUTER_SOLICITATION_RATE[1] + 3):
        overlay.packet_in(2, ROUTER_SOLICITATION, now=1.0)
    (report,) = overlay.drop_report()
    assert isinstance(report, DropCounts)
    assert report.by_port == {"vethc1": {"LINK_LOCAL_LIMITED": 3}}
    overlay.port_deleted(2, "vethc1", now=2.0)
    assert overlay.switch.port_drops == {}


def test_an_attached_port_is_a_leaf_whose_hosts_are_pinned_and_announced_to_new_peers() -> None:
    # A site LAN behind "vlan0": the daemon announces no peer for it, so the switch makes it a leaf port.
    from evio.sdn.boundary import PortAdded

    overlay = OverlaySwitch(AttachOverlay("ov1", 1, 100))
    step = overlay.port_up(5, "vlan0", "02:00:00:00:05:00", now=0)
    assert [(e.name, e.kind) for e in step.events if isinstance(e, PortAdded)] == [("vlan0", "leaf")]
    lan_hosts = ["02:00:00:00:05:01", "02:00:00:00:05:02"]
    for host in lan_hosts:
        overlay.packet_in(5, b"\xff" * 6 + frb.parse_mac(host) + b"\x08\x06" + b"\x00" * 28, now=1.0)
    # A peer claiming one of them by a unicast frame moves nothing: a leaf's hosts are pinned.
    overlay.peer_up("evt200", 200, now=2.0)
    overlay.port_up(10, "evt200", "02:00:00:00:0a:00", now=2.0)
    overlay.packet_in(10, frb.parse_mac(H1) + frb.parse_mac(lan_hosts[0]) + b"\x08\x00" + b"\x00" * 46, now=2.0)
    entry = overlay.switch.learning.lookup(lan_hosts[0], now=3.0)
    assert entry is not None and entry.port == 5
    assert overlay.switch.drops[Drop.LOCAL_MAC_CLAIMED] == 1
    # A new peer port gets a leaf announcement that carries the LAN's hosts.
    overlay.peer_up("evt300", 300, now=4.0)
    step = overlay.port_up(11, "evt300", "02:00:00:00:0b:00", now=4.0)
    announced = [frb.parse(a.data) for a in step.actions if isinstance(a, PacketOut) and a.port == 11]
    assert announced and set(lan_hosts) <= set(announced[0].leaf_macs)
