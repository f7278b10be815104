"""The overlay controller: the `Orchestrator` core driven by signaling, tunnels and time (asyncio).

One `OverlayController` per overlay. It feeds the core with membership
(`PeerAdded` / `PeerRemoved`, our own `Connected` / `Disconnected`), tunnel
events (`on_tunnel_event`, wired to the tunnel manager), negotiation requests
from peers (the ``overlay.link`` and ``overlay.release`` remote actions) and
on-demand wishes from the SDN side, and carries out what the core returns:
negotiation requests, `LinkProvider.connect` / `disconnect`, and
`LinkUp` / `LinkDown` to subscribers. One timer wakes the core when it asks.

Everything runs in the event loop's thread: callers in other threads (the
os-ken side) hand `request_on_demand` / `release_on_demand` to the loop with
`call_soon_threadsafe`. The tunnel manager reports to `on_tunnel_event` and the
controller drives the manager, so bind the manager's callback late, e.g.
``TunnelManager(..., on_event=lambda e: controller.on_tunnel_event(e))``
before ``controller = OverlayController(..., links=manager)``.

Every task it starts is kept and observed; `stop()` releases the links this
node holds, disconnects every tunnel, reports the last `LinkDown`s and leaves
no task or timer behind. A controller is started once (the signaling
interface has no way to unregister an action handler; after `stop()` the
handlers refuse).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from evio.clock import REAL_CLOCK, Clock, Timer
from evio.config.model import LimitsConfig, TopologyConfig
from evio.overlay.adjacency_events import AdjacencyEvent, LinkDown, LinkInfo, LinkUp
from evio.overlay.negotiation import (
    ACTION_LINK,
    ACTION_RELEASE,
    LinkAnswer,
    LinkRefusal,
    NegotiationError,
    ReleaseAnswer,
    decode_link_answer,
    decode_link_request,
    decode_release_answer,
    decode_release_request,
    encode_link_answer,
    encode_link_request,
    encode_release_answer,
    encode_release_request,
)
from evio.overlay.orchestrator import (
    Action,
    CheckMembership,
    Connect,
    Disconnect,
    Doubt,
    Failure,
    Notify,
    Orchestrator,
    SendLinkRequest,
    SendRelease,
    Timings,
)
from evio.ratelimit import LogLimiter
from evio.signal.errors import ErrorReason, HandlerBadRequest, HandlerRejected, RequestError, SignalError
from evio.signal.events import Connected, Disconnected, PeerAdded, PeerRemoved, Subscription
from evio.signal.interface import Signaling
from evio.signal.protocol import Body
from evio.tunnel.session import TunnelDown, TunnelEvent, TunnelInfo, TunnelUp

_Answer = TypeVar("_Answer")
_Request = TypeVar("_Request")

__all__ = [
    "AdjacencyEvent",
    "AdjacencySubscription",
    "ControllerError",
    "LinkDown",
    "LinkInfo",
    "LinkProvider",
    "LinkUp",
    "OverlayController",
    "Timings",
]

log = logging.getLogger(__name__)

MALFORMED_LOG_INTERVAL = 60.0


class ControllerError(Exception):
    """The controller was used out of order (started twice)."""


class LinkProvider(Protocol):
    """Tunnels to peers; `evio.tunnel.manager.TunnelManager` satisfies it as is."""

    async def connect(self, peer: int) -> TunnelInfo: ...

    async def disconnect(self, peer: int) -> None: ...

    def doubt(self, peer: int) -> None:
        """Probe the tunnel to ``peer``: down within a few RTTs unless it answers."""


class AdjacencySubscription:
    def __init__(self, owner: OverlayController, callback: Callable[[AdjacencyEvent], None]) -> None:
        self._owner = owner
        self.callback = callback

    def cancel(self) -> None:
        if self in self._owner._subscribers:
            self._owner._subscribers.remove(self)


class _State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


_SIGNAL_DOWN = frozenset({ErrorReason.NOT_CONNECTED, ErrorReason.CLOSED})
_NO_ANSWER = frozenset({ErrorReason.NO_RESPONSE, ErrorReason.UNREACHABLE, ErrorReason.TIMEOUT})


def _failure_of(reason: ErrorReason) -> Failure:
    if reason in _SIGNAL_DOWN:
        return Failure.SIGNAL_DOWN
    if reason is ErrorReason.UNKNOWN_PEER:
        return Failure.PEER_ABSENT
    if reason in _NO_ANSWER:
        return Failure.NO_ANSWER
    return Failure.ERROR


class OverlayController:
    def __init__(
        self,
        overlay: str,
        node_id: int,
        topology: TopologyConfig,
        signaling: Signaling,
        links: LinkProvider,
        *,
        rng: random.Random,
        clock: Clock = REAL_CLOCK,
        reevaluate_interval: float = 10.0,
        timings: Timings | None = None,
        limits: LimitsConfig | None = None,
        load: Callable[[], float] | None = None,
    ) -> None:
        """``load``: the host's setup load (the tunnel manager's `setup_load`): fewer setups at once while it is high."""
        self.overlay = overlay
        self.node_id = node_id
        self.topology = topology
        self._signaling = signaling
        self._links = links
        self._clock = clock
        self.timings = replace(timings or Timings(), reevaluate_interval=reevaluate_interval)
        # A new epoch for every controller: peers tell our restart from a repeated request by it.
        epoch = rng.getrandbits(64)
        self._core = Orchestrator(
            node_id, topology, rng, clock.now(), self.timings, name=overlay, epoch=epoch, limits=limits, load=load
        )
        self._state = _State.NEW
        self._subscribers: list[AdjacencySubscription] = []
        self._signal_subscriptions: list[Subscription[Any]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: Timer | None = None
        self.malformed: Counter[int] = Counter()  # negotiation bodies from a peer we could not read
        self._malformed_log = LogLimiter[int](MALFORMED_LOG_INTERVAL)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve negotiation, follow membership, and start evaluating."""
        if self._state is not _State.NEW:
            raise ControllerError("an overlay controller is started once")
        self._signaling.register_handler(ACTION_LINK, self._on_link_request)
        self._signaling.register_handler(ACTION_RELEASE, self._on_release_request)
        self._state = _State.RUNNING
        subscribe = self._signaling.subscribe
        self._signal_subscriptions = [
            subscribe(PeerAdded, self._on_peer_added),
            subscribe(PeerRemoved, self._on_peer_removed),
            subscribe(Connected, self._on_connected),
            subscribe(Disconnected, self._on_disconnected),
        ]
        now = self._clock.now()
        actions: list[Action] = []
        for peer in self._signaling.peers(self.overlay):
            actions += self._core.peer_added(peer, now)
        if self._signaling.connected:
            actions += self._core.signal_connected(now)
        log.info(
            "overlay %s controller started node=%032x s=%s k=%s",
            self.overlay, self.node_id, self.topology.successors,
            "log2(n)" if self.topology.long_distance is None else self.topology.long_distance,
        )
        self._execute(actions)

    async def stop(self) -> None:
        """Release and disconnect every link; afterwards nothing of this controller runs."""
        if self._state is _State.NEW:
            self._state = _State.STOPPED
            return
        if self._state is not _State.RUNNING:
            return
        self._state = _State.STOPPING
        self._cancel_timer()
        for sub in self._signal_subscriptions:
            sub.cancel()
        self._signal_subscriptions.clear()
        await self._cancel_tasks()
        actions = self._core.stop(self._clock.now())
        releases = [a for a in actions if isinstance(a, SendRelease)]
        if releases:
            try:
                await self._clock.wait_for(
                    asyncio.gather(*(self._release_on_stop(a) for a in releases)),
                    self.timings.stop_release_timeout,
                )
            except TimeoutError:
                log.info("overlay %s: some releases went unanswered on stop", self.overlay)
        disconnects = [a.peer for a in actions if isinstance(a, Disconnect)]
        await asyncio.gather(*(self._disconnect(peer) for peer in disconnects))
        self._execute(self._core.close())
        await self._cancel_tasks()  # anything a late event started
        self._state = _State.STOPPED
        self._subscribers.clear()
        log.info("overlay %s controller stopped", self.overlay)

    # -- the API the daemon and the SDN side use -------------------------------------------

    def subscribe(self, callback: Callable[[AdjacencyEvent], None]) -> AdjacencySubscription:
        sub = AdjacencySubscription(self, callback)
        self._subscribers.append(sub)
        return sub

    def adjacency(self) -> dict[int, LinkInfo]:
        return self._core.adjacency()

    def set_topology(self, topology: TopologyConfig) -> None:
        """Apply new topology settings (a config reload); links they no longer want are released."""
        self.topology = topology
        self._core.set_topology(topology, self._clock.now())
        self._reschedule()

    def request_on_demand(self, peer: int) -> None:
        if self._state is _State.RUNNING:
            self._execute(self._core.want_on_demand(peer, self._clock.now()))

    def release_on_demand(self, peer: int) -> None:
        if self._state is _State.RUNNING:
            self._execute(self._core.drop_on_demand(peer, self._clock.now()))

    def expects_tunnel(self, peer: int) -> bool:
        """The tunnel manager's offer policy: serve offers only for links negotiated with `peer`."""
        return self._state is _State.RUNNING and self._core.expects_tunnel(peer)

    def on_tunnel_event(self, event: TunnelEvent) -> None:
        if self._state in (_State.NEW, _State.STOPPED):
            return
        info = event.info
        now = self._clock.now()
        if isinstance(event, TunnelUp):
            self._execute(self._core.tunnel_up(info.peer, info.tunnel_id, info.tap or "", now))
        elif isinstance(event, TunnelDown):
            self._execute(self._core.tunnel_down(info.peer, info.tunnel_id, info.reason or "down", now))

    @property
    def core(self) -> Orchestrator:
        """The decision core, for status and tests (read it; do not drive it)."""
        return self._core

    @property
    def running(self) -> bool:
        return self._state is _State.RUNNING

    def pending_tasks(self) -> int:
        return len(self._tasks)

    # -- signaling events -------------------------------------------------------------------

    def _on_peer_added(self, event: PeerAdded) -> None:
        if event.overlay == self.overlay and self._state is _State.RUNNING:
            self._execute(self._core.peer_added(event.node_id, self._clock.now()))

    def _on_peer_removed(self, event: PeerRemoved) -> None:
        if event.overlay == self.overlay and self._state is _State.RUNNING:
            self._execute(self._core.peer_removed(event.node_id, event.cause, self._clock.now()))

    def _on_connected(self, event: Connected) -> None:
        if self._state is _State.RUNNING:
            self._execute(self._core.signal_connected(self._clock.now()))

    def _on_disconnected(self, event: Disconnected) -> None:
        if self._state is _State.RUNNING:
            self._execute(self._core.signal_disconnected(self._clock.now()))

    # -- negotiation served to peers ---------------------------------------------------------

    def _decoded(self, overlay: str, peer: int, body: Body, decode: Callable[[Body], _Request]) -> _Request:
        """A peer's request for this overlay; refused (and counted, if malformed) otherwise."""
        if overlay != self.overlay:
            raise HandlerRejected(f"overlay {overlay} is not served here")
        try:
            return decode(body)
        except NegotiationError as exc:
            self._count_malformed(peer, exc)
            raise HandlerBadRequest(str(exc)) from exc

    async def _on_link_request(self, overlay: str, peer: int, body: Body) -> Body:
        request = self._decoded(overlay, peer, body, decode_link_request)
        if self._state is not _State.RUNNING:
            return encode_link_answer(LinkAnswer(False, refusal=LinkRefusal.STOPPING))
        answer, actions = self._core.link_request(peer, request, self._clock.now())
        self._execute(actions)
        return encode_link_answer(answer)

    async def _on_release_request(self, overlay: str, peer: int, body: Body) -> Body:
        request = self._decoded(overlay, peer, body, decode_release_request)
        if self._state is _State.NEW or self._state is _State.STOPPED:
            return encode_release_answer(ReleaseAnswer(None))
        answer, actions = self._core.release_request(peer, request, self._clock.now())
        self._execute(actions)
        return encode_release_answer(answer)

    # -- carrying out the core's actions ----------------------------------------------------

    def _execute(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Notify):
                self._notify(action.event)
            elif isinstance(action, CheckMembership):
                if self._state is _State.RUNNING:
                    self._signaling.check_membership()
            elif self._state is not _State.RUNNING:
                # While stopping, stop() itself carries out releases and disconnects.
                if isinstance(action, Disconnect):
                    self._spawn(self._disconnect(action.peer), f"overlay disconnect {action.peer:032x}")
            elif isinstance(action, SendLinkRequest):
                self._spawn(self._send_link_request(action), f"overlay link request {action.peer:032x}")
            elif isinstance(action, SendRelease):
                self._spawn(self._send_release(action), f"overlay release {action.peer:032x}")
            elif isinstance(action, Connect):
                self._spawn(self._connect(action), f"overlay connect {action.peer:032x}")
            elif isinstance(action, Disconnect):
                self._spawn(self._disconnect(action.peer), f"overlay disconnect {action.peer:032x}")
            elif isinstance(action, Doubt):
                self._links.doubt(action.peer)
        self._reschedule()

    def _notify(self, event: AdjacencyEvent) -> None:
        for sub in list(self._subscribers):
            try:
                sub.callback(event)
            except Exception:
                log.exception("overlay %s adjacency subscriber failed on %s", self.overlay, event)

    async def _ask(self, peer: int, action: str, body: Body, decode: Callable[[Body], _Answer]) -> _Answer | Failure:
        """One negotiation request; every way it can go wrong becomes a Failure for the core."""
        try:
            return decode(await self._signaling.request(
                self.overlay, peer, action, body, timeout=self.timings.request_timeout,
            ))
        except RequestError as exc:
            return _failure_of(exc.reason)
        except NegotiationError as exc:
            self._count_malformed(peer, exc)
            return Failure.ERROR
        except SignalError as exc:
            log.warning("overlay %s %s to %032x not sent: %s", self.overlay, action, peer, exc)
            return Failure.ERROR

    async def _send_link_request(self, action: SendLinkRequest) -> None:
        outcome = await self._ask(action.peer, ACTION_LINK, encode_link_request(action.request), decode_link_answer)
        if self._state is _State.RUNNING:
            self._execute(self._core.link_answered(action.peer, action.seq, outcome, self._clock.now()))

    async def _send_release(self, action: SendRelease) -> None:
        outcome = await self._ask(
            action.peer, ACTION_RELEASE, encode_release_request(action.request), decode_release_answer
        )
        if self._state is _State.RUNNING:
            self._execute(self._core.release_answered(action.peer, action.seq, outcome, self._clock.now()))

    async def _release_on_stop(self, action: SendRelease) -> None:
        try:
            await self._signaling.request(
                self.overlay, action.peer, ACTION_RELEASE, encode_release_request(action.request),
                timeout=self.timings.stop_release_timeout,
            )
        except SignalError:
            pass  # the tunnel goes down anyway; the release only spares the peer a failure count

    async def _connect(self, action: Connect) -> None:
        try:
            info = await self._clock.wait_for(self._links.connect(action.peer), self.timings.connect_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the provider is a failed setup, never a crash here
            reason = str(exc) or type(exc).__name__
            if self._state is _State.RUNNING:
                self._execute(self._core.connect_failed(action.peer, action.seq, reason, self._clock.now()))
            return
        if self._state is _State.RUNNING:
            self._execute(
                self._core.connect_succeeded(action.peer, action.seq, info.tunnel_id, info.tap or "", self._clock.now())
            )

    async def _disconnect(self, peer: int) -> None:
        try:
            await self._links.disconnect(peer)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("overlay %s disconnect from %032x failed", self.overlay, peer)
        if self._state is not _State.STOPPED:
            self._execute(self._core.disconnected(peer, self._clock.now()))

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("overlay %s task %s failed", self.overlay, task.get_name(), exc_info=task.exception())

    async def _cancel_tasks(self) -> None:
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- the timer --------------------------------------------------------------------------

    def _reschedule(self) -> None:
        self._cancel_timer()
        if self._state is not _State.RUNNING:
            return
        now = self._clock.now()
        wake = self._core.next_wakeup(now)
        if wake is None:
            return
        self._timer = self._clock.call_later(max(0.0, wake - now), self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        if self._state is _State.RUNNING:
            self._execute(self._core.tick(self._clock.now()))

    # -- bad input --------------------------------------------------------------------------

    def _count_malformed(self, peer: int, exc: NegotiationError) -> None:
        self.malformed[peer] += 1
        if self._malformed_log.should_log(peer, self._clock.now()):
            log.warning(
                "overlay %s malformed negotiation from peer=%032x (%s so far): %s",
                self.overlay, peer, self.malformed[peer], exc,
            )
