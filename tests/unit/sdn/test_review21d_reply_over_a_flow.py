"""review21d N1'': the owner's answer to a flooded request counts only if the controller sees it, and an ARP
reply is a unicast frame like any other: when a flow (in_port, owner's MAC -> asker's MAC) is live, the owner's
reply to the asker matches it in OVS and never reaches the switch logic. The flow outlives the address's entry
here: unicast traffic from the owner to the asker keeps it (idle 5 s) and re-installs it at its hard timeout,
and none of that refreshes the neighbour entry, which ages out after max_age. A local host whose ARP entry for
the owner went (a host that only receives a stream from the owner: its unused entry is garbage-collected)
asks again: flooded; the owner's reply rides the flow, unseen; the attacker's reply, a new pair, comes in by
packet-in and is the lone answer in the window: confirmed, uncontested. Every local host asking for the owner's
address is then answered with the attacker's MAC, the request reaching the owner no more (N1 again), until
the owner happens to send an ARP frame the controller sees. Real BoundedFloodSwitch as in test_review21c_
neighbor_last_word.py."""

from __future__ import annotations

from evio.sdn.flow_actions import AddFlow, DeleteFlowsToMac, PacketOut
from evio.sdn.neighbor_answers import arp_reply
from tests.unit.sdn.test_review21_neighbor_poisoning import H1, H3, HA, IP1, IP3, answered_with, request, switch


def data_frame(src: str, dst: str) -> bytes:
    """A UDP/IPv4 frame of the owner's stream to the asker (the switch reads only its Ethernet header here)."""
    ip = bytes.fromhex("4500001c000000004011") + b"\x00\x00" + IP3.packed + IP1.packed
    return bytes.fromhex(dst.replace(":", "")) + bytes.fromhex(src.replace(":", "")) + b"\x08\x00" + ip + bytes(8)


def test_a_flooded_request_takes_the_flows_to_the_asker_so_the_owners_reply_is_seen_and_contests_the_attacker() -> None:
    sw = switch()
    assert answered_with(sw, 1.0) is None
    actions = sw.packet_in(10, arp_reply(H3, IP3, H1, IP1), now=1.01)  # the owner answers: confirmed for H3
    owner_to_asker = [a for a in actions if isinstance(a, AddFlow) and a.match.in_port == 10
                      and a.match.eth_src == H3 and a.match.eth_dst == H1]
    assert owner_to_asker  # its match is (in_port, eth_src, eth_dst): any ethertype, so ARP replies ride it
    assert answered_with(sw, 2.0) == H3
    # H3 streams to H1 from then on: OVS refreshes the flow without packet-in; at its hard timeout the next
    # frame comes to the controller and the flow is installed again. No ARP among these.
    hard = owner_to_asker[0].hard_timeout
    again = sw.packet_in(10, data_frame(H3, H1), now=1.01 + hard)
    assert any(isinstance(a, AddFlow) and a.match.in_port == 10 and a.match.eth_src == H3 for a in again)
    t = 1.01 + sw.neighbors.max_age + 10  # the entry for IP3 aged out; the flow (re-installed above) lives on
    sw.expire(t)
    # H1's entry for IP3 was garbage-collected: it asks, flooded, and the flows to H1 go with the flood, so
    # OVS sends the owner's reply (which would have ridden the flow (10, H3 -> H1)) to the controller.
    asked = sw.packet_in(1, request(H1, IP1, IP3), now=t)
    assert [a for a in asked if isinstance(a, PacketOut) and a.port in (10, 11)], "flooded"
    assert DeleteFlowsToMac(H1) in asked, "the flow that would carry the owner's reply past the controller stays"
    sw.packet_in(10, arp_reply(H3, IP3, H1, IP1), now=t + 0.01)
    sw.packet_in(11, arp_reply(HA, IP3, H1, IP1), now=t + 0.02)
    got = answered_with(sw, t + 1)
    print(f"after the lone reply the controller saw, a local request for the owner's address is answered {got}")
    assert got != HA, "a local host's request for the owner's address is answered with the attacker's MAC"
