"""``TunnelManager``: the one place that owns this node's tunnels (at most one per peer).

It serves incoming offers, opens tunnels on request, and reports every tunnel
going up or down to one subscriber (the overlay controller). Offer collisions
(both nodes open at once) are settled by node id: the higher id's offer wins.
A new offer from a peer we think we are connected to replaces the old tunnel
(the peer restarted or lost it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from evio.tunnel.config import TunnelSettings
from evio.tunnel.dtls import TunnelCertificate
from evio.tunnel.errors import OfferError, SignalingFailed
from evio.tunnel.session import (
    Clock,
    DatapathFactory,
    TapFactory,
    Tunnel,
    TunnelDown,
    TunnelEvent,
    TunnelInfo,
    default_datapath_factory,
    default_tap_factory,
)
from evio.tunnel.signaling import Body, TunnelOffer, TunnelSignaling

logger = logging.getLogger(__name__)


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
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.certificate = certificate
        self._signaling = signaling
        self._subscriber = on_event
        self._tap_factory = tap_factory
        self._datapath_factory = datapath_factory
        self._clock = clock
        self._wall_clock = wall_clock
        self._tunnels: dict[int, Tunnel] = {}
        self._closing = False

    def start(self) -> None:
        self._signaling.serve(self._on_offer)

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

    async def disconnect(self, peer: int) -> None:
        tunnel = self._tunnels.get(peer)
        if tunnel is not None:
            await tunnel.close()

    async def close(self) -> None:
        self._closing = True
        await asyncio.gather(*(t.close("node shutting down") for t in list(self._tunnels.values())))

    def _new_tunnel(self, peer: int, initiator: bool, tunnel_id: str | None = None) -> Tunnel:
        tunnel = Tunnel(
            node_id=self.node_id,
            peer=peer,
            config=self.config,
            certificate=self.certificate,
            on_event=self._on_tunnel_event,
            initiator=initiator,
            tunnel_id=tunnel_id,
            tap_factory=self._tap_factory,
            datapath_factory=self._datapath_factory,
            clock=self._clock,
            wall_clock=self._wall_clock,
        )
        self._tunnels[peer] = tunnel
        return tunnel

    async def _on_offer(self, peer: int, body: Body) -> Body:
        if self._closing:
            raise SignalingFailed("node shutting down")
        offer = TunnelOffer.from_body(body)
        if offer.node_id != peer:
            raise OfferError("node", "does not match the sender")
        existing = self._tunnels.get(peer)
        if existing is not None and existing.active:
            if existing.info.initiator and existing.state.value in ("negotiating",) and self.node_id > peer:
                raise SignalingFailed("offer collision: the higher node id's offer wins")
            await existing.close("replaced by a new offer from the peer")
        tunnel = self._new_tunnel(peer, initiator=False, tunnel_id=offer.tunnel_id)
        answer = await tunnel.prepare_answer(offer)
        tunnel.start_responder()
        return answer.to_body()

    def _on_tunnel_event(self, event: TunnelEvent) -> None:
        if isinstance(event, TunnelDown):
            tunnel = self._tunnels.get(event.info.peer)
            if tunnel is not None and tunnel.info.tunnel_id == event.info.tunnel_id:
                del self._tunnels[event.info.peer]
        if self._subscriber is not None:
            try:
                self._subscriber(event)
            except Exception:
                logger.exception("tunnel event subscriber failed")
