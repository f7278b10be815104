"""The overlay controller's decision core: the paper's Network Orchestrator, without I/O.

It keeps this node's picture of its links in one overlay and turns inputs (membership from signaling,
tunnel events, negotiation requests and answers, on-demand wishes, the passing of time) into actions
for the adapter (`evio.overlay.controller`): send a negotiation request, connect or disconnect a tunnel,
notify subscribers. Every input takes `now`; randomness comes from the `random.Random` given at
construction. Nothing here reads a clock, sleeps or touches a socket.

The `Orchestrator` is thin: it routes each input to the parts that decide, and returns the actions
they return, in order.

    input --> Orchestrator --> presence      our session, the members, when to ask about absent ones
                  |        --> peer_links    the link to each peer and its steps (ask, connect, release, close)
                  |        --> answers       our answers to peers' requests, verdicts on their answers
                  |        --> pacing        backoff, retries, setup slots, the change budget
                  |        --> stand_ins     peers linked beside a doubted successor
                  |        --> evaluation    the links we want and the steps toward them; when to evaluate
                  +--> [Action] --> evio.overlay.controller (I/O)

A tunnel going down ends the link for both ends; each re-evaluates and asks again if it still wants it.
Evaluations run after membership changes (debounced), after link events, when a backoff or deadline
expires, and every `reevaluate_interval` seconds. A successor that leaves signaling while its tunnel is
up is doubted (the tunnel probes it) and evaluated at once, with stand-ins (`stand_ins`). While our own
signaling is down nothing is evaluated and every tunnel stays up (`presence`).
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from evio.config.model import LimitsConfig, LogForm, TopologyConfig
from evio.overlay import answers, evaluation
from evio.overlay.actions import (
    Action,
    CheckMembership,
    Connect,
    Disconnect,
    Doubt,
    Failure,
    Notify,
    SendLinkRequest,
    SendRelease,
)
from evio.overlay.adjacency import Adjacency, LinkType
from evio.overlay.adjacency_events import LinkInfo
from evio.overlay.answers import Reaction
from evio.overlay.evaluation import EvaluationSchedule
from evio.overlay.link_pacing import OVERDUE_REPEAT, Pacing
from evio.overlay.negotiation import LinkAnswer, LinkRefusal, LinkRequest, ReleaseAnswer, ReleaseRequest
from evio.overlay.peer_links import PeerLinks, Phase
from evio.overlay.presence import RELOGIN_GRACE_STRETCH, Presence
from evio.overlay.stand_ins import StandIns
from evio.overlay.symphony import Ring
from evio.overlay.timings import Timings
from evio.ratelimit import PeerRateLimiter, Rate
from evio.signal.events import RemovalCause

__all__ = [
    "OVERDUE_REPEAT", "RELOGIN_GRACE_STRETCH", "Action", "CheckMembership", "Connect", "Disconnect", "Doubt", "Failure",
    "Notify", "Orchestrator", "Phase", "SendLinkRequest", "SendRelease", "Timings",
]

log = logging.getLogger(__name__)


class Orchestrator:
    """One overlay's decision core: inputs in, the actions of its parts out."""

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
        self._links = PeerLinks(name)
        self._presence = Presence(node_id, self.timings, now, name)
        self._pacing = Pacing(self.timings, now, name)
        self._stand_ins = StandIns()
        self._schedule = EvaluationSchedule(self.timings, now)
        self._on_demand: dict[int, None] = {}  # wanted on-demand peers, oldest wish first
        self._stopped = False
        # Observability: what tests and `status` read.
        self.ticks = 0  # wake-ups, evaluated or not (e.g. while signaling is down)
        self.evaluations = 0
        self.refusals_received: Counter[LinkRefusal] = Counter()
        self.refusals_sent: Counter[LinkRefusal] = Counter()
        self.failures: Counter[Failure | str] = Counter()

    # == inputs: signaling =======================================================================

    def signal_connected(self, now: float) -> list[Action]:
        self._schedule.want(self._presence.logged_in(now))
        return []

    def signal_disconnected(self, now: float) -> list[Action]:
        # Nothing is torn down: tunnels carry traffic without signaling. Evaluation pauses.
        self._presence.logged_out(now)
        return []

    def peer_added(self, peer: int, now: float) -> list[Action]:
        if not self._presence.add(peer, now):
            return []
        if self._stand_ins.believe(peer):
            self._schedule.want(now)  # its stand-in is not needed any more
        self._membership_changed(now)
        return []

    def peer_removed(self, peer: int, cause: RemovalCause, now: float) -> list[Action]:
        self._presence.members.discard(peer)
        if cause is RemovalCause.SIGNAL_LOST:
            return []  # our session ended; the peer may be fine, and so are its tunnels
        self._membership_changed(now)
        self._pacing.forget(peer)
        self._on_demand.pop(peer, None)
        st = self._links.get(peer)
        if st is None:
            return []
        out = self._links.peer_left(peer, st, cause is RemovalCause.MEMBERSHIP_REVOKED, now)
        # An up link to a peer that merely left signaling stays while its tunnel lives, unless
        # signaling, asked a little later, says it was removed (servers need not push that). A peer
        # logging in again said it is back at once: it is asked about only if it is not, since each
        # check is a re-login of ours that our own peers see (a cascade around a large overlay).
        if cause is not RemovalCause.MEMBERSHIP_REVOKED and st.phase is Phase.UP:
            self._presence.check_later(peer, cause, now)
            if cause is RemovalCause.LEFT and peer in self._pacing.successors and self._presence.connected:
                # It may have crashed (its session closes with its process): its tunnel is probed, and
                # the peer after it is linked now, alongside, rather than once the probe has ended.
                self._stand_ins.doubt(peer, now + self.timings.standby_window)
                self._schedule.membership_now(now)
        else:
            self._presence.forget(peer, revoked=cause is RemovalCause.MEMBERSHIP_REVOKED)
        self._links.forget_if_idle(peer)
        return out

    # == inputs: tunnels =========================================================================

    def tunnel_up(self, peer: int, tunnel_id: str, tap: str, now: float) -> list[Action]:
        out = self._links.tunnel_up(peer, tunnel_id, tap, now)
        if out is None:
            return []  # already known (connect's result and the event both report it)
        self._pacing.backoff.succeeded(peer)
        log.info("overlay %s link up peer=%032x tunnel=%s tap=%s", self.name, peer, tunnel_id, tap)
        if not self._stopped:
            self._schedule.want(now)
        return out

    def tunnel_down(self, peer: int, tunnel_id: str | None, reason: str, now: float) -> list[Action]:
        st = self._links.get(peer)
        if st is None or st.phase is Phase.NONE or not st.reports_current(tunnel_id):
            return []  # about an older tunnel
        was, held = st.phase, st.held
        gone = peer not in self._presence.members
        expected = was is Phase.CLOSING or st.released_by_peer or gone or self._stopped
        if gone and was is Phase.UP:
            # A peer gone from signaling whose tunnel has now died too (a crash): its place in the ring
            # is free and the neighbours must link up at once, not after the membership debounce.
            self._schedule.hurry(now)
        out = self._links.end_tunnel(peer, st, reason, now)
        if not expected:
            self._fail(peer, f"tunnel {reason}", now, held)
            if was is Phase.CONNECTING and held is not None:
                # Our offer may never have reached the peer (no_response): without word from us it
                # would wait for our tunnel until `await_tunnel`, a pending link on its side only.
                out += self._links.withdraw(peer, st, held, peer in self._presence.members, self._presence.connected)
        log.info("overlay %s link down peer=%032x (%s, was %s)", self.name, peer, reason, was.value)
        self._links.forget_if_idle(peer)
        if not self._stopped:
            self._schedule.want(now)
        return out

    def connect_succeeded(self, peer: int, seq: int, tunnel_id: str, tap: str, now: float) -> list[Action]:
        st = self._links.get(peer)
        if st is None or st.connect_seq != seq or st.phase is not Phase.CONNECTING:
            return []
        return self.tunnel_up(peer, tunnel_id, tap, now)

    def connect_failed(self, peer: int, seq: int, reason: str, now: float) -> list[Action]:
        st = self._links.get(peer)
        if st is None or st.connect_seq != seq or st.phase is not Phase.CONNECTING:
            return []  # already reported by a tunnel event, or no longer wanted
        log.info("overlay %s connect to peer=%032x failed: %s", self.name, peer, reason)
        held = st.held
        st.held = st.theirs = None
        self._fail(peer, "connect failed", now, held)
        out: list[Action] = []
        # Tell the peer to stop waiting for our tunnel, and make sure no half-made one lingers.
        if held is not None and peer in self._presence.members and self._presence.connected:
            out += self._links.send_release(peer, st, held)
        out += self._links.disconnect(peer, st, now)
        self._schedule.want(now)
        return out

    def disconnected(self, peer: int, now: float) -> list[Action]:
        """Our disconnect call returned: whatever it closed is gone (the provider may not report it)."""
        st = self._links.get(peer)
        if st is None or st.phase is not Phase.CLOSING:
            return []
        out = self._links.end_tunnel(peer, st, "closed", now)
        self._links.forget_if_idle(peer)
        if not self._stopped:
            self._schedule.want(now)
        return out

    # == inputs: negotiation =====================================================================

    def link_request(self, peer: int, request: LinkRequest, now: float) -> tuple[LinkAnswer, list[Action]]:
        """A peer's overlay.link: the answer to send back, and what to do."""
        if self._stopped:
            return LinkAnswer(False, refusal=LinkRefusal.STOPPING), []
        if not self._link_requests.allow(peer, now):
            # Before any state is kept for the peer: a flood costs a counter, nothing more.
            self.refusals_sent[LinkRefusal.RATE_LIMITED] += 1
            return LinkAnswer(False, refusal=LinkRefusal.RATE_LIMITED), []
        st = self._links.track(peer)
        out: list[Action] = []
        if st.epoch is not None and st.epoch != request.epoch and st.phase is Phase.UP and not request.existing:
            # The peer restarted: the link it does not know any more is stale.
            log.info("overlay %s peer=%032x restarted: its new request replaces the stale link", self.name, peer)
            out += self._links.end_tunnel(peer, st, "peer restarted", now)
        st.epoch = request.epoch
        caps = answers.incoming_caps(self.topology, len(self._ring(now)))
        answer, steps = answers.answer_link(
            self._links, peer, st, request, node_id=self.node_id, caps=caps,
            max_tunnels=self.limits.max_tunnels, await_tunnel=self.timings.await_tunnel, now=now,
        )
        out += steps
        existing = " (existing)" if request.existing else ""
        if answer.accepted:
            answer = replace(answer, epoch=self.epoch)
            log.debug("overlay %s accepted %s link from peer=%032x%s", self.name, request.type.value, peer, existing)
            self._schedule.want(now)
        else:
            assert answer.refusal is not None
            self.refusals_sent[answer.refusal] += 1
            if answer.refusal is LinkRefusal.ALREADY_LINKED and st.phase is Phase.UP and not request.existing:
                # The peer asks for a new link to us: its end of ours is gone (its TURN server died, say) or
                # the request is a late copy. A probe tells which within a few RTTs, not dead_after.
                log.info("overlay %s peer=%032x asks for a new link while ours is up: probing ours", self.name, peer)
                out.append(Doubt(peer))
            log.debug(
                "overlay %s refused %s link from peer=%032x: %s",
                self.name, request.type.value, peer, answer.refusal.value,
            )
            self._links.forget_if_idle(peer)
        return answer, out

    def link_answered(self, peer: int, seq: int, outcome: LinkAnswer | Failure, now: float) -> list[Action]:
        st = self._links.get(peer)
        if st is None or st.asking is None or st.asking_seq != seq or self._stopped:
            return []  # superseded (e.g. we accepted the peer's own request meanwhile)
        wanted, existing = st.asking, st.asking_existing
        self._schedule.want(now)
        out: list[Action] = []
        if isinstance(outcome, LinkAnswer) and outcome.accepted:
            log.debug("overlay %s %s link to peer=%032x accepted", self.name, wanted.value, peer)
            out += answers.take_acceptance(self._links, peer, st, outcome, now)
            self._links.forget_if_idle(peer)
            return out
        if isinstance(outcome, LinkAnswer):
            assert outcome.refusal is not None
            self.refusals_received[outcome.refusal] += 1
            log.debug("overlay %s %s link to peer=%032x refused: %s", self.name, wanted.value, peer, outcome.refusal.value)
        else:
            self.failures[outcome] += 1
            log.info("overlay %s %s link request to peer=%032x failed: %s", self.name, wanted.value, peer, outcome.value)
        verdict = answers.judge(outcome, existing)
        if verdict.reaction is Reaction.AWAIT_WINNER:
            st.collision_until = now + self.timings.collision_wait  # the peer's own request is coming
            return out
        st.asking = None
        if verdict.reaction is Reaction.SKIP_LONG_DISTANCE:
            self._pacing.refuse_long_distance(peer, now)
        elif verdict.reaction is Reaction.BACK_OFF:
            self._fail(peer, verdict.why, now, wanted)
        else:
            self._pacing.retry_soon(peer, verdict.why, now)
        member, connected = peer in self._presence.members, self._presence.connected
        if verdict.withdraw:
            out += self._links.withdraw(peer, st, wanted, member, connected)
        if verdict.let_go:
            out += self._links.let_go(peer, st, now, member, connected)
        self._links.forget_if_idle(peer)
        return out

    def release_request(self, peer: int, request: ReleaseRequest, now: float) -> tuple[ReleaseAnswer, list[Action]]:
        """A peer's overlay.release: it no longer holds the link. Answer with our own hold."""
        st = self._links.get(peer)
        if st is None:
            return ReleaseAnswer(None), []
        answer = answers.answer_release(st, now)
        log.debug(
            "overlay %s peer=%032x released its %s link%s",
            self.name, peer, request.type.value, "" if st.held is None else f" (we hold it as {st.held.value})",
        )
        self._links.forget_if_idle(peer)
        if not self._stopped:
            self._schedule.want(now)
        return answer, []

    def release_answered(self, peer: int, seq: int, outcome: ReleaseAnswer | Failure, now: float) -> list[Action]:
        st = self._links.get(peer)
        if st is None or st.releasing_seq != seq or self._stopped:
            return []
        if outcome is Failure.SIGNAL_DOWN:
            self._links.release_unsent(st)
            return []
        out = self._links.release_answered(peer, st, outcome, now)
        self._links.forget_if_idle(peer)
        self._schedule.want(now)
        return out

    # == inputs: the SDN side ====================================================================

    def want_on_demand(self, peer: int, now: float) -> list[Action]:
        if peer == self.node_id or self._stopped:
            return []
        if not self.topology.on_demand.enabled:
            log.debug("overlay %s on-demand link to peer=%032x ignored: disabled", self.name, peer)
            return []
        if peer not in self._on_demand:
            self._on_demand[peer] = None
            self._schedule.want(now)
        return []

    def drop_on_demand(self, peer: int, now: float) -> list[Action]:
        if self._on_demand.pop(peer, 0) is None:
            self._schedule.want(now)
        return []

    # == time ====================================================================================

    def next_wakeup(self, now: float) -> float | None:
        """When `tick` has something to do (None: only an input can change anything)."""
        if self._stopped:
            return None
        times = self._schedule.wakeups()
        later = [*self._pacing.wakeups(now), *self._stand_ins.wakeups(), *self._presence.wakeups()]
        later.extend(self._links.deadlines())
        times.extend(t for t in later if t > now)  # those due now are handled by the tick they cause
        return min(times)

    def tick(self, now: float) -> list[Action]:
        """Expire what is due, and evaluate (unless membership is still changing)."""
        if self._stopped:
            return []
        self.ticks += 1
        out = self._links.expire(now, self._presence.members, self._presence.connected, self.timings.orphan_grace)
        self._pacing.expire(now)
        if self._stand_ins.expire(now):
            self._schedule.want(now)
        out += self._presence.check_absent(now, self._links.phase)
        if self._schedule.settling(now):
            return out
        return out + self._evaluate(now)

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
        self._schedule.want(now)

    # == stop ====================================================================================

    def stop(self, now: float) -> list[Action]:
        """Releases for every link we hold, then a disconnect for every tunnel: the node leaves."""
        self._stopped = True
        return self._links.stop(self._presence.members, self._presence.connected, now)

    def close(self, reason: str = "controller stopped") -> list[Action]:
        """After stop's disconnects: report what is still announced, and forget everything."""
        self._stopped = True
        out = self._links.close(reason)
        self._presence.clear()
        self._on_demand.clear()
        self._pacing.clear()
        self._stand_ins.clear()
        return out

    # == views ===================================================================================

    @property
    def connected(self) -> bool:
        return self._presence.connected

    @property
    def members(self) -> frozenset[int]:
        return frozenset(self._presence.members)

    @property
    def requests_sent(self) -> int:
        return self._links.requests_sent

    def adjacency(self) -> dict[int, LinkInfo]:
        return self._links.adjacency()

    def view(self) -> Adjacency:
        """Our links as `diff` and `accept_request` see them (our in-flight requests as pending holds)."""
        return self._links.view()

    def tunnel_count(self) -> int:
        """Tunnels this node has or is setting up or awaiting (what `limits.max_tunnels` caps)."""
        return self._links.tunnel_count()

    def expects_tunnel(self, peer: int) -> bool:
        """May `peer` offer us a tunnel? Only for a link negotiated with it (or up, to replace a stale tunnel).

        The tunnel manager asks before it gathers a socket, allocates on TURN or makes a TAP.
        """
        return self._links.expects_tunnel(peer)

    def phase(self, peer: int) -> Phase:
        return self._links.phase(peer)

    def backed_off(self, now: float) -> set[int]:
        return self._pacing.backoff.blocked_peers(now)

    def tracked_peers(self) -> int:
        """Peers with any state here (links, requests, backoff): for leak checks."""
        return len(self._links.peers() | self._pacing.tracked())

    # == internals ===============================================================================

    def _ring(self, now: float) -> Ring:
        blocked = self._pacing.backoff.blocked_peers(now)
        return evaluation.ring_of(self.node_id, self._presence.members, blocked, self._links)

    def _evaluate(self, now: float) -> list[Action]:
        self._schedule.evaluating(now)
        if not self._presence.connected:
            return []  # nothing can be negotiated, and no membership is known: keep what is up
        if now < self._presence.settle_until:
            self._schedule.want(self._presence.settle_until)
            return []
        self.evaluations += 1
        out, again = evaluation.evaluate(
            node_id=self.node_id, topology=self.topology, log_form=self._log_form, rng=self._rng,
            epoch=self.epoch, max_tunnels=self.limits.max_tunnels,
            load=self._load() if self._load is not None else None,
            members=self._presence.members, on_demand=self._on_demand,
            links=self._links, pacing=self._pacing, stand_ins=self._stand_ins, now=now,
        )
        if again is not None:
            self._schedule.want(again)
        return out

    def _membership_changed(self, now: float) -> None:
        self._pacing.ring_moved()  # everyone may be asked again for a long-distance link
        self._schedule.membership_changed(now)

    def _fail(self, peer: int, why: str, now: float, link_type: LinkType | None = None) -> None:
        self.failures[why] += 1
        self._pacing.failed(peer, why, now, self._rng, link_type)

