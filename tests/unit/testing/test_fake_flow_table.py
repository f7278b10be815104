"""The fake switch table itself: it reads the daemon's encoded OpenFlow as a switch would."""

from __future__ import annotations

import pytest

from evio.sdn.flow_actions import AddFlow, DeleteFlowsOfPort, DeleteFlowsToMac, FlowMatch, PacketOut
from evio.sdn.frb import ETH_TYPE_FRB
from evio.sdn.openflow_messages import EVIO_COOKIE, base_flows, removed_flow_match, to_ofp_messages
from evio.testing.fake_flow_table import CONTROLLER, CodecDatapath, FakeFlowTable, FakeFlowTableError
from evio.testing.frames import eth

A, B, C = "02:00:00:00:00:0a", "02:00:00:00:00:0b", "02:00:00:00:00:0c"


def table_with_base_flows() -> FakeFlowTable:
    table = FakeFlowTable()
    for msg in base_flows(table.codec):
        table.receive(table.codec.encode(msg), 0.0)
    return table


def send(table: FakeFlowTable, action: object, now: float = 0.0) -> list[tuple[int, bytes]]:
    out = []
    for msg in to_ofp_messages(table.codec, action):  # type: ignore[arg-type]
        out += table.receive(table.codec.encode(msg), now)
    return out


def test_unknown_frames_and_every_frb_go_to_the_controller_learned_ones_by_their_flow() -> None:
    table = table_with_base_flows()
    assert table.lookup(1, eth(B, A), 0.0) == [CONTROLLER]
    send(table, AddFlow(FlowMatch(1, A, B), 7, 30))
    assert table.lookup(1, eth(B, A), 1.0) == [7]
    assert table.lookup(2, eth(B, A), 1.0) == [CONTROLLER]  # another in_port: not this flow
    assert table.lookup(1, eth(B, A, ETH_TYPE_FRB), 1.0) == [CONTROLLER]  # the FRB rule outranks it
    (flow,) = table.flows.values()
    assert (flow.packets, flow.bytes, flow.cookie) == (1, 60, EVIO_COOKIE)


def test_deletes_take_evio_flows_by_port_and_by_mac_and_never_the_base_flows() -> None:
    table = table_with_base_flows()
    send(table, AddFlow(FlowMatch(1, A, B), 7, 30))
    send(table, AddFlow(FlowMatch(7, B, A), 1, 30))
    send(table, AddFlow(FlowMatch(2, C, A), 3, 30))
    send(table, DeleteFlowsOfPort(7))  # in by 7 and out through 7
    assert set(table.flows) == {FlowMatch(2, C, A)}
    send(table, DeleteFlowsToMac(A))
    assert table.flows == {}
    assert len(table.entries) == 4  # each table's table-miss and FRB rules stay
    removed = [removed_flow_match(table.codec.decode(n)) for n in table.take_notices()]
    assert sorted(removed, key=str) == sorted([FlowMatch(1, A, B), FlowMatch(7, B, A), FlowMatch(2, C, A)], key=str)


def test_idle_flows_time_out_and_the_switch_says_so() -> None:
    table = table_with_base_flows()
    send(table, AddFlow(FlowMatch(1, A, B), 7, 30))
    table.lookup(1, eth(B, A), 20.0)
    assert table.expire(49.0) == []  # used at 20: idle for 29 s only
    (gone,) = table.expire(50.0)
    assert gone.match == FlowMatch(1, A, B)
    (notice,) = table.take_notices()
    assert removed_flow_match(table.codec.decode(notice)) == FlowMatch(1, A, B)


def test_packet_out_leaves_by_its_port_with_its_bytes() -> None:
    table = FakeFlowTable()
    data = eth(B, A)
    assert send(table, PacketOut(4, data)) == [(4, data)]


def test_what_the_switch_is_not_modelled_for_fails_loudly() -> None:
    codec = CodecDatapath()
    table = FakeFlowTable(codec)
    parser = codec.ofproto_parser
    modify = parser.OFPFlowMod(codec, command=codec.ofproto.OFPFC_MODIFY, match=parser.OFPMatch())
    with pytest.raises(FakeFlowTableError):
        table.receive(codec.encode(modify), 0.0)
    third_table = parser.OFPFlowMod(codec, table_id=2, match=parser.OFPMatch())
    with pytest.raises(FakeFlowTableError):
        table.receive(codec.encode(third_table), 0.0)
    flood = parser.OFPFlowMod(codec, match=parser.OFPMatch(), instructions=[parser.OFPInstructionActions(
        codec.ofproto.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(codec.ofproto.OFPP_FLOOD)])])
    with pytest.raises(FakeFlowTableError):
        table.receive(codec.encode(flood), 0.0)
