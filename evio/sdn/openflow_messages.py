"""Neutral flow actions as OpenFlow 1.3 messages, and OpenFlow replies back as neutral values.

The switch logic (evio.sdn.flow_actions) says what to do to a bridge's flows;
these functions say it in OpenFlow, through the datapath's own `ofproto` and
`ofproto_parser` (so nothing here imports os-ken), and read the flow stats
and flow-removed messages the switch sends back. The cookies tell evio's
flows from the base flows and from anyone else's: deletes and stats never
touch what is not ours. The os-ken adapter (evio.sdn.ofapp) sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evio.sdn import flow_actions
from evio.sdn.flow_actions import (
    ARP_ANSWER_PRIORITY,
    ARP_ASK_PRIORITY,
    DESTINATION_HAIRPIN_PRIORITY,
    DESTINATION_PRIORITY,
    FRB_PAST_POLICY_PRIORITY,
    FRB_TO_CONTROLLER_PRIORITY,
    OWN_SOURCE_PRIORITY,
    POLICY_TABLE,
    SWITCHING_TABLE,
    TABLE_MISS_PRIORITY,
)
from evio.sdn.frb import ETH_TYPE_FRB
from evio.sdn.l2policy import oxm_fields

# Marks the unicast flows evio installs, so deletes and stats never touch the base flows.
EVIO_COOKIE = 0xE710_0001
EVIO_COOKIE_MASK = 0xFFFF_FFFF  # the bits that say "evio's"; the ones above may say more of a flow
# Above them: the flow's bytes count for on-demand links (AddFlow.counted). The byte counter poll asks
# for these alone, so its cost is that of the flows between local hosts and known remote roots, not
# of every flow a member can make the switch install (issue 21, H3).
COUNTED_COOKIE = EVIO_COOKIE | 1 << 32
ALL_BITS = 0xFFFF_FFFF_FFFF_FFFF
# Above them: a flow ahead by destination (decision 0072), which also copies its frames to the controller. Its
# low bits are evio's, so the deletes of a port's flows and of the flows to a MAC take it too; a packet-in with
# this cookie is such a copy: the frame has already gone on (`copied_ahead`).
DESTINATION_COOKIE = EVIO_COOKIE | 1 << 33
DESTINATION_HAIRPIN_COOKIE = EVIO_COOKIE | 1 << 35  # its frames entering by the port it leads to: a plain packet-in
# Above them: a certified address's ARP answer on the bridge (decision 0072), and the requests it leaves to the
# controller; the deletes of a leaf port's flows take them too.
ARP_ANSWER_COOKIE = EVIO_COOKIE | 1 << 34
_ARP = 0x0806
_BROADCAST = "ff:ff:ff:ff:ff:ff"
# The L2 policy's flows in table 0 (evio.sdn.l2policy): the rule's number in the bits above.
POLICY_COOKIE = 0xE710_0002
GUARD_COOKIE = 0xE710_0003  # the RA and ARP guards' flows in table 0 (evio.sdn.neighbor_guard)


def to_ofp_messages(datapath: Any, action: flow_actions.FlowAction) -> list[Any]:
    """The OpenFlow 1.3 messages that carry out `action` on `datapath`."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    if isinstance(action, flow_actions.PacketOut):
        return [parser.OFPPacketOut(datapath, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                                    actions=[parser.OFPActionOutput(action.port)], data=action.data)]
    if isinstance(action, flow_actions.AddFlow):
        m = action.match
        match = parser.OFPMatch(in_port=m.in_port, eth_src=m.eth_src, eth_dst=m.eth_dst)
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(action.out_port)])]
        cookie = COUNTED_COOKIE if action.counted else EVIO_COOKIE
        return [parser.OFPFlowMod(datapath, cookie=cookie, command=ofp.OFPFC_ADD, table_id=SWITCHING_TABLE,
                                  idle_timeout=action.idle_timeout, hard_timeout=action.hard_timeout,
                                  priority=action.priority,
                                  flags=ofp.OFPFF_SEND_FLOW_REM, match=match, instructions=inst)]
    if isinstance(action, flow_actions.AddDestinationFlow | flow_actions.DeleteDestinationFlow):
        return _destination(datapath, action)
    if isinstance(action, flow_actions.AddArpAnswer | flow_actions.DeleteArpAnswer):
        return _arp_answer(datapath, action)
    if isinstance(action, flow_actions.DeleteFlowsOfPort):
        # Two deletes: flows entering by the port, and flows leaving through it.
        common = dict(cookie=EVIO_COOKIE, cookie_mask=EVIO_COOKIE_MASK, table_id=ofp.OFPTT_ALL, command=ofp.OFPFC_DELETE,
                      out_group=ofp.OFPG_ANY)
        return [
            parser.OFPFlowMod(datapath, out_port=ofp.OFPP_ANY, match=parser.OFPMatch(in_port=action.port), **common),
            parser.OFPFlowMod(datapath, out_port=action.port, match=parser.OFPMatch(), **common),
        ]
    if isinstance(action, flow_actions.DeleteFlowsToMac | flow_actions.DeleteFlowsFromMac | flow_actions.DeleteFlow):
        if isinstance(action, flow_actions.DeleteFlowsToMac):
            match = parser.OFPMatch(eth_dst=action.mac)
        elif isinstance(action, flow_actions.DeleteFlowsFromMac):
            match = parser.OFPMatch(eth_src=action.mac)
        else:  # the one flow: a delete by its whole match takes nothing wider (evio's flows all match these)
            m = action.match
            match = parser.OFPMatch(in_port=m.in_port, eth_src=m.eth_src, eth_dst=m.eth_dst)
        return [parser.OFPFlowMod(datapath, cookie=EVIO_COOKIE, cookie_mask=EVIO_COOKIE_MASK, table_id=ofp.OFPTT_ALL,
                                  command=ofp.OFPFC_DELETE, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                                  match=match)]
    if isinstance(action, flow_actions.AddPolicyFlow):
        inst = [parser.OFPInstructionGotoTable(SWITCHING_TABLE)] if action.allow else []  # none: dropped
        return [parser.OFPFlowMod(datapath, cookie=POLICY_COOKIE | action.rule << 32, command=ofp.OFPFC_ADD,
                                  table_id=POLICY_TABLE, priority=action.priority,
                                  match=parser.OFPMatch(**oxm_fields(action.match)), instructions=inst)]
    if isinstance(action, flow_actions.DeletePolicyFlow):
        return [parser.OFPFlowMod(datapath, cookie=POLICY_COOKIE, cookie_mask=EVIO_COOKIE_MASK, table_id=POLICY_TABLE,
                                  command=ofp.OFPFC_DELETE_STRICT, priority=action.priority, out_port=ofp.OFPP_ANY,
                                  out_group=ofp.OFPG_ANY, match=parser.OFPMatch(**oxm_fields(action.match)))]
    if isinstance(action, flow_actions.AddGuardFlow | flow_actions.DeleteGuardFlow):
        return _guard_messages(datapath, action)
    raise TypeError(f"not a flow action: {action!r}")


