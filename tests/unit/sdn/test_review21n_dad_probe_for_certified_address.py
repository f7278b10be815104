"""Review21n N3: any member fails another member's certified IPv6 overlay address with one duplicate-address-detection
probe: the certified-address guard does not judge a neighbour solicitation from `::`.

Attack (trust mode, V's overlay address fd00::3 certified by the CA for V's interface MAC, 0062): the bridge puts
the overlay address on its internal port with `ip address replace` (`evio/bridge/ovs_bridge.py`), so the kernel runs
duplicate address detection on it (accept_dad 1, no `nodad`) each time V's daemon (re)starts: the address is
tentative for about a second and V floods its probe, an NS from :: for fd00::3 to ff02::1:ff00:3, to every member.
Member A, on seeing it (or blindly, every half second), floods its own probe: an NS from :: for fd00::3, no option,
from A's own MAC under A's own root. `neighbor_guard.spoofs_certified` passes every message whose sender address is
unspecified, the switch answers no probe (`neighbor_answers`: "never for probes"), so the flood reaches V's interface,
and Linux (RFC 4862 5.4.3, `ndisc_recv_ns`: a DAD probe for a tentative address, without our nonce) fails V's DAD:
`inet6 fd00::3/64 scope global dadfailed tentative`, checked on this host's kernel with a veth pair (probe sent
while the address was tentative). The address is never used until the bridge is set up again, and the next setup
meets the next probe.

Code path: flood from A -> `frb_receive._broadcast_in` -> `BoundedFloodSwitch.guard_allows` -> `certified_claim`
(an NS: `neighbor_answers.parse`, sender_ip ::) -> `spoofs_certified` (`msg.sender_ip.is_unspecified`: False) ->
delivered to V's leaf ports.

Impact: medium: a denial of a chosen member's (or every member's) certified IPv6 overlay address, by any member,
one frame per restart of the victim, for as long as the attacker likes; the guard exists to keep members from
speaking for each other's certified addresses (0062, 0068, 0075), and a probe for V's address speaks against it.

Suggested fix: a DAD probe (NS from ::) for a certified address from a tunnel port is delivered only if the flood's
root is the address's owner and its Ethernet source the certified MAC (the owner's own probe; a unicast one
neither: the owner's probe is multicast); else dropped as `CERTIFIED_ADDRESS_SPOOFED`. Table 0 already sends every
NS naming a certified address as its source to the controller; a probe's source is ::, so its flow would match the
target (`icmpv6_type=135, ipv6_src=::, ipv6_nd_target=<address>`) if unicast probes are to be judged too. Or add the
overlay address with `nodad` (the CA's certificate is the uniqueness check) and keep the guard as it is.

Fixed (decision 0076): both. The guard drops a probe for a certified address unless flooded rooted at its owner from
the certified MAC, a table-0 flow by target brings unicast ones to it, and the owner's switch, told its own
certified addresses, drops every probe for them and advertisement of them from a tunnel port (a neighbour's probe
reached V without crossing another switch); the bridge adds a certified IPv6 address with `nodad`. The ways around
it: `test_sdn_dad_guard.py`.
"""

from __future__ import annotations

from evio.testing.fake_flow_table import FakeNetwork
from evio.testing.frames import dad_probe
from tests.unit.sdn.test_review21k_nd_behind_extension_header import V6, _certify_v6
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring


def _setup() -> tuple[FakeNetwork, list[int], dict[int, str]]:
    net, ids, macs, _ = trusted_ring(6)
    _certify_v6(net, ids, macs)  # V = ids[2] is fd00::3
    net.advance(0.5)
    return net, ids, macs


def test_a_members_dad_probe_for_anothers_certified_address_does_not_reach_its_owner() -> None:
    net, ids, macs = _setup()
    a, v = ids[0], ids[2]
    heard = len(net.nodes[v].received[1])
    probe = dad_probe(macs[a], V6.format(3))
    net.inject(a, 1, probe)  # A's own interface floods it: A's MAC, A's root
    delivered = probe in net.nodes[v].received[1][heard:]
    print(f"A's DAD probe for V's certified fd00::3 delivered to V's interface: {delivered}")
    assert not delivered


def test_the_owners_own_dad_probe_still_goes_out() -> None:
    """What a fix must keep: V's own probe reaches the others (they stay silent; a duplicate would answer)."""
    net, ids, macs = _setup()
    u, v = ids[0], ids[2]
    heard = len(net.nodes[u].received[1])
    probe = dad_probe(macs[v], V6.format(3))
    net.inject(v, 1, probe)
    assert probe in net.nodes[u].received[1][heard:]
