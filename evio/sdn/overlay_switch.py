"""One overlay's bridge as the controller sees it: pure, one instance per datapath.

It joins what the os-ken adapter learns from the switch (ports by number and
name, packets, flow byte counters) with what the daemon tells it through the
boundary (which TAP leads to which peer), and drives the Bounded Flood logic
(`BoundedFloodSwitch`) and the on-demand policy. Every method returns what
to send to the switch (`evio.sdn.flow_actions`) and what to tell the daemon
(`evio.sdn.boundary` events); the adapter does both. No clock, no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from evio.config.model import OnDemandConfig, PolicyRule
from evio.ids import format_node_id
from evio.sdn.boundary import (
    AttachOverlay,
    BroadcastCounts,
    ControllerEvent,
    DocumentUnicastIn,
    DropCounts,
    HostAnnouncementFlooded,
    HostedMacs,
    OnDemandIdle,
    OnDemandWanted,
    PolicyCounts,
    PortAdded,
    PortRemoved,
    SwitchConnected,
    SwitchDisconnected,
    TrafficCounts,
)
from evio.sdn.flow_actions import AddFlow, ArpAnswerMatch, DestinationMatch, FlowAction, FlowMatch
from evio.sdn.l2policy import PolicyPort, PolicyTable
from evio.sdn.on_demand import FlowRates, OnDemandPolicy, WantOnDemand, traffic_by_peer
from evio.sdn.switch import BoundedFloodSwitch, PortKind, SwitchPort
from evio.sdn.transit import TransitMirror

log = logging.getLogger(__name__)


def switch_mac_for(node_id: int) -> str:
    """A locally administered unicast MAC for the FRBs a switch originates, from the node id."""
    return "02:" + (node_id & 0xFF_FFFF_FFFF).to_bytes(5, "big").hex(":")


@dataclass
class Step:
    """What one input leads to: flow changes and packets for the switch, events for the daemon."""

    actions: list[FlowAction] = field(default_factory=list)
    events: list[ControllerEvent] = field(default_factory=list)

    def __iadd__(self, other: Step) -> Step:
        self.actions += other.actions
        self.events += other.events
        return self


class OverlaySwitch:
    def __init__(self, settings: AttachOverlay) -> None:
        self.settings = settings
        self.switch = BoundedFloodSwitch(settings.node_id, switch_mac_for(settings.node_id),
                                         settings.flow_idle_timeout, settings.mac_max_age,
                                         tunnel_mtu=settings.tunnel_mtu)
        self.on_demand = OnDemandPolicy(settings.on_demand)
        self.transit = TransitMirror(settings.transit)  # the fast path's entries (evio.sdn.transit)
        self.policy = PolicyTable(settings.policy)
        self.switch.frame_filter = self._policy_allows
        self.switch.ipv6_routers = frozenset(settings.ipv6_routers)  # the RA guard's named members (0068)
        self.switch.router_addresses.named = {address: router for router, address in settings.ipv6_router_addresses}
        self._policy_reported: tuple[object, ...] | None = None
        self.rates = FlowRates()
        self.peer_by_name: dict[str, int] = {}
        self.downed: set[str] = set()  # TAPs whose link went down, until the bridge drops them or a link is back
        self.port_desc: dict[int, tuple[str, str]] = {}  # port number -> (name, hw_addr)
        self.connected = False
        # Whether the switch may hold evio unicast flows that are counted (AddFlow.counted, the only ones
        # a poll asks for): only our AddFlows make them, and a complete poll that finds none, with no
        # counted AddFlow sent since it was asked for, proves there are none.
        # Without flows a counter poll could only come back empty, so it is not sent (see flow_stats).
        self.may_have_flows = True
        self.flows_added = 0  # counted AddFlows sent to the switch
        self._flows_added_at_poll = -1  # flows_added when the poll in flight was asked for
        self._reported: tuple[dict[str, int], dict[str, int], dict[str, int], dict[str, dict[str, int]]] | None = None
        self._broadcasts_reported = (0, 0)  # (received, own_returned) in the last BroadcastCounts
        self._traffic_reported: tuple[object, ...] = (0, 0, 0, 0, 0, 0, 0, 0, 0, ())  # the counters in the last TrafficCounts
        self._hosted_reported: tuple[str, ...] = ()  # the MACs in the last HostedMacs

    @property
    def overlay(self) -> str:
        return self.settings.overlay

    @property
    def datapath_id(self) -> int:
        return self.settings.datapath_id

    # ---------------------------------------------------------------- the switch's connection

    def switch_connected(self) -> Step:
        """The bridge connected; the adapter has cleared its flows, so byte counters start over. The
        policy's flows for every port go now (those of ports go as the ports are described)."""
        self.connected = True
        self.may_have_flows = True  # until a poll says otherwise
        self.rates.reset()
        self.policy.switch_cleared()
        log.info("switch connected overlay=%s dpid=%016x node=%s", self.overlay, self.datapath_id,
                 format_node_id(self.settings.node_id))
        return Step(self._policy_sync() + self.switch.guard_sync(cleared=True),
                    [SwitchConnected(self.overlay, self.datapath_id)])

    def switch_disconnected(self, now: float) -> list[ControllerEvent]:
        """Forget the ports (their numbers may differ when it comes back); keep the peer names."""
        self.connected = False
        self.transit.clear()
        for port_no in list(self.switch.ports):
            self.switch.port_removed(port_no, now)  # nothing to send: there is no switch
        self.port_desc.clear()
        self.rates.reset()
        log.warning("switch disconnected overlay=%s dpid=%016x", self.overlay, self.datapath_id)
        return [SwitchDisconnected(self.overlay, self.datapath_id)]

    # ---------------------------------------------------------------- ports

    def peer_up(self, port_name: str, peer: int, now: float) -> Step:
        self.peer_by_name[port_name] = peer
        self.downed.discard(port_name)
        return self._reclassify(port_name, now)

    def peer_down(self, port_name: str, now: float) -> Step:
        # The tunnel behind the TAP is gone; the bridge drops the port 0.1-0.25 s later (an OVSDB
        # transaction). Meanwhile it is out of the switch, not a leaf: a tunnel's TAP is no host's port,
        # and floods into it would go nowhere. A new tunnel to the peer under that name brings it back.
        self.peer_by_name.pop(port_name, None)
        self.downed.add(port_name)
        step = Step()
        for port_no, (name, _) in list(self.port_desc.items()):
            if name == port_name and port_no in self.switch.ports:
                step += Step(self.switch.port_removed(port_no, now), [PortRemoved(self.overlay, port_no, name)])
        step.actions += self._policy_sync()
        return step

    def _reclassify(self, port_name: str, now: float) -> Step:
        # A port already on the bridge changes kind now that we know where it leads.
        step = Step()
        for port_no, (name, hw_addr) in list(self.port_desc.items()):
            if name == port_name:
                step += self.port_up(port_no, name, hw_addr, now)
        return step

    def port_up(self, port_no: int, name: str, hw_addr: str, now: float) -> Step:
        """The switch described a port (at connect or when it was added or changed)."""
        self.port_desc[port_no] = (name, hw_addr)
        if name in self.downed:
            # A dead link's TAP that changed state (its carrier went as the tunnel closed it) before the bridge
            # dropped it: no host's port. Seen in E4 logs as a leaf port for 0.02 s, announced to new peers.
            return Step()
        peer = self.peer_by_name.get(name)
        if peer is not None:
            port = SwitchPort(port_no, name, PortKind.PEER, peer)
        else:
            port = SwitchPort(port_no, name, PortKind.LEAF, None, hw_addr)
        if self.switch.ports.get(port_no) == port:
            return Step()
        actions = self.switch.port_added(port, now)
        return Step(self._policy_sync() + actions, [PortAdded(self.overlay, port_no, name, port.kind.value, peer)])

    def port_deleted(self, port_no: int, name: str, now: float) -> Step:
        self.port_desc.pop(port_no, None)
        self.downed.discard(name)
        if port_no not in self.switch.ports:
            return Step()
        actions = self.switch.port_removed(port_no, now)
        return Step(actions + self._policy_sync(), [PortRemoved(self.overlay, port_no, name)])

    # ---------------------------------------------------------------- the L2 policy (evio.sdn.l2policy)

    def _policy_ports(self) -> list[PolicyPort]:
        return [PolicyPort(p.port_no, p.name, p.peer is not None) for p in self.switch.ports.values()]

    def _policy_sync(self) -> list[FlowAction]:
        return self.policy.sync(self._policy_ports()) if self.connected else []

    def _policy_allows(self, in_port: int, inner: bytes) -> bool:
        port = self.switch.ports.get(in_port)
        if port is None:
            return True  # the switch drops a frame of an unknown port itself
        return self.policy.allows(PolicyPort(port.port_no, port.name, port.peer is not None), inner)

    def set_policy(self, rules: tuple[PolicyRule, ...]) -> list[FlowAction]:
        """New policy rules (a config reload): the table-0 flows that change; tunnels and switching stay."""
        if not self.policy.set_rules(rules):
            return []
        self.settings = replace(self.settings, policy=rules)
        if self.policy.polices_members:
            self.transit.clear()  # frames passing through must meet the rules on the bridge from now on
        log.info("policy applied overlay=%s rules=%d", self.overlay, len(rules))
        return self._policy_sync()

    def policy_stats(self, packets_by_rule: Mapping[int, int]) -> None:
        self.policy.flow_stats(packets_by_rule)

    @property
    def needs_policy_poll(self) -> bool:
        return self.connected and bool(self.policy.rules)

    def policy_report(self) -> list[ControllerEvent]:
        """What each rule matched, if it changed since the last report."""
        counts = self.policy.counts()
        if counts == self._policy_reported or (not counts and self._policy_reported is None):
            return []
        self._policy_reported = counts
        return [PolicyCounts(self.overlay, counts)]

    # ---------------------------------------------------------------- packets and flows

    def packet_in(self, in_port: int, data: bytes, now: float, forwarded: bool = False) -> list[FlowAction]:
        return self.switch.packet_in(in_port, data, now, forwarded)

    def flooded_announcements(self) -> list[ControllerEvent]:
        """The host announcements floods brought since the last call, each with the peer it came from."""
        queued = self.switch.flooded_announcements
        events: list[ControllerEvent] = [HostAnnouncementFlooded(self.overlay, a.frame, a.peer, a.root) for a in queued]
        queued.clear()
        return events

    def document_unicasts(self) -> list[ControllerEvent]:
        """The signed documents' unicasts for the interface since the last call, with their tunnel and sender."""
        queued = self.switch.document_unicasts
        events: list[ControllerEvent] = [DocumentUnicastIn(self.overlay, d.frame, d.peer, d.sender) for d in queued]
        queued.clear()
        return events

    def flow_removed(self, match: FlowMatch | DestinationMatch | ArpAnswerMatch) -> list[FlowAction]:
        if isinstance(match, DestinationMatch | ArpAnswerMatch):
            return self.switch.destination_removed(match)
        self.transit.flow_removed(match)
        return self.switch.flow_removed(match)

    # ---------------------------------------------------------------- the transit fast path's mirror

    def before_send(self, action: FlowAction, now: float) -> None:
        """`action` is about to go to the switch: fast-path entries it deletes go now."""
        self.transit.before(action)
        if isinstance(action, AddFlow) and action.counted:  # the poll sees counted flows only
            self.flows_added += 1
            if not self.may_have_flows:
                # The switch had no flow of ours, so the last polls were empty and may be long ago (polls
                # pause without flows): this flow's bytes are counted from now, not spread over that pause.
                self.may_have_flows = True
                self.rates.reset()
                self.rates.update({}, now)

    def after_send(self, action: FlowAction, now: float) -> None:
        """`action` went to the switch: a tunnel-to-tunnel flow gets its fast-path entry (not while a policy
        rule sees frames from members: the fast path passes frames on without the bridge's table 0)."""
        if not self.policy.polices_members:
            self.transit.after(action, self.switch.ports, now)

    def transit_refresh(self, now: float) -> list[FlowAction]:
        """Flows the fast path keeps busy, re-installed before the switch would expire them."""
        return self.transit.refresh(now)

    def clear_transit(self) -> None:
        """The switch's flows are about to be cleared, or the overlay is going: no fast-path entry may stay."""
        self.transit.clear()

    def expire(self, now: float) -> list[FlowAction]:
        return self.switch.expire(now)

    # ---------------------------------------------------------------- on-demand links and counters

    def set_on_demand(self, config: OnDemandConfig) -> None:
        """New on-demand settings (a config reload); the switch and its flows stay."""
        if config == self.settings.on_demand:
            return
        was_enabled = self.settings.on_demand.enabled
        self.on_demand.reconfigure(config)
        self.settings = replace(self.settings, on_demand=config)
        if config.enabled and not was_enabled:
            self.rates.reset()  # counters from before the pause would spread its bytes over the whole pause
        log.info("on-demand settings applied overlay=%s enabled=%s threshold_bytes_per_s=%.0f idle_timeout=%g",
                 self.overlay, config.enabled, config.threshold_bytes_per_s, config.idle_timeout)

    @property
    def needs_counter_poll(self) -> bool:
        """Whether a poll of the switch's byte counters could find anything (else `flow_stats({}, now)`
        stands in for it: the policy still sees time pass, and releases links that went idle)."""
        return self.connected and self.may_have_flows

    def stats_requested(self) -> None:
        """A poll of the byte counters went to the switch."""
        self._flows_added_at_poll = self.flows_added

    @property
    def needs_fast_ticks(self) -> bool:
        """Whether anything here needs the controller's short tick: counters to poll for on-demand
        links, wished links to keep or release, fast-path flows to refresh."""
        polling = self.settings.on_demand.enabled and self.needs_counter_poll
        return polling or bool(self.on_demand.wanted) or bool(len(self.transit))

    def flow_stats(self, byte_counts: Mapping[FlowMatch, int], now: float) -> list[ControllerEvent]:
        """One complete poll of evio's flows' byte counters (empty when there is nothing to poll)."""
        if not byte_counts and self.flows_added == self._flows_added_at_poll:
            self.may_have_flows = False  # none then, and none added since: no need to ask again
        rates = self.rates.update(byte_counts, now)
        traffic = traffic_by_peer(self.switch, rates, now)
        adjacent = set(self.switch.peer_ports())
        events: list[ControllerEvent] = []
        for decision in self.on_demand.update(now, traffic, adjacent):
            if isinstance(decision, WantOnDemand):
                events.append(OnDemandWanted(self.overlay, decision.peer, decision.bytes_per_s))
            else:
                events.append(OnDemandIdle(self.overlay, decision.peer))
        return events

    def drop_report(self) -> list[ControllerEvent]:
        """The drop counters, if they changed since the last report."""
        drops = {reason.name: n for reason, n in sorted(self.switch.drops.items(), key=lambda i: i[0].name)}
        errors = {reason.name: n for reason, n in sorted(self.switch.frb_parse_errors.items(),
                                                          key=lambda i: i[0].name)}
        segments = {reason.name: n for reason, n in sorted(self.switch.segment_errors.items(),
                                                           key=lambda i: i[0].name)}
        by_port: dict[str, dict[str, int]] = {}
        for (port, reason), n in sorted(self.switch.port_drops.items(), key=lambda i: (i[0][0], i[0][1].name)):
            by_port.setdefault(port, {})[reason.name] = n
        report = (drops, errors, segments, by_port)
        if report == self._reported or (not drops and not errors and self._reported is None):
            return []
        self._reported = report
        return [DropCounts(self.overlay, drops, errors, segments, by_port)]

    def traffic_report(self) -> list[ControllerEvent]:
        """Packet-ins and FRBs sent and forwarded, if they changed since the last report."""
        # The neighbour table counts its own answers (ARP and NS answered here instead of flooded).
        kinds = tuple(sorted(self.switch.packet_in_kinds.items()))
        adverts = self.switch.router_adverts
        statements = tuple(sorted(adverts.counts.items())) if adverts is not None else ()
        totals = (*self.switch.counters.as_tuple(), self.switch.neighbors.answered, self.switch.destination_copies,
                  self.switch.unicast_packet_ins, kinds, statements)
        if totals == self._traffic_reported:
            return []
        self._traffic_reported = totals
        return [TrafficCounts(self.overlay, *totals[:-2], by_kind=dict(kinds), router_adverts=dict(statements))]

    def hosted_report(self) -> list[ControllerEvent]:
        """What this node hosts, if it changed since the last report (decision 0055)."""
        hosted = tuple(self.switch.hosted_macs())
        if hosted == self._hosted_reported:
            return []
        self._hosted_reported = hosted
        return [HostedMacs(self.overlay, hosted)]

    def broadcast_report(self) -> list[ControllerEvent]:
        """The broadcast counters (E1), if any broadcast arrived since the last report."""
        broadcasts = self.switch.broadcasts
        totals = (broadcasts.received, broadcasts.own_returned)
        if totals == self._broadcasts_reported:
            return []
        self._broadcasts_reported = totals
        return [BroadcastCounts(self.overlay, broadcasts.received, broadcasts.own_returned, dict(broadcasts.by_root),
                                tuple(broadcasts.recent), dict(broadcasts.by_ethertype))]
