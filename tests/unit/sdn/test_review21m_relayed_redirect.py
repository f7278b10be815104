"""Review21m M2: a relay of the named router's floods passes a redirect in the router's name whose target
link-layer option is its own MAC: attached hosts then send their IPv6 traffic for any destination to the relay.

Attack (a hostile member A on the arc by which router R's floods reach node U, trust mode, `ipv6_routers`
names R; an attached host H on a leaf port of U took R's RA, so its default route is `via fe80::66` (R's)):
1. A writes an FRB rooted at R (a copy of R's flood, plausible: A relays R's floods to U) whose inner frame is an
   ICMPv6 redirect (137) to H: Ethernet source R's MAC, IPv6 source fe80::66, destination 2001:db8::1, target
   2001:db8::1 ("on-link"), target link-layer option A's MAC.
2. U's switch: table 0 sends the redirect to the controller; `switch.guard_allows` -> `neighbor_guard.router_allowed`
   passes it (root R is named, R owns the Ethernet source); `_router_address_allowed` returns True for anything
   but an RA ("a redirect: nothing to bind"), and `router_addresses.CLAIM_TYPES` has no 137, so the target
   link-layer option is never looked at. The frame is delivered to H's port.
3. H's kernel (a container or VM: `accept_redirects` defaults to 1 on a non-forwarding host; only the bridge's own
   interface gets 0, `ovs_bridge.py`) takes it: the redirect comes from its current next hop for 2001:db8::1, so
   it installs a route for 2001:db8::1 on-link and a neighbour entry 2001:db8::1 -> A's MAC. H's traffic to that
   destination (any destination A picks, one redirect each; a member's certified address too) goes to A.
   Checked on this machine's kernel (a namespace's veth, accept_ra 1, forwarding 0, sent this test's RA and then
   this very redirect): `default via fe80::66 proto ra`, then `ip -6 route get 2001:db8::1` on-link (no `via`) and
   `2001:db8::1 lladdr 02:00:00:00:00:0a STALE` (A's MAC).

This is review21k K7's relay case (an RA in R's name with the relay's MAC in its source link-layer option, fixed by
`router_addresses.admit_advert`) for the other router message the guard passes: the redirect's target link-layer
option is what the kernel stores, and it is not judged. Decision 0068's amendment lists "Redirects (137) from a
named router are not judged beyond the guard" as still open, without saying a relay can forge them. Distinct from
review21l L1 (unicast in R's name from any port): here the frame is an FRB on a plausible way, which a fix that
judges unicast router messages by the port R's MAC is placed on leaves open.

Code path: `frb_receive.frb_in` -> `switch.guard_allows(root=R)` -> `router_allowed` (True) ->
`_router_address_allowed` (True for 137) -> delivered to leaf ports.

Impact and severity: medium: interception of attached hosts' IPv6 traffic to chosen destinations, but it needs a
position (a relay on R's flood arc to the victim node) and a named router, and the nodes' own interfaces refuse
redirects.

Suggested fix: a redirect's target link-layer option legitimately names another host's MAC, so it cannot be bound
to R's MACs as an RA's source option is. Drop redirects from tunnel ports (`Drop.ROUTER_GUARD`) unless they are
unicast from a MAC placed on the port they came by under R (L1's check) and their target link-layer option is
absent or a MAC whose learned place is the one R's is (or a certified member's, as its owner's); or simply stop
passing redirects from tunnels to leaf ports (the overlay's own interfaces already ignore them).
"""

from __future__ import annotations

import ipaddress
import struct

from evio.sdn import frb
from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import FakeNetwork
from tests.unit.sdn.test_review21k_router_link_local_taken import RA_SOURCE, _named, advert, nd_frame
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

HOST = "02:00:00:00:aa:01"  # an attached host on a leaf port of U
_TARGET_LL = 2


def redirect(eth_src: str, eth_dst: str, destination: str, lladdr: str) -> bytes:
    """A redirect from R's fe80::66 to H (fd00::aa): `destination` is on-link, at `lladdr`."""
    dest = ipaddress.IPv6Address(destination).packed
    return nd_frame(137, eth_src, eth_dst, RA_SOURCE, "fd00::aa", struct.pack("!I16s16s", 0, dest, dest),
                    (_TARGET_LL, lladdr))


def _setup() -> tuple[FakeNetwork, list[int], dict[int, str], int]:
    net, ids, macs, _ = trusted_ring(6)
    u, r = ids[0], ids[3]
    _named(net, ids, r)
    host = net.add_leaf(u, "host", hw_addr=HOST)
    net.inject(u, host, frb.parse_mac("ff:ff:ff:ff:ff:ff") + frb.parse_mac(HOST) + b"\x88\xb5" + bytes(46))
    ra = advert(macs[r], macs[r])
    net.inject(r, 1, ra)
    assert ra in net.nodes[u].received[host]  # H took R's RA: its default route is via fe80::66
    return net, ids, macs, host


def test_a_relays_redirect_in_the_routers_name_reaches_no_attached_host() -> None:
    net, ids, macs, host = _setup()
    u, a, r = ids[0], ids[5], ids[3]  # A relays R's floods to U (as in review21k K7's relay test)
    forged = redirect(macs[r], HOST, "2001:db8::1", macs[a])
    heard = len(net.nodes[u].received[host])
    net.from_neighbour(u, a, frb.pack(frb.broadcast(forged, root_nid=r, bound_nid=r, hop_count=2)))
    delivered = forged in net.nodes[u].received[host][heard:]
    drops = {d.name: n for d, n in net.nodes[u].switch.drops.items() if n}
    print(f"relay A's redirect in R's name (2001:db8::1 on-link at A's MAC) delivered to H: {delivered}; "
          f"drops at U: {drops}")
    assert not delivered


def test_a_redirect_from_an_unnamed_root_is_dropped() -> None:
    # The control: the guard reads the FRB's root; only the named router's name gets a redirect through.
    net, ids, macs, host = _setup()
    u, a = ids[0], ids[5]
    forged = redirect(macs[a], HOST, "2001:db8::1", macs[a])
    heard = len(net.nodes[u].received[host])
    net.from_neighbour(u, a, frb.pack(frb.broadcast(forged, root_nid=a, bound_nid=a, hop_count=1)))
    assert forged not in net.nodes[u].received[host][heard:]
    assert net.nodes[u].switch.drops[Drop.ROUTER_GUARD] == 1
