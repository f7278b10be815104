"""Flows ahead by destination: a frame for a member's certified MAC (or for this node's own interface) goes on
without waiting for the controller, at every switch on its path (decision 0072; 0066 did the two ends).

0066 installs, at each end of a path between members' interfaces, the pair flows a first frame would install.
The switches between still took one packet-in per new flow, and so did the receiving end when the frame came by
another tunnel than the sender's floods (Symphony's routes from A to B and from B to A differ). Here every switch
also installs, for each certified member MAC M that 0066's rules place on a peer port P (certified, owned by
another member, learned live on P under its owner's root, within P's share), and for its own interface's MAC on
its leaf port (not while an ask of that interface floods: 0056), two flows:

    eth_dst=M             -> output:P, output:CONTROLLER     priority DESTINATION_PRIORITY (below pair flows)
    in_port=P, eth_dst=M  -> output:CONTROLLER               priority DESTINATION_HAIRPIN_PRIORITY

- **The frame goes on at once**, the controller gets a copy. It handles the copy as the packet-in it would have
  had (learning, the pair flow and its way back, the transit fast path's entry, the on-demand counters, the port's
  flow cap), but does not send the frame again (`forwarded`). Once the pair flow is in, it wins by priority and
  the copies stop. So nothing that pair flows carry is bypassed for longer than the controller's answer: only the
  wait for it is gone.
- **The hairpin** (a frame for M entering by P itself) goes to the controller as before, which floods it rooted
  here; a cookie of its own tells its packet-ins from the copies.
- **Bounded and still**: two flows per member placed here, at most `MAX_DESTINATION_FLOWS` members (the rest, by
  sorted MAC, are left to packet-ins and counted in `destination_flows_capped`). A new tunnel changes none of them;
  only a member's place does. (One per member and tunnel, the first form, put 434 flows on each switch of the
  32-node lab and reinstalled many at every tunnel that came up: its ring took 111 s to close instead of 23.)
- **Kept in step**: recomputed when what they are made of changes; the deletes of a port's flows and of the
  flows to a MAC take these too (their cookies have evio's low bits), and the switch's book mirrors that. The next
  tick installs them where learning then places the MAC.
- **No timeout**: they forward only where the controller, re-reading its tables every tick, still wants them.

**ARP for a member's certified IPv4 address** is answered by the bridge itself: a flow per leaf port and address
turns a broadcast request into the reply with the certified MAC and sends it back by the port it came by, while
0066's rules place that MAC on a tunnel (what 0062's controller answer asks: the CA's binding, the MAC live on
another port than the asker's). Probes (sender 0.0.0.0) and announcements of the address itself still go to the
controller, by two flows above. IPv6 neighbour solicitations stay with the controller: an answer repeats the
router flag, known only from the owner's own advertisement, and ICMPv6 needs its checksum made again.

Pure: reads the switch's tables, returns the wanted flows.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from evio.sdn import proactive_flows
from evio.sdn.flow_actions import ArpAnswerMatch, DestinationMatch

if TYPE_CHECKING:
    from evio.sdn.switch import BoundedFloodSwitch

# ARP answers per switch: (leaf ports) x (members' certified IPv4 addresses). Past it the controller answers (0062).
MAX_ARP_ANSWERS = 4096
# Flows ahead by destination per switch (one per member, each with its hairpin's). Past it the rest ask, as before.
MAX_DESTINATION_FLOWS = 4096


def wanted_destination_flows(
    switch: BoundedFloodSwitch, now: float, paused: frozenset[str] = frozenset()
) -> tuple[dict[DestinationMatch, int], int]:
    """(match -> out port of every flow wanted ahead by destination now, how many were left out by the cap): each
    member's certified MAC where 0066 places it, and this node's own interfaces (not while an ask of theirs floods,
    0056: its answer must reach the controller)."""
    wanted = dict(proactive_flows.member_places(switch, now))
    if not wanted:
        return {}, 0  # no member placed (or no trust): nothing comes this way that the controller need not see
    for leaf, own in proactive_flows.local_interfaces(switch, now):
        if own not in paused:
            wanted[own] = leaf
    flows: dict[DestinationMatch, int] = {}
    capped = 0
    for mac, out in sorted(wanted.items()):
        if len(flows) >= MAX_DESTINATION_FLOWS:
            capped += 1
            continue
        flows[DestinationMatch(mac)] = out
    return flows, capped


def wanted_arp_answers(switch: BoundedFloodSwitch, now: float) -> tuple[dict[ArpAnswerMatch, str], int]:
    """(match -> MAC of every ARP answer wanted on the bridge now, how many were left out by the cap)."""
    places = proactive_flows.member_places(switch, now)
    addresses = sorted((str(ip), mac.lower()) for ip, mac in switch.neighbors.certified.items()
                       if isinstance(ip, ipaddress.IPv4Address) and mac.lower() in places)  # fmt: skip
    answers: dict[ArpAnswerMatch, str] = {}
    capped = 0
    for leaf in switch.leaf_ports():
        for address, mac in addresses:
            if len(answers) >= MAX_ARP_ANSWERS:
                capped += 1
                continue
            answers[ArpAnswerMatch(leaf, address)] = mac
    return answers, capped
