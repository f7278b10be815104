"""The overlay controller's decision core: the paper's Network Orchestrator, without I/O.

It keeps this node's picture of its links in one overlay and turns inputs
(membership from signaling, tunnel events, negotiation requests and answers,
on-demand wishes, the passing of time) into actions for the adapter
(`evio.overlay.controller`): send a negotiation request, connect or disconnect
a tunnel, notify subscribers. Every input takes `now`; randomness comes from
the `random.Random` given at construction. Nothing here reads a clock, sleeps
or touches a socket.

Links are held per end, as in `evio.overlay.adjacency`: this node *holds* a
link (`held`, its own type) and knows whether the peer holds it (`theirs`).
A tunnel exists while either end holds it. Edge negotiation
(`evio.overlay.negotiation`):

- ``overlay.link`` asks to hold a link. For a new link the peer answers with
  `accept_request` (every type under its incoming cap, collisions settled by
  node id: the lower id's request wins), within `limits.max_tunnels` and a
  per-peer request rate (`limits.link_requests_per_s`: a flood is refused
  before any state is kept); the requester then connects, the answerer waits
  for the tunnel, and its tunnel manager serves the offer only because the
  link was agreed (`expects_tunnel`). ``existing`` requests take over or
  retype a link that is already there (no new tunnel; the new type's cap
  still applies).
- ``overlay.release`` says this end no longer holds the link; the answer says
  whether the peer still does. If not, the releaser disconnects: a tunnel
  comes down only when neither end holds it.

A tunnel going down ends the link for both ends; each re-evaluates and asks
again if it still wants it.

Restarts: every request and acceptance carries the sender's `epoch`, drawn
when its controller starts. A peer that restarts under the same node id has
no links, while this node still sees the old link up until tunnel liveness
kills it. Its new-link request, from another epoch than the one the link was
agreed with, ends that stale link here at once (LinkDown, and its tunnel
reports are ignored from then on) and is answered as for a new link; the
peer's tunnel offer then replaces the stale tunnel (the tunnel manager does
that for a peer it thinks it is connected to).

Evaluation (`tick`): ring = present members, self, and peers whose link is up
(a live tunnel proves the peer runs even if its signaling session dropped),
minus peers in failure backoff; `select_links` -> `desired_links` -> `diff`;
the operations are carried out in diff's order (successors first, never
below `s` successors up), skipping peers with a request in flight and
spending a token of a `TokenBucket` per tunnel added or removed. The ring comes
first: no long-distance link is started while one of our successor links is
not up, new successor links and new other links are each paced to
`max_setups` under way (fewer while the host is loaded: `load`), and a failing successor's backoff is capped at
`successor_backoff_cap`. Evaluations run
after membership changes (debounced), after link events, when a backoff or
deadline expires, and every `reevaluate_interval` seconds. A successor that
leaves signaling while its tunnel is up is doubted (the tunnel probes it) and
evaluated at once: for `standby_window` the successors we would have without
it are wanted too, as stand-ins (only peers we have no tunnel with), so a
crashed successor's place is taken by a link already up or on its way when
its tunnel is found dead; a live one keeps its link and the stand-in is
released. While our own
signaling is down nothing is evaluated and every tunnel stays up; after
login, evaluation waits for the membership to be re-learnt: until the
members' presences have been quiet for `membership_debounce`, at most
`settle_after_login`.
"""

from __future__ import annotations

import enum
import logging
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from evio.config.model import LimitsConfig, LogForm, TopologyConfig
from evio.overlay.adjacency import (
    AddLink,
    Adjacency,
    ChangeType,
    Link,
    LinkState,
    LinkType,
    RemoveLink,
    accept_request,
    cap_reason,
    desired_links,
    diff,
)
from evio.overlay.adjacency_events import AdjacencyEvent, LinkDown, LinkInfo, LinkUp
from evio.overlay.negotiation import LinkAnswer, LinkRefusal, LinkRequest, ReleaseAnswer, ReleaseRequest
from evio.overlay.peer_backoff import PeerBackoff
from evio.overlay.symphony import Ring, Selection, select_links
from evio.ratelimit import PeerRateLimiter, Rate, TokenBucket
from evio.signal.events import RemovalCause

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timings:
    """Every delay the controller uses, in seconds."""

    reevaluate_interval: float = 10.0  # periodic evaluation
    membership_debounce: float = 0.5  # quiet time after a membership change before evaluating ...
    membership_max_delay: float = 3.0  # ... but no longer than this after the first change
    settle_after_login: float = 2.0  # presence of the members arrives after login: wait for it, at most this long
    request_timeout: float = 10.0  # an overlay.link / overlay.release round trip
    connect_timeout: float = 90.0  # LinkProvider.connect (ICE may take about a minute to give up)
    await_tunnel: float = 100.0  # a link we accepted whose requester never connects is forgotten
    collision_wait: float = 10.0  # after losing a collision, how long the winner's request is awaited
    orphan_grace: float = 20.0  # a tunnel nobody holds is closed after this long
    refused_retry: float = 2.0  # after already_linked / link_closing / no_link: ask again after
    long_distance_refusal_ttl: float = 300.0  # a peer that refused a long-distance link is not asked again
    backoff_base: float = 1.0  # failing peers: first delay ...
    backoff_cap: float = 60.0  # ... doubling up to this
    successor_backoff_cap: float = 8.0  # ... or this, for a successor: the ring is retried until it closes
    change_rate: float = 4.0  # tunnels added or removed per second, sustained ...
    change_burst: int = 16  # ... after a burst of this many
    max_setups: int = 3  # new links of ours asked for or connecting at once, of each kind: successors, others
    stop_release_timeout: float = 1.0  # on stop, how long releases are given before tunnels close
    revalidate_after: float = 1.5  # a linked peer gone from signaling this long: ask whether it is still a member
    # A successor gone from signaling while its tunnel is up is probed by the tunnel (dead within 0.25-1 s if
    # it crashed); meanwhile the next peer is linked as a successor too, and released after this if it lives.
    standby_window: float = 2.0
    relogin_grace: float = 30.0  # ... or this long, when it said it was logging in again
    successor_overdue: float = 30.0  # a successor link not up after this long is logged as a warning, once a minute


OVERDUE_REPEAT = 60.0  # seconds between warnings about the same overdue successor
RELOGIN_GRACE_STRETCH = 10  # a peer logging in again is never given longer than this many `relogin_grace`s


