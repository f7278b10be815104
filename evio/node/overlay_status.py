"""The status document of one overlay on this node (`evio status`, the metrics, `evio attach`'s answer).

Read from an `OverlayStack` and what it holds (signaling, controller, tunnels, the SDN side's latest
counters); nothing here changes the stack, except that address conflicts are logged once per peer.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from evio.ids import format_node_id
from evio.node.ring_signaling import RingSignaling
from evio.node.status import link_counts, link_document, trust_document
from evio.node.transit_wiring import transit_status
from evio.sdn import boundary

if TYPE_CHECKING:
    from evio.node.overlay_stack import OverlayStack


def overlay_status(stack: OverlayStack) -> dict[str, Any]:
    now = stack.clock.now()
    names = stack.signaling.peers(stack.overlay)
    links = []
    for peer, info in sorted(stack.controller.adjacency().items()):
        tap = getattr(info, "tap", None)
        links.append(link_document(
            peer, info, stack.links.get(peer), names,
            port=stack.port_numbers.get(tap) if tap else None,
            on_bridge=tap in stack.ports if tap else False,
            now=now,
        ))  # fmt: skip
    config = stack.plan.config
    traffic = stack.traffic
    signaling = stack.signaling
    return {
        "node_id": format_node_id(stack.node_id),
        "bridge": stack.bridge.name,
        "address": stack.plan.bridge.overlay_address,
        "address_conflicts": [format_node_id(p) for p in stack.address_conflicts()],
        "datapath": stack.plan.datapath,
        "datapath_id": f"{stack.plan.datapath_id:016x}",
        "switching": stack.plan.bridge.switching,
        "switch_connected": stack.switch_connected,
        "bridge_ready": stack.bridge_ready,
        # The server signed in to (several: the one in use, evio.signal.failover), else the configured one.
        "signal": {"jid": config.signal.jid, "server": signaling.server or f"{config.signal.server}:{config.signal.port}",
                   "connected": signaling.connected, "connected_since": signaling.connected_since,
                   "logins": signaling.sessions, "reconnects": max(signaling.sessions - 1, 0),
                   "last_error": error.as_dict() if (error := signaling.last_error(stack.overlay)) else None,
                   "drops": signaling.drop_counts(), "messages": signaling.message_counts(),
                   # Revocation lists that did not fit our presence (they spread over the overlay: 0036 amended).
                   **signaling.presence_lists_left_out(),
                   # Link requests and offers along the ring (decision 0064); None: all through the server.
                   "ring": signaling.counts() if isinstance(signaling, RingSignaling) else None},
        "peers": {format_node_id(p): jid for p, jid in sorted(names.items())},
        "trust": _trust_status(stack),
        "links": links,
        "link_counts": link_counts(links),
        "tunnels": {"up": stack.tunnels_up, "down": stack.tunnels_down, "setup_seconds": stack.setup_times.as_dict()},
        "switch": {
            "packet_ins": traffic.packet_ins if traffic else 0,
            "broadcasts_originated": traffic.broadcasts_originated if traffic else 0,
            "frb_sent": traffic.frb_sent if traffic else 0,
            "frb_forwarded": traffic.frb_forwarded if traffic else 0,
            "segmented": traffic.segmented if traffic else 0,
            "checksums_completed": traffic.checksums_completed if traffic else 0,
            "neighbors_answered": traffic.neighbors_answered if traffic else 0,
            "copied_ahead": traffic.copied_ahead if traffic else 0,
            "unicast_packet_ins": traffic.unicast_packet_ins if traffic else 0,
            "packet_ins_by_kind": dict(traffic.by_kind) if traffic else {},
            "router_adverts": dict(traffic.router_adverts) if traffic else {},  # decision 0081
        },
        "transit": transit_status(stack.links.transit),
        "drops": dict(stack.drops),
        "policy": _policy_status(stack),
        # Peers' ICE candidates not tried (loopback, link-local, deny list, ...: evio.tunnel.path.candidates).
        "candidates_dropped": _candidates_dropped(stack.links),
        "frb_errors": dict(stack.frb_errors),
        "segment_errors": dict(stack.segment_errors),
        "port_drops": {port: dict(counts) for port, counts in sorted(stack.port_drops.items())},
        "port_errors": stack.port_errors,
        "attached_ports": attached_ports_status(stack),
        "broadcasts": _broadcasts(stack.broadcasts),
        "link_events": {
            "up": stack.link_ups,
            "down": stack.link_downs,
            "seconds_since_last": round(now - stack.last_link_change, 3) if stack.last_link_change is not None else None,
        },
        "sdn": dict(stack.sdn_other),
    }


def attached_ports_status(stack: OverlayStack) -> dict[str, Any]:
    """Each attached host interface: what became of it, its OpenFlow port, switch drops and counters."""
    counters = stack.port_counters([n for n, p in stack.attached.items() if p.on_bridge])
    document = {}
    for name, port in sorted(stack.attached.items()):
        counted = counters.get(name)
        document[name] = {
            "origin": port.origin, "on_bridge": port.on_bridge, "error": port.error, "mtu": port.mtu,
            "port": stack.port_numbers.get(name),
            "switch_drops": dict(stack.port_drops.get(name, {})),
            **(counted.as_dict() if counted is not None else {"rx": None, "tx": None}),
        }
    return document


def _trust_status(stack: OverlayStack) -> dict[str, Any]:
    doc = trust_document(stack.plan.certificate, datetime.datetime.now(datetime.UTC),
                         len(stack.signaling.revoked_nodes(stack.overlay)))  # fmt: skip
    if stack.plan.certificate is not None:
        doc["revocation_flood"] = stack.revocations.status() if stack.revocations else {"error": stack.revocation_error}
        if stack.member_lists is not None:
            doc["member_list_flood"] = stack.member_lists.status()
        doc["host_claims"] = stack.host_claims.status() if stack.host_claims else {"error": stack.host_claims_error}
    return doc


def _policy_status(stack: OverlayStack) -> list[dict[str, Any]]:
    """Each rule in order, with what it matched: `packets` in all, `frb_packets` of them FRB inner frames."""
    counts = stack.policy_counts.rules if stack.policy_counts is not None else ()
    rules = []
    for index, rule in enumerate(stack.plan.config.policy):
        count = counts[index] if index < len(counts) and counts[index].name == rule.label(index) else None
        flow, frb = (count.packets, count.frb_packets) if count is not None else (0, 0)
        rules.append({"rule": rule.label(index), "action": rule.action, "in_port": rule.in_port,
                      "packets": flow + frb, "frb_packets": frb})
    return rules


def _candidates_dropped(links: object) -> dict[str, int]:
    drops = getattr(links, "dropped_candidates", None)  # the tunnel manager's; fakes have none
    return drops.as_dict() if drops is not None else {}


def _broadcasts(counts: boundary.BroadcastCounts | None) -> dict[str, Any]:
    """FRB broadcasts received: totals, per root, per inner ethertype, and the latest ones (`recent`, oldest first)."""
    if counts is None:
        return {"received": 0, "own_returned": 0, "by_root": {}, "by_ethertype": {}, "recent": []}
    document = boundary.event_as_dict(counts)
    return {key: document[key] for key in ("received", "own_returned", "by_root", "by_ethertype", "recent")}
