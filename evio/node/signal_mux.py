"""One signaling account serving several overlays, each through its own ``Signaling`` view.

An XMPP account logs in once, but each overlay's controller and tunnel
manager register their own remote-action handlers, and a client accepts one
handler per action. ``SharedAccount`` registers one dispatcher per action on
the client and routes each request to the handler of the overlay it names.
Each ``OverlaySignaling`` view sees only its overlay's peer events. The node
owns the client's start and stop; a view's are no-ops.
"""

from __future__ import annotations

from collections.abc import Callable

from evio.signal.errors import HandlerRejected, LoginFailure
from evio.signal.events import E, MemberListAdopted, PeerAdded, PeerRemoved, RevocationAdopted, Subscription
from evio.signal.identity import RevocationList
from evio.signal.interface import Handler, Signaling
from evio.signal.member_list import MemberList
from evio.signal.protocol import Body


class SharedAccount:
    def __init__(self, client: Signaling) -> None:
        self.client = client
        self._routes: dict[str, dict[str, Handler]] = {}  # action -> overlay -> handler

    def view(self, overlay: str) -> OverlaySignaling:
        if overlay not in self.client.overlays:
            raise KeyError(f"account serves no overlay {overlay!r}")
        return OverlaySignaling(self, overlay)

    def forget(self, overlay: str) -> None:
        """Drop an overlay's handlers (it was stopped; a restarted one registers its own)."""
        for routes in self._routes.values():
            routes.pop(overlay, None)

    def register(self, overlay: str, action: str, handler: Handler) -> None:
        routes = self._routes.get(action)
        if routes is None:
            routes = self._routes[action] = {}
            self.client.register_handler(action, self._dispatcher(action))
        if overlay in routes:
            raise ValueError(f"a handler for {action!r} in overlay {overlay} is already registered")
        routes[overlay] = handler

    def _dispatcher(self, action: str) -> Handler:
        async def dispatch(overlay: str, peer: int, body: Body) -> Body:
            handler = self._routes[action].get(overlay)
            if handler is None:
                raise HandlerRejected(f"{action} is not served in overlay {overlay}")
            return await handler(overlay, peer, body)

        return dispatch


class OverlaySignaling:
    """``Signaling`` narrowed to one overlay of a shared account."""

    def __init__(self, account: SharedAccount, overlay: str) -> None:
        self._account = account
        self._client = account.client
        self.overlay = overlay

    @property
    def connected(self) -> bool:
        return self._client.connected

    @property
    def overlays(self) -> frozenset[str]:
        return frozenset({self.overlay})

    @property
    def connected_since(self) -> float | None:
        return self._client.connected_since

    @property
    def sessions(self) -> int:
        return self._client.sessions

    @property
    def server(self) -> str | None:
        return self._client.server

    def use_servers(self, servers: tuple[tuple[str, int], ...]) -> None:
        self._client.use_servers(servers)  # the account's (the node hands a reload's list to the account itself)

    def last_error(self, overlay: str) -> LoginFailure | None:
        return self._client.last_error(overlay)

    def node_id(self, overlay: str) -> int:
        return self._client.node_id(overlay)

    def peers(self, overlay: str) -> dict[int, str]:
        return self._client.peers(overlay)

    def is_listed(self, overlay: str, node_id: int) -> bool:
        return self._client.is_listed(overlay, node_id)

    def listed_ids(self, overlay: str) -> frozenset[int]:
        return self._client.listed_ids(overlay)

    def revoked_nodes(self, overlay: str) -> frozenset[int]:
        return self._client.revoked_nodes(overlay)

    def revocation_list(self, overlay: str) -> RevocationList | None:
        return self._client.revocation_list(overlay)

    def revocation_list_text(self, overlay: str) -> str | None:
        return self._client.revocation_list_text(overlay)

    def receive_revocation_list(self, text: str, source: str = "local") -> bool:
        return self._client.receive_revocation_list(text, source)

    def message_counts(self) -> dict[str, dict[str, int]]:
        return self._client.message_counts()

    def listed_members(self, overlay: str) -> MemberList | None:
        return self._client.listed_members(overlay)

    def member_list_text(self, overlay: str) -> str | None:
        return self._client.member_list_text(overlay)

    def receive_member_list(self, text: str, source: str = "local") -> bool:
        return self._client.receive_member_list(text, source)

    def drop_counts(self) -> dict[str, int]:
        return self._client.drop_counts()

    def presence_lists_left_out(self) -> dict[str, list[str] | int]:
        return self._client.presence_lists_left_out()

    def subscribe(self, event_type: type[E], callback: Callable[[E], None]) -> Subscription[E]:
        if event_type not in (PeerAdded, PeerRemoved, RevocationAdopted, MemberListAdopted):
            return self._client.subscribe(event_type, callback)

        def ours_only(event: E) -> None:
            if (isinstance(event, PeerAdded | PeerRemoved | RevocationAdopted | MemberListAdopted)
                    and event.overlay != self.overlay):  # fmt: skip
                return
            callback(event)

        return self._client.subscribe(event_type, ours_only)

    def register_handler(self, action: str, handler: Handler) -> None:
        self._account.register(self.overlay, action, handler)

    def check_membership(self) -> None:
        self._client.check_membership()

    async def start(self) -> None:
        """The node starts the shared client."""

    async def stop(self) -> None:
        """The node stops the shared client."""

    async def wait_connected(self, timeout: float | None = None) -> None:
        await self._client.wait_connected(timeout)

    async def request(self, overlay: str, peer: int, action: str, body: Body, timeout: float | None = None) -> Body:
        return await self._client.request(overlay, peer, action, body, timeout)
