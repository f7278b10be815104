"""Signaling events and a small typed subscription registry.

Subscribers register for one event class and receive instances of exactly that
class; the set of event classes is closed (``SignalEvent``), so a typo is a
type error, not a silently dead subscription.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)


class RemovalCause(enum.Enum):
    LEFT = "left"  # the peer's presence went unavailable or it stopped announcing the overlay
    SIGNAL_LOST = "signal_lost"  # our own connection to the server went away
    MEMBERSHIP_REVOKED = "membership_revoked"  # the server no longer lists it in the overlay's group
    REPLACED = "replaced"  # another JID took over the node id (the previous holder left first)
    # The peer said it is logging in again at once (its own membership check): it is back shortly,
    # nothing of it needs checking meanwhile.
    RELOGIN = "relogin"


@dataclass(frozen=True)
class PeerAdded:
    overlay: str
    node_id: int
    jid: str


@dataclass(frozen=True)
class PeerRemoved:
    overlay: str
    node_id: int
    jid: str
    cause: RemovalCause


@dataclass(frozen=True)
class Connected:
    jid: str  # the full JID the server bound for this session


@dataclass(frozen=True)
class Disconnected:
    reason: str  # human-readable; for logs


@dataclass(frozen=True)
class RevocationAdopted:
    """A newer revocation list of the overlay CA was verified and adopted (trust mode)."""

    overlay: str
    serial: int
    source: str  # where it came from: a file, the server host, a member's presence, the overlay
    # From the server host, which sends it to every member online: the overlay's flood is then a stand-by for
    # members it did not reach, sent by whichever node's random wait ends first (decision 0065).
    from_server_host: bool = False


@dataclass(frozen=True)
class MemberListAdopted:
    """A newer member list of the overlay CA was verified and adopted (presence to linked peers only, 0059)."""

    overlay: str
    serial: int
    source: str  # where it came from: a file, the join token's file, the server host, the overlay
    # Whether the overlay's flood passes it on: not a change from the server host, which every member online
    # had (decision 0065); the few that had the whole list from it flood it.
    flood: bool = True


SignalEvent = PeerAdded | PeerRemoved | Connected | Disconnected | RevocationAdopted | MemberListAdopted
EVENT_TYPES: tuple[type, ...] = (PeerAdded, PeerRemoved, Connected, Disconnected, RevocationAdopted, MemberListAdopted)

E = TypeVar("E", PeerAdded, PeerRemoved, Connected, Disconnected, RevocationAdopted, MemberListAdopted)


class Subscription(Generic[E]):
    def __init__(self, registry: EventRegistry, event_type: type[E], callback: Callable[[E], None]) -> None:
        self._registry = registry
        self.event_type: type[E] = event_type
        self.callback: Callable[[E], None] = callback

    def cancel(self) -> None:
        self._registry._remove(self)


class EventRegistry:
    """Synchronous fan-out of signaling events to typed subscribers.

    Callbacks run in the publisher's context (the event loop thread) and must
    not block; an exception in one is logged and does not reach the publisher or
    the other subscribers.
    """

    def __init__(self) -> None:
        self._subs: dict[type, list[Any]] = {t: [] for t in EVENT_TYPES}

    def subscribe(self, event_type: type[E], callback: Callable[[E], None]) -> Subscription[E]:
        if event_type not in self._subs:
            raise TypeError(f"{event_type!r} is not a signaling event")
        sub = Subscription(self, event_type, callback)
        self._subs[event_type].append(sub)
        return sub

    def publish(self, event: SignalEvent) -> None:
        for sub in list(self._subs[type(event)]):
            try:
                sub.callback(event)
            except Exception:
                log.exception("signal event subscriber failed on %s", event)

    def _remove(self, sub: Any) -> None:
        subs = self._subs[sub.event_type]
        if sub in subs:
            subs.remove(sub)