def _destination(datapath: Any, action: flow_actions.AddDestinationFlow | flow_actions.DeleteDestinationFlow) -> list[Any]:
    """A flow ahead by destination (frame on, copy to the controller) and its hairpin's (to the controller)."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    dst, out = action.match.eth_dst, action.out_port
    flows = [(DESTINATION_PRIORITY, DESTINATION_COOKIE, parser.OFPMatch(eth_dst=dst)),
             (DESTINATION_HAIRPIN_PRIORITY, DESTINATION_HAIRPIN_COOKIE, parser.OFPMatch(in_port=out, eth_dst=dst))]
    if action.own:
        flows.append((OWN_SOURCE_PRIORITY, DESTINATION_HAIRPIN_COOKIE, parser.OFPMatch(eth_src=dst)))
    if isinstance(action, flow_actions.DeleteDestinationFlow):
        return [parser.OFPFlowMod(datapath, cookie=cookie, cookie_mask=ALL_BITS, table_id=SWITCHING_TABLE,
                                  command=ofp.OFPFC_DELETE_STRICT, priority=priority, out_port=ofp.OFPP_ANY,
                                  out_group=ofp.OFPG_ANY, match=match)
                for priority, cookie, match in flows]
    to_controller = parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)
    actions = {DESTINATION_PRIORITY: [parser.OFPActionOutput(out), to_controller],
               DESTINATION_HAIRPIN_PRIORITY: [to_controller], OWN_SOURCE_PRIORITY: [to_controller]}
    return [parser.OFPFlowMod(datapath, cookie=cookie, command=ofp.OFPFC_ADD, table_id=SWITCHING_TABLE,
                              priority=priority, match=match,
                              flags=ofp.OFPFF_SEND_FLOW_REM if priority == DESTINATION_PRIORITY else 0,
                              instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions[priority])])
            for priority, cookie, match in flows]


def _arp_answer(datapath: Any, action: flow_actions.AddArpAnswer | flow_actions.DeleteArpAnswer) -> list[Any]:
    """The answer flow (RFC 826's reply made of the request in place, as OVS's ARP responders do: Nicira moves of
    the asker's addresses into the target fields, ours set, back out of the port it came by) and the two flows
    above it that leave to the controller what must not be answered for: a probe (sender 0.0.0.0, RFC 5227) and an
    announcement of the address itself."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    m = action.match
    asks = dict(in_port=m.in_port, eth_dst=_BROADCAST, eth_type=_ARP, arp_op=1, arp_tpa=m.address)
    flows = [(ARP_ANSWER_PRIORITY, asks), (ARP_ASK_PRIORITY, {**asks, "arp_spa": "0.0.0.0"}),
             (ARP_ASK_PRIORITY, {**asks, "arp_spa": m.address})]
    if isinstance(action, flow_actions.DeleteArpAnswer):
        return [parser.OFPFlowMod(datapath, cookie=ARP_ANSWER_COOKIE, cookie_mask=ALL_BITS, table_id=SWITCHING_TABLE,
                                  command=ofp.OFPFC_DELETE_STRICT, priority=priority, out_port=ofp.OFPP_ANY,
                                  out_group=ofp.OFPG_ANY, match=parser.OFPMatch(**fields))
                for priority, fields in flows]
    answer = [
        parser.NXActionRegMove(src_field="eth_src", dst_field="eth_dst", n_bits=48),
        parser.OFPActionSetField(eth_src=action.mac),
        parser.OFPActionSetField(arp_op=2),
        parser.NXActionRegMove(src_field="arp_sha", dst_field="arp_tha", n_bits=48),
        parser.NXActionRegMove(src_field="arp_spa", dst_field="arp_tpa", n_bits=32),
        parser.OFPActionSetField(arp_sha=action.mac),
        parser.OFPActionSetField(arp_spa=m.address),
        parser.OFPActionOutput(ofp.OFPP_IN_PORT),
    ]
    to_controller = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
    return [parser.OFPFlowMod(datapath, cookie=ARP_ANSWER_COOKIE, command=ofp.OFPFC_ADD, table_id=SWITCHING_TABLE,
                              priority=priority, match=parser.OFPMatch(**fields),
                              flags=ofp.OFPFF_SEND_FLOW_REM if priority == ARP_ANSWER_PRIORITY else 0,
                              instructions=[parser.OFPInstructionActions(
                                  ofp.OFPIT_APPLY_ACTIONS, answer if priority == ARP_ANSWER_PRIORITY else to_controller)])
            for priority, fields in flows]


def _guard_messages(datapath: Any, action: flow_actions.AddGuardFlow | flow_actions.DeleteGuardFlow) -> list[Any]:
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    flow = action.flow if isinstance(action, flow_actions.DeleteGuardFlow) else action
    match = parser.OFPMatch(**dict(flow.fields))
    if isinstance(action, flow_actions.DeleteGuardFlow):
        return [parser.OFPFlowMod(datapath, cookie=GUARD_COOKIE, cookie_mask=EVIO_COOKIE_MASK, table_id=POLICY_TABLE,
                                  command=ofp.OFPFC_DELETE_STRICT, priority=flow.priority, out_port=ofp.OFPP_ANY,
                                  out_group=ofp.OFPG_ANY, match=match)]
    if flow.to_switching:
        inst = [parser.OFPInstructionGotoTable(SWITCHING_TABLE)]
    else:
        inst = [parser.OFPInstructionActions(
            ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])]
    return [parser.OFPFlowMod(datapath, cookie=GUARD_COOKIE, command=ofp.OFPFC_ADD, table_id=POLICY_TABLE,
                              priority=flow.priority, match=match, instructions=inst)]


