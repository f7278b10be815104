"""Review21k K6: a neighbour advertisement behind an IPv6 destination-options header names another member's
certified IPv6 address at the attacker's MAC past the guard, at every node.

Attack (a hostile member, attacker a): decision 0068 checks neighbour solicitations and advertisements in FRBs and
packet-ins against the certified addresses (`switch.guard_allows` -> `neighbor_answers.parse` ->
`neighbor_guard.spoofs_certified`). `neighbor_answers._parse_nd` reads ND only when ICMPv6 follows the IPv6 header
directly ("RFC 4861 7.1.1/7.1.2: ... no extension headers here": RFC 4861 asks no such thing; RFC 6980 forbids
only fragmentation), and returns None otherwise, which the guard takes as "not ND" and passes. Linux's `ndisc_rcv`
checks the hop limit (255) and code (0) only: an NA behind a hop-by-hop or destination-options header is taken.
A's host floods an unsolicited NA to ff02::1 (override flag; target V's certified fd00::3; target link-layer
option A's MAC) with an 8-byte destination-options header (PadN) in front of the ICMPv6. A's switch floods it as
FRBs; every receiver passes it to its interface; every kernel holding an entry for V's address moves it to A's
MAC (override): V's IPv6 traffic from every node goes to A. `neighbor_guard.icmpv6_type` already walks these
headers for the RA guard; the ND reading does not.

Measured (fake network, real switch logic, trust mode, V's address certified as fd00::3): the plain NA is dropped
at u (CERTIFIED_ADDRESS_SPOOFED); the same NA behind a destination-options header reaches u's interface, 0 drops.
Checked on this machine's kernel: a namespace's veth with `fd00::3 lladdr 02:00:00:00:00:03 STALE` sent this very
frame (NA behind destination options, O flag) showed `fd00::3 lladdr <A's MAC> STALE`.

Impact: high: one frame from any member takes another member's certified IPv6 address at every node, what the
guard's ND check was written to stop (the unicast NA riding flows is a documented follow-up; this is the flooded
case the decision says is dropped).

Suggested fix: in `_parse_nd` skip extension headers (0, 43, 60) as `icmpv6_type` does, so the guard judges the
ND message inside; a fragment header (44) or anything unparsed that `icmpv6_type` says is ND (types 135/136) is
dropped from tunnel ports outright rather than passed.
"""

from __future__ import annotations

import ipaddress
import struct

from evio.sdn import frb
from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import FakeNetwork
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

V6 = "fd00::{}"


def _checksum(data: bytes) -> int:
    data += b"\x00" * (len(data) % 2)
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def unsolicited_na(src_mac: str, target: str, with_extension: bool) -> bytes:
    """An unsolicited NA to all nodes (override), `target` at `src_mac`; optionally behind destination options."""
    src, dst = ipaddress.IPv6Address("fe80::66").packed, ipaddress.IPv6Address("ff02::1").packed
    na = bytearray(struct.pack("!BBHI16s", 136, 0, 0, 0x20000000, ipaddress.IPv6Address(target).packed)
                   + bytes([2, 1]) + frb.parse_mac(src_mac))
    na[2:4] = _checksum(src + dst + struct.pack("!I3xB", len(na), 58) + bytes(na)).to_bytes(2, "big")
    payload, next_header = (bytes([58, 0, 1, 4, 0, 0, 0, 0]) + bytes(na), 60) if with_extension else (bytes(na), 58)
    ipv6 = struct.pack("!IHBB16s16s", 6 << 28, len(payload), next_header, 255, src, dst)
    return frb.parse_mac("33:33:00:00:00:01") + frb.parse_mac(src_mac) + b"\x86\xdd" + ipv6 + payload


def _certify_v6(net: FakeNetwork, ids: list[int], macs: dict[int, str]) -> None:
    """Each member's certified IPv6 address fd00::i beside its IPv4 one, told to every other switch (0062)."""
    for nid in ids:
        for i, other in enumerate(ids):
            if other != nid:
                net.nodes[nid].switch.neighbors.certified[ipaddress.IPv6Address(V6.format(i + 1))] = macs[other]


def _sent_to_u(with_extension: bool) -> tuple[bool, int]:
    net, ids, macs, _ = trusted_ring(4)
    _certify_v6(net, ids, macs)
    u, a = ids[0], ids[1]
    heard = len(net.nodes[u].received[1])
    forged = unsolicited_na(macs[a], V6.format(3), with_extension)  # V (ids[2]) is fd00::3
    net.inject(a, 1, forged)
    return forged in net.nodes[u].received[1][heard:], net.nodes[u].switch.drops[Drop.CERTIFIED_ADDRESS_SPOOFED]


def test_a_plain_advertisement_for_a_certified_address_is_dropped() -> None:
    assert _sent_to_u(with_extension=False) == (False, 1)


def test_an_advertisement_behind_an_extension_header_is_dropped_too() -> None:
    delivered, drops = _sent_to_u(with_extension=True)
    print(f"NA for V's certified fd00::3 at A's MAC behind destination options delivered to u's interface: "
          f"{delivered}, CERTIFIED_ADDRESS_SPOOFED drops at u: {drops}")
    assert not delivered
