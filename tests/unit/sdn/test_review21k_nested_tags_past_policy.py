"""Review21k K2: nested VLAN-0 tags carry a member's frames past an L2 policy's drop rules.

Attack (a hostile member, attacker a): an overlay's policy drops, say, SSH from members
(`{"action": "drop", "from": "members", "ip_proto": 6, "dst_port": 22}`), enforced by table-0 flows for unicast
and by `PolicyTable.allows` (`l2policy.frame_fields`) for the inner frames of FRBs. `frame_fields` reads through
at most two VLAN tags, and OVS through only one by default (`other_config:vlan-limit` is 1 unless set; evio does
not set it): past that, the frame "matches Ethernet type 0x8100" and no IP, TCP or UDP field. Member A sends node
u's interface its TCP SYN to port 22 with three 802.1Q tags of VLAN id 0 (real OVS: two suffice). No drop rule
naming an IP field matches; the default allows; u's kernel strips every VLAN-0 tag in turn (with no VLAN device,
`__netif_receive_skb_core` clears a priority tag and, when another tag follows, goes back to `check_vlan_id`) and
takes the SYN as untagged: A reaches the service the policy denies members. Broadcast too (an FRB's inner frame).

Measured (fake network, real switch and policy logic, 2 nodes): the thrice-tagged SYN to port 22 is delivered to
u's interface (the untagged one is dropped by the rule, counted 1). Checked on this machine's kernel: a veth in a
namespace took a router advertisement behind three VLAN-0 tags as untagged (a default route via its sender).

Impact: medium. Any deny-list policy (drop rules by eth_type, ip_proto or ports over a default allow) is void
against a member that adds tags; allow-list policies ("allow IPv4, ARP, IPv6; drop the rest") are not affected
(the tagged frame is 0x8100 and the last rule drops it).

Suggested fix: drop frames from tunnel ports that carry a VLAN-0 tag, or more tags than the policy reads
(evio's overlay has no use for a priority tag), in a table-0 flow above the rules (`vlan_vid=0x1000/0x1fff`, and
a frame whose `eth_type` is still 0x8100/0x88a8) and in `PolicyTable.allows`; and set OVS's `vlan-limit` to 2 so
OVS reads what `frame_fields` reads (or make `frame_fields` read one tag, as OVS does by default).
"""

from __future__ import annotations

from evio.config.model import PolicyRule
from tests.unit.sdn.test_sdn_l2policy import drop_count, eth, ipv4, tcp, two_nodes, with_policy

NO_SSH_FROM_MEMBERS = (PolicyRule("drop", name="no-ssh", in_port="members", ip_proto=6, dst_port=22),)


def priority_tagged(frame: bytes, tags: int) -> bytes:
    return frame[:12] + b"\x81\x00\x00\x00" * tags + frame[12:]


def test_a_members_tagged_frame_meets_the_policy_as_the_kernel_reads_it() -> None:
    net, mac1, mac2 = two_nodes()
    with_policy(net, 0x200, NO_SSH_FROM_MEMBERS)
    syn = eth(mac2, mac1, 0x0800, ipv4(6, tcp(40000, 22)))
    net.inject(0x100, 1, syn)
    assert net.nodes[0x200].received[1] == [] and drop_count(net, 0x200, 0) == 1  # the rule works untagged
    tagged = priority_tagged(syn, 3)
    net.inject(0x100, 1, tagged)
    net.inject(0x100, 1, tagged)  # the second by the flow the first installed
    delivered = net.nodes[0x200].received[1].count(tagged)
    print(f"thrice VLAN-0-tagged SYN to port 22 delivered to u's interface: {delivered} of 2, "
          f"the rule's drops: {drop_count(net, 0x200, 0)}")
    assert delivered == 0
