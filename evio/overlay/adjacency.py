"""The adjacency diff and the edge-request decision (paper section 3.1; docs/design.md, "Link negotiation").

Vocabulary. A *link* is one tunnel between two nodes. Each end keeps its own
view: links it *holds* (`Adjacency.outgoing`, under its own type: successor,
long-distance or on-demand) and links the peer holds towards it
(`Adjacency.incoming`, under the peer's type). Both ends may hold the same
link; the tunnel is torn down when neither holds it any more. So taking over a
link the peer opened is a bookkeeping change (`ChangeType` with
``adopted=True``), not a new tunnel, and removing a link means releasing this
end's hold.

`diff` turns the current view and the desired links into ordered operations:

1. changes that make a link a successor, then new successor links: before
   anything is taken away, so the ring is never cut (paper: "prioritizes
   creating successor links before removing existing ones");
2. other type changes;
3. on-demand removals, then on-demand additions;
4. successor removals (and successor -> other type changes), only while at
   least `s` successor links that are *up* remain; the rest wait for a later
   evaluation, when the new successors are up;
5. long-distance removals, then long-distance additions (freeing a peer's
   incoming slot before asking another).

This follows the priorities of the original GraphTransformation, with
successor additions moved ahead of every removal.

`accept_request` is the answer to a peer asking for a link, shared by the
daemon and the simulator: long-distance requests are accepted only while
fewer than a cap (2k by default) of links are held by peers alone as their
long-distance links ("accept as many as you create", and then some);
successor and on-demand requests under caps of their own (every peer is
untrusted: no type of incoming link may grow without bound); when both
sides asked each other at once, the request from the lower node id wins on
both sides (as in the original: the higher id accepts, the lower id refuses).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from evio.ids import clockwise_distance, sorted_clockwise
from evio.overlay.symphony import Selection


class LinkType(enum.Enum):
    SUCCESSOR = "successor"
    LONG_DISTANCE = "long_distance"
    ON_DEMAND = "on_demand"


class LinkState(enum.Enum):
    PENDING = "pending"  # asked for or accepted, tunnel not yet carrying traffic
    UP = "up"
    CLOSING = "closing"  # being torn down


@dataclass(frozen=True)
class Link:
    type: LinkType
    state: LinkState = LinkState.UP


@dataclass(frozen=True)
class Adjacency:
    """One node's view of its links: those it holds, and those peers hold towards it."""

    outgoing: Mapping[int, Link] = field(default_factory=dict)
    incoming: Mapping[int, Link] = field(default_factory=dict)

    def incoming_long_distance_only(self) -> int:
        """Links held by a peer alone as its long-distance link: what the cap of k counts."""
        return self.incoming_only(LinkType.LONG_DISTANCE)

    def incoming_only(self, link_type: LinkType) -> int:
        """Links held by a peer alone as `link_type`: what the incoming caps count."""
        return sum(
            1 for peer, link in self.incoming.items() if link.type is link_type and peer not in self.outgoing
        )

    def successors_up(self) -> int:
        return sum(
            1 for link in self.outgoing.values() if link.type is LinkType.SUCCESSOR and link.state is LinkState.UP
        )


@dataclass(frozen=True)
class AddLink:
    """Ask `peer` for a new link of `type`."""

    peer: int
    type: LinkType


@dataclass(frozen=True)
class RemoveLink:
    """Release this end's hold on the link to `peer` (held as `type`)."""

    peer: int
    type: LinkType


@dataclass(frozen=True)
class ChangeType:
    """Hold the existing link to `peer` as `new` instead of `old`; `adopted`: it was the peer's alone."""

    peer: int
    old: LinkType
    new: LinkType
    adopted: bool = False


LinkOperation = AddLink | RemoveLink | ChangeType


def desired_links(selection: Selection, on_demand: Iterable[int] = ()) -> dict[int, LinkType]:
    """Merge a Symphony selection with wanted on-demand peers; a peer keeps its strongest type."""
    desired: dict[int, LinkType] = dict.fromkeys(on_demand, LinkType.ON_DEMAND)
    desired.update(dict.fromkeys(selection.long_distance, LinkType.LONG_DISTANCE))
    desired.update(dict.fromkeys(selection.successors, LinkType.SUCCESSOR))
    return desired


