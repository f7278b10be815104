"""In-memory ``TunnelSignaling``: offers go straight to the peer's handler.

Bodies are copied through JSON, as a real transport would, and delivered on a
later loop iteration. ``drop_to`` makes offers to a peer vanish (the request
times out), ``tamper`` rewrites a body in flight (e.g. to substitute a
fingerprint).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from evio.tunnel.errors import SignalingFailed
from evio.tunnel.path.offer_answer import Body, OfferHandler


class FakeTunnelSignalingHub:
    def __init__(self) -> None:
        self._handlers: dict[int, OfferHandler] = {}
        self.drop_to: set[int] = set()
        self.tamper: Callable[[int, int, Body], Body] | None = None
        """(from node, to node, body) -> body, applied to offers and answers."""
        self.requests = 0

    def endpoint(self, node_id: int) -> FakeTunnelSignaling:
        return FakeTunnelSignaling(self, node_id)

    async def _deliver(self, src: int, dst: int, body: Body, timeout: float) -> Body:
        self.requests += 1
        handler = self._handlers.get(dst)
        if handler is None or dst in self.drop_to:
            await asyncio.sleep(timeout)
            raise SignalingFailed(f"no answer from {dst:032x}")
        await asyncio.sleep(0)
        offer = json.loads(json.dumps(body))
        if self.tamper:
            offer = self.tamper(src, dst, offer)
        answer = json.loads(json.dumps(await asyncio.wait_for(handler(src, offer), timeout)))
        if self.tamper:
            answer = self.tamper(dst, src, answer)
        return answer


class FakeTunnelSignaling:
    def __init__(self, hub: FakeTunnelSignalingHub, node_id: int) -> None:
        self._hub = hub
        self._node_id = node_id

    async def request(self, peer: int, body: Body, timeout: float) -> Body:
        return await self._hub._deliver(self._node_id, peer, body, timeout)

    def serve(self, handler: OfferHandler) -> None:
        self._hub._handlers[self._node_id] = handler
