"""Review21l L5: K4's fix (`net/ipv4/conf/<bridge>/accept_redirects=0`) does not stop IPv4 redirects on a node
whose forwarding is off while `net.ipv4.conf.all.accept_redirects` keeps the kernel's default, 1.

Attack: review21k K4's, unchanged (a member's ICMP redirect "from" a gateway member's address, over its tunnel to
u's MAC, moves u's route to a site behind that gateway onto the attacker). `OvsBridge._no_redirects` writes only
the interface's value. For IPv4 the kernel combines it with `all` (include/linux/inetdevice.h,
`IN_DEV_RX_REDIRECTS`): with forwarding on it takes redirects if `all` AND the interface say so, but with
forwarding off, if `all` OR the interface does (Documentation/networking/ip-sysctl.rst, accept_redirects). The
kernel's default for `all` is 1 (devinet.c `ipv4_devconf`); this machine's 0 (its image's sysctl.d) is why a
check here passes. IPv6 reads the interface's value alone, so K4's IPv6 half holds. The switch still delivers
the redirect frame to u's interface (no table-0 flow or controller check looks at ICMP type 5).

Measured on this machine's kernel (two namespaces, a veth, the interface's accept_redirects=0 and forwarding=0,
`192.168.50.0/24 via 10.99.0.5`, a connected UDP socket to 192.168.50.7:53, K4's redirect frame "from" 10.99.0.5
naming 10.99.0.66): with `all` 1, `ip route get 192.168.50.7` said `via 10.99.0.66 ... cache <redirected> expires
299sec`; with `all` 0, `via 10.99.0.5` (unchanged).

Impact: medium (K4's): on an ordinary member host (no forwarding, stock sysctls) one redirect frame misroutes its
IPv4 traffic for a destination behind a gateway member through the attacker, 300 s per frame, renewed at will.

Suggested fix: drop ICMP redirects (IPv4 type 5) from tunnel ports in the switch, as the RA guard drops ICMPv6 137
(a table-0 flow, counted), which holds whatever the sysctls; or, if the sysctl stays the defence, also check
`all` (and `forwarding`) at bridge creation and say in `evio doctor` when the interface's 0 is overridden.
"""

from __future__ import annotations

from evio.bridge import BridgeSpec, OvsBridge
from evio.testing.frames import icmp_redirect
from tests.unit.bridge.test_bridge_ovs import RecordingRunner
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

ALL_OFF = ["sysctl", "-q", "-w", "net/ipv4/conf/all/accept_redirects=0"]


async def test_a_members_ipv4_redirect_is_refused_whatever_the_hosts_all_setting() -> None:
    runner = RecordingRunner()
    await OvsBridge(BridgeSpec("evobr0", 6653, "10.7.0.1/24"), runner, "netdev").create()
    all_off = ALL_OFF in runner.calls
    net, ids, macs, _ = trusted_ring(4)
    u, a = ids[0], ids[1]
    heard = len(net.nodes[u].received[1])
    forged = icmp_redirect(macs[u], macs[a], "10.7.0.5", "10.7.0.1", "192.168.50.7", "10.7.0.2")
    net.from_neighbour(u, a, forged)
    delivered = forged in net.nodes[u].received[1][heard:]
    sysctls = [c[-1] for c in runner.calls if c[:1] == ["sysctl"]]
    print(f"sysctls: {sysctls}; `all` off: {all_off}; A's redirect delivered to u's interface: {delivered}")
    assert all_off or not delivered