def base_flows(datapath: Any) -> list[Any]:
    """At connect: clear old flows. Table 0 (the policy's) lets what no rule drops, and every FRB, on to
    table 1 (the switching); there unmatched frames and every FRB go to the controller, whole."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    to_controller = [parser.OFPInstructionActions(
        ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])]
    to_switching = [parser.OFPInstructionGotoTable(SWITCHING_TABLE)]
    return [
        parser.OFPFlowMod(datapath, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY,
                          out_group=ofp.OFPG_ANY, match=parser.OFPMatch()),
        parser.OFPFlowMod(datapath, table_id=POLICY_TABLE, priority=TABLE_MISS_PRIORITY, match=parser.OFPMatch(),
                          instructions=to_switching),
        parser.OFPFlowMod(datapath, table_id=POLICY_TABLE, priority=FRB_PAST_POLICY_PRIORITY,
                          match=parser.OFPMatch(eth_type=ETH_TYPE_FRB), instructions=to_switching),
        parser.OFPFlowMod(datapath, table_id=SWITCHING_TABLE, priority=TABLE_MISS_PRIORITY, match=parser.OFPMatch(),
                          instructions=to_controller),
        parser.OFPFlowMod(datapath, table_id=SWITCHING_TABLE, priority=FRB_TO_CONTROLLER_PRIORITY,
                          match=parser.OFPMatch(eth_type=ETH_TYPE_FRB), instructions=to_controller),
    ]


def flow_stats_request(datapath: Any) -> Any:
    """Byte counters of evio's unicast flows that on-demand links count (by cookie), all tables."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPFlowStatsRequest(datapath, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                      COUNTED_COOKIE, ALL_BITS, parser.OFPMatch())


