"""The narrow interface the rest of evio uses for signaling.

``SignalClient`` (XMPP) and ``evio.testing.fake_signal.FakeSignalClient``
(in memory) both implement it; the overlay controller and the tunnel code
depend on this Protocol only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from evio.signal.errors import LoginFailure
from evio.signal.events import E, Subscription
from evio.signal.identity import RevocationList
from evio.signal.member_list import MemberList
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

    def use_servers(self, servers: tuple[tuple[str, int], ...]) -> None:
        """Sign in to these servers from now on (a reload): the session stays if its server is among them."""
        ...

    @property
    def server(self) -> str | None:
        """host:port of the server signed in to, or tried next (several servers: evio.signal.failover); None
        where the transport has no servers (in memory)."""
        ...

    def last_error(self, overlay: str) -> LoginFailure | None:
        """Why `overlay`'s signaling is not working now (the step that failed), or None."""
        ...

    def node_id(self, overlay: str) -> int: ...

    def peers(self, overlay: str) -> dict[int, str]: ...

    def is_listed(self, overlay: str, node_id: int) -> bool:
        """Whether the overlay CA's member list held here names `node_id` (decision 0059; False without one): a
        member, present or not."""
        ...

    def listed_ids(self, overlay: str) -> frozenset[int]:
        """Every node id the overlay CA's member list held here names (decision 0059; empty without one)."""
        ...

    def revoked_nodes(self, overlay: str) -> frozenset[int]:
        """Node ids the overlay CA's newest revocation list revokes (trust mode; empty otherwise)."""
        ...

    def revocation_list(self, overlay: str) -> RevocationList | None:
        """The overlay CA's newest verified revocation list held here (trust mode), to pass on."""
        ...

    def revocation_list_text(self, overlay: str) -> str | None:
        """That list as text (`identity.list_to_text`), made once per serial: what the overlay's flood sends, and
        asks for at every frame it takes in (review21o O2)."""
        ...

    def receive_revocation_list(self, text: str, source: str = "local") -> bool:
        """A revocation list from anywhere (a file, the overlay): adopted if it verifies and is newer."""
        ...

    def message_counts(self) -> dict[str, dict[str, int]]:
        """Requests and responses sent through the server by action ("out"), requests received ("requests_in")."""
        ...

    def listed_members(self, overlay: str) -> MemberList | None:
        """The overlay CA's newest verified member list held here (presence to linked peers only), to pass on."""
        ...

    def member_list_text(self, overlay: str) -> str | None:
        """That list as text (`member_list.to_text`), made once per serial (review21h H9, review21o O2)."""
        ...

    def receive_member_list(self, text: str, source: str = "local") -> bool:
        """A member list from anywhere (a file, the overlay): adopted if it verifies and is newer."""
        ...

    def drop_counts(self) -> dict[str, int]:
        """Refused signaling input so far, by `evio.signal.drops.DropReason` value (the whole account's)."""
        ...

    def presence_lists_left_out(self) -> dict[str, list[str] | int]:
        """Revocation lists that did not fit our presence's identity element (decision 0036, amended): the overlays
        of those left out now (`lists_left_out`) and how many the documents made so far left out
        (`lists_left_out_total`), the whole account's."""
        ...

    def subscribe(self, event_type: type[E], callback: Callable[[E], None]) -> Subscription[E]: ...

    def register_handler(self, action: str, handler: Handler) -> None: ...

    def check_membership(self) -> None:
        """Ask the server again who the members are (soon, not at once: checks are rate-limited).

        A member that went away may have been removed from the overlay meanwhile,
        and servers do not push every change (prosody's mod_groups pushes none):
        a removed member found this way is reported as `PeerRemoved` with cause
        MEMBERSHIP_REVOKED, even though it is no longer present.
        """
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def wait_connected(self, timeout: float | None = None) -> None: ...

    async def request(
        self, overlay: str, peer: int, action: str, body: Body, timeout: float | None = None
    ) -> Body: ...
