"""Evaluation: which links this node wants in one overlay, and the steps it takes toward them now.

1. The ring (`ring_of`): present members, self, and peers whose link is up (a live tunnel proves the peer
   runs even if its signaling session dropped), minus peers in failure backoff.
2. `select_links` (Symphony), plus stand-ins for doubted successors (`stand_ins`) and wanted on-demand
   peers (`on_demand_targets`), -> `desired_links`.
3. `diff` against our links (`PeerLinks.view`), carried out in diff's order (successors first, never below
   `s` successors up), skipping peers with a request in flight and spending a token of the change budget per
   tunnel added or removed. The ring comes first: no long-distance link is started while one of our
   successor links is not up, and new successor links and new other links are each paced to
   `setup_slots` under way (fewer while the host is loaded).

`evaluate` returns the actions and, if the budget ran out, when to evaluate again. `EvaluationSchedule`
says when evaluations run: after membership changes (debounced), after link events, when a backoff or
deadline expires, and every `reevaluate_interval` seconds.

Pure: `now` and a `random.Random` come in. Called by `evio.overlay.orchestrator`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping

from evio.config.model import LogForm, OnDemandConfig, TopologyConfig
from evio.overlay.actions import Action
from evio.overlay.adjacency import AddLink, ChangeType, LinkType, RemoveLink, desired_links, diff
from evio.overlay.link_pacing import Pacing, setup_slots
from evio.overlay.negotiation import LinkRequest
from evio.overlay.peer_links import PeerLinks, Phase
from evio.overlay.stand_ins import StandIns
from evio.overlay.symphony import Ring, Selection, select_links
from evio.overlay.timings import Timings

log = logging.getLogger(__name__)


class EvaluationSchedule:
    """When the next evaluation is due: wanted at a time, debounced after membership changes, periodic."""

    def __init__(self, timings: Timings, now: float) -> None:
        self.timings = timings
        self._due: float | None = None  # an evaluation is wanted then
        self._membership_first: float | None = None
        self._membership_due: float | None = None
        self._periodic_at = now + timings.reevaluate_interval

    def want(self, at: float) -> None:
        self._due = at if self._due is None else min(self._due, at)

    def membership_changed(self, now: float) -> None:
        """Debounce: evaluate after a quiet `membership_debounce`, at most `membership_max_delay` late."""
        if self._membership_first is None:
            self._membership_first = now
        self._membership_due = min(
            now + self.timings.membership_debounce, self._membership_first + self.timings.membership_max_delay
        )

    def hurry(self, now: float) -> None:
        """A membership change under way cannot wait for the debounce (a successor's place is free)."""
        if self._membership_due is not None:
            self._membership_due = min(self._membership_due, now)

    def membership_now(self, now: float) -> None:
        """A membership change to evaluate at once, past the debounce (a successor may have crashed)."""
        if self._membership_first is None:
            self._membership_first = now
        self._membership_due = now

    def settling(self, now: float) -> bool:
        """Membership is still moving: the debounced evaluation will cover every other wish."""
        if self._membership_due is None or now >= self._membership_due:
            return False
        self._due = None
        if self._periodic_at <= now:
            self._periodic_at = now + self.timings.reevaluate_interval
        return True

    def evaluating(self, now: float) -> None:
        self._due = None
        self._membership_first = self._membership_due = None
        self._periodic_at = now + self.timings.reevaluate_interval

    def wakeups(self) -> list[float]:
        times = [self._periodic_at]
        if self._membership_due is not None:
            times.append(self._membership_due)
        elif self._due is not None:
            times.append(self._due)
        return times


def ring_of(node_id: int, members: set[int], blocked: set[int], links: PeerLinks) -> Ring:
    return Ring({node_id} | (members - blocked) | links.up_and_held())


def on_demand_targets(
    config: OnDemandConfig, selection: Selection, ring: Ring, wishes: Mapping[int, None], links: PeerLinks
) -> list[int]:
    """Wanted on-demand peers (oldest wish first) not linked otherwise, within `max_links`."""
    if not config.enabled:
        return []
    linked = set(selection.successors) | set(selection.long_distance)
    # On-demand links no longer wanted still count until they are released: never above max_links.
    leaving = sum(1 for peer in links.held_or_asked(LinkType.ON_DEMAND) if peer not in wishes)
    targets: list[int] = []
    for peer in wishes:
        if len(targets) + leaving >= config.max_links:
            break
        if peer not in linked and peer in ring:
            targets.append(peer)
    return targets


def evaluate(
    *,
    node_id: int,
    topology: TopologyConfig,
    log_form: LogForm,
    rng: random.Random,
    epoch: int,
    max_tunnels: int,
    load: float | None,
    members: set[int],
    on_demand: Mapping[int, None],
    links: PeerLinks,
    pacing: Pacing,
    stand_ins: StandIns,
    now: float,
) -> tuple[list[Action], float | None]:
    """The steps toward the links we want, taken on `links` (our signaling is up); and when to evaluate
    again if the change budget deferred some (None: it did not)."""
    out: list[Action] = []
    for gone in pacing.backoff.peers() - members - links.peers():
        pacing.backoff.forget(gone)  # vanished while our signaling was down: nothing to pace any more
    blocked = pacing.backoff.blocked_peers(now)
    ring = ring_of(node_id, members, blocked, links)
    s = topology.successors
    whole = Ring(set(ring) | (blocked & members))
    pacing.successors = frozenset(whole.peer_at(node_id, d) for d in range(1, min(s, len(whole) - 1) + 1))
    k = topology.long_distance_for(len(ring))
    keep = links.held_or_asked(LinkType.LONG_DISTANCE)
    exclude = blocked | pacing.refused_long_distance(now)
    selection = select_links(ring, node_id, s, k, log_form, rng, keep=keep, exclude=exclude)
    extra = stand_ins.choose(node_id, s, ring, selection, lambda p: links.phase(p) is not Phase.NONE, now)
    if extra:
        selection = Selection((*selection.successors, *extra), selection.long_distance)
    desired = desired_links(selection, on_demand_targets(topology.on_demand, selection, ring, on_demand, links))
    # The ring first: no long-distance link is started while one of our successor links is not up.
    # On a loaded host every setup slows the others, and a missing successor splits the ring
    # (Bounded Flood and routing need it) where a missing chord costs a few hops.
    ring_pending = any(links.phase(p) is not Phase.UP for p in selection.successors)
    pacing.warn_overdue(selection.successors, links.phase, now)
    slots = setup_slots(pacing.timings.max_setups, load)
    deferred = False
    for op in diff(node_id, links.view(), desired, s):
        st = links.get(op.peer)
        if st is not None and st.busy():
            continue  # its answer comes first
        if isinstance(op, ChangeType):
            if op.adopted and not pacing.may_ask(op.peer, now):
                continue
            st = links.track(op.peer)
            st.held = op.new
            st.deadline = None
            out += links.ask(op.peer, st, LinkRequest(op.new, existing=True, epoch=epoch))
            continue
        if isinstance(op, AddLink):
            if (st is not None and st.phase is Phase.CLOSING) or not pacing.may_ask(op.peer, now):
                continue
            if links.tunnel_count() + links.asking_new() >= max_tunnels:
                continue  # at the cap: only changes and removals until a tunnel goes
            successor = op.type is LinkType.SUCCESSOR
            if not successor and op.type is LinkType.LONG_DISTANCE and ring_pending:
                continue  # evaluated again when a successor link comes up or fails
            if links.setting_up(successor) >= slots:
                # Each setup costs both ends CPU (ICE, TURN, DTLS, a TAP, a bridge port): started all
                # at once on a busy host they time out together and are retried together. The
                # next one starts when one of these ends (its answer or tunnel event evaluates).
                # Successors have slots of their own: a slow long-distance setup never holds them up.
                continue
        if not pacing.budget.take(now):
            deferred = True
            continue
        if isinstance(op, AddLink):
            st = links.track(op.peer)
            st.since = now if st.phase is Phase.NONE else st.since
            out += links.ask(op.peer, st, LinkRequest(op.type, epoch=epoch))
        else:
            assert isinstance(op, RemoveLink) and st is not None
            log.info("overlay %s releasing %s link to peer=%032x", links.name, op.type.value, op.peer)
            out += links.let_go(op.peer, st, now, member=op.peer in members, connected=True)
    return out, (pacing.budget.next_token(now) if deferred else None)

