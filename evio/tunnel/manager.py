"""``TunnelManager``: the one place that owns this node's tunnels (at most one per peer).

It serves incoming offers, opens tunnels on request, and reports every tunnel
going up or down to one subscriber (the overlay controller). Offer collisions
(both nodes open at once) are settled by node id: the higher id's offer wins.
A new offer from a peer we think we are connected to replaces the old tunnel
(the peer restarted or lost it).

Every offer costs sockets, maybe a TURN allocation under this node's
credentials, and a TAP, so an offer is refused, before any of that, when it
comes too often from its peer (`offers_per_s`), cannot be read, is not for a
link this node negotiated with the peer (the offer policy, `admit_offers`:
the overlay controller's `expects_tunnel`), or would exceed
`max_pending_offers` or `max_tunnels`. Refusals are counted by reason in
`refused_offers` and logged at most once per peer per minute.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from evio.ratelimit import LogLimiter, PeerRateLimiter, Rate
from evio.tunnel.config import TunnelSettings
from evio.tunnel.datapath.transit_table import TransitTable
from evio.tunnel.errors import OfferError, SetupError, SignalingFailed, TunnelError
from evio.tunnel.path.candidates import CandidateDrops
from evio.tunnel.path.deadlines import LoopLag
from evio.tunnel.path.dtls import UNTRUSTED, TunnelCertificate
from evio.tunnel.path.offer_answer import Body, TunnelOffer, TunnelSignaling
from evio.tunnel.session import (
    Clock,
    DatapathFactory,
    TapFactory,
    Tunnel,
    TunnelDown,
    TunnelEvent,
    TunnelInfo,
    TunnelState,
    default_datapath_factory,
    default_tap_factory,
)

logger = logging.getLogger(__name__)

REFUSAL_LOG_INTERVAL = 60.0
# An offer from a peer whose tunnel is up replaces it only if the peer does not answer an echo on it within
# this: a restarted peer cannot, while an offer the XMPP server forged in its name closed a working tunnel
# (review21h H7). A few RTTs of a loaded host; a real restart waits this much longer.
REPLACE_PROBE_TIMEOUT = 1.0
OfferPolicy = Callable[[int], bool]
"""May this peer offer us a tunnel now? (The overlay controller: was a link negotiated with it?)"""


class TunnelManager:
    def __init__(
        self,
        node_id: int,
        config: TunnelSettings,
        certificate: TunnelCertificate,
        signaling: TunnelSignaling,
        on_event: Callable[[TunnelEvent], None] | None = None,
        tap_factory: TapFactory = default_tap_factory,
        datapath_factory: DatapathFactory = default_datapath_factory,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        transit: TransitTable | None = None,
    ) -> None:
        """``transit``: the overlay's fast-path table (tunnel.transit), shared by its tunnels and the SDN controller."""
        self.node_id = node_id
        self.dropped_candidates = CandidateDrops(clock)
        """Peers' ICE candidates this node would not try (candidates.py), by reason, over all tunnels."""
        self.config = self._counting(config)
        self.certificate = certificate
        self._signaling = signaling
        self._subscriber = on_event
        self._tap_factory = tap_factory
        self._datapath_factory = datapath_factory
        self._clock = clock
        self._wall_clock = wall_clock
        self.transit = transit
        self._tunnels: dict[int, Tunnel] = {}
        self._closing = False
        self._offer_policy: OfferPolicy | None = None
        self._offer_rate = PeerRateLimiter[int](Rate(config.offers_per_s, config.offer_burst))
        self._offers_in_progress = 0
        self._answered: dict[int, tuple[str, Body]] = {}  # peer -> (tunnel id, our answer) of its tunnel we answered
        self.duplicate_offers = 0
        self.refused_offers: Counter[str] = Counter()  # reason -> offers refused
        self._refusal_log = LogLimiter[int](REFUSAL_LOG_INTERVAL)
        self.untrusted_refused = 0
        """Tunnels refused because the peer's certificate failed the overlay's trust anchor."""
        self.loop_lag = LoopLag()
        """Sampled while tunnels are set up: the setup deadlines stretch with it (evio.tunnel.path.deadlines)."""
        self._overlay_signal: Callable[[int, bytes], None] | None = None

    def relay_signal_to(self, sink: Callable[[int, bytes], None]) -> None:
        """Tunnels from now on say they read OVERLAY_SIGNAL and hand what arrives to ``sink(peer, payload)``
        (decision 0064: signaling routed along the ring)."""
        self._overlay_signal = sink

    def signal_relays(self) -> dict[int, Tunnel]:
        """The up tunnels whose peer reads OVERLAY_SIGNAL, by peer."""
        return {p: t for p, t in self._tunnels.items() if t.peer_relays_signal and t.state is TunnelState.UP}

    def setup_load(self) -> float:
        """How far setups are stretched now (>= 1, the loop lag's patience factor): the overlay starts
        fewer at once while it is above 1."""
        return self.loop_lag.patience()

    def admit_offers(self, policy: OfferPolicy) -> None:
        """Serve offers only from peers `policy` admits (without one, every well-formed offer is served)."""
        self._offer_policy = policy

    def start(self) -> None:
        self._signaling.serve(self._on_offer)
        # A node starting is about to set tunnels up, maybe on a host busy starting others: the
        # first setups' deadlines then know the loop's lag already (it samples for a while, then stops).
        self.loop_lag.wake()

    def reconfigure(self, config: TunnelSettings) -> None:
        """Settings for tunnels made from now on; the tunnels that exist keep the ones they were made with,
        except the transit fast path, switched for all of them at once."""
        self.config = self._counting(config)
        if self.transit is not None:
            self.transit.set_enabled(config.transit)

    def _counting(self, config: TunnelSettings) -> TunnelSettings:
        """``config`` with its ICE agents counting dropped candidates here (the count outlives a reload)."""
        return replace(config, ice=replace(config.ice, candidate_drops=self.dropped_candidates))

    def get(self, peer: int) -> Tunnel | None:
        return self._tunnels.get(peer)

    def tunnels(self) -> dict[int, Tunnel]:
        return dict(self._tunnels)

    async def connect(self, peer: int) -> TunnelInfo:
        """Open a tunnel to ``peer`` (or reuse an active one) and wait until it is up."""
        tunnel = self._tunnels.get(peer)
        if tunnel is None or not tunnel.active:
            tunnel = self._new_tunnel(peer, initiator=True)
            tunnel.start_initiator(self._signaling)
        return await tunnel.wait_up()

    def doubt(self, peer: int) -> None:
        """The peer may be gone (its signaling presence went): an up tunnel to it must answer within a few RTTs (0.25-1 s)."""
        tunnel = self._tunnels.get(peer)
        if tunnel is not None:
            tunnel.doubt()

    async def disconnect(self, peer: int) -> None:
        tunnel = self._tunnels.get(peer)
        if tunnel is not None:
            await tunnel.close()

    async def close(self) -> None:
        self._closing = True
        await asyncio.gather(*(t.close("node shutting down") for t in list(self._tunnels.values())))
        await self.loop_lag.close()

    def _new_tunnel(self, peer: int, initiator: bool, tunnel_id: str | None = None) -> Tunnel:
        self.loop_lag.wake()
        tunnel = Tunnel(
            node_id=self.node_id,
            peer=peer,
            config=self.config.stretched(self.loop_lag.patience()),
            certificate=self.certificate,
            on_event=self._on_tunnel_event,
            initiator=initiator,
            tunnel_id=tunnel_id,
            tap_factory=self._tap_factory,
            datapath_factory=self._datapath_factory,
            clock=self._clock,
            wall_clock=self._wall_clock,
            patience=self.loop_lag.patience,
            lateness=self.loop_lag.record,
            transit=self.transit,
        )
        tunnel.on_overlay_signal = self._overlay_signal
        self._tunnels[peer] = tunnel
        return tunnel

    async def _on_offer(self, peer: int, body: Body) -> Body:
        if self._closing:
            raise SignalingFailed("node shutting down")
        if not self._offer_rate.allow(peer, self._clock()):
            raise self._refuse(peer, "rate_limited", SignalingFailed("too many offers"))
        try:
            offer = TunnelOffer.from_body(body)
            if offer.node_id != peer:
                raise OfferError("node", "does not match the sender")
        except OfferError as exc:
            raise self._refuse(peer, "malformed", exc) from None
        if self._offer_policy is not None and not self._offer_policy(peer):
            raise self._refuse(peer, "not_negotiated", SignalingFailed("no link negotiated with this node"))
        if self._offers_in_progress >= self.config.max_pending_offers:
            raise self._refuse(peer, "too_many_pending", SignalingFailed("too many offers in progress"))
        existing = self._tunnels.get(peer)
        if (existing is not None and existing.active and not existing.info.initiator
                and existing.info.tunnel_id == offer.tunnel_id):
            # The same offer again: a copy a relay held along the ring (decision 0064; fresh for 60 s) after the
            # server carried it. Answered as before; replacing the tunnel would end the one it made (review21f F7).
            self.duplicate_offers += 1
            answered = self._answered.get(peer)
            if answered is not None and answered[0] == offer.tunnel_id:
                return answered[1]
            raise SignalingFailed("this offer is being answered")
        if existing is not None and existing.active:
            if existing.info.initiator and existing.state.value in ("negotiating",) and self.node_id > peer:
                raise SignalingFailed("offer collision: the higher node id's offer wins")
        elif sum(1 for t in self._tunnels.values() if t.active) >= self.config.max_tunnels:
            raise self._refuse(peer, "too_many_tunnels", SignalingFailed("too many tunnels"))
        self._offers_in_progress += 1
        try:
            if existing is not None and existing.state is TunnelState.UP and await self._answers(existing):
                raise self._refuse(peer, "tunnel_alive", SignalingFailed("our tunnel with this node is up and answers"))
            if existing is not None and existing.active:
                await existing.close("replaced by a new offer from the peer")
            tunnel = self._new_tunnel(peer, initiator=False, tunnel_id=offer.tunnel_id)
            try:
                answer = await tunnel.prepare_answer(offer)
            except SetupError as exc:  # no candidates in time, say: the peer hears why, as for a refusal
                raise self._refuse(peer, "setup_failed", SignalingFailed(f"no answer prepared: {exc}")) from exc
        finally:
            self._offers_in_progress -= 1
        tunnel.start_responder()
        body = answer.to_body()
        self._answered[peer] = (offer.tunnel_id, body)
        return body

    @staticmethod
    async def _answers(tunnel: Tunnel) -> bool:
        """Does the peer answer an echo on `tunnel` (records only it can seal) within REPLACE_PROBE_TIMEOUT?"""
        try:
            await tunnel.probe(REPLACE_PROBE_TIMEOUT)
        except (TunnelError, TimeoutError):
            return False
        return True

    def _refuse(self, peer: int, reason: str, error: Exception) -> Exception:
        """Count a refused offer, log it at most once per peer per interval; the error to raise."""
        self.refused_offers[reason] += 1
        if self._refusal_log.should_log(peer, self._clock()):
            logger.warning(
                "tunnel offer refused peer=%032x: %s: %s (%d %s so far)",
                peer, reason, error, self.refused_offers[reason], reason,
            )
        return error

    def _on_tunnel_event(self, event: TunnelEvent) -> None:
        if isinstance(event, TunnelDown) and event.info.state is TunnelState.FAILED and (event.info.reason or "").startswith(UNTRUSTED):
            self.untrusted_refused += 1
        if isinstance(event, TunnelDown):
            tunnel = self._tunnels.get(event.info.peer)
            if tunnel is not None and tunnel.info.tunnel_id == event.info.tunnel_id:
                del self._tunnels[event.info.peer]
                self._answered.pop(event.info.peer, None)
        if self._subscriber is not None:
            try:
                self._subscriber(event)
            except Exception:
                logger.exception("tunnel event subscriber failed")
