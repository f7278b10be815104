"""The node's wiring of the transit fast path (evio.node.transit_wiring): one table per overlay, its status."""

from __future__ import annotations

import dataclasses

from evio.node.plan import plan_node
from evio.node.transit_wiring import transit_status, transit_table
from evio.testing.node_fleet import fleet_config


def test_the_node_makes_a_table_per_bounded_flood_overlay_and_none_on_an_stp_bridge() -> None:
    [plan] = plan_node(fleet_config(1), 1, controller_port=6653, kernel_module_loaded=True).overlays
    table = transit_table(plan)
    assert table is not None and table.enabled is plan.tunnel.transit
    assert transit_status(table) == {
        "enabled": True, "entries": 0, "max_entries": table.max_entries, "forwarded": 0, "expired": 0,
        "no_egress": 0, "refused_full": 0, "refused_group": 0,
    }
    off = transit_table(dataclasses.replace(plan, tunnel=dataclasses.replace(plan.tunnel, transit=False)))
    assert off is not None and not off.enabled  # there, so that a reload can switch it on
    stp = dataclasses.replace(plan, bridge=dataclasses.replace(plan.bridge, switching="stp"))
    assert transit_table(stp) is None and transit_status(None) == {"enabled": False}
