"""review21e E6: review21d C1' keeps a host learned on a leaf port in its node's list for `HOSTED_GRACE` (600 s)
after its entry aged out (a busy VM talks over flows and reaches no packet-in), "while the port stays and nothing
places the MAC elsewhere": a host that moved shows at its old node by a tunnel port, which ends the grace at once.
But any member can make it show there: one forged flood, with the VM's MAC as inner source, sent to the VM's own
node while the VM's entry is aged out there, is learned on the tunnel port (nothing holds a MAC the node hosts
itself: its own list is left out of the owners its switch is told), the grace ends, the node's next list omits the
VM, and the member that named the VM all along holds it overlay-wide. Real BoundedFloodSwitch for the home node,
real HostClaimsFlood fleet, as in test_review21d_host_forgotten_at_home.py."""

from __future__ import annotations

import time

from evio.node import host_claims as hcf
from evio.sdn.flow_actions import AddFlow, DeleteFlowsFromMac, DeleteFlowsToMac, FlowAction, FlowMatch
from evio.sdn.switch import BoundedFloodSwitch, PortKind, SwitchPort
from tests.unit.node.test_host_claims_flood import fleet
from tests.unit.sdn.test_sdn_port_bounds import forged

VM, PEER_HOST = "02:00:00:00:00:0b", "02:00:00:00:00:0c"  # a VM behind leaf port 1, talking to one behind port 2
TICK, SENDS_EVERY = 0.5, 3.5  # the controller's tick; a frame each way every 3.5 s (not a divisor of 300)


def frame(src: str, dst: str) -> bytes:
    return bytes.fromhex(dst.replace(":", "")) + bytes.fromhex(src.replace(":", "")) + b"\x08\x00" + bytes(46)




async def test_one_forged_flood_to_a_busy_vms_own_node_does_not_hand_the_vm_to_a_member_naming_it() -> None:
    medium, nodes, clock = fleet(3)
    victim, honest, hostile = nodes
    base = time.time() - clock.now()
    for node in nodes:
        node._wall = lambda: base + clock.now()
    sw = BoundedFloodSwitch(100, "02:aa:00:00:00:01", flow_idle_timeout=30)  # the honest member's switch
    sw.port_added(SwitchPort(1, "vm-tap", PortKind.LEAF, None, "02:00:00:00:00:01"), now=0)
    sw.port_added(SwitchPort(2, "vm2-tap", PortKind.LEAF, None, "02:00:00:00:00:02"), now=0)
    sw.port_added(SwitchPort(3, "t-hostile", PortKind.PEER, hostile.node_id), now=0)  # a link to the hostile member
    forged_at = None
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
        if hostile_named and forged_at is None and sw.learning.lookup(VM, t) is None:
            forged_at = t  # the VM's entry aged out at home (in its grace): one forged flood naming it
            apply(sw.packet_in(3, forged(frame(VM, "ff:ff:ff:ff:ff:ff"), hostile.node_id, hostile.node_id), now=t) or [], t)
        hosted = tuple(sw.hosted_macs())
        gaps += VM not in hosted and hostile_named
        honest.set_hosted(hosted)  # the tick's report (hosted_report)
        if not hostile_named and victim.told and VM in victim.told[-1]:
            hostile.set_hosted((VM,))  # names the VM all along: disputed, held by the honest member
            hostile_named = True
            assert victim.told[-1][VM] == honest.node_id
    owner = victim.told[-1].get(VM)
    print(f"forged flood at {forged_at} s; ticks the VM was missing from its home node's list: {gaps}; owner at another node: "
          f"{'the hostile member' if owner == hostile.node_id else 'the honest one' if owner == honest.node_id else owner}"
          f"; counts {dict(victim.counts)}; min interval {hcf.MIN_INTERVAL}")
    assert forged_at is not None and gaps == 0, "the forged flood ended the VM's grace at its own node"
    assert owner == honest.node_id, "the member naming the honest member's busy VM owns it"
