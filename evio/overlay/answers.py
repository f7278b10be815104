"""Edge negotiation as this node takes part in it: the answers it gives, and what it makes of the answers it gets.

- ``overlay.link`` asks to hold a link. For a new link the peer answers with `accept_request` (every type
  under its incoming cap, collisions settled by node id: the lower id's request wins), within
  `limits.max_tunnels` and a per-peer request rate (`limits.link_requests_per_s`: a flood is refused by
  the orchestrator before any state is kept); the requester then connects, the answerer waits for the
  tunnel, and its tunnel manager serves the offer only because the link was agreed (`expects_tunnel`).
  ``existing`` requests take over or retype a link that is already there (no new tunnel; the new type's
  cap still applies). `answer_link` gives our answer.
- ``overlay.release`` says this end no longer holds the link; the answer says whether the peer still does
  (`answer_release`). If not, the releaser disconnects: a tunnel comes down only when neither end holds it.
- An answer to our own request that is not an acceptance is judged (`judge`): wait for the collision's
  winner, stop asking for a long-distance link, back off, or retry soon; and whether to let go of an
  existing link or withdraw a new one the peer may have agreed to.

Restarts: every request and acceptance carries the sender's `epoch`, drawn when its controller starts. A
peer that restarts under the same node id has no links, while this node still sees the old link up until
tunnel liveness kills it. Its new-link request, from another epoch than the one the link was agreed with,
ends that stale link here at once (in the orchestrator: LinkDown, and its tunnel reports are ignored from
then on) and is answered as for a new link; the peer's tunnel offer then replaces the stale tunnel.

Pure: the answers and the actions come back to `evio.overlay.orchestrator`; the wire schema is
`evio.overlay.negotiation`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from evio.config.model import TopologyConfig
from evio.overlay.actions import Action, Failure
from evio.overlay.adjacency import LinkType, accept_request, cap_reason
from evio.overlay.negotiation import LinkAnswer, LinkRefusal, LinkRequest, ReleaseAnswer
from evio.overlay.peer_links import PeerLink, PeerLinks, Phase

# Refusals that say the answerer is full (or we asked too often): asking again soon would not help.
FULL = frozenset({
    LinkRefusal.TOO_MANY_SUCCESSORS, LinkRefusal.TOO_MANY_ON_DEMAND, LinkRefusal.TOO_MANY_LINKS, LinkRefusal.RATE_LIMITED,
})


def incoming_caps(topology: TopologyConfig, ring_size: int) -> dict[LinkType, int]:
    """How many links of each type this node accepts from peers, in a ring of `ring_size`."""
    return {
        LinkType.LONG_DISTANCE: topology.incoming_long_distance_cap(ring_size),
        LinkType.SUCCESSOR: topology.incoming_successor_cap(),
        LinkType.ON_DEMAND: topology.max_incoming_on_demand,
    }


def answer_link(
    links: PeerLinks,
    peer: int,
    st: PeerLink,
    request: LinkRequest,
    *,
    node_id: int,
    caps: Mapping[LinkType, int],
    max_tunnels: int,
    await_tunnel: float,
    now: float,
) -> tuple[LinkAnswer, list[Action]]:
    """Our answer to the peer's ``overlay.link`` (without our epoch), its effect on `st` already made."""
    if st.phase is Phase.CLOSING:
        return LinkAnswer(False, refusal=LinkRefusal.LINK_CLOSING), []
    if request.existing:
        if st.phase is Phase.NONE:
            return LinkAnswer(False, refusal=LinkRefusal.NO_LINK), []
        if st.held is None and st.theirs is not request.type:
            # Held by the peer alone under a new type: it counts against that type's cap.
            others = sum(
                1
                for p, other in links.items()
                if p != peer and other.theirs is request.type and (other.held or other.asking) is None
            )
            if others >= caps[request.type]:
                return LinkAnswer(False, refusal=LinkRefusal.of(cap_reason(request.type))), []
        st.theirs = request.type
        st.deadline = None if st.phase is not Phase.AWAITING else st.deadline
        return LinkAnswer(True, held_as=st.held), links.announce_up(peer, st)
    if st.theirs is not None and st.phase is Phase.AWAITING:
        # The peer asks again for the link we already agreed to: our answer was lost.
        st.theirs = request.type
        st.deadline = now + await_tunnel
        return LinkAnswer(True, held_as=st.held), []
    if st.phase is Phase.NONE and links.tunnel_count() >= max_tunnels:
        return LinkAnswer(False, refusal=LinkRefusal.TOO_MANY_LINKS), []
    decision = accept_request(
        node_id, peer, request.type, links.view(), caps[LinkType.LONG_DISTANCE], max_incoming=caps
    )
    if not decision.accepted:
        assert decision.reason is not None
        return LinkAnswer(False, refusal=LinkRefusal.of(decision.reason)), []
    if decision.replaces_pending:
        # Both asked at once and the peer's request wins: hold its link as our own wish.
        if st.held is None:
            st.held = st.asking
        st.asking, st.collision_until = None, None
    st.theirs = request.type
    out: list[Action] = []
    if st.phase is Phase.NONE:
        st.set_phase(Phase.AWAITING, now)
        st.deadline = now + await_tunnel
    elif st.phase is Phase.UP:
        st.deadline = None
        out = links.announce_up(peer, st)
    return LinkAnswer(True, held_as=st.held), out


