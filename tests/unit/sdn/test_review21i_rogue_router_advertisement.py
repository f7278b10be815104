"""Review21i I7: a member's router advertisement reaches every node's own interface: it becomes their IPv6 router.

Attack (a hostile member, attacker a): the bridges' own interfaces keep IPv6 (link_local.py: "the bridges' own
ports ... keep their IPv6 link-local address"), evio sets neither `accept_ra` nor `accept_redirects` on them, and
the switch bounds link-local multicast per port (10/s) but passes router advertisements (ICMPv6 134) like any
broadcast; the L2 policy cannot match an ICMPv6 type, so an operator cannot even write an RA guard short of
dropping all ICMPv6 (and neighbour discovery with it). Member A's host sends one RA to ff02::1 with a router
lifetime, preference "high" and a prefix with autoconf: a Linux node (forwarding off, the default `accept_ra=1`)
takes A as its IPv6 default router, ahead of a "medium" one, and forms an address in A's prefix. Its IPv6 traffic
to anywhere, its underlay's too, then goes into the overlay to A (a node without native IPv6 now prefers IPv6 for
every dual-stack name). One frame reaches every node of the overlay.

Measured (fake network, 6-node ring, real switch logic): A's RA is delivered to every other node's interface (5 of
5). Checked on this machine's kernel: a namespace's veth (accept_ra 1, forwarding 0) sent this very frame took
`default via fe80::66 proto ra metric 1024 pref high` and the address 2001:db8:66::<eui64>/64.

Suggested fix: the daemon sets `net.ipv6.conf.<bridge>.accept_ra=0` and `accept_redirects=0` on the bridge's
interface (as it disables IPv6 on the TAPs), or the switch drops RAs and redirects from tunnel ports unless the
config names the member allowed to route (an RA guard); this test checks the switch, rewrite it for the sysctl.

Closed by the RA guard (decision 0068, evio/sdn/neighbor_guard.py): RAs and redirects from tunnel ports reach no
port unless the overlay's `ipv6_routers` names their originating member; the bridge's interface takes no redirect.
"""

from __future__ import annotations

import ipaddress
import struct

from evio.sdn import frb
from evio.testing.fake_flow_table import host_mac, ring_network


def _checksum(data: bytes) -> int:
    total = sum(struct.unpack(f"!{len(data) // 2}H", data.ljust(len(data) + len(data) % 2, b"\x00")))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def router_advertisement(src_mac: str) -> bytes:
    """An RA to all nodes: lifetime 1800 s, preference high, prefix 2001:db8:66::/64 with autoconf."""
    src = ipaddress.IPv6Address("fe80::66").packed
    dst = ipaddress.IPv6Address("ff02::1").packed
    prefix = struct.pack("!BBBBIII16s", 3, 4, 64, 0xC0, 86400, 14400, 0, ipaddress.IPv6Address("2001:db8:66::").packed)
    body = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0x08, 1800, 0, 0) + prefix
    pseudo = src + dst + struct.pack("!I3xB", len(body), 58)
    body = body[:2] + struct.pack("!H", _checksum(pseudo + body)) + body[4:]
    ipv6 = struct.pack("!IHBB16s16s", 6 << 28, len(body), 58, 255, src, dst)
    return frb.parse_mac("33:33:00:00:00:01") + frb.parse_mac(src_mac) + b"\x86\xdd" + ipv6 + body


def test_a_members_router_advertisement_does_not_reach_other_nodes_interfaces() -> None:
    net, ids = ring_network(6)
    a = ids[3]
    heard = {n: len(net.nodes[n].received[1]) for n in ids}
    ra = router_advertisement(host_mac(net, a))
    net.inject(a, 1, ra)
    reached = [n for n in ids if n != a and ra in net.nodes[n].received[1][heard[n]:]]
    print(f"A's router advertisement reached the interfaces of {len(reached)} of {len(ids) - 1} other nodes")
    assert not reached