class Phase(enum.Enum):
    """Where the tunnel to a peer is, as this node sees it."""

    NONE = "none"
    AWAITING = "awaiting"  # we accepted the peer's request: it connects, we wait for the tunnel
    CONNECTING = "connecting"  # our request was accepted: we called connect
    UP = "up"
    CLOSING = "closing"  # we called disconnect


class Failure(enum.Enum):
    """How one of our requests ended without an answer from the peer."""

    SIGNAL_DOWN = "signal_down"  # our own signaling session is down: not the peer's fault
    PEER_ABSENT = "peer_absent"  # the peer is not present in signaling (left, or not yet known)
    NO_ANSWER = "no_answer"  # timed out or bounced
    ERROR = "error"  # an error answer, or one we could not read


# Refusals that say the answerer is full (or we asked too often): asking again soon would not help.
_FULL = frozenset({
    LinkRefusal.TOO_MANY_SUCCESSORS, LinkRefusal.TOO_MANY_ON_DEMAND, LinkRefusal.TOO_MANY_LINKS, LinkRefusal.RATE_LIMITED,
})


# -- actions for the adapter ------------------------------------------------------------------


@dataclass(frozen=True)
class SendLinkRequest:
    peer: int
    seq: int  # pass back with the answer
    request: LinkRequest


@dataclass(frozen=True)
class SendRelease:
    peer: int
    seq: int
    request: ReleaseRequest


@dataclass(frozen=True)
class Connect:
    peer: int
    seq: int


@dataclass(frozen=True)
class Disconnect:
    peer: int


@dataclass(frozen=True)
class Notify:
    event: AdjacencyEvent


@dataclass(frozen=True)
class CheckMembership:
    """Ask signaling whether peers that left are still members (a removal is then reported as revoked)."""


Action = SendLinkRequest | SendRelease | Connect | Disconnect | Notify | CheckMembership


@dataclass(slots=True)
class _Peer:
    """Everything this node tracks about one peer it has, or is negotiating, a link with."""

    held: LinkType | None = None  # our hold
    theirs: LinkType | None = None  # the peer's hold, as far as we know
    asking: LinkType | None = None  # our overlay.link in flight (or awaiting the winner after a collision)
    asking_existing: bool = False
    asking_seq: int = 0
    collision_until: float | None = None
    releasing_seq: int | None = None  # our overlay.release in flight ...
    releasing_type: LinkType | None = None  # ... of a link we held as this
    release_due: LinkType | None = None  # a release (of a link held as this) to send once signaling is back
    phase: Phase = Phase.NONE
    connect_seq: int = 0
    deadline: float | None = None  # AWAITING: give up; UP with no holder: close
    tunnel_id: str | None = None
    last_down_id: str | None = None  # a late report about this tunnel is ignored
    epoch: int | None = None  # the peer's epoch in its last request or acceptance
    tap: str | None = None
    since: float = 0.0
    announced: bool = False  # LinkUp sent for the current tunnel
    released_by_peer: bool = False  # the peer let go: its tunnel going down is no failure

    def holder_type(self) -> LinkType | None:
        return self.held or self.theirs

    def busy(self) -> bool:
        return self.asking is not None or self.releasing_seq is not None

    def idle(self) -> bool:
        return (
            self.held is None
            and self.theirs is None
            and not self.busy()
            and self.release_due is None
            and self.phase is Phase.NONE
        )

    def link_state(self) -> LinkState:
        if self.phase is Phase.UP:
            return LinkState.UP
        if self.phase is Phase.CLOSING:
            return LinkState.CLOSING
        return LinkState.PENDING


