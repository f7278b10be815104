"""The transit fast path's switch side alone (evio.sdn.transit): the write order, a mirror with or without a table."""

from __future__ import annotations

from evio.sdn.flow_actions import (
    AddFlow,
    DeleteFlow,
    DeleteFlowsFromMac,
    DeleteFlowsOfPort,
    DeleteFlowsToMac,
    FlowAction,
    FlowMatch,
    PacketOut,
)
from evio.sdn.switch import PortKind, SwitchPort
from evio.sdn.transit import TransitMirror, write_batches
from evio.tunnel.datapath.transit_table import TransitTable

M1 = FlowMatch(2, "02:00:00:00:00:01", "02:00:00:00:00:02")
M2 = FlowMatch(3, "02:00:00:00:00:02", "02:00:00:00:00:01")
ADD1, ADD2 = AddFlow(M1, 3, 30), AddFlow(M2, 2, 30)
PORTS = {2: SwitchPort(2, "evta", PortKind.PEER, 11), 3: SwitchPort(3, "evtb", PortKind.PEER, 12)}


def test_a_port_or_mac_delete_after_an_add_waits_for_the_adds_write() -> None:
    port_delete, mac_delete = DeleteFlowsOfPort(3), DeleteFlowsToMac("02:00:00:00:00:02")
    actions: list[FlowAction] = [ADD1, PacketOut(2, b"x"), port_delete, ADD2, mac_delete]
    assert list(write_batches(actions)) == [[ADD1, PacketOut(2, b"x")], [port_delete, ADD2], [mac_delete]]


def test_deletes_before_any_add_and_other_deletes_go_in_one_write() -> None:
    one_flow, from_mac = DeleteFlow(M1), DeleteFlowsFromMac("02:00:00:00:00:01")
    actions: list[FlowAction] = [DeleteFlowsOfPort(3), ADD1, one_flow, from_mac, ADD2]
    assert list(write_batches(actions)) == [actions]
    assert list(write_batches([])) == []


def test_a_mirror_without_a_table_keeps_nothing_and_refreshes_nothing() -> None:
    mirror = TransitMirror(None)
    mirror.after(ADD1, PORTS, 0.0)
    assert len(mirror) == 0 and mirror.refresh(100.0) == []
    mirror.before(DeleteFlowsToMac("02:00:00:00:00:02"))
    mirror.clear()


class Egress:
    def accept_plain(self, frame: memoryview) -> bool:
        return True

    def flush_plain(self) -> None:
        pass


def test_a_mirror_with_a_table_mirrors_a_tunnel_to_tunnel_flow() -> None:
    table = TransitTable()
    for tap in ("evta", "evtb"):
        table.attach(tap, Egress())
    mirror = TransitMirror(table)
    mirror.after(ADD1, PORTS, 0.0)
    assert len(mirror) == 1 and table.counters().entries == 1
    mirror.before(DeleteFlowsOfPort(3))
    assert len(mirror) == 0 and table.counters().entries == 0
