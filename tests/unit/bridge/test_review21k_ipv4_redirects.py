"""Review21k K4: a member's ICMP (IPv4) redirect, sent in another member's name, reroutes a node's IPv4 traffic into
the overlay to the attacker; decision 0068 switched off only IPv6 redirects.

Attack (a hostile member, attacker a): `OvsBridge._no_ipv6_redirects` sets `net/ipv6/conf/<bridge>/accept_redirects=0`
and the RA guard drops ICMPv6 redirects (137) from tunnel ports, "a member could send one to reroute any of the
node's IPv6 destinations into the overlay". The IPv4 twin is untouched: the bridge's interface keeps the kernel's
`net.ipv4.conf.<bridge>.accept_redirects` (1 by default; a host, forwarding off, takes redirects when `all` or the
interface says so), and no table-0 flow or controller check looks at ICMP type 5. Say node u routes a site's
prefix (or its default) via member G on the overlay (`192.168.50.0/24 via 10.7.0.5`). A first makes u's kernel
hold its own address at its MAC (any ARP request to u naming A's address: legitimate), then sends u, over its
tunnel to u's MAC, an ICMP redirect "from 10.7.0.5" (G's address as IP source: no ARP, so the certified-address
guard never sees it) for an active connection of u's to 192.168.50.7: "use gateway 10.7.0.66" (A). u's kernel
takes it: its traffic to that host goes to A for the next 300 s, renewed at will.

Measured: checked on this machine's kernel (a namespace's veth, forwarding 0, `192.168.50.0/24 via 10.7.0.5`, a
connected UDP socket to 192.168.50.7:53, neighbour 10.7.0.66 at A's MAC): after one such frame, `ip route get
192.168.50.7` said `via 10.7.0.66 ... cache <redirected> expires 299sec` (before: via 10.7.0.5). In evio:
`OvsBridge.create` issues no IPv4 `accept_redirects` sysctl, and the switch (fake network, real logic) delivers
A's redirect frame to u's interface.

Impact: medium: misroutes another member's (or a site's) IPv4 traffic through the attacker; needs a route via the
overlay on the victim (a member gateway), which is how an overlay reaches a site behind a member.

Suggested fix: as for IPv6, set `net/ipv4/conf/<bridge>/accept_redirects=0` (and `secure_redirects=0`,
`shared_media=0` change nothing once it is 0) on the bridge's interface in `OvsBridge.create`; optionally the
RA guard's table-0 flows also send ICMP type 5 from tunnel ports to the controller to drop and count.
This test passes with either.
"""

from __future__ import annotations

from evio.bridge import BridgeSpec, OvsBridge
from evio.testing.frames import icmp_redirect
from tests.unit.bridge.test_bridge_ovs import RecordingRunner
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

IPV4_REDIRECTS_OFF = ["sysctl", "-q", "-w", "net/ipv4/conf/evobr0/accept_redirects=0"]


async def test_a_members_ipv4_redirect_is_not_taken_by_a_nodes_interface() -> None:
    runner = RecordingRunner()
    await OvsBridge(BridgeSpec("evobr0", 6653, "10.7.0.1/24"), runner, "netdev").create()
    sysctl_off = IPV4_REDIRECTS_OFF in runner.calls
    net, ids, macs, _ = trusted_ring(4)
    u, a = ids[0], ids[1]
    heard = len(net.nodes[u].received[1])
    forged = icmp_redirect(macs[u], macs[a], "10.7.0.5", "10.7.0.1", "192.168.50.7", "10.7.0.2")
    net.from_neighbour(u, a, forged)
    delivered = forged in net.nodes[u].received[1][heard:]
    print(f"IPv4 accept_redirects=0 on the bridge: {sysctl_off}; A's redirect delivered to u's interface: {delivered}")
    assert sysctl_off or not delivered