def answer_release(st: PeerLink, now: float) -> ReleaseAnswer:
    """The peer no longer holds the link: our answer is our own hold."""
    st.theirs = None
    if st.held is None and st.asking is None:
        st.released_by_peer = True  # the releaser now closes the tunnel
        if st.phase is Phase.AWAITING:
            st.set_phase(Phase.NONE, now)  # it will not connect any more
    return ReleaseAnswer(st.held)


def take_acceptance(links: PeerLinks, peer: int, st: PeerLink, answer: LinkAnswer, now: float) -> list[Action]:
    """The peer accepted our ``overlay.link``: a new link is connected (we are the requester), an existing
    one held as we asked."""
    wanted, existing = st.asking, st.asking_existing
    st.asking = None
    st.theirs = answer.held_as
    st.epoch = answer.epoch
    out: list[Action] = []
    if not existing:
        st.held = wanted
        if st.phase in (Phase.NONE, Phase.AWAITING):
            out += links.connect(peer, st, now)
    elif st.phase is Phase.NONE:
        st.held = None  # the link went down while the peer was agreeing
    return out + links.announce_up(peer, st)


class Reaction(enum.Enum):
    """What to do about a request of ours that was refused or went unanswered."""

    AWAIT_WINNER = "await_winner"  # we lost a collision: the peer's own request is coming
    SKIP_LONG_DISTANCE = "skip_long_distance"  # the peer has long-distance links enough: ask others
    BACK_OFF = "back_off"  # the peer is full, or did not answer: back off, ask others
    RETRY_SOON = "retry_soon"  # a passing reason: ask again after `refused_retry`


@dataclass(frozen=True)
class Verdict:
    reaction: Reaction
    why: str  # for the backoff log and the overdue-successor warning
    let_go: bool = False  # an existing link cannot be held as we wanted: the peer decides if it stays
    withdraw: bool = False  # the peer may have accepted a new link and lost only its answer: it awaits our tunnel


def judge(outcome: LinkAnswer | Failure, existing: bool) -> Verdict:
    """The verdict on an answer to our ``overlay.link`` that is not an acceptance (or on its failure).

    A failure leaves an existing link's local hold: only the peer's bookkeeping is behind."""
    if isinstance(outcome, Failure):
        why = f"link request {outcome.value}"
        if outcome in (Failure.NO_ANSWER, Failure.ERROR):
            return Verdict(Reaction.BACK_OFF, why, withdraw=not existing)
        return Verdict(Reaction.RETRY_SOON, why)
    refusal = outcome.refusal
    assert not outcome.accepted and refusal is not None
    why = f"refused: {refusal.value}"
    if refusal is LinkRefusal.COLLISION and not existing:
        return Verdict(Reaction.AWAIT_WINNER, why)
    if refusal is LinkRefusal.TOO_MANY_LONG_DISTANCE:
        return Verdict(Reaction.SKIP_LONG_DISTANCE, why, let_go=existing)
    if refusal in FULL:
        return Verdict(Reaction.BACK_OFF, why, let_go=existing)
    return Verdict(Reaction.RETRY_SOON, why, let_go=existing)
