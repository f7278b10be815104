"""A tunnel's lifecycle as a pure machine: events in, actions out (in the manner of nebula's handshake machine).

``TunnelLifecycle`` holds what a tunnel is (its ``TunnelInfo``: state, path,
cipher, why it went down) and decides what happens next; it does no I/O,
reads no clock and starts no task. ``session.Tunnel`` is its adapter: it runs
ICE, DTLS, the TAP and the data path, tells the machine what came of them
(``handle(event)``), and performs the actions it gets back, in their order.

States, and the events that move them::

    NEGOTIATING   Offered (responder) / Answered (initiator) -> Connect
        |                                    (a bad answer   -> Fail)
        |         Connecting (Connect performed: ICE runs)
    CONNECTING    PathChosen                  -> Handshake
        |
    AUTHENTICATING HandshakeDone              -> StartDatapath, [WatchForDirect], Supervise
        |
    ESTABLISHING  LinkAlive                   -> ReportUp
        |
    UP            Moved (relay -> direct)     -> (the path in the info changes)

    any state     Close (local)               -> Stop, [CancelSetup while still setting up]
                  LinkDead (peer dead, closed, silent; ICE closed; underlay failed)
                                              -> Stop
                  Failed (the setup raised)   -> (the reason kept)
                  TearDown                    -> the teardown, step by step
                  TornDown                    -> ReportDown; CLOSED if it was up, else FAILED

The first reason given (Close, LinkDead, Failed) is the one reported.
Only an authenticated record from the peer (``LinkAlive``, from the liveness
machine) makes a tunnel UP, never the handshake alone.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from evio.config.model import Cipher
from evio.tunnel.liveness import DownReason
from evio.tunnel.path.path_kind import PathKind

if TYPE_CHECKING:
    from evio.tunnel.path.dtls import Fingerprint


class TunnelState(enum.Enum):
    NEGOTIATING = "negotiating"
    CONNECTING = "connecting"
    AUTHENTICATING = "authenticating"
    ESTABLISHING = "establishing"
    UP = "up"
    CLOSED = "closed"
    FAILED = "failed"


SETTING_UP = (TunnelState.NEGOTIATING, TunnelState.CONNECTING, TunnelState.AUTHENTICATING)
"""States in which a local close cancels the setup instead of waiting for it."""
FINISHED = (TunnelState.CLOSED, TunnelState.FAILED)


@dataclass(frozen=True)
class TunnelInfo:
    peer: int
    tunnel_id: str
    initiator: bool
    controlling: bool
    state: TunnelState
    path: PathKind | None = None
    local_candidate: str | None = None
    remote_candidate: str | None = None
    remote_addr: tuple[str, int] | None = None
    transport: str | None = None
    """How this node's end of the path travels: "udp", or "tcp" / "tls" to its TURN server."""
    cipher: Cipher | None = None
    tap: str | None = None
    setup_seconds: float | None = None
    reason: str | None = None
    """Why the tunnel went down or failed."""


# -- events ------------------------------------------------------------------------


@dataclass(frozen=True)
class Offered:
    """Responder: the peer's offer was read and answered with ``cipher``."""

    fingerprint: Fingerprint
    cipher: Cipher


@dataclass(frozen=True)
class Answered:
    """Initiator: the peer's answer to our offer of ``offered`` ciphers."""

    node_id: int
    tunnel_id: str
    fingerprint: Fingerprint
    cipher: Cipher
    offered: tuple[Cipher, ...]


@dataclass(frozen=True)
class Connecting:
    """The ``Connect`` action is being performed: ICE runs, and frames will be sealed with ``cipher``."""

    cipher: Cipher


@dataclass(frozen=True)
class PathChosen:
    """ICE chose the path the handshake runs on."""

    kind: PathKind
    local_type: str
    remote_type: str
    remote_addr: tuple[str, int]
    transport: str = "udp"


@dataclass(frozen=True)
class HandshakeDone:
    """DTLS completed with the pinned certificate and the TAP named ``tap`` is ready."""

    tap: str


@dataclass(frozen=True)
class LinkAlive:
    """The liveness machine's verdict: an authenticated record came from the peer at ``now``."""

    now: float


@dataclass(frozen=True)
class LinkDead:
    """The link is gone: the liveness machine's verdict, or the path under it failed."""

    reason: str


@dataclass(frozen=True)
class Moved:
    """The data path moved to another path (relay first, then direct)."""

    kind: PathKind
    local_type: str
    remote_type: str
    remote_addr: tuple[str, int]
    transport: str = "udp"


@dataclass(frozen=True)
class Close:
    """Closed locally."""

    reason: str


@dataclass(frozen=True)
class Failed:
    """The tunnel's task ended by an exception (``reason``: what it said)."""

    reason: str


@dataclass(frozen=True)
class TearDown:
    """Release everything: what to do, in order."""


@dataclass(frozen=True)
class TornDown:
    """Everything is released."""


Event = Offered | Answered | Connecting | PathChosen | HandshakeDone | LinkAlive | LinkDead | Moved | Close | Failed | TearDown | TornDown


# -- actions -----------------------------------------------------------------------


@dataclass(frozen=True)
class Connect:
    """Run ICE to the peer, then DTLS pinning ``fingerprint``; frames are sealed with ``cipher``."""

    fingerprint: Fingerprint
    cipher: Cipher


@dataclass(frozen=True)
class Fail:
    """Give up the setup (the signaling failed): ``reason``."""

    reason: str


@dataclass(frozen=True)
class Handshake:
    """DTLS on the chosen path."""


