"""The controller keeps the transit fast path's table in step with its tunnel-to-tunnel flows.

Through the os-ken adapter with a fake switch connection, so the order of
table changes and FlowMods is the one the daemon gets: an entry appears once
its flow is sent and is gone before any delete that matches the flow leaves.
"""

from __future__ import annotations

from typing import Any

from evio.sdn import frb
from evio.sdn.learning_table import MOVE_HOLD
from evio.sdn.ofapp import BoundedFloodApp, EventTick
from evio.sdn.openflow_messages import EVIO_COOKIE
from evio.sdn.switch import FLOW_HARD_TIMEOUT
from evio.sdn.transit import TransitMirror
from evio.testing.fake_ofapp import FakeDatapath, FakeEvent, FakeMsg, connect, make_app, port_desc
from evio.testing.frames import H1, H2, H3, eth
from evio.testing.virtual_clock import ManualTime
from evio.tunnel.datapath.transit_table import TransitTable

IDLE = 30
PEER_IDLE = min(IDLE, int(MOVE_HOLD))  # a flow entering by a tunnel idles out within the move hold (switch.py)
A, B = "evta", "evtb"
PORT_A, PORT_B, PORT_LEAF = 2, 3, 4


def mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


class Egress:
    def accept_plain(self, frame: memoryview) -> bool:
        return True

    def flush_plain(self) -> None:
        pass


class RecordingDatapath(FakeDatapath):
    """Notes how many fast-path entries there were when each flow delete was sent."""

    def __init__(self, table: TransitTable) -> None:
        super().__init__(1)
        self.table = table
        self.entries_at_delete: list[int] = []

    def send_msg(self, msg: Any) -> None:
        if getattr(msg, "command", None) == self.ofproto.OFPFC_DELETE and getattr(msg, "cookie", 0) == EVIO_COOKIE:
            self.entries_at_delete.append(len(self.table))
        super().send_msg(msg)

    def flow_adds(self) -> list[Any]:
        return [m for m in self.sent if getattr(m, "command", None) == self.ofproto.OFPFC_ADD and m.cookie == EVIO_COOKIE]


def transit_switch(mac_max_age: float = 300.0) -> tuple[BoundedFloodApp, RecordingDatapath, TransitTable, ManualTime]:
    """A bridge with two tunnel ports and a leaf; H2 is behind B, H3 on the leaf, and H1 (behind A) has
    sent to H2 and H3, so the switch has (A, H1, H2) -> B and (A, H1, H3) -> leaf."""
    app, commands, _, clock = make_app()
    table = TransitTable(excluded_ethertypes=(frb.ETH_TYPE_FRB,), clock=clock)
    for tap in (A, B):
        table.attach(tap, Egress())
    commands.attach("red", 1, node_id=100, flow_idle_timeout=IDLE, mac_max_age=mac_max_age, transit=table)
    commands.peer_up("red", A, 200)
    commands.peer_up("red", B, 300)
    dp = RecordingDatapath(table)
    connect(app, dp, [port_desc(PORT_A, A, "02:00:00:00:00:a0"), port_desc(PORT_B, B, "02:00:00:00:00:b0"),
                      port_desc(PORT_LEAF, "veth1", "02:00:00:00:00:c0")])
    packet_in(app, dp, PORT_B, eth(H1, H2))  # teaches H2 behind B (H1 unknown: flooded)
    packet_in(app, dp, PORT_LEAF, eth(H1, H3))  # teaches H3 on the leaf
    packet_in(app, dp, PORT_A, eth(H2, H1))
    packet_in(app, dp, PORT_A, eth(H3, H1))
    return app, dp, table, clock


def packet_in(app: BoundedFloodApp, dp: FakeDatapath, port: int, data: bytes) -> None:
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": port}, data=data)))


def test_a_tunnel_to_tunnel_flow_gets_an_entry_and_a_flow_to_a_leaf_does_not() -> None:
    _, _, table, clock = transit_switch()
    # H1's frame to H2 installed the way back with its flow (H1 was just heard on A): an entry each way. The
    # flows between H1 and H3 on the leaf have none.
    assert sorted((i, d.hex(), s.hex(), r.egress) for i, d, s, r in table.entries()) == [
        (A, mac(H2).hex(), mac(H1).hex(), B), (B, mac(H1).hex(), mac(H2).hex(), A)]
    route = table.get(A, mac(H2), mac(H1))
    assert route is not None and route.deadline == TransitMirror.deadline(clock.now, PEER_IDLE) < clock.now + PEER_IDLE


def test_a_deleted_port_takes_its_entries_before_the_flow_deletes_leave() -> None:
    app, dp, table, _ = transit_switch()
    dp.entries_at_delete.clear()
    app.port_status(FakeEvent(FakeMsg(datapath=dp, reason=dp.ofproto.OFPPR_DELETE, desc=port_desc(PORT_B, B, "02:00:00:00:00:b0"))))
    assert dp.entries_at_delete and set(dp.entries_at_delete) == {0}
    assert len(table) == 0


def test_a_peer_port_down_takes_its_entries_too() -> None:
    app, dp, table, _ = transit_switch()
    app.commands.peer_down("red", A)
    app.tick(EventTick(periodic=False))
    assert len(table) == 0 and set(dp.entries_at_delete) == {0}


