"""The transit fast path as the node wires it: one table per overlay, shared by its tunnels and its switch.

A frame that only passes through this node can go from one tunnel straight into another, past both TAPs
and Open vSwitch, where the SDN controller's flow says the bridge would send it that way. One home per
layer:

- `evio.tunnel.datapath.transit_table`: the data-path side, the `TransitTable` the data paths look
  frames up in (their hook: `FdDatapath.set_transit`, step 7 of `receive.py`, the native ring's
  prefilter; `Tunnel` attaches its data path);
- `evio.sdn.transit`: the switch side, `TransitMirror` keeping the table in step with the flows;
- here: the table made for an overlay (`transit_table`, given to its `TunnelManager`, which the
  overlay's stack hands to the SDN attach as the mirror's sink) and its status document
  (`transit_status`, which the metrics read).
"""

from __future__ import annotations

from typing import Any

from evio.node.plan import OverlayPlan
from evio.sdn.frb import ETH_TYPE_FRB
from evio.tunnel.datapath.transit_table import TransitTable


def transit_table(plan: OverlayPlan) -> TransitTable | None:
    """The overlay's fast-path table; None on an stp bridge, which has no controller flows to mirror.

    The table is there when `tunnel.transit` is off too, so that a reload can switch it on. FRBs never
    take the fast path: the bridge sends them to the controller whatever the unicast flows say."""
    if plan.bridge.stp:
        return None
    return TransitTable(excluded_ethertypes=(ETH_TYPE_FRB,), enabled=plan.tunnel.transit)


def transit_status(table: TransitTable | None) -> dict[str, Any]:
    """The fast path's counters (frames it sent on, frames it left to the bridge and why)."""
    if table is None:
        return {"enabled": False}
    counters = table.counters()
    return {"enabled": table.enabled, "entries": counters.entries, "max_entries": table.max_entries,
            "forwarded": counters.forwarded, "expired": counters.expired, "no_egress": counters.no_egress,
            "refused_full": counters.refused_full, "refused_group": counters.refused_group}