def policy_stats_request(datapath: Any) -> Any:
    """Packet counters of the policy's flows in table 0 (by cookie)."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPFlowStatsRequest(datapath, 0, POLICY_TABLE, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                      POLICY_COOKIE, EVIO_COOKIE_MASK, parser.OFPMatch())


def policy_packet_counts(stats: Sequence[Any]) -> dict[int, int]:
    """OFPFlowStats entries of policy flows as {rule number: packets of its flows}."""
    counts: dict[int, int] = {}
    for stat in stats:
        if stat.cookie & EVIO_COOKIE_MASK == POLICY_COOKIE:
            rule = stat.cookie >> 32
            counts[rule] = counts.get(rule, 0) + stat.packet_count
    return counts


def flow_byte_counts(stats: Sequence[Any]) -> dict[flow_actions.FlowMatch, int]:
    """OFPFlowStats entries of evio's unicast flows as {FlowMatch: byte_count}."""
    counts: dict[flow_actions.FlowMatch, int] = {}
    for stat in stats:
        m = stat.match
        if stat.cookie & EVIO_COOKIE_MASK != EVIO_COOKIE or not all(k in m for k in ("in_port", "eth_src", "eth_dst")):
            continue
        counts[flow_actions.FlowMatch(m["in_port"], m["eth_src"], m["eth_dst"])] = stat.byte_count
    return counts


def copied_ahead(msg: Any) -> bool:
    """Whether an OFPPacketIn is the copy a flow ahead by destination sent with the frame it passed on (its
    hairpin's flow passed nothing on: a cookie of its own)."""
    return bool(getattr(msg, "cookie", 0) == DESTINATION_COOKIE)


def removed_destination_match(msg: Any) -> flow_actions.DestinationMatch | flow_actions.ArpAnswerMatch | None:
    """The flow ahead by destination, or the ARP answer, an OFPFlowRemoved reports (None: another flow)."""
    m = msg.match
    if msg.cookie == ARP_ANSWER_COOKIE and "arp_spa" not in m and all(k in m for k in ("in_port", "arp_tpa")):
        return flow_actions.ArpAnswerMatch(m["in_port"], m["arp_tpa"])
    if msg.cookie != DESTINATION_COOKIE or "eth_dst" not in m or "in_port" in m:
        return None
    return flow_actions.DestinationMatch(m["eth_dst"])


def removed_flow_match(msg: Any) -> flow_actions.FlowMatch | None:
    """The evio unicast flow an OFPFlowRemoved reports; None for the base flows and anyone else's."""
    m = msg.match
    if msg.cookie & EVIO_COOKIE_MASK != EVIO_COOKIE or not all(k in m for k in ("in_port", "eth_src", "eth_dst")):
        return None
    return flow_actions.FlowMatch(m["in_port"], m["eth_src"], m["eth_dst"])

