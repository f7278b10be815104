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
    FRB_PAST_POLICY_PRIORITY,
    FRB_TO_CONTROLLER_PRIORITY,
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


def removed_flow_match(msg: Any) -> flow_actions.FlowMatch | None:
    """The evio unicast flow an OFPFlowRemoved reports; None for the base flows and anyone else's."""
    m = msg.match
    if msg.cookie & EVIO_COOKIE_MASK != EVIO_COOKIE or not all(k in m for k in ("in_port", "eth_src", "eth_dst")):
        return None
    return flow_actions.FlowMatch(m["in_port"], m["eth_src"], m["eth_dst"])

