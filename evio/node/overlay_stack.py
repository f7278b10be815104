"""One overlay on this node: its bridge, tunnels, overlay controller, and their order.

    signaling --> OverlayController --connect/disconnect--> TunnelManager
                      ^    | LinkUp(tap) / LinkDown(tap)       | TunnelUp / TunnelDown
                      |    v                                    |
                      |  port worker: SDN PeerPortUp, then add the TAP to the bridge;
                      |               remove it from the bridge, then SDN PeerPortDown
                      +---- on_tunnel_event <-------------------+
    SDN controller --OnDemandWanted/Idle--> request_on_demand / release_on_demand
    config `attach`, `evio attach`/`detach` --> attached host ports (leaf ports on the bridge)

Port changes go through one worker task, in the order the controller
reported them, so a TAP is never removed before it was added. The SDN side
hears of a TAP before the bridge has it, so the port comes up as a peer port.
An overlay whose bridge switches by STP (`bridge.switching: stp`) has no SDN
side at all: its bridge runs Open vSwitch's RSTP and MAC learning on the same
TAPs, and nothing asks for on-demand links.
Host interfaces named in the overlay's `attach` (a container's veth, a VM's
tap, a NIC, a veth to a Linux bridge) go on the bridge after it is made, and
on a reload or an `evio attach`; the switch sees them as leaf ports, since no
peer is known for them. One the host refuses (missing, in another bridge,
the uplink) is reported in the status and left alone; `evio attach` gets the
refusal as its answer.
`stop()` undoes everything `start()` did, whatever failed on the way, and
leaves no port, TAP or bridge behind (the attached interfaces themselves stay
on the host, off the bridge).
The status document of the overlay is evio.node.overlay_status's.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import ipaddress
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from evio.bridge.commands import BridgeError
from evio.bridge.host_ports import AttachRefused, interface_counters
from evio.clock import REAL_CLOCK, Clock
from evio.config.address_pool import conflicting_peers
from evio.config.model import PolicyRule, TopologyConfig
from evio.ids import format_node_id
from evio.node.host_claims import HostClaimsFlood
from evio.node.member_list_flood import MemberListFlood
from evio.node.overlay_parts import (
    AdjacencyController,
    AttachedPort,
    Bridge,
    Cancellable,
    ControllerFactory,
    CounterSource,
    LinksFactory,
)
from evio.node.plan import OverlayPlan
from evio.node.revocation_flood import RevocationFlood
from evio.node.ring_signaling import RingSignaling
from evio.node.sdn import SdnController
from evio.node.status import TRUST_RISK, SetupHistogram
from evio.overlay.adjacency_events import LinkDown, LinkUp
from evio.sdn import boundary
from evio.signal.events import PeerAdded, PeerRemoved, RemovalCause
from evio.signal.interface import Signaling
from evio.tunnel.config import TunnelSettings
from evio.tunnel.errors import TunnelError
from evio.tunnel.session import TunnelEvent, TunnelUp

log = logging.getLogger(__name__)

PORT_RETRY_INTERVAL = 1.0  # after OVS refused a port change (ovsdb-server down, say): reconcile this often
PORT_DRAIN_TIMEOUT = 15.0  # at stop: ovs-vsctl calls still queued get this long before the bridge goes anyway




class OverlayStack:
    def __init__(
        self,
        plan: OverlayPlan,
        node_id: int,
        signaling: Signaling,
        bridge: Bridge,
        sdn: SdnController,
        make_links: LinksFactory,
        make_controller: ControllerFactory,
        clock: Clock = REAL_CLOCK,
        on_first_port: Callable[[str], None] | None = None,
        port_counters: CounterSource = interface_counters,
    ) -> None:
        self.plan = plan
        self.node_id = node_id
        # Told the bridge's name when a link's TAP joins a bridge that had none (the node announces its
        # addresses again then: nothing it announced before reached anyone).
        self._on_first_port = on_first_port
        self.signaling = signaling
        self.bridge = bridge
        self._sdn = sdn
        self.stp = plan.bridge.stp  # no SDN controller for this bridge: OVS's own RSTP and learning
        self.clock = clock
        self._controller: AdjacencyController | None = None
        # The tunnel manager reports to the controller, which is made from the manager.
        self.links = make_links(self._tunnel_event)
        self.controller = self._controller = make_controller(self.links)
        self.ports: dict[str, int] = {}  # TAP on the bridge -> peer
        self.port_numbers: dict[str, int] = {}  # bridge port name -> OpenFlow port number (from the SDN side)
        self.switch_connected = False
        self.bridge_ready = False  # created (an stp bridge is ready then; a Bounded Flood one once connected)
        self.drops: Mapping[str, int] = {}
        self.frb_errors: Mapping[str, int] = {}
        self.segment_errors: Mapping[str, int] = {}
        self.port_drops: Mapping[str, Mapping[str, int]] = {}  # port name -> what its bounds in the switch dropped
        self.broadcasts: boundary.BroadcastCounts | None = None  # the latest counters from the SDN side (E1)
        self.traffic: boundary.TrafficCounts | None = None  # packet-ins, FRBs sent and forwarded (SDN side)
        self.policy_counts: boundary.PolicyCounts | None = None  # what each L2 policy rule matched (SDN side)
        self.setup_times = SetupHistogram()  # of every tunnel that came up in this overlay
        self.tunnels_up = 0
        self.tunnels_down = 0
        self.port_errors = 0
        self.link_ups = 0  # adjacency events seen, for "has the overlay stopped changing?"
        self.link_downs = 0
        self.last_link_change: float | None = None
        self.sdn_other: dict[str, dict[str, Any]] = {}  # latest controller event of each other kind
        self._port_events: asyncio.Queue[LinkUp | LinkDown] = asyncio.Queue()
        self._adding: str | None = None  # the TAP whose LinkUp the worker is applying (its add_port may be slow)
        self._sdn_down_early: set[str] = set()  # TAPs the SDN side was told of before the worker reached them
        self._port_worker: asyncio.Task[None] | None = None
        self._subscription: Cancellable | None = None
        self._presence: list[Cancellable] = []
        self._attached = False
        self._bridge_made = False
        self._controller_started = False
        self.started_at: float | None = None
        self._conflicts_logged: set[int] = set()
        self.attached: dict[str, AttachedPort] = {}  # host interface -> what became of it
        self.port_counters = port_counters  # of the attached ports, for the status
        self._attach_lock = asyncio.Lock()  # one attach, detach or reload of them at a time
        # Trust mode: revocation lists also spread over the overlay itself (not only through the server).
        self.revocations: RevocationFlood | None = None
        self.revocation_error: str | None = None  # why the flood did not start (shown in the status)
        # Presence to linked peers only: the CA's member list spreads the same way (decision 0063).
        self.member_lists: MemberListFlood | None = None
        # Trust mode: the MACs each member hosts, announced signed over the overlay (decision 0055).
        self.host_claims: HostClaimsFlood | None = None
        self._router_keys_told: dict[int, Any] | None = None  # what `_tell_router_keys` sent last (decision 0081)
        self.host_claims_error: str | None = None
        # Members signaling sees (kept while our own session is down), told to the switch: floods rooted at
        # anyone else are an invented root's (evio/sdn/switch.py, `_flood_budget_key`).
        self._members: set[int] = {node_id}
        self._members_pending = False

    @property
    def overlay(self) -> str:
        return self.plan.id

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Bridge, SDN attachment, tunnel offers served, then the controller; stop() undoes a partial start."""
        # Attached first, so the controller knows the bridge's datapath id when it connects.
        if not self.stp:
            self._sdn.commands.attach(
                self.overlay,
                self.plan.datapath_id,
                self.node_id,
                flow_idle_timeout=self.plan.config.bridge.flow_idle_timeout,
                on_demand=self.plan.config.topology.on_demand,
                tunnel_mtu=self.plan.tunnel.tap_mtu,
                transit=self.links.transit,  # the fast path's table, mirrored by the switch (evio.node.transit_wiring)
                policy=self.plan.config.policy,
                ipv6_routers=self.plan.config.ipv6_routers,
                ipv6_router_addresses=self.plan.config.ipv6_router_addresses,
            )
            self._attached = True
        self._bridge_made = True  # from here on, stop() deletes it even if create() failed half-way
        await self.bridge.create()
        self.bridge_ready = True
        await self._remove_stale_ports()
        await self.set_attached(self.plan.config.attach)
        if self.plan.certificate is not None:
            self._start_revocation_flood()
            self._start_member_list_flood()
            self._start_host_claims()
        self._port_worker = asyncio.create_task(self._apply_port_changes(), name=f"ports {self.overlay}")
        self._port_worker.add_done_callback(self._worker_done)
        self._subscription = self.controller.subscribe(self._adjacency_event)
        # Offers only for links the controller negotiated: before any socket, TURN allocation or TAP.
        self.links.admit_offers(self.controller.expects_tunnel)
        self.links.start()
        self._presence = [
            self.signaling.subscribe(PeerRemoved, self._peer_removed),
            self.signaling.subscribe(PeerAdded, self._peer_added),
        ]
        self._members.update(self.signaling.peers(self.overlay))
        self._members_changed()
        self._controller_started = True
        await self.controller.start()
        self.started_at = self.clock.now()
        if self.plan.certificate is None:  # issue 21 H1: said once per overlay, at start
            log.warning("overlay %s: %s; set trust (evio member add / evio join write it)", self.overlay, TRUST_RISK)
        elif (left := self.plan.certificate.cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)).days < 7:
            log.warning("overlay %s: this node's certificate expires in %d days: evio member renew on the server host",
                        self.overlay, max(left.days, 0))  # fmt: skip
        log.info("overlay started overlay=%s node=%s bridge=%s datapath=%s", self.overlay,
                 format_node_id(self.node_id), self.bridge.name, self.plan.datapath)

    def _start_revocation_flood(self) -> None:
        anchor, certificate = self.plan.tunnel.trust, self.plan.certificate
        if anchor is None or certificate is None:
            return
        flood = RevocationFlood(self.overlay, self.bridge.name, self.signaling, self.clock, node_id=self.node_id,
                                certificate=certificate, anchor=anchor)  # fmt: skip
        try:
            flood.start()
        except OSError as exc:  # revocation still comes through the server and the revocation file
            self.revocation_error = f"{self.bridge.name}: {exc.strerror or exc}"
            log.warning("overlay %s: revocation lists not spread over the overlay (%s)", self.overlay,
                        self.revocation_error)  # fmt: skip
            return
        self.revocations = flood

    def _start_member_list_flood(self) -> None:
        if self.signaling.listed_members(self.overlay) is None:
            return  # the roster's membership: no list to spread
        anchor, certificate = self.plan.tunnel.trust, self.plan.certificate
        if anchor is None or certificate is None:
            return  # no certificate to sign a manifest with (decision 0043, review21e E3)
        flood = MemberListFlood(self.overlay, self.bridge.name, self.signaling, self.clock, node_id=self.node_id,
                                certificate=certificate, anchor=anchor)  # fmt: skip
        try:
            flood.start()
        except OSError as exc:  # the list still comes from the server host and the join token
            log.warning("overlay %s: member lists not spread over the overlay (%s: %s)", self.overlay,
                        self.bridge.name, exc.strerror or exc)  # fmt: skip
            return
        self.member_lists = flood

    def _start_host_claims(self) -> None:
        anchor, certificate = self.plan.tunnel.trust, self.plan.certificate
        if anchor is None or certificate is None or self.stp:
            return
        own = self.plan.bridge.overlay_address
        flood = HostClaimsFlood(self.overlay, self.bridge.name, self.node_id, certificate, anchor, self.signaling,
                                self._owners_found, self.clock,
                                own_addresses=[ipaddress.ip_interface(own).ip] if own is not None else [],
                                tell_addresses=lambda found: self._sdn.commands.set_certified_addresses(self.overlay, found))  # fmt: skip
        try:
            flood.start()
        except OSError as exc:  # MACs then keep the rules of unannounced ones (decision 0034)
            self.host_claims_error = f"{self.bridge.name}: {exc.strerror or exc}"
            log.warning("overlay %s: hosts not announced over the overlay (%s)", self.overlay, self.host_claims_error)
            return
        self.host_claims = flood
        self._tell_router_keys()  # this node's own key at once: named a router, it signs before any owner is known
        # No probe for the bridge's own certified address from a tunnel port reaches it (decision 0076).
        self._sdn.commands.set_own_addresses(self.overlay, frozenset(flood.own_addresses))
        for document_flood in (self.revocations, self.member_lists):  # HAVE senders known by member (0043, J5)
            if document_flood is not None:
                document_flood.use_members(flood.owner_of)
        if isinstance(self.signaling, RingSignaling):  # offers along the ring are sealed to the target's key (0064)
            self.signaling.use_keys(flood.certificate_key)

    def _owners_found(self, owners: Mapping[str, int]) -> None:
        """Who holds which MAC changed (host claims): the switch places MACs by it, and the named routers' keys
        found with their announcements go with it (decision 0081)."""
        self._sdn.commands.set_mac_owners(self.overlay, owners)
        self._tell_router_keys()

    def _tell_router_keys(self) -> None:
        """The switch's keys for routers' statements (decision 0081): this node's, and each named router's whose
        certificate the host claims found the CA's (not revoked). Sent only when there are routers to vouch for."""
        routers, flood, certificate = self.plan.config.ipv6_routers, self.host_claims, self.plan.certificate
        if not routers or flood is None or certificate is None:
            return
        keys = {router: key for router in routers if (key := flood.certificate_key(router)) is not None}
        if keys != self._router_keys_told:
            self._router_keys_told = keys
            self._sdn.commands.set_router_keys(self.overlay, certificate.key, keys)

    async def _remove_stale_ports(self) -> None:
        """TAP ports left on the bridge by an earlier run that was killed: their devices died with it."""
        prefix = self.plan.tunnel.tap_prefix
        for port in await self.bridge.ports():
            if port.startswith(prefix):
                log.info("stale port removed overlay=%s port=%s", self.overlay, port)
                await self.bridge.remove_port(port)

    async def stop(self) -> None:
        """Release every link, close every tunnel, take the TAPs off the bridge, delete the bridge."""
        if self._controller_started:
            await _step(self.overlay, "stop overlay controller", self.controller.stop())
            await _step(self.overlay, "close tunnels", self.links.close())
        if self._subscription is not None:
            self._subscription.cancel()
        for presence in self._presence:
            presence.cancel()
        self._presence.clear()
        if self.revocations is not None:
            self.revocations.stop()
            self.revocations = None
        if self.member_lists is not None:
            self.member_lists.stop()
            self.member_lists = None
        if self.host_claims is not None:
            self.host_claims.stop()
            self.host_claims = None
        # Apply what the controller reported while it let go, then stop the worker.
        if self._port_worker is not None:
            if not self._port_worker.done():
                await _step(self.overlay, "finish port changes", self._drain_port_changes())
            self._port_worker.cancel()
            await asyncio.gather(self._port_worker, return_exceptions=True)
            self._port_worker = None
        for tap in list(self.ports):
            await self._remove_port(tap)
        for name in list(self.attached):
            await _step(self.overlay, f"detach {name}", self._detach(name))
        if self._attached:
            self._sdn.commands.detach(self.overlay)
            self._attached = False
        if self._bridge_made:
            await _step(self.overlay, "delete bridge", self.bridge.delete())
            self._bridge_made = False
            self.bridge_ready = False
        log.info("overlay stopped overlay=%s", self.overlay)

    # -- reload ----------------------------------------------------------------------------------

    def set_topology(self, topology: TopologyConfig) -> None:
        previous = self.plan.config.topology
        self.plan = replace(self.plan, config=replace(self.plan.config, topology=topology))
        self.controller.set_topology(topology)
        if topology.on_demand != previous.on_demand and self._attached:
            # The SDN side decides when a link is wanted: it needs the new threshold and timeout too.
            self._sdn.commands.set_on_demand(self.overlay, topology.on_demand)
        log.info("topology settings applied overlay=%s", self.overlay)

    def set_policy(self, rules: tuple[PolicyRule, ...]) -> None:
        """A new L2 policy (a reload): the bridge's table-0 flows change; tunnels and learning stay."""
        self.plan = replace(self.plan, config=replace(self.plan.config, policy=rules))
        self.policy_counts = None  # rule numbers may mean other rules now
        if self._attached:
            self._sdn.commands.set_policy(self.overlay, rules)
        log.info("policy applied overlay=%s rules=%d", self.overlay, len(rules))

    def set_tunnel_settings(self, settings: TunnelSettings) -> None:
        self.plan = replace(self.plan, tunnel=settings)
        self.links.reconfigure(settings)
        log.info("tunnel settings applied to new tunnels overlay=%s", self.overlay)

    # -- attached host ports ---------------------------------------------------------------------

    async def set_attached(self, names: Iterable[str]) -> None:
        """The config's `attach` (at start, and on reload): its interfaces on the bridge, those it no longer
        names off; ports `evio attach` added stay. An interface the host refuses is logged and reported."""
        wanted = tuple(names)
        async with self._attach_lock:
            self.plan = replace(self.plan, config=replace(self.plan.config, attach=wanted))
            for name, port in list(self.attached.items()):
                if port.origin == "config" and name not in wanted:
                    await _step(self.overlay, f"detach {name}", self._detach(name))
            for name in wanted:
                known = self.attached.get(name)
                if known is None or not known.on_bridge:
                    try:
                        await self._attach(name, "config")
                    except BridgeError as exc:
                        self.attached[name] = AttachedPort(name, "config", error=str(exc))
                        log.error("port not attached overlay=%s port=%s: %s", self.overlay, name, exc)

    def attach_retry_wanted(self) -> bool:
        """Whether an interface the config names is not on the bridge (a reload tries it again)."""
        return any(not port.on_bridge for port in self.attached.values() if port.origin == "config")

    async def attach(self, name: str) -> AttachedPort:
        """`evio attach`: AttachRefused (nothing changed) when the interface may not go on the bridge."""
        async with self._attach_lock:
            port = self.attached.get(name)
            if port is not None and port.on_bridge:
                raise AttachRefused(f"{name!r} is already attached to overlay {self.overlay!r}")
            return await self._attach(name, port.origin if port is not None else "command")

    async def detach(self, name: str) -> None:
        """`evio detach`: the interface off the bridge (one the config names comes back at the next reload)."""
        async with self._attach_lock:
            if name not in self.attached:
                raise AttachRefused(f"{name!r} is not attached to overlay {self.overlay!r}")
            await self._detach(name)

    async def _attach(self, name: str, origin: str) -> AttachedPort:
        facts = await self.bridge.attach_host_port(name)
        port = AttachedPort(name, origin, on_bridge=True, mtu=facts.mtu)
        self.attached[name] = port
        mtu = self.plan.bridge.mtu or self.plan.tunnel.tap_mtu
        if facts.mtu is not None and facts.mtu > mtu:
            # Open vSwitch forwards by flows, past the controller's segmentation: a larger frame dies at the TAP.
            log.warning("attached port's MTU above the overlay's overlay=%s port=%s mtu=%d overlay_mtu=%d: set the "
                        "hosts behind it to %d", self.overlay, name, facts.mtu, mtu, mtu)
        log.info("port attached overlay=%s port=%s origin=%s", self.overlay, name, origin)
        return port

    async def _detach(self, name: str) -> None:
        port = self.attached.pop(name)
        if port.on_bridge:
            try:
                await self.bridge.remove_port(name)
            except BridgeError:
                self.attached[name] = port  # still there: `evio detach` again, or the bridge goes at stop
                raise
            log.info("port detached overlay=%s port=%s", self.overlay, name)

    # -- presence -> tunnel probes --------------------------------------------------------------

    def _members_changed(self) -> None:
        if self._attached and not self._members_pending:
            self._members_pending = True  # one command for every change of this loop turn (a login's burst)
            asyncio.get_running_loop().call_soon(self._send_members)

    def _send_members(self) -> None:
        self._members_pending = False
        if self._attached:
            # With the CA's member list (0059) signaling sees only contacts present: the list names the rest, so
            # their floods keep a budget of their own, apart from roots that are no member (review21e E8).
            self._sdn.commands.set_members(self.overlay, frozenset(self._members) | self.signaling.listed_ids(self.overlay))

    def _peer_removed(self, event: PeerRemoved) -> None:
        # Gone for good, or an account that now speaks for another id (one id per account: an account cycling
        # through ids leaves only the last one a member). Not our own lost session, nor a peer's quick relogin.
        if event.cause not in (RemovalCause.SIGNAL_LOST, RemovalCause.RELOGIN) and event.node_id in self._members:
            self._members.discard(event.node_id)
            self._members_changed()
        # A peer whose presence went may have crashed (its server session closes with its process):
        # its tunnel must answer a probe within a few RTTs (0.25-1 s), or it goes down now rather than after
        # dead_after, and the link is made again as soon as the peer is back.
        if event.cause is RemovalCause.LEFT:
            self.links.doubt(event.node_id)

    def _peer_added(self, event: PeerAdded) -> None:
        if event.node_id not in self._members:
            self._members.add(event.node_id)
            self._members_changed()
        # Back so soon that the probe above may not have ended: a restarted peer answers no old tunnel.
        self.links.doubt(event.node_id)

    # -- adjacency -> bridge ports -------------------------------------------------------------

    def _tunnel_event(self, event: TunnelEvent) -> None:
        if isinstance(event, TunnelUp):
            self.tunnels_up += 1
            if event.info.setup_seconds is not None:
                self.setup_times.observe(event.info.setup_seconds)
        elif event.info.state.value == "closed":  # a tunnel that was up went down
            self.tunnels_down += 1
        if self._controller is not None:
            self._controller.on_tunnel_event(event)

    def _adjacency_event(self, event: object) -> None:
        if isinstance(event, LinkUp | LinkDown):
            if isinstance(event, LinkUp):
                self.link_ups += 1
                self.address_conflicts()
            else:
                self.link_downs += 1
                self._early_peer_down(event.tap)
            self.last_link_change = self.clock.now()
            self._port_events.put_nowait(event)

    def _early_peer_down(self, tap: str) -> None:
        """The SDN side drops a dead link's port now, not when the worker reaches its LinkDown.

        The worker's queue may hold OVSDB transactions of other links first (a stand-in's add-port takes
        0.1-0.3 s under load), and until the SDN side drops the port, frames learned towards it go to a
        dead tunnel (E4: 0.08 s in one run, 0.35 s in another). Only for a TAP whose LinkUp was fully
        applied: one still being added would come back as a leaf port when the bridge reports it, so the
        worker tells the SDN side of that one in its turn."""
        if self.stp or tap not in self.ports or tap == self._adding:
            return
        self._sdn.commands.peer_down(self.overlay, tap)
        self._sdn_down_early.add(tap)

    async def _apply_port_changes(self) -> None:
        behind = False  # OVS refused a change: the bridge's ports may not be what the links say
        while True:
            if behind:
                try:
                    event = await self.clock.wait_for(self._port_events.get(), PORT_RETRY_INTERVAL)
                except TimeoutError:
                    behind = not await self._reconcile_ports()
                    continue
            else:
                event = await self._port_events.get()
            errors = self.port_errors
            try:
                await self._apply(event)
            finally:
                self._port_events.task_done()
            behind = behind or self.port_errors != errors

    async def _reconcile_ports(self) -> bool:
        """Put on the bridge the TAP of every up link and take off every other tunnel port; True when done."""
        prefix = self.plan.tunnel.tap_prefix
        try:
            present = {port for port in await self.bridge.ports() if port.startswith(prefix)}
            for tap in sorted(set(self.ports) - present):
                await self.bridge.add_port(tap)
            for tap in sorted(present - set(self.ports)):
                await self.bridge.remove_port(tap)
        except BridgeError as exc:
            log.info("ports not reconciled yet overlay=%s: %s", self.overlay, exc)
            return False
        log.info("ports reconciled overlay=%s ports=%d", self.overlay, len(self.ports))
        return True

    async def _drain_port_changes(self) -> None:
        await self.clock.wait_for(self._port_events.join(), PORT_DRAIN_TIMEOUT)

    async def _apply(self, event: LinkUp | LinkDown) -> None:
        if isinstance(event, LinkUp):
            if not event.tap:
                return
            first = not self.ports
            self.ports[event.tap] = event.peer
            if self.host_claims is not None:  # before the port joins the bridge: its announcement may come at once
                self.host_claims.peer_linked(event.peer)
            self._sdn_down_early.discard(event.tap)  # a new link under the same name
            if not self.stp:
                self._sdn.commands.peer_up(self.overlay, event.tap, event.peer)
            self._adding = event.tap
            try:
                await self.bridge.add_port(event.tap)
            except BridgeError as exc:
                self.port_errors += 1
                log.warning("port not added overlay=%s port=%s peer=%s: %s", self.overlay, event.tap,
                            format_node_id(event.peer), exc)
            else:
                if first and self._on_first_port is not None:
                    self._on_first_port(self.bridge.name)
                if self.revocations is not None:
                    self.revocations.link_up()
                if self.member_lists is not None:
                    self.member_lists.link_up()
                if self.host_claims is not None:
                    self.host_claims.announce()
            finally:
                self._adding = None
        elif event.tap in self.ports:
            await self._remove_port(event.tap)

    async def _remove_port(self, tap: str) -> None:
        # The controller first: it drops the port's flows and learned MACs now, so traffic is flooded
        # round the dead link at once instead of after the OVSDB transaction (0.1-0.2 s under load).
        if not self.stp and tap not in self._sdn_down_early:
            self._sdn.commands.peer_down(self.overlay, tap)
        self._sdn_down_early.discard(tap)
        try:
            await self.bridge.remove_port(tap)
        except BridgeError as exc:
            self.port_errors += 1
            log.warning("port not removed overlay=%s port=%s: %s", self.overlay, tap, exc)
        self.ports.pop(tap, None)

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("port worker of overlay %s died", self.overlay, exc_info=task.exception())

    # -- SDN controller -> here ----------------------------------------------------------------

    def controller_event(self, event: boundary.ControllerEvent) -> None:
        if isinstance(event, boundary.OnDemandWanted):
            log.info("on-demand link wanted overlay=%s peer=%s (%.0f B/s)", self.overlay, format_node_id(event.peer),
                     event.bytes_per_s)
            self.controller.request_on_demand(event.peer)
        elif isinstance(event, boundary.OnDemandIdle):
            self.controller.release_on_demand(event.peer)
        elif isinstance(event, boundary.PortAdded):
            self.port_numbers[event.name] = event.port_no
        elif isinstance(event, boundary.PortRemoved):
            if self.port_numbers.get(event.name) == event.port_no:
                del self.port_numbers[event.name]
        elif isinstance(event, boundary.SwitchConnected):
            self.switch_connected = True
        elif isinstance(event, boundary.SwitchDisconnected):
            self.switch_connected = False
            self.port_numbers.clear()
        elif isinstance(event, boundary.DropCounts):
            self.drops, self.frb_errors = dict(event.drops), dict(event.frb_errors)
            self.segment_errors = dict(event.segment_errors)
            self.port_drops = {port: dict(counts) for port, counts in event.by_port.items()}
        elif isinstance(event, boundary.BroadcastCounts):
            self.broadcasts = event
        elif isinstance(event, boundary.TrafficCounts):
            self.traffic = event
        elif isinstance(event, boundary.PolicyCounts):
            self.policy_counts = event
        elif isinstance(event, boundary.HostedMacs):
            if self.host_claims is not None:
                self.host_claims.set_hosted(event.macs)
        elif isinstance(event, boundary.HostAnnouncementFlooded):
            if self.host_claims is not None:
                self.host_claims.flooded(event.frame, event.peer, event.root)
        elif isinstance(event, boundary.DocumentUnicastIn):
            for document_flood in (self.revocations, self.member_lists):  # each takes its own kind's (its magic)
                if document_flood is not None:
                    document_flood.switched(event.frame, event.peer, event.sender)
        else:  # kinds this daemon does not act on (counters, reports): kept for the status
            self.sdn_other[type(event).__name__] = boundary.event_as_dict(event)

    # -- probe (evio ping) ----------------------------------------------------------------------

    async def probe(self, peer: int, timeout: float) -> dict[str, Any]:
        """One echo through the tunnel to `peer`: its path and RTT, or why there is none."""
        names = self.signaling.peers(self.overlay)
        adjacency = self.controller.adjacency().get(peer)
        tunnel = self.links.get(peer)
        answer: dict[str, Any] = {
            "overlay": self.overlay,
            "peer": format_node_id(peer),
            "peer_name": names[peer].partition("/")[0] if peer in names else None,
            "link_type": _value(getattr(adjacency, "link_type", None)),
            "link_state": _value(getattr(adjacency, "state", None)),
            "tunnel_state": _value(tunnel.info.state) if tunnel is not None else None,
            "peer_online": peer in names,
        }
        if tunnel is None or answer["tunnel_state"] != "up":
            # Being set up: the controller holds a pending link, or a tunnel is negotiating.
            setting_up = answer["link_state"] == "pending" or (
                tunnel is not None and answer["tunnel_state"] not in ("closed", "failed"))
            return {**answer, "result": "no-link", "setting_up": setting_up}
        info = tunnel.info
        answer.update({
            "path": _value(info.path),
            "local_candidate": info.local_candidate,
            "remote_candidate": info.remote_candidate,
            "remote_address": f"{info.remote_addr[0]}:{info.remote_addr[1]}" if info.remote_addr else None,
            "transport": info.transport,
        })  # fmt: skip
        try:
            rtt = await tunnel.probe(timeout)
        except TimeoutError:
            return {**answer, "result": "timeout", "timeout": timeout}
        except TunnelError as exc:
            return {**answer, "result": "no-link", "setting_up": False, "reason": str(exc)}
        return {**answer, "result": "pong", "rtt_ms": round(rtt * 1000, 3)}

    # -- status --------------------------------------------------------------------------------

    def address_conflicts(self) -> list[int]:
        """Members whose address, derived from their node id in `bridge.address_pool`, is this node's.

        Logged once per peer; empty when the address is set in the config (the operator's choice).
        """
        bridge = self.plan.config.bridge
        if bridge.address is not None or bridge.address_pool is None:
            return []
        peers = list(self.signaling.peers(self.overlay))
        conflicts = conflicting_peers(bridge.address_pool, self.node_id, peers)
        for peer in conflicts:
            if peer not in self._conflicts_logged:
                self._conflicts_logged.add(peer)
                log.error("address conflict overlay=%s: peer %s derives %s from its node id in %s as this node "
                          "does; set node.id on one of them or use a bigger address_pool", self.overlay,
                          format_node_id(peer), self.plan.bridge.overlay_address, bridge.address_pool)
        return conflicts

def _value(item: object) -> Any:
    if isinstance(item, enum.Enum):
        return item.value
    return item


async def _step(overlay: str, what: str, awaitable: Any) -> None:
    """One teardown step: a failure is logged and the teardown goes on."""
    try:
        await awaitable
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("%s failed overlay=%s; going on with the teardown", what, overlay)
