"""review21b: one member account puts as many node ids as it likes into the members set the switch is told.

The overlay stack keeps a node id in its members set "until revoked" (it drops one only on a removal caused by
MEMBERSHIP_REVOKED or REPLACED). But an account that announces another node id in its presence moves its one
binding (evio/signal/peers.py): the old id is removed with cause LEFT, which the stack ignores. So an account
cycling its announced id through invented ids X1..Xn (unproven claims are accepted, trust mode or not) leaves all
n in the members set, for good: each then counts as a member root in `_flood_budget_key`, with its own flood
bucket per port, which is what SetMembers was to stop (review21 M: invented-but-known roots multiply budgets).
Revoking the account afterwards removes only the id it holds then.
"""

from __future__ import annotations

import pytest

from evio.sdn.boundary import SetMembers
from evio.signal.events import PeerAdded, PeerRemoved
from evio.signal.peers import PeerTable
from evio.signal.protocol import Announcement, Membership
from evio.testing.waiting import wait_until
from tests.unit.node.test_node_wiring import bridge_ports, mesh_fleet

INVENTED = [(0xBAD << 116) | n for n in range(1, 41)]


@pytest.mark.parametrize("trust", [(), ("ov1",)])
def test_presence_churn_by_one_account_binds_one_id_but_the_removals_are_left(trust: tuple[str, ...]) -> None:
    table = PeerTable("me@x/r", {"ov1": 1 << 120}, trust_overlays=trust)  # trust mode: unproven ids accepted too
    table.set_membership("hostile@x", ["ov1"])
    causes = []
    for node_id in INVENTED:
        update = table.on_available("hostile@x/r", Announcement((Membership("ov1", node_id),)))
        causes += [e.cause.name for e in update.events if isinstance(e, PeerRemoved)]
    assert len(table.peers("ov1")) == 1  # the table holds one id per account, as designed
    assert set(causes) == {"LEFT"} and len(causes) == len(INVENTED) - 1


# Fixed since: an id an account stops announcing (LEFT) leaves the members set.
async def test_one_account_cycling_its_node_id_grows_the_members_set_the_switch_is_told() -> None:
    fleet = mesh_fleet(3)
    await fleet.start()
    try:
        await wait_until(lambda: all(len(bridge_ports(fleet, i)) == 2 for i in fleet.nodes), clock=fleet.clock)
        first = sorted(fleet.nodes)[0]
        stack = fleet.nodes[first].overlays["ov1"]
        table = PeerTable("me@x/r", {"ov1": fleet.nodes[first].node_id})
        table.set_membership("hostile@x", ["ov1"])
        for node_id in INVENTED:  # presence updates of one session, each naming another id
            for event in table.on_available("hostile@x/r", Announcement((Membership("ov1", node_id),))).events:
                (stack._peer_added if isinstance(event, PeerAdded) else stack._peer_removed)(event)
        await fleet.clock.advance(0.1)
        platform = fleet.platforms[first]
        platform.sdn.sync()
        told = [c.members for c in platform.sdn.history if isinstance(c, SetMembers)][-1]
        invented = told & set(INVENTED)
        print(f"members told to the switch: {len(told)}, of them invented by one account: {len(invented)}")
        assert len(invented) <= 1
    finally:
        await fleet.stop_all()