@dataclass(frozen=True)
class StartDatapath:
    """Start the data path on the chosen path's socket and the TAP, with the exported keys."""


@dataclass(frozen=True)
class WatchForDirect:
    """The relay was taken first: move to the direct path if it connects after all."""


@dataclass(frozen=True)
class Supervise:
    """Run liveness (and rekeying) until the link goes down."""


@dataclass(frozen=True)
class ReportUp:
    info: TunnelInfo


@dataclass(frozen=True)
class ReportDown:
    info: TunnelInfo


@dataclass(frozen=True)
class Stop:
    """End supervision now."""


@dataclass(frozen=True)
class CancelSetup:
    """Cancel the setup in progress (nothing it waits for matters any more)."""


@dataclass(frozen=True)
class CancelMove:
    """Stop moving to the direct path."""


@dataclass(frozen=True)
class StopDatapath:
    """Stop the data path, telling the peer with a CLOSE record first if ``say_close``."""

    say_close: bool


@dataclass(frozen=True)
class CloseDtls:
    """Send DTLS's close_notify."""


@dataclass(frozen=True)
class StopPump:
    """Stop reading what the ICE connection still receives."""


@dataclass(frozen=True)
class CloseIce:
    """Close both ICE connections (and the TURN allocation)."""


@dataclass(frozen=True)
class CloseTap:
    """Remove the TAP (made or still being made)."""


Action = (
    Connect | Fail | Handshake | StartDatapath | WatchForDirect | Supervise | ReportUp | ReportDown | Stop | CancelSetup
    | CancelMove | StopDatapath | CloseDtls | StopPump | CloseIce | CloseTap
)

_PEER_ALREADY_GONE = (DownReason.PEER_CLOSED.value, DownReason.PEER_SILENT.value)
"""Reasons after which a CLOSE record would reach nobody."""


class TunnelLifecycle:
    """One tunnel's lifecycle (module doc): ``handle`` an event, perform the actions returned."""

    def __init__(self, peer: int, tunnel_id: str, initiator: bool, controlling: bool, now: float) -> None:
        """``now``: when the tunnel started (the setup time is counted from it)."""
        self.info = TunnelInfo(peer=peer, tunnel_id=tunnel_id, initiator=initiator, controlling=controlling,
                               state=TunnelState.NEGOTIATING)  # fmt: skip
        self.started = now
        self.up_since: float | None = None
        """When the link came up, None before."""
        self.down_reason: str | None = None
        """Why the tunnel is going down (the first reason given), None while it is not."""

    @property
    def state(self) -> TunnelState:
        return self.info.state

    def handle(self, event: Event) -> list[Action]:
        """The actions ``event`` calls for, in the order they are to be performed."""
        if isinstance(event, Offered):
            return [Connect(event.fingerprint, event.cipher)]
        if isinstance(event, Answered):
            return self._answered(event)
        if isinstance(event, Connecting):
            self._set(state=TunnelState.CONNECTING, cipher=event.cipher)
            return []
        if isinstance(event, PathChosen):
            self._set(state=TunnelState.AUTHENTICATING, path=event.kind, local_candidate=event.local_type,
                      remote_candidate=event.remote_type, remote_addr=event.remote_addr, transport=event.transport)  # fmt: skip
            return [Handshake()]
        if isinstance(event, HandshakeDone):
            self._set(tap=event.tap, state=TunnelState.ESTABLISHING)
            watch: list[Action] = [WatchForDirect()] if self.info.path is PathKind.RELAY else []
            return [StartDatapath(), *watch, Supervise()]
        if isinstance(event, LinkAlive):
            self.up_since = event.now
            self._set(state=TunnelState.UP, setup_seconds=event.now - self.started)
            return [ReportUp(self.info)]
        if isinstance(event, Moved):
            self._set(path=event.kind, local_candidate=event.local_type, remote_candidate=event.remote_type,
                      remote_addr=event.remote_addr, transport=event.transport)  # fmt: skip
            return []
        if isinstance(event, LinkDead):
            self._going_down(event.reason)
            return [Stop()]
        if isinstance(event, Close):
            self._going_down(event.reason)
            return [Stop(), CancelSetup()] if self.info.state in SETTING_UP else [Stop()]
        if isinstance(event, Failed):
            self._going_down(event.reason)
            return []
        if isinstance(event, TearDown):
            if self.info.state in FINISHED:
                return []
            return [CancelMove(), StopDatapath(say_close=self.down_reason not in _PEER_ALREADY_GONE), CloseDtls(),
                    StopPump(), CloseIce(), CloseTap()]  # fmt: skip
        if isinstance(event, TornDown):
            if self.info.state in FINISHED:
                return []
            was_up = self.info.state is TunnelState.UP
            self._set(state=TunnelState.CLOSED if was_up else TunnelState.FAILED, reason=self.down_reason or "closed")
            return [ReportDown(self.info)]
        raise TypeError(f"not a lifecycle event: {event!r}")

    def _answered(self, answer: Answered) -> list[Action]:
        if answer.node_id != self.info.peer or answer.tunnel_id != self.info.tunnel_id:
            return [Fail("answer from another node or for another tunnel")]
        if answer.cipher not in answer.offered:
            return [Fail(f"answer chose a cipher we did not offer: {answer.cipher.value}")]
        return [Connect(answer.fingerprint, answer.cipher)]

    def _going_down(self, reason: str) -> None:
        if self.down_reason is None:
            self.down_reason = reason

    def _set(self, **changes: object) -> None:
        self.info = replace(self.info, **changes)  # type: ignore[arg-type]