class Orchestrator:
    def __init__(
        self,
        node_id: int,
        topology: TopologyConfig,
        rng: random.Random,
        now: float,
        timings: Timings | None = None,
        name: str = "",
        epoch: int = 0,
        limits: LimitsConfig | None = None,
        load: Callable[[], float] | None = None,
    ) -> None:
        """``load``: how far the host's setups are stretched now (>= 1; the tunnels' patience factor):
        fewer new links are set up at once while it is above 1."""
        self.node_id = node_id
        self._load = load
        self.limits = limits or LimitsConfig()
        self._link_requests = PeerRateLimiter[int](
            Rate(self.limits.link_requests_per_s, self.limits.link_request_burst)
        )
        self.epoch = epoch  # sent with our requests and acceptances: a restart changes it
        self.topology = topology
        self.timings = timings or Timings()
        self.name = name  # the overlay id, for logs
        self._rng = rng
        self._log_form = LogForm(topology.log_form)
        self._members: set[int] = set()
        self._peers: dict[int, _Peer] = {}
        self._on_demand: dict[int, None] = {}  # wanted on-demand peers, oldest wish first
        self._backoff = PeerBackoff(self.timings.backoff_base, self.timings.backoff_cap)
        self._budget = TokenBucket(Rate(self.timings.change_rate, self.timings.change_burst), now)
        self._retry_at: dict[int, float] = {}  # refused for a passing reason: not before then
        self._refused_long_distance: dict[int, float] = {}  # peer -> until
        self._absent_check: dict[int, float] = {}  # linked peer gone from signaling -> when to ask about it
        self._doubted: dict[int, float] = {}  # up successor gone from signaling -> until when it has a stand-in
        self._stand_in: dict[int, float] = {}  # peer linked as a stand-in -> until when it is wanted as one
        self._successors: frozenset[int] = frozenset()  # our ring successors, backed-off ones included
        # A successor whose link is not up: since when, when it was last warned about, the last setback. Kept
        # for our successors only (a few peers), so a refusal that is retried quietly still shows in the log.
        self._overdue: dict[int, tuple[float, float | None]] = {}
        self._setback: dict[int, str] = {}
        # Our signaling session ended then ... (or we started then: the first login is a way back too, and
        # on a loaded host it is the only measure a node has before its peers' sessions start to drop)
        self._signal_lost_at: float | None = now
        self._rejoin_time = 0.0  # ... and the last time it came back, it took this long
        self._connected = False
        self._settle_until = now
        self._settle_deadline = now  # the latest _settle_until may be after a login
        self._due: float | None = None  # an evaluation is wanted then
        self._membership_first: float | None = None
        self._membership_due: float | None = None
        self._periodic_at = now + self.timings.reevaluate_interval
        self._seq = 0
        self._stopped = False
        self._out: list[Action] = []
        # Observability: what tests and `status` read.
        self.ticks = 0  # wake-ups, evaluated or not (e.g. while signaling is down)
        self.evaluations = 0
        self.requests_sent = 0
        self.refusals_received: Counter[LinkRefusal] = Counter()
        self.refusals_sent: Counter[LinkRefusal] = Counter()
        self.failures: Counter[Failure | str] = Counter()

    # == inputs: signaling =======================================================================

    def signal_connected(self, now: float) -> list[Action]:
        if self._signal_lost_at is not None:
            # How long our own way back took: a peer that dropped out is given as long (see peer_removed).
            self._rejoin_time = now - self._signal_lost_at
            self._signal_lost_at = None
        self._connected = True
        self._settle_until = self._settle_deadline = now + self.timings.settle_after_login
        self._want_evaluation(self._settle_until)
        return self._flush()

    def signal_disconnected(self, now: float) -> list[Action]:
        # Nothing is torn down: tunnels carry traffic without signaling. Evaluation pauses.
        if self._connected:
            self._signal_lost_at = now
        self._connected = False
        return self._flush()

    def peer_added(self, peer: int, now: float) -> list[Action]:
        if peer == self.node_id or peer in self._members:
            return self._flush()
        self._members.add(peer)
        if now < self._settle_until:
            # The presences a login brings arrive together (16 in 46 ms in a lab): once they pause, the
            # membership is known. Waiting the whole settle time kept a node that had just (re)joined
            # from asking its successors while its predecessors already linked to it and handed it
            # broadcasts it could not pass on (a 1.6 s outage for a pair crossing it, E8).
            self._settle_until = min(self._settle_deadline, now + self.timings.membership_debounce)
        self._absent_check.pop(peer, None)  # back: still a member
        if self._doubted.pop(peer, None) is not None:
            self._want_evaluation(now)  # its stand-in is not needed any more
        self._membership_changed(now)
        return self._flush()

    def peer_removed(self, peer: int, cause: RemovalCause, now: float) -> list[Action]:
        self._members.discard(peer)
        if cause is RemovalCause.SIGNAL_LOST:
            return self._flush()  # our session ended; the peer may be fine, and so are its tunnels
        self._membership_changed(now)
        self._backoff.forget(peer)
        self._retry_at.pop(peer, None)
        self._refused_long_distance.pop(peer, None)
        self._on_demand.pop(peer, None)
        st = self._peers.get(peer)
        if st is None:
            return self._flush()
        if st.asking is not None:
            st.asking, st.collision_until = None, None
        st.release_due = None
        if cause is RemovalCause.MEMBERSHIP_REVOKED or st.phase is not Phase.UP:
            # Revoked: no link may stay. Not up yet: it will not come up without the peer.
            st.held = st.theirs = None
            if st.phase is Phase.AWAITING:
                self._set_phase(st, Phase.NONE, now)
            elif st.phase in (Phase.UP, Phase.CONNECTING):
                self._disconnect(peer, st, now)
        # An up link to a peer that merely left signaling stays while its tunnel lives, unless
        # signaling, asked a little later, says it was removed (servers need not push that). A peer
        # logging in again said it is back at once: it is asked about only if it is not, since each
        # check is a re-login of ours that our own peers see (a cascade around a large overlay).
        if cause is not RemovalCause.MEMBERSHIP_REVOKED and st.phase is Phase.UP:
            if cause is RemovalCause.RELOGIN:
                # ... given twice as long as our own way back took, when that was longer: in a 128-node
                # lab logins took 20-60 s, so peers logging in again were asked about after 30 s, each
                # check a re-login seen by the checker's own peers (675 in ten minutes, the ring never
                # closed). Bounded, so a revoked member is still found.
                wait = max(self.timings.relogin_grace,
                           min(2 * self._rejoin_time, RELOGIN_GRACE_STRETCH * self.timings.relogin_grace))
            else:
                # A peer whose session dropped needs about as long to log in again as we did last time:
                # on a loaded host logins took 20 s, and checking after 1.5 s made every drop a re-login
                # of each linked peer (some 270 in four minutes of a 64-node lab). Unloaded, 1.5 s.
                wait = max(self.timings.revalidate_after, min(self._rejoin_time, self.timings.relogin_grace))
            self._absent_check[peer] = now + wait
            if cause is RemovalCause.LEFT and peer in self._successors and self._connected:
                # It may have crashed (its session closes with its process): its tunnel is probed, and
                # the peer after it is linked now, alongside, rather than once the probe has ended.
                self._doubted[peer] = now + self.timings.standby_window
                self._membership_due = now
        else:
            self._absent_check.pop(peer, None)
        self._forget_if_idle(peer)
        return self._flush()

    # == inputs: tunnels =========================================================================

    def tunnel_up(self, peer: int, tunnel_id: str, tap: str, now: float) -> list[Action]:
        st = self._peers.get(peer)
        if st is None:
            st = self._peers[peer] = _Peer()
        if st.tunnel_id == tunnel_id or tunnel_id == st.last_down_id:
            return self._flush()  # already known (connect's result and the event both report it)
        if st.tunnel_id is not None:
            self._announce_down(peer, st, "replaced by a new tunnel")
        st.tunnel_id, st.tap = tunnel_id, tap
        st.released_by_peer = False
        self._set_phase(st, Phase.UP, now)
        self._backoff.succeeded(peer)
        log.info("overlay %s link up peer=%032x tunnel=%s tap=%s", self.name, peer, tunnel_id, tap)
        self._announce_up(peer, st)
        if not self._stopped:
            self._want_evaluation(now)
        return self._flush()

    def tunnel_down(self, peer: int, tunnel_id: str | None, reason: str, now: float) -> list[Action]:
        st = self._peers.get(peer)
        if st is None or st.phase is Phase.NONE:
            return self._flush()
        if tunnel_id is not None and (
            tunnel_id == st.last_down_id or (st.tunnel_id is not None and tunnel_id != st.tunnel_id)
        ):
            return self._flush()  # about an older tunnel
        was, held = st.phase, st.held
        gone = peer not in self._members
        expected = was is Phase.CLOSING or st.released_by_peer or gone or self._stopped
        if gone and was is Phase.UP and self._membership_due is not None:
            # A peer gone from signaling whose tunnel has now died too (a crash): its place in the ring
            # is free and the neighbours must link up at once, not after the membership debounce.
            self._membership_due = min(self._membership_due, now)
        self._end_tunnel(peer, st, reason, now)
        if not expected:
            self._fail(peer, f"tunnel {reason}", now, held)
            if was is Phase.CONNECTING and held is not None:
                # Our offer may never have reached the peer (no_response): without word from us it
                # would wait for our tunnel until `await_tunnel`, a pending link on its side only.
                self._withdraw(peer, st, held)
        log.info("overlay %s link down peer=%032x (%s, was %s)", self.name, peer, reason, was.value)
        self._forget_if_idle(peer)
        if not self._stopped:
            self._want_evaluation(now)
        return self._flush()

    def connect_succeeded(self, peer: int, seq: int, tunnel_id: str, tap: str, now: float) -> list[Action]:
        st = self._peers.get(peer)
        if st is None or st.connect_seq != seq or st.phase is not Phase.CONNECTING:
            return self._flush()
        return self.tunnel_up(peer, tunnel_id, tap, now)

    def connect_failed(self, peer: int, seq: int, reason: str, now: float) -> list[Action]:
        st = self._peers.get(peer)
        if st is None or st.connect_seq != seq or st.phase is not Phase.CONNECTING:
            return self._flush()  # already reported by a tunnel event, or no longer wanted
        log.info("overlay %s connect to peer=%032x failed: %s", self.name, peer, reason)
        held = st.held
        st.held = st.theirs = None
        self._fail(peer, "connect failed", now, held)
        # Tell the peer to stop waiting for our tunnel, and make sure no half-made one lingers.
        if held is not None and peer in self._members and self._connected:
            self._send_release(peer, st, held)
        self._disconnect(peer, st, now)
        self._want_evaluation(now)
        return self._flush()

    def disconnected(self, peer: int, now: float) -> list[Action]:
        """Our disconnect call returned: whatever it closed is gone (the provider may not report it)."""
        st = self._peers.get(peer)
        if st is None or st.phase is not Phase.CLOSING:
            return self._flush()
        self._end_tunnel(peer, st, "closed", now)
        self._forget_if_idle(peer)
        if not self._stopped:
            self._want_evaluation(now)
        return self._flush()

    # == inputs: negotiation =====================================================================

    def link_request(self, peer: int, request: LinkRequest, now: float) -> tuple[LinkAnswer, list[Action]]:
        """A peer's overlay.link: the answer to send back, and what to do."""
        if self._stopped:
            return LinkAnswer(False, refusal=LinkRefusal.STOPPING), self._flush()
        if not self._link_requests.allow(peer, now):
            # Before any state is kept for the peer: a flood costs a counter, nothing more.
            self.refusals_sent[LinkRefusal.RATE_LIMITED] += 1
            return LinkAnswer(False, refusal=LinkRefusal.RATE_LIMITED), self._flush()
        st = self._peers.get(peer)
        if st is None:
            st = self._peers[peer] = _Peer()
        if st.epoch is not None and st.epoch != request.epoch and st.phase is Phase.UP and not request.existing:
            # The peer restarted: the link it does not know any more is stale.
            log.info("overlay %s peer=%032x restarted: its new request replaces the stale link", self.name, peer)
            self._end_tunnel(peer, st, "peer restarted", now)
        st.epoch = request.epoch
        answer = self._answer_link(peer, st, request, now)
        if answer.accepted:
            answer = replace(answer, epoch=self.epoch)
            log.debug(
                "overlay %s accepted %s link from peer=%032x%s",
                self.name, request.type.value, peer, " (existing)" if request.existing else "",
            )
            self._want_evaluation(now)
        else:
            assert answer.refusal is not None
            self.refusals_sent[answer.refusal] += 1
            log.debug(
                "overlay %s refused %s link from peer=%032x: %s",
                self.name, request.type.value, peer, answer.refusal.value,
            )
            self._forget_if_idle(peer)
        return answer, self._flush()

    def link_answered(self, peer: int, seq: int, outcome: LinkAnswer | Failure, now: float) -> list[Action]:
        st = self._peers.get(peer)
        if st is None or st.asking is None or st.asking_seq != seq or self._stopped:
            return self._flush()  # superseded (e.g. we accepted the peer's own request meanwhile)
        wanted, existing = st.asking, st.asking_existing
        self._want_evaluation(now)
        if isinstance(outcome, LinkAnswer) and outcome.accepted:
            st.asking = None
            st.theirs = outcome.held_as
            st.epoch = outcome.epoch
            if not existing:
                st.held = wanted
                if st.phase in (Phase.NONE, Phase.AWAITING):
                    self._connect(peer, st, now)
            elif st.phase is Phase.NONE:
                st.held = None  # the link went down while the peer was agreeing
            log.debug("overlay %s %s link to peer=%032x accepted", self.name, wanted.value, peer)
            self._announce_up(peer, st)
        elif isinstance(outcome, LinkAnswer):
            assert outcome.refusal is not None
            refusal = outcome.refusal
            self.refusals_received[refusal] += 1
            log.debug("overlay %s %s link to peer=%032x refused: %s", self.name, wanted.value, peer, refusal.value)
            if refusal is LinkRefusal.COLLISION and not existing:
                st.collision_until = now + self.timings.collision_wait  # the peer's own request is coming
                return self._flush()
            st.asking = None
            if refusal is LinkRefusal.TOO_MANY_LONG_DISTANCE:
                self._refused_long_distance[peer] = now + self.timings.long_distance_refusal_ttl
            elif refusal in _FULL:
                self._fail(peer, f"refused: {refusal.value}", now, wanted)  # the peer is full: back off, ask others
            else:
                self._retry_at[peer] = now + self.timings.refused_retry
                self._note_setback(peer, f"refused: {refusal.value}")
            if existing:
                # The link cannot be held as we wanted: let go of it (the peer decides if it stays).
                self._let_go(peer, st, now)
        else:
            st.asking = None
            self.failures[outcome] += 1
            log.info("overlay %s %s link request to peer=%032x failed: %s", self.name, wanted.value, peer, outcome.value)
            if outcome in (Failure.NO_ANSWER, Failure.ERROR):
                self._fail(peer, f"link request {outcome.value}", now, wanted)
                if not existing:
                    # The peer may have accepted and lost only its answer: it would await our tunnel.
                    self._withdraw(peer, st, wanted)
            else:
                self._retry_at[peer] = now + self.timings.refused_retry
                self._note_setback(peer, f"link request {outcome.value}")
            # An existing link keeps our local hold: only the peer's bookkeeping is behind.
        self._forget_if_idle(peer)
        return self._flush()

    def release_request(self, peer: int, request: ReleaseRequest, now: float) -> tuple[ReleaseAnswer, list[Action]]:
        """A peer's overlay.release: it no longer holds the link. Answer with our own hold."""
        st = self._peers.get(peer)
        if st is None:
            return ReleaseAnswer(None), self._flush()
        st.theirs = None
        answer = ReleaseAnswer(st.held)
        if st.held is None and st.asking is None:
            st.released_by_peer = True  # the releaser now closes the tunnel
            if st.phase is Phase.AWAITING:
                self._set_phase(st, Phase.NONE, now)  # it will not connect any more
        log.debug(
            "overlay %s peer=%032x released its %s link%s",
            self.name, peer, request.type.value, "" if st.held is None else f" (we hold it as {st.held.value})",
        )
        self._forget_if_idle(peer)
        if not self._stopped:
            self._want_evaluation(now)
        return answer, self._flush()

    def release_answered(self, peer: int, seq: int, outcome: ReleaseAnswer | Failure, now: float) -> list[Action]:
        st = self._peers.get(peer)
        if st is None or st.releasing_seq != seq or self._stopped:
            return self._flush()
        st.releasing_seq = None
        released_type, st.releasing_type = st.releasing_type, None
        if isinstance(outcome, ReleaseAnswer):
            st.theirs = outcome.held_as
        elif outcome is Failure.SIGNAL_DOWN:
            if st.held is None:
                st.release_due = released_type  # say it again once signaling is back; the tunnel stays meanwhile
            return self._flush()
        else:
            st.theirs = None  # cannot ask: assume the peer does not need it
        self._close_if_unheld(peer, st, now)
        self._forget_if_idle(peer)
        self._want_evaluation(now)
        return self._flush()

    # == inputs: the SDN side ====================================================================

    def want_on_demand(self, peer: int, now: float) -> list[Action]:
        if peer == self.node_id or self._stopped:
            return self._flush()
        if not self.topology.on_demand.enabled:
            log.debug("overlay %s on-demand link to peer=%032x ignored: disabled", self.name, peer)
            return self._flush()
        if peer not in self._on_demand:
            self._on_demand[peer] = None
            self._want_evaluation(now)
        return self._flush()

    def drop_on_demand(self, peer: int, now: float) -> list[Action]:
        if self._on_demand.pop(peer, 0) is None:
            self._want_evaluation(now)
        return self._flush()

    # == time ====================================================================================

    def next_wakeup(self, now: float) -> float | None:
        """When `tick` has something to do (None: only an input can change anything)."""
        if self._stopped:
            return None
        times: list[float] = [self._periodic_at]
        if self._membership_due is not None:
            times.append(self._membership_due)
        elif self._due is not None:
            times.append(self._due)
        expiry = self._backoff.next_expiry(now)
        if expiry is not None:
            times.append(expiry)  # a backed-off peer rejoins the ring
        later = [*self._retry_at.values(), *self._refused_long_distance.values(), *self._doubted.values()]
        if self._connected:
            later.extend(self._absent_check.values())
        for st in self._peers.values():
            later.extend(t for t in (st.deadline, st.collision_until) if t is not None)
        times.extend(t for t in later if t > now)  # those due now are handled by the tick they cause
        return min(times)

    def tick(self, now: float) -> list[Action]:
        """Expire what is due, and evaluate (unless membership is still changing)."""
        if self._stopped:
            return self._flush()
        self.ticks += 1
        self._expire(now)
        if self._membership_due is not None and now < self._membership_due:
            # Membership is still moving: the debounced evaluation will cover every other wish.
            self._due = None
            if self._periodic_at <= now:
                self._periodic_at = now + self.timings.reevaluate_interval
            return self._flush()
        self._evaluate(now)
        return self._flush()

    def set_topology(self, topology: TopologyConfig, now: float) -> None:
        """New s, k, log form, caps or on-demand settings (a config reload): the next evaluation uses them.

        Links the new settings no longer want are released by that evaluation as usual; nothing else changes.
        """
        if topology == self.topology:
            return
        self.topology = topology
        if not topology.on_demand.enabled:
            # Its links go with the next evaluation; kept wishes would come back unasked if it is enabled again.
            self._on_demand.clear()
        self._log_form = LogForm(topology.log_form)
        self._want_evaluation(now)

    # == stop ====================================================================================

    def stop(self, now: float) -> list[Action]:
        """Releases for every link we hold, then a disconnect for every tunnel: the node leaves."""
        self._stopped = True
        for peer, st in self._peers.items():
            if st.held is not None and peer in self._members and self._connected:
                self._seq += 1
                self._out.append(SendRelease(peer, self._seq, ReleaseRequest(st.held)))
            st.held = st.theirs = st.asking = None
            st.releasing_seq = st.releasing_type = None
        for peer, st in self._peers.items():
            if st.phase is not Phase.NONE:
                self._disconnect(peer, st, now)
        return self._flush()

    def close(self, reason: str = "controller stopped") -> list[Action]:
        """After stop's disconnects: report what is still announced, and forget everything."""
        self._stopped = True
        for peer, st in self._peers.items():
            self._announce_down(peer, st, reason)
        self._peers.clear()
        self._members.clear()
        self._on_demand.clear()
        self._retry_at.clear()
        self._refused_long_distance.clear()
        self._absent_check.clear()
        self._doubted.clear()
        self._stand_in.clear()
        self._successors = frozenset()
        self._backoff.clear()
        return self._flush()

    # == views ===================================================================================

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def members(self) -> frozenset[int]:
        return frozenset(self._members)

    def adjacency(self) -> dict[int, LinkInfo]:
        out: dict[int, LinkInfo] = {}
        for peer, st in self._peers.items():
            link_type = st.holder_type()
            if link_type is None:
                continue
            tap = st.tap if st.phase in (Phase.UP, Phase.CLOSING) else None
            out[peer] = LinkInfo(peer, link_type, st.link_state(), tap, st.since)
        return out

    def view(self) -> Adjacency:
        """Our links as `diff` and `accept_request` see them (our in-flight requests as pending holds)."""
        outgoing: dict[int, Link] = {}
        incoming: dict[int, Link] = {}
        for peer, st in self._peers.items():
            mine = st.held or st.asking
            if mine is not None:
                outgoing[peer] = Link(mine, st.link_state())
            if st.theirs is not None:
                incoming[peer] = Link(st.theirs, st.link_state())
        return Adjacency(outgoing, incoming)

    def tunnel_count(self) -> int:
        """Tunnels this node has or is setting up or awaiting (what `limits.max_tunnels` caps)."""
        return sum(1 for st in self._peers.values() if st.phase is not Phase.NONE)

    def expects_tunnel(self, peer: int) -> bool:
        """May `peer` offer us a tunnel? Only for a link negotiated with it (or up, to replace a stale tunnel).

        The tunnel manager asks before it gathers a socket, allocates on TURN or makes a TAP.
        """
        st = self._peers.get(peer)
        return st is not None and st.phase in (Phase.AWAITING, Phase.CONNECTING, Phase.UP) and (
            st.holder_type() is not None or st.busy()
        )

    def phase(self, peer: int) -> Phase:
        st = self._peers.get(peer)
        return Phase.NONE if st is None else st.phase

    def backed_off(self, now: float) -> set[int]:
        return self._backoff.blocked_peers(now)

    def tracked_peers(self) -> int:
        """Peers with any state here (links, requests, backoff): for leak checks."""
        return len(self._peers.keys() | self._backoff.peers() | self._retry_at.keys())

    # == internals: evaluation ===================================================================

    def _ring(self, now: float) -> tuple[Ring, set[int]]:
        blocked = self._backoff.blocked_peers(now)
        ids = {self.node_id} | (self._members - blocked)
        ids.update(p for p, st in self._peers.items() if st.phase is Phase.UP and st.holder_type() is not None)
        return Ring(ids), blocked

    def _evaluate(self, now: float) -> None:
        self._due = None
        self._membership_first = self._membership_due = None
        self._periodic_at = now + self.timings.reevaluate_interval
        if not self._connected:
            return  # nothing can be negotiated, and no membership is known: keep what is up
        if now < self._settle_until:
            self._due = self._settle_until
            return
        self.evaluations += 1
        for gone in self._backoff.peers() - self._members - self._peers.keys():
            self._backoff.forget(gone)  # vanished while our signaling was down: nothing to pace any more
        ring, blocked = self._ring(now)
        s = self.topology.successors
        whole = Ring(set(ring) | (blocked & self._members))
        self._successors = frozenset(whole.peer_at(self.node_id, d) for d in range(1, min(s, len(whole) - 1) + 1))
        k = self.topology.long_distance_for(len(ring))
        keep = [p for p, st in self._peers.items() if (st.held or st.asking) is LinkType.LONG_DISTANCE]
        refused = {p for p, until in self._refused_long_distance.items() if until > now}
        selection = select_links(
            ring, self.node_id, s, k, self._log_form, self._rng, keep=keep, exclude=blocked | refused
        )
        stand_ins = self._stand_ins(ring, selection, now)
        if stand_ins:
            selection = Selection((*selection.successors, *stand_ins), selection.long_distance)
        desired = desired_links(selection, self._on_demand_targets(selection, ring))
        # The ring first: no long-distance link is started while one of our successor links is not up.
        # On a loaded host every setup slows the others, and a missing successor splits the ring
        # (Bounded Flood and routing need it) where a missing chord costs a few hops.
        ring_pending = any(self.phase(p) is not Phase.UP for p in selection.successors)
        self._warn_overdue(selection.successors, now)
        slots = self._setup_slots()
        deferred = False
        for op in diff(self.node_id, self.view(), desired, s):
            st = self._peers.get(op.peer)
            if st is not None and st.busy():
                continue  # its answer comes first
            if isinstance(op, ChangeType):
                if op.adopted and self._retry_at.get(op.peer, now) > now:
                    continue
                st = self._peers.setdefault(op.peer, _Peer())
                st.held = op.new
                st.deadline = None
                self._ask(op.peer, st, LinkRequest(op.new, existing=True, epoch=self.epoch))
                continue
            if isinstance(op, AddLink):
                if (st is not None and st.phase is Phase.CLOSING) or self._retry_at.get(op.peer, now) > now:
                    continue
                if self.tunnel_count() + self._asking_new() >= self.limits.max_tunnels:
                    continue  # at the cap: only changes and removals until a tunnel goes
                successor = op.type is LinkType.SUCCESSOR
                if not successor and op.type is LinkType.LONG_DISTANCE and ring_pending:
                    continue  # evaluated again when a successor link comes up or fails
                if self._setting_up(successor) >= slots:
                    # Each setup costs both ends CPU (ICE, TURN, DTLS, a TAP, a bridge port): started all
                    # at once on a busy host they time out together and are retried together. The
                    # next one starts when one of these ends (its answer or tunnel event evaluates).
                    # Successors have slots of their own: a slow long-distance setup never holds them up.
                    continue
            if not self._budget.take(now):
                deferred = True
                continue
            if isinstance(op, AddLink):
                st = self._peers.setdefault(op.peer, _Peer())
                st.since = now if st.phase is Phase.NONE else st.since
                self._ask(op.peer, st, LinkRequest(op.type, epoch=self.epoch))
            else:
                assert isinstance(op, RemoveLink) and st is not None
                log.info("overlay %s releasing %s link to peer=%032x", self.name, op.type.value, op.peer)
                self._let_go(op.peer, st, now)
        if deferred:
            self._want_evaluation(self._budget.next_token(now))

    def _stand_ins(self, ring: Ring, selection: Selection, now: float) -> tuple[int, ...]:
        """The successors we would have without our doubted successors, where they are not successors now.

        They are wanted as successor links beside the doubted ones, which stay (presence alone never takes
        a link away): a crashed successor's place is taken once its probe fails with the link already up
        or on its way; a live one keeps it, and the stand-in is released when the doubt expires."""
        doubts = {p: until for p, until in self._doubted.items() if until > now and p in selection.successors}
        if not doubts:
            self._stand_in.clear()  # back in signaling, or dead and out of the ring: no stand-in is kept as one
            return ()
        without = Ring(set(ring) - doubts.keys())
        count = min(self.topology.successors, len(without) - 1)
        nearest = [without.peer_at(self.node_id, d) for d in range(1, count + 1)]
        chosen = []
        for peer in nearest:
            if peer in selection.successors:
                continue
            # A peer we have a tunnel with (a long-distance link, say) needs none: the flood uses it already,
            # and should the doubted one die it becomes a successor by a retype, no new tunnel.
            if peer in self._stand_in or self.phase(peer) is Phase.NONE:
                self._stand_in[peer] = max(doubts.values())
                chosen.append(peer)
        return tuple(chosen)

    def _incoming_caps(self, now: float) -> dict[LinkType, int]:
        return {
            LinkType.LONG_DISTANCE: self.topology.incoming_long_distance_cap(len(self._ring(now)[0])),
            LinkType.SUCCESSOR: self.topology.incoming_successor_cap(),
            LinkType.ON_DEMAND: self.topology.max_incoming_on_demand,
        }

    def _on_demand_targets(self, selection: Selection, ring: Ring) -> list[int]:
        config = self.topology.on_demand
        if not config.enabled:
            return []
        linked = set(selection.successors) | set(selection.long_distance)
        # On-demand links no longer wanted still count until they are released: never above max_links.
        leaving = sum(
            1
            for peer, st in self._peers.items()
            if (st.held or st.asking) is LinkType.ON_DEMAND and peer not in self._on_demand
        )
        targets: list[int] = []
        for peer in self._on_demand:
            if len(targets) + leaving >= config.max_links:
                break
            if peer not in linked and peer in ring:
                targets.append(peer)
        return targets

    def _expire(self, now: float) -> None:
        for peer, st in list(self._peers.items()):
            if st.collision_until is not None and st.collision_until <= now:
                st.asking, st.collision_until = None, None  # the winner's request never came
            if st.phase is Phase.AWAITING and st.deadline is not None and st.deadline <= now:
                log.info("overlay %s peer=%032x never connected the link we accepted", self.name, peer)
                st.held = st.theirs = None
                self._set_phase(st, Phase.NONE, now)
            elif st.phase is Phase.UP and (st.holder_type() is not None or st.busy()):
                st.deadline = None
            elif st.phase is Phase.UP:
                # A tunnel nobody holds (a release that crossed a request, a peer that restarted): close it.
                if st.deadline is None:
                    st.deadline = now + self.timings.orphan_grace
                elif st.deadline <= now:
                    log.info("overlay %s closing unheld tunnel to peer=%032x", self.name, peer)
                    self._disconnect(peer, st, now)
            if st.release_due is not None and self._connected and st.releasing_seq is None:
                released, st.release_due = st.release_due, None
                if st.held is not None:
                    pass  # held again meanwhile: nothing to release
                elif peer in self._members:
                    self._send_release(peer, st, released)
                else:
                    self._close_if_unheld(peer, st, now)
            self._forget_if_idle(peer)
        for table in (self._retry_at, self._refused_long_distance):
            for peer in [p for p, until in table.items() if until <= now]:
                del table[peer]
        for table in (self._doubted, self._stand_in):
            for peer in [p for p, until in table.items() if until <= now]:
                del table[peer]  # it lived (or is gone for good): its stand-in goes as any surplus link
                self._want_evaluation(now)
        due = [p for p, at in self._absent_check.items() if at <= now]
        if due and self._connected:
            for peer in due:
                del self._absent_check[peer]
            linked = [p for p in due if p not in self._members and self.phase(p) is Phase.UP]
            if linked:
                log.info("overlay %s %d linked peer(s) gone from signaling: checking membership", self.name, len(linked))
                self._out.append(CheckMembership())

    # == internals: link steps ===================================================================

    def _asking_new(self) -> int:
        return sum(1 for st in self._peers.values() if st.asking is not None and st.phase is Phase.NONE)

    def _setup_slots(self) -> int:
        """New links of each kind set up at once: `max_setups`, divided by the host's load (at least one).
        On a host whose loops run late every setup slows the others; with as many at once as unloaded,
        they missed their deadlines together and were retried together."""
        load = max(1.0, self._load()) if self._load is not None else 1.0
        return max(1, math.ceil(self.timings.max_setups / load))

    def _setting_up(self, successors: bool) -> int:
        """Our own new links under way, successor links or the others: asked for, or accepted and connecting."""
        count = 0
        kind: LinkType | None
        for st in self._peers.values():
            if st.asking is not None and not st.asking_existing and st.phase is Phase.NONE:
                kind = st.asking
            elif st.phase is Phase.CONNECTING:
                kind = st.held or st.asking
            else:
                continue
            count += (kind is LinkType.SUCCESSOR) is successors
        return count

    def _ask(self, peer: int, st: _Peer, request: LinkRequest) -> None:
        self._seq += 1
        st.asking, st.asking_existing, st.asking_seq = request.type, request.existing, self._seq
        st.collision_until = None
        self.requests_sent += 1
        log.log(
            logging.DEBUG if request.existing else logging.INFO,
            "overlay %s asking peer=%032x for a %s link%s",
            self.name, peer, request.type.value, " (existing)" if request.existing else "",
        )
        self._out.append(SendLinkRequest(peer, self._seq, request))

    def _answer_link(self, peer: int, st: _Peer, request: LinkRequest, now: float) -> LinkAnswer:
        if st.phase is Phase.CLOSING:
            return LinkAnswer(False, refusal=LinkRefusal.LINK_CLOSING)
        caps = self._incoming_caps(now)
        if request.existing:
            if st.phase is Phase.NONE:
                return LinkAnswer(False, refusal=LinkRefusal.NO_LINK)
            if st.held is None and st.theirs is not request.type:
                # Held by the peer alone under a new type: it counts against that type's cap.
                others = sum(
                    1
                    for p, other in self._peers.items()
                    if p != peer and other.theirs is request.type and (other.held or other.asking) is None
                )
                if others >= caps[request.type]:
                    return LinkAnswer(False, refusal=LinkRefusal.of(cap_reason(request.type)))
            st.theirs = request.type
            st.deadline = None if st.phase is not Phase.AWAITING else st.deadline
            self._announce_up(peer, st)
            return LinkAnswer(True, held_as=st.held)
        if st.theirs is not None and st.phase is Phase.AWAITING:
            # The peer asks again for the link we already agreed to: our answer was lost.
            st.theirs = request.type
            st.deadline = now + self.timings.await_tunnel
            return LinkAnswer(True, held_as=st.held)
        if st.phase is Phase.NONE and self.tunnel_count() >= self.limits.max_tunnels:
            return LinkAnswer(False, refusal=LinkRefusal.TOO_MANY_LINKS)
        decision = accept_request(
            self.node_id, peer, request.type, self.view(), caps[LinkType.LONG_DISTANCE], max_incoming=caps
        )
        if not decision.accepted:
            assert decision.reason is not None
            return LinkAnswer(False, refusal=LinkRefusal.of(decision.reason))
        if decision.replaces_pending:
            # Both asked at once and the peer's request wins: hold its link as our own wish.
            if st.held is None:
                st.held = st.asking
            st.asking, st.collision_until = None, None
        st.theirs = request.type
        if st.phase is Phase.NONE:
            self._set_phase(st, Phase.AWAITING, now)
            st.deadline = now + self.timings.await_tunnel
        elif st.phase is Phase.UP:
            st.deadline = None
            self._announce_up(peer, st)
        return LinkAnswer(True, held_as=st.held)

    def _let_go(self, peer: int, st: _Peer, now: float) -> None:
        """Stop holding the link; the tunnel goes once the peer does not hold it either."""
        held = st.held
        st.held = None
        if held is None:
            return
        if peer in self._members and self._connected:
            self._send_release(peer, st, held)
        elif not self._connected and st.phase is not Phase.NONE:
            st.release_due = held
        else:
            self._close_if_unheld(peer, st, now)

    def _withdraw(self, peer: int, st: _Peer, link_type: LinkType) -> None:
        """A new link we asked for will not be made now: say so, in case the peer agreed and waits for it."""
        if peer in self._members and self._connected and st.releasing_seq is None:
            self._send_release(peer, st, link_type)

    def _send_release(self, peer: int, st: _Peer, held: LinkType) -> None:
        self._seq += 1
        st.releasing_seq, st.releasing_type = self._seq, held
        self._out.append(SendRelease(peer, self._seq, ReleaseRequest(held)))

    def _close_if_unheld(self, peer: int, st: _Peer, now: float) -> None:
        if st.held is not None or st.theirs is not None or st.asking is not None:
            return
        if st.phase is Phase.AWAITING:
            self._set_phase(st, Phase.NONE, now)
        elif st.phase in (Phase.UP, Phase.CONNECTING):
            self._disconnect(peer, st, now)

    def _connect(self, peer: int, st: _Peer, now: float) -> None:
        self._seq += 1
        st.connect_seq = self._seq
        st.deadline = None
        self._set_phase(st, Phase.CONNECTING, now)
        self._out.append(Connect(peer, self._seq))

    def _disconnect(self, peer: int, st: _Peer, now: float) -> None:
        st.deadline = None
        self._set_phase(st, Phase.CLOSING, now)
        self._out.append(Disconnect(peer))

    def _end_tunnel(self, peer: int, st: _Peer, reason: str, now: float) -> None:
        """The tunnel is gone: so is the link, for both ends."""
        self._announce_down(peer, st, reason)
        st.held = st.theirs = None
        st.last_down_id = st.tunnel_id or st.last_down_id
        st.tunnel_id = st.tap = None
        st.deadline = None
        st.released_by_peer = False
        self._set_phase(st, Phase.NONE, now)

    def _fail(self, peer: int, why: str, now: float, link_type: LinkType | None = None) -> None:
        self.failures[why] += 1
        self._note_setback(peer, why)
        # A successor is retried within seconds for ever: while it is left out, the next peer stands in,
        # but the ring is only whole once this link is up (the "retried until it exists").
        successor = link_type is LinkType.SUCCESSOR or peer in self._successors
        cap = self.timings.successor_backoff_cap if successor else None
        retry_at = self._backoff.failed(peer, now, self._rng, cap)
        log.info(
            "overlay %s peer=%032x backed off for %.1f s after %s failure(s): %s",
            self.name, peer, retry_at - now, self._backoff.failures(peer), why,
        )

    def _note_setback(self, peer: int, why: str) -> None:
        if peer in self._successors:
            self._setback[peer] = why

    def _warn_overdue(self, successors: Iterable[int], now: float) -> None:
        """Warn about each successor whose link has not been up for `successor_overdue`, once a minute:
        the ring has a gap here although every retry may be quiet (a refusal for a passing reason)."""
        missing = {p for p in successors if self.phase(p) is not Phase.UP}
        for peer in self._overdue.keys() - missing:
            del self._overdue[peer]
        for peer in self._setback.keys() - missing:
            del self._setback[peer]
        for peer in missing:
            since, warned = self._overdue.setdefault(peer, (now, None))
            if now - since < self.timings.successor_overdue or (warned is not None and now - warned < OVERDUE_REPEAT):
                continue
            self._overdue[peer] = (since, now)
            st = self._peers.get(peer)
            log.warning(
                "overlay %s successor peer=%032x has had no link for %.0f s (phase %s, last setback: %s)",
                self.name, peer, now - since, (st.phase if st else Phase.NONE).value,
                self._setback.get(peer, "none"),
            )

    def _announce_up(self, peer: int, st: _Peer) -> None:
        link_type = st.holder_type()
        if st.phase is Phase.UP and not st.announced and link_type is not None:
            st.announced = True
            self._out.append(Notify(LinkUp(peer, link_type, st.tap or "")))

    def _announce_down(self, peer: int, st: _Peer, reason: str) -> None:
        if st.announced:
            st.announced = False
            self._out.append(Notify(LinkDown(peer, st.tap or "", reason)))

    def _set_phase(self, st: _Peer, phase: Phase, now: float) -> None:
        if st.phase is not phase:
            st.phase = phase
            st.since = now

    def _forget_if_idle(self, peer: int) -> None:
        st = self._peers.get(peer)
        if st is not None and st.idle() and st.collision_until is None:
            del self._peers[peer]

    def _membership_changed(self, now: float) -> None:
        """Debounce: evaluate after a quiet `membership_debounce`, at most `membership_max_delay` late."""
        self._refused_long_distance.clear()  # the ring moved: everyone may be asked again
        if self._membership_first is None:
            self._membership_first = now
        self._membership_due = min(
            now + self.timings.membership_debounce, self._membership_first + self.timings.membership_max_delay
        )

    def _want_evaluation(self, at: float) -> None:
        self._due = at if self._due is None else min(self._due, at)

    def _flush(self) -> list[Action]:
        out, self._out = self._out, []
        return out
