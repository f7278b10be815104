"""review21d C1': "a disputed MAC stays with its first claimant" holds only while the claimant names it without
a gap, and a node's list of what it hosts has gaps for its busiest hosts. A VM's MAC learned on a leaf port
is seen by the switch logic only at packet-in; while it talks over a flow (idle 30 s, hard 300 s) nothing
refreshes its learning entry, so at max_age (300 s) the controller's tick forgets it (and deletes its flows),
and it is learned again at its next frame. The tick reports the list in between: the node announces a list
without the VM, then one with it (MIN_INTERVAL later). At every other node the announcer's first place for
the VM went with the first list, and a member that names the VM all along is its first claimant from then
on, for good: it owns the VM's MAC overlay-wide (one forged flood then takes its stream, review21c C1). Real
BoundedFloodSwitch for the home node (OVS modelled: a frame matching an installed flow reaches no controller),
real HostClaimsFlood fleet for the announcements."""

from __future__ import annotations

import time

from evio.node import host_claims as hcf
from evio.sdn.flow_actions import AddFlow, DeleteFlowsFromMac, DeleteFlowsToMac, FlowAction, FlowMatch
from evio.sdn.switch import BoundedFloodSwitch, PortKind, SwitchPort
from tests.unit.node.test_host_claims_flood import fleet

VM, PEER_HOST = "02:00:00:00:00:0b", "02:00:00:00:00:0c"  # a VM behind leaf port 1, talking to one behind port 2
TICK, SENDS_EVERY = 0.5, 3.5  # the controller's tick; a frame each way every 3.5 s (not a divisor of 300)


def frame(src: str, dst: str) -> bytes:
    return bytes.fromhex(dst.replace(":", "")) + bytes.fromhex(src.replace(":", "")) + b"\x08\x00" + bytes(46)


async def test_a_busy_vm_aged_out_at_home_stays_in_its_list_and_with_its_node() -> None:
    medium, nodes, clock = fleet(3)
    victim, honest, hostile = nodes
    base = time.time() - clock.now()
    for node in nodes:
        node._wall = lambda: base + clock.now()
    sw = BoundedFloodSwitch(100, "02:aa:00:00:00:01", flow_idle_timeout=30)  # the honest member's switch
    sw.port_added(SwitchPort(1, "vm-tap", PortKind.LEAF, None, "02:00:00:00:00:01"), now=0)
    sw.port_added(SwitchPort(2, "vm2-tap", PortKind.LEAF, None, "02:00:00:00:00:02"), now=0)
    installed: dict[FlowMatch, float] = {}  # OVS: match -> hard deadline

    def apply(actions: list[FlowAction], now: float) -> None:
        for a in actions:
            if isinstance(a, AddFlow):
                installed[a.match] = now + a.hard_timeout
            elif isinstance(a, DeleteFlowsFromMac | DeleteFlowsToMac):
                for m in [m for m in installed if a.mac in (m.eth_src, m.eth_dst)]:
                    del installed[m]

    gaps, t, hostile_named = 0, 0.0, False
    next_send = {2: 1.0, 1: 1.0}
    while t < 700:
        t += TICK
        await clock.advance(TICK)
        for m in [m for m, until in installed.items() if until <= t]:
            del installed[m]
        apply(sw.expire(t), t)
        for port, src, dst in ((2, PEER_HOST, VM), (1, VM, PEER_HOST)):  # both talk, a frame each way per 3.5 s
            if t >= next_send[port]:
                next_send[port] += SENDS_EVERY
                if FlowMatch(port, src, dst) not in installed:  # a frame matching a flow reaches no controller
                    apply(sw.packet_in(port, frame(src, dst), now=t), t)
        hosted = tuple(sw.hosted_macs())
        gaps += VM not in hosted and hostile_named
        honest.set_hosted(hosted)  # the tick's report (hosted_report)
        if not hostile_named and victim.told and VM in victim.told[-1]:
            hostile.set_hosted((VM,))  # names the VM all along: disputed, held by the honest member
            hostile_named = True
            assert victim.told[-1][VM] == honest.node_id
    owner = victim.told[-1].get(VM)
    print(f"ticks the VM was missing from its home node's list: {gaps}; owner at another node: "
          f"{'the hostile member' if owner == hostile.node_id else 'the honest one' if owner == honest.node_id else owner}"
          f"; counts {dict(victim.counts)}; min interval {hcf.MIN_INTERVAL}")
    assert owner == honest.node_id, "the member naming the honest member's busy VM owns it"