def test_a_mac_that_ages_out_takes_its_entries_before_the_flow_deletes_leave() -> None:
    app, dp, table, clock = transit_switch(mac_max_age=10.0)
    dp.entries_at_delete.clear()
    clock.now += 11
    app.tick(EventTick(periodic=True))
    assert dp.entries_at_delete and set(dp.entries_at_delete) == {0}


def test_a_moved_mac_takes_its_entries() -> None:
    app, dp, table, _ = transit_switch()
    # H2 announces itself from the leaf (a host that migrated): flows towards it are deleted, and the way
    # back from its old place (installed with H1's flow to it), so no member behind B keeps sending as H2.
    packet_in(app, dp, PORT_LEAF, eth("ff:ff:ff:ff:ff:ff", H2, 0x0806))
    assert len(table) == 0 and 0 in dp.entries_at_delete


def test_a_flow_the_switch_removed_takes_its_entry() -> None:
    app, dp, table, _ = transit_switch()
    match = dp.ofproto_parser.OFPMatch(in_port=PORT_A, eth_src=H1, eth_dst=H2)
    app.flow_removed(FakeEvent(FakeMsg(datapath=dp, cookie=EVIO_COOKIE, match=match)))
    assert table.get(A, mac(H2), mac(H1)) is None
    # The way back is a flow of its own: it idles out (and takes its entry) when its own traffic stops.
    assert [(i, r.egress) for i, _, _, r in table.entries()] == [(B, A)]
    match = dp.ofproto_parser.OFPMatch(in_port=PORT_B, eth_src=H2, eth_dst=H1)
    app.flow_removed(FakeEvent(FakeMsg(datapath=dp, cookie=EVIO_COOKIE, match=match)))
    assert len(table) == 0


def test_a_switch_that_goes_or_reconnects_and_a_detached_overlay_leave_no_entry() -> None:
    app, dp, table, _ = transit_switch()
    app.switch_gone(FakeEvent(datapath=dp))
    assert len(table) == 0
    app, dp, table, _ = transit_switch()
    app.switch_features(FakeEvent(FakeMsg(datapath=FakeDatapath(1))))  # a new connection: its flows are cleared
    assert len(table) == 0
    app, dp, table, _ = transit_switch()
    app.commands.detach("red")
    app.tick(EventTick(periodic=False))
    assert len(table) == 0


def test_a_used_entry_has_its_flow_reinstalled_and_its_deadline_moved_an_unused_one_runs_out() -> None:
    app, dp, table, clock = transit_switch()
    hook = table.attach(A, Egress())  # the ingress data path, as it sees frames
    frame = memoryview(eth(H2, H1))
    clock.now += PEER_IDLE / 3 - 1
    assert hook(frame)
    dp.sent.clear()
    app.tick(EventTick(periodic=True))
    assert dp.flow_adds() == []  # not due yet
    clock.now += 1
    app.tick(EventTick(periodic=True))
    (again,) = dp.flow_adds()
    assert (again.match["in_port"], again.match["eth_src"], again.match["eth_dst"]) == (PORT_A, H1, H2)
    assert again.idle_timeout == PEER_IDLE and again.instructions[0].actions[0].port == PORT_B
    route = table.get(A, mac(H2), mac(H1))
    assert route is not None and route.deadline == TransitMirror.deadline(clock.now, PEER_IDLE)
    # No more frames: no refresh; the entry runs out before the switch could expire the flow.
    dp.sent.clear()
    clock.now += PEER_IDLE
    app.tick(EventTick(periodic=True))
    assert dp.flow_adds() == []
    assert not hook(frame)
    assert table.counters().expired == 1


def test_a_delete_after_an_add_in_one_batch_leaves_no_entry() -> None:
    """The adapter writes a batch at once; an add mirrored after the write would outlive a delete after it."""
    from evio.sdn.flow_actions import AddFlow, DeleteFlowsToMac, FlowMatch

    app, dp, table, _ = transit_switch()
    app._send(app.overlays["red"], [AddFlow(FlowMatch(PORT_B, H2, H1), PORT_A, IDLE), DeleteFlowsToMac(H1)])
    assert table.get(B, mac(H1), mac(H2)) is None
    assert len(table) == 1  # (A, H1, H2) -> B stays: its destination is H2


def test_a_busy_entry_is_refreshed_with_its_hard_timeout_and_no_longer_once_that_is_due() -> None:
    """However busy, a flow is installed anew at its hard timeout (issue 21, H3): the fast path does not keep
    it alive past that, since every refresh (an add) would restart the switch's hard timer."""
    app, dp, table, clock = transit_switch()
    installed = clock.now
    hook = table.attach(A, Egress())
    frame = memoryview(eth(H2, H1))
    refreshes = []
    for _ in range(int(FLOW_HARD_TIMEOUT // (IDLE / 3)) + 3):
        clock.now += IDLE / 3
        hook(frame)
        dp.sent.clear()
        app.tick(EventTick(periodic=True))
        refreshes += [(clock.now, m.hard_timeout) for m in dp.flow_adds()]
    assert refreshes and all(hard == FLOW_HARD_TIMEOUT for _, hard in refreshes)
    assert max(at for at, _ in refreshes) < installed + FLOW_HARD_TIMEOUT < clock.now
