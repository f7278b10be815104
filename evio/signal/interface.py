"""The narrow interface the rest of evio uses for signaling.

``SignalClient`` (XMPP) and ``evio.testing.fake_signal.FakeSignalClient``
(in memory) both implement it; the overlay controller and the tunnel code
depend on this Protocol only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from evio.signal.events import E, Subscription
from evio.signal.protocol import Body

Handler = Callable[[str, int, Body], Awaitable[Body]]


class Signaling(Protocol):
    @property
    def connected(self) -> bool: ...

    @property
    def overlays(self) -> frozenset[str]: ...

    @property
    def connected_since(self) -> float | None:
        """Wall-clock time the current session logged in (None while disconnected)."""
        ...

    @property
    def sessions(self) -> int:
        """Logins completed so far (every one after the first is a reconnect)."""
        ...

    def node_id(self, overlay: str) -> int: ...

    def peers(self, overlay: str) -> dict[int, str]: ...

    def subscribe(self, event_type: type[E], callback: Callable[[E], None]) -> Subscription[E]: ...

    def register_handler(self, action: str, handler: Handler) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def wait_connected(self, timeout: float | None = None) -> None: ...

    async def request(
        self, overlay: str, peer: int, action: str, body: Body, timeout: float | None = None
    ) -> Body: ...