def diff(
    self_id: int, current: Adjacency, desired: Mapping[int, LinkType], successor_count: int
) -> list[LinkOperation]:
    """Ordered operations from `current` to `desired` (peer -> type this node wants to hold).

    Links this node holds but does not desire are released, except successors
    that must stay until enough new successors are up: the number of up
    successor links never drops below min(successor_count, successors desired).
    """

    def clockwise(peers: Iterable[int]) -> list[int]:
        # Distinct ids by clockwise distance from self_id: numeric order rotated at self_id, the
        # same order as a sort by clockwise_distance without a key call per peer.
        return sorted_clockwise(self_id, peers)

    to_successor: list[LinkOperation] = []
    add_successor: list[LinkOperation] = []
    retype: list[LinkOperation] = []
    remove_on_demand: list[LinkOperation] = []
    add_on_demand: list[LinkOperation] = []
    leave_successor: list[tuple[int, LinkOperation]] = []  # (peer, op) that lowers the successor count
    remove_long_distance: list[LinkOperation] = []
    add_long_distance: list[LinkOperation] = []

    successors_up = current.successors_up()
    # Looked up once: the simulator runs this for every node of a large overlay.
    held_get, incoming_get = current.outgoing.get, current.incoming.get
    successor, on_demand, closing = LinkType.SUCCESSOR, LinkType.ON_DEMAND, LinkState.CLOSING
    for peer in clockwise(desired):
        want = desired[peer]
        held = held_get(peer)
        if held is None:
            theirs = incoming_get(peer)
            if theirs is None:
                if want is successor:
                    add_successor.append(AddLink(peer, want))
                elif want is on_demand:
                    add_on_demand.append(AddLink(peer, want))
                else:
                    add_long_distance.append(AddLink(peer, want))
                continue
            if theirs.state is closing:
                continue  # ask again once the peer's old link is gone
            op: LinkOperation = ChangeType(peer, theirs.type, want, adopted=True)
            (to_successor if want is successor else retype).append(op)
            if want is successor and theirs.state is LinkState.UP:
                successors_up += 1
            continue
        if held.state is closing:
            continue  # wait until it is gone; the peer would refuse a new request meanwhile
        if held.type is not want:
            op = ChangeType(peer, held.type, want)
            if want is LinkType.SUCCESSOR:
                to_successor.append(op)
                if held.state is LinkState.UP:
                    successors_up += 1
            elif held.type is LinkType.SUCCESSOR:
                leave_successor.append((peer, op))
            else:
                retype.append(op)

    for peer in clockwise([p for p in current.outgoing if p not in desired]):
        link = current.outgoing[peer]
        if link.state is LinkState.CLOSING:
            continue  # already on its way out
        if link.type is LinkType.SUCCESSOR:
            leave_successor.append((peer, RemoveLink(peer, link.type)))
        elif link.type is LinkType.ON_DEMAND:
            remove_on_demand.append(RemoveLink(peer, link.type))
        else:
            remove_long_distance.append(RemoveLink(peer, link.type))

    # Let go of the farthest old successors first; stop at the floor.
    floor = min(successor_count, sum(1 for t in desired.values() if t is LinkType.SUCCESSOR))
    leave_ok: list[LinkOperation] = []
    for peer, op in sorted(leave_successor, key=lambda po: clockwise_distance(self_id, po[0]), reverse=True):
        if current.outgoing[peer].state is LinkState.UP:
            if successors_up - 1 < floor:
                continue  # keep it until a desired successor is up
            successors_up -= 1
        leave_ok.append(op)

    return (
        to_successor
        + add_successor
        + retype
        + remove_on_demand
        + add_on_demand
        + leave_ok
        + remove_long_distance
        + add_long_distance
    )


class RejectReason(enum.Enum):
    TOO_MANY_LONG_DISTANCE = "too_many_long_distance"  # the cap on incoming long-distance links is reached
    COLLISION = "collision"  # both asked at once and this side's request wins (lower node id)
    ALREADY_LINKED = "already_linked"  # a link to the requester already exists (a stale or repeated request)
    LINK_CLOSING = "link_closing"  # the previous link to the requester is being torn down; ask again later
    TOO_MANY_SUCCESSORS = "too_many_successors"  # the cap of incoming successor links is reached
    TOO_MANY_ON_DEMAND = "too_many_on_demand"  # the cap of incoming on-demand links is reached


@dataclass(frozen=True)
class RequestDecision:
    accepted: bool
    reason: RejectReason | None = None
    # Accepted over this node's own pending request to the same peer: that request is
    # dropped and this node holds the requester's link instead.
    replaces_pending: bool = False


_CAP_REASON = {
    LinkType.LONG_DISTANCE: RejectReason.TOO_MANY_LONG_DISTANCE,
    LinkType.SUCCESSOR: RejectReason.TOO_MANY_SUCCESSORS,
    LinkType.ON_DEMAND: RejectReason.TOO_MANY_ON_DEMAND,
}


# The few answers there are, made once (the simulator decides millions of requests).
ACCEPTED = RequestDecision(True)  # a plain acceptance is always this one answer (the simulator relies on it)
_ACCEPTED_OVER_PENDING = RequestDecision(True, replaces_pending=True)
_REFUSED = {reason: RequestDecision(False, reason) for reason in RejectReason}


def cap_reason(link_type: LinkType) -> RejectReason:
    """The refusal when the incoming cap of `link_type` is reached."""
    return _CAP_REASON[link_type]


def accept_request(
    self_id: int,
    requester: int,
    link_type: LinkType,
    current: Adjacency,
    max_incoming_long_distance: int,
    max_incoming: Mapping[LinkType, int] | None = None,
) -> RequestDecision:
    """Decide on `requester` asking this node for a link of `link_type`.

    `max_incoming` caps the links peers hold alone of the other types (absent: no cap),
    so no type of incoming link can grow without bound.
    """
    mine = current.outgoing.get(requester)
    if mine is not None:
        if mine.state is LinkState.CLOSING:
            return _REFUSED[RejectReason.LINK_CLOSING]
        if mine.state is LinkState.UP:
            return _REFUSED[RejectReason.ALREADY_LINKED]
        # Both asked at once: the lower node id's request is the one that goes ahead.
        if self_id < requester:
            return _REFUSED[RejectReason.COLLISION]
        return _ACCEPTED_OVER_PENDING
    theirs = current.incoming.get(requester)
    if theirs is not None:
        reason = RejectReason.LINK_CLOSING if theirs.state is LinkState.CLOSING else RejectReason.ALREADY_LINKED
        return _REFUSED[reason]
    if link_type is LinkType.LONG_DISTANCE:
        # Through incoming_long_distance_only: a view may keep that count running (the simulator's does).
        full = current.incoming_long_distance_only() >= max_incoming_long_distance
    else:
        cap = (max_incoming or {}).get(link_type)
        full = cap is not None and current.incoming_only(link_type) >= cap
    if full:
        return _REFUSED[cap_reason(link_type)]
    return ACCEPTED
