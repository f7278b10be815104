"""review21e E8, the daemon's side: the members the switch is told (flood budgets, eviction groups) include every id
the overlay CA's member list names, not only the members signaling sees present (in member-list mode, a node's
contacts). The storm itself: tests/unit/sdn/test_review21e_contacts_as_members.py."""

from __future__ import annotations

from evio.sdn.boundary import SetMembers
from evio.testing.waiting import wait_until
from tests.unit.node.test_node_wiring import bridge_ports, mesh_fleet

LISTED = frozenset((0xA << 120) | n for n in range(1, 31))  # members present nowhere here, named by the CA's list


async def test_the_switch_is_told_the_member_lists_ids_as_members() -> None:
    fleet = mesh_fleet(3)
    await fleet.start()
    try:
        await wait_until(lambda: all(len(bridge_ports(fleet, i)) == 2 for i in fleet.nodes), clock=fleet.clock)
        first = sorted(fleet.nodes)[0]
        stack = fleet.nodes[first].overlays["ov1"]
        stack.signaling.listed_ids = lambda overlay: LISTED  # type: ignore[method-assign]
        stack._members_changed()
        await fleet.clock.advance(0.1)
        platform = fleet.platforms[first]
        platform.sdn.sync()
        told = [c.members for c in platform.sdn.history if isinstance(c, SetMembers)][-1]
        print(f"members told to the switch: {len(told)}, of them named by the member list only: {len(told & LISTED)}")
        assert told >= LISTED and len(told) == len(LISTED) + 3
    finally:
        await fleet.stop_all()
