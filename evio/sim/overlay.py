"""An n-node Symphony overlay built in-process, with the daemon's own decision code.

Every node knows every live member (as signaling presence tells the daemon)
and, each round, does what the overlay controller does: `select_links` over the
ring, `diff` against its current links, then carries the operations out.
Requests are answered by the target with `accept_request`, under the same
limits as the daemon (incoming long-distance links capped by the config model's rule, 2k).

A round has two phases so that "both sides ask at once" really happens:
every node decides from the state at the start of the round and sends its
requests; then the requests are delivered, in an order drawn from the
seeded generator (messages race), and answered. New
links come up at the end of the round (a tunnel takes time to connect), so a
successor that is being replaced is still there while its replacement is
pending. A node that is refused a long-distance link does not ask that peer
again until membership changes (the daemon backs off in the same way).

Links are kept per end, as in `evio.overlay.adjacency`: a node *holds* the
links it wants; a tunnel exists while either end holds it.

Inside, a node is its rank among the ids it was built with (0 .. n-1), and
the methods translate at the edges. Symphony and Bounded Flood use only the
ids' clockwise order, which ranks keep, so the overlay is the same; but small
ints hash and compare faster than 128-bit ones and take less memory (at
n = 10^5 the build does millions of lookups keyed by node; see
docs/design.md, "The simulator at n = 10^5").
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, itemgetter

from evio.config.model import LogForm, TopologyConfig
from evio.ids import RING_SIZE
from evio.overlay.adjacency import (
    ACCEPTED,
    AddLink,
    Adjacency,
    ChangeType,
    Link,
    LinkState,
    LinkType,
    RejectReason,
    RemoveLink,
    accept_request,
    desired_links,
    diff,
)
from evio.overlay.symphony import Ring, select_links
from evio.sim.collector import collector_paused
from evio.sim.shuffle import shuffle

_log = logging.getLogger(__name__)


# Links are immutable values of which there are only nine: share them instead of building
# one per request (millions at n = 10^5).
# Keyed by identity: an enum member's own hash is computed in Python, slowly.
_LINKS = {(id(t), id(st)): Link(t, st) for t in LinkType for st in LinkState}


def _link(link_type: LinkType, state: LinkState) -> Link:
    return _LINKS[id(link_type), id(state)]


# The commonest lookups.
_PENDING_LINKS = {id(t): _LINKS[id(t), id(LinkState.PENDING)] for t in LinkType}
_UP_LINKS = {id(t): _LINKS[id(t), id(LinkState.UP)] for t in LinkType}


class SimError(ValueError):
    """Simulator parameters that cannot work."""


@dataclass(frozen=True)
class OverlayParams:
    successors: int = 2
    long_distance: int | None = None  # None: floor(log2 n) of the current membership
    log_form: LogForm = LogForm.LN
    max_rounds: int = 100
    max_incoming_long_distance: int | None = None  # None: the daemon's default (the config model's rule)

    def topology(self) -> TopologyConfig:
        """The daemon's topology settings these parameters stand for: k and the incoming cap come from it."""
        return TopologyConfig(
            successors=self.successors,
            long_distance=self.long_distance,
            log_form=self.log_form,
            max_incoming_long_distance=self.max_incoming_long_distance,
        )


@dataclass(frozen=True)
class RoundResult:
    operations: int  # link operations carried out (adds that were accepted, removals, type changes)
    requests: int
    rejected: int


def random_node_ids(n: int, rng: random.Random) -> list[int]:
    """n distinct random 128-bit ids."""
    ids: set[int] = set()
    while len(ids) < n:
        ids.add(rng.randrange(RING_SIZE))
    return sorted(ids)


class SymphonyOverlay:
    def __init__(self, node_ids: Iterable[int], params: OverlayParams, rng: random.Random) -> None:
        if params.successors < 1:
            raise SimError("need at least one successor link per node")
        self.params = params
        self._rng = rng
        # Node ids by rank, and back (see the module's docstring); everything below is by rank.
        self._ids: list[int] = sorted(set(node_ids))
        self._rank: dict[int, int] = {nid: rank for rank, nid in enumerate(self._ids)}
        n = len(self._ids)
        self._members: set[int] = set(range(n))
        # Per node, indexed by rank: lists, not dicts keyed by node (a build looks them up
        # millions of times in random order; a list index is one load). A node that failed
        # keeps empty tables.
        self._holds: list[dict[int, Link]] = [{} for _ in range(n)]  # holder -> peer -> link
        self._incoming: list[dict[int, Link]] = [{} for _ in range(n)]  # peer -> holder -> link
        self._connecting: list[tuple[int, int]] = []  # (holder, peer) of links that come up at the round's end
        self._pending: list[dict[int, LinkType]] = [{} for _ in range(n)]  # requests in flight
        self._excluded: list[set[int]] = [set() for _ in range(n)]
        # Per node, `Adjacency.incoming_long_distance_only` of its view, kept up to date on every
        # change instead of recounted per request (the recount dominated large builds).
        self._ld_only: list[int] = [0] * n
        # Each node's view, made once: it reads the live mappings and the running count.
        self._views: list[_CountedAdjacency] = [
            _CountedAdjacency(
                _WithPending(self._holds[nid], self._pending[nid]), self._incoming[nid], self._ld_only, nid
            )
            for nid in range(n)
        ]
        self._topology = params.topology()
        self._ring = Ring(self._members)
        # Nodes that may want a change. The rest hold exactly the links of their last
        # selection, with k long-distance ones, all up: while the ring is unchanged they
        # would keep every one without a draw and their diff would be empty, and other
        # nodes' moves cannot change what a node holds. So only these are evaluated.
        self._unsettled: set[int] = set(self._members)
        self.rounds = 0
        self.rejections: Counter[RejectReason] = Counter()

    # -- views -------------------------------------------------------------

    @property
    def members(self) -> set[int]:
        """The ids of the live nodes."""
        ids = self._ids
        return {ids[nid] for nid in self._members}

    def long_distance_count(self) -> int:
        return self._topology.long_distance_for(len(self._members))

    def incoming_cap(self) -> int:
        """Most links a node accepts as peers' long-distance links (the daemon's rule, from the config model)."""
        return self._topology.incoming_long_distance_cap(len(self._members))

    def view(self, nid: int) -> Adjacency:
        """What node `nid` knows of its links, including its own unanswered requests (as pending); a copy."""
        rank = self._rank[nid]
        if rank not in self._members:
            raise KeyError(nid)
        ranked = self._views[rank]
        ids = self._ids
        return _CountedAdjacency(
            {ids[p]: link for p, link in ranked.outgoing.items()},
            {ids[p]: link for p, link in ranked.incoming.items()},
            {nid: ranked.incoming_long_distance_only()},
            nid,
        )

    def adjacency(self, by_rank: bool = False) -> dict[int, set[int]]:
        """Symmetric graph of links that are up, for flooding.

        `by_rank`: nodes as their ranks among the ids the overlay was built with. The clockwise
        order is the same, so a flood over it takes the same paths (and its roots, drawn from
        the sorted nodes, are the same nodes); at large n it floods in half the time.
        """
        with collector_paused():  # 10^5 new sets at n = 10^5: each full pass would walk every table
            ranked = self._ranked_adjacency()
        if by_rank:
            return ranked
        ids = self._ids
        with collector_paused():
            return {ids[nid]: {ids[peer] for peer in peers} for nid, peers in ranked.items()}

    def _ranked_adjacency(self) -> dict[int, set[int]]:
        # Each node's peers from its own tables (links it holds, links held towards it: the same
        # link values), so building the graph reads each node's tables once, in order, instead
        # of the peer's set at random for every link. Between rounds every link is up (a round
        # brings up all it made, and nothing else changes a link's state; test_sim checks it),
        # so the tables' keys are the graph.
        holds, incoming = self._holds, self._incoming
        return {nid: {*holds[nid], *incoming[nid]} for nid in sorted(self._members)}

    def held_links(self) -> Iterator[tuple[int, int, Link]]:
        """(holder, peer, link) for every link held, by either end."""
        ids = self._ids
        for holder, links in enumerate(self._holds):
            for peer, link in links.items():
                yield ids[holder], ids[peer], link

    def held_counts(self) -> Counter[LinkType]:
        """How many links are held, by the holder's type (a link held by both ends counts twice)."""
        # Without a Python step per link (1.8 million at n = 10^5): the same counts, in the same order.
        return Counter(map(attrgetter("type"), chain.from_iterable(map(dict.values, self._holds))))

    # -- dynamics ----------------------------------------------------------

    def run_round(self) -> RoundResult:
        s = self.params.successors
        k = self.long_distance_count()
        cap = self.incoming_cap()
        operations = 0
        requests: list[tuple[int, int, LinkType]] = []
        # Phase 1: every node decides from the state at the start of the round.
        decisions = []
        wanted: list[tuple[int, dict[int, LinkType]]] = []  # nodes whose diff was not empty, and their wish
        unsettled: set[int] = set()
        long_distance = LinkType.LONG_DISTANCE
        for nid in sorted(self._unsettled):
            keep = [p for p, link in self._holds[nid].items() if link.type is long_distance]
            selection = select_links(
                self._ring, nid, s, k, self.params.log_form, self._rng, keep=keep, exclude=self._excluded[nid]
            )
            desired = desired_links(selection)
            # No request is in flight between rounds: the held links are the whole outgoing view.
            ops = diff(nid, Adjacency(self._holds[nid], self._incoming[nid]), desired, s)
            decisions.append((nid, ops))
            if len(selection.long_distance) < k:
                unsettled.add(nid)  # draws again next round
            elif ops:
                wanted.append((nid, desired))
        self._unsettled = unsettled
        holds, incoming, ld_only, pending = self._holds, self._incoming, self._ld_only, self._pending
        for nid, ops in decisions:
            for op in ops:
                if isinstance(op, AddLink):
                    # Asked for: pending until answered. A link the target holds alone as long-distance
                    # stops counting against this node's cap (see the bookkeeping below).
                    target, link_type = op.peer, op.type
                    asked = pending[nid]
                    if target not in asked and target not in holds[nid]:
                        theirs = incoming[nid].get(target)
                        if theirs is not None and theirs.type is long_distance:
                            ld_only[nid] -= 1
                    asked[target] = link_type
                    requests.append((nid, target, link_type))
                elif isinstance(op, RemoveLink):
                    operations += self._release(nid, op.peer)
                elif isinstance(op, ChangeType):
                    operations += self._retype(nid, op)
        # Phase 2: deliver the requests, in no particular order (as messages arrive);
        # the target answers with the daemon's rule.
        shuffle(self._rng, requests)
        rejected = 0
        views, connecting, pending_links, accepted = self._views, self._connecting, _PENDING_LINKS, ACCEPTED
        for requester, target, link_type in requests:
            asked = pending[requester]
            if asked.get(target) is not link_type:
                continue  # already settled by a collision the other way round
            decision = accept_request(target, requester, link_type, views[target], cap)
            if decision is accepted:
                # The commonest answer (all but a few of a large build's), carried out inline:
                # what _drop_pending then _hold do when neither end holds or asks anything of
                # the other but this request, which is what a plain acceptance means.
                del asked[target]
                asking = pending_links[id(link_type)]
                holds[requester][target] = incoming[target][requester] = asking
                connecting.append((requester, target))
                if link_type is long_distance:
                    ld_only[target] += 1  # held by the requester alone, as long-distance
                operations += 1
            elif decision.accepted:
                self._drop_pending(requester, target)
                self._hold(requester, target, _PENDING_LINKS[id(link_type)])
                operations += 1
                if decision.replaces_pending:
                    # The target's own request to the requester is dropped; it holds this link instead.
                    own = self._drop_pending(target, requester)
                    assert own is not None
                    self._hold(target, requester, _PENDING_LINKS[id(own)])
                    self._unsettled.add(target)
                    operations += 1
            elif decision.reason is RejectReason.COLLISION:
                self.rejections[RejectReason.COLLISION] += 1
                rejected += 1  # the target's own request, delivered in this round too, settles it
            else:
                self._drop_pending(requester, target)
                assert decision.reason is not None
                self.rejections[decision.reason] += 1
                rejected += 1
                if link_type is LinkType.LONG_DISTANCE:
                    self._excluded[requester].add(target)
        # Requests still in flight (cannot happen today): dropped, and asked again next round. No
        # request is in flight between rounds, so only the nodes that decided now can hold any;
        # looking at theirs (not at every request again, in shuffled order) reads each table once.
        for requester, _ in decisions:
            if pending[requester]:
                for target in list(pending[requester]):
                    self._drop_pending(requester, target)
                self._unsettled.add(requester)
        # End of round: the new tunnels are connected. Every pending link was held in this round
        # and listed in `connecting` (_hold and the inline acceptance list it), so the nodes at
        # either end of those are the ones with pending links, and all of theirs come up. Each
        # node's two tables are updated in one pass, in order, not two lookups at random places
        # per link (1.8 million links in the first round at n = 10^5). Same type, same holder:
        # the cap counts do not change.
        up_links, state_pending = _UP_LINKS, LinkState.PENDING
        for nid in set(map(itemgetter(0), connecting)).union(map(itemgetter(1), connecting)):
            for table in (holds[nid], incoming[nid]):
                came_up = {peer: up_links[id(link.type)] for peer, link in table.items() if link.state is state_pending}
                if came_up:
                    table.update(came_up)  # new values for keys there already: the tables' order stays
        connecting.clear()
        # A node whose operations left it holding exactly its wish is done (see _unsettled).
        for nid, desired in wanted:
            now = holds[nid]
            if len(now) != len(desired) or any(desired.get(p) is not link.type for p, link in now.items()):
                self._unsettled.add(nid)
        self.rounds += 1
        return RoundResult(operations, len(requests), rejected)

    def stabilise(self) -> bool:
        """Run rounds until one changes nothing and asks nothing; False if max_rounds ran out first."""
        with collector_paused():
            return self._stabilise()

    def _stabilise(self) -> bool:
        for _ in range(self.params.max_rounds):
            result = self.run_round()
            _log.debug(
                "round %s: %s operations, %s requests, %s refused",
                self.rounds, result.operations, result.requests, result.rejected,
            )
            if result.operations == 0 and result.requests == 0:
                return True
        return False

    def fail(self, nids: Iterable[int]) -> None:
        """Nodes stop: their tunnels go down at both ends. Nobody relinks until the next round."""
        rank = self._rank
        gone = {rank[nid] for nid in nids if nid in rank} & self._members
        for nid in gone:
            for peer in list(self._holds[nid]):
                self._release(nid, peer)
            for holder in list(self._incoming[nid]):
                self._release(holder, nid)
        for nid in gone:
            self._members.discard(nid)
            # Its tables are empty now (every link released, no request in flight between rounds).
            assert not (self._holds[nid] or self._incoming[nid] or self._pending[nid]) and self._ld_only[nid] == 0
            self._excluded[nid].clear()
        for excluded in self._excluded:
            excluded.clear()  # membership changed: everyone may be asked again
        self._ring = Ring(self._members)
        self._unsettled = set(self._members)

    # -- bookkeeping -------------------------------------------------------

    # Each change below touches one pair of nodes, and can change only that pair's terms of
    # the two nodes' running `incoming_long_distance_only` counts: a link counts against
    # node t's cap while the holder holds it as long-distance and t holds or asks nothing back.

    def _hold(self, holder: int, peer: int, link: Link) -> None:
        holds = self._holds[holder]
        old = holds.get(peer)
        was_ld = old is not None and old.type is LinkType.LONG_DISTANCE
        changes = was_ld is not (link.type is LinkType.LONG_DISTANCE)
        if changes and holder not in self._holds[peer] and holder not in self._pending[peer]:
            self._ld_only[peer] += -1 if was_ld else 1
        if old is None and peer not in self._pending[holder]:
            theirs = self._incoming[holder].get(peer)
            if theirs is not None and theirs.type is LinkType.LONG_DISTANCE:
                self._ld_only[holder] -= 1  # holding it back takes the peer's link off the cap
        holds[peer] = link
        self._incoming[peer][holder] = link
        if link.state is LinkState.PENDING:
            self._connecting.append((holder, peer))

    def _release(self, holder: int, peer: int) -> int:
        old = self._holds[holder].pop(peer, None)
        if old is None:
            return 0
        del self._incoming[peer][holder]
        if old.type is LinkType.LONG_DISTANCE and holder not in self._holds[peer] and holder not in self._pending[peer]:
            self._ld_only[peer] -= 1
        if peer not in self._pending[holder]:
            theirs = self._incoming[holder].get(peer)
            if theirs is not None and theirs.type is LinkType.LONG_DISTANCE:
                self._ld_only[holder] += 1
        return 1

    def _drop_pending(self, requester: int, target: int) -> LinkType | None:
        link_type = self._pending[requester].pop(target, None)
        if link_type is not None and target not in self._holds[requester]:
            theirs = self._incoming[requester].get(target)
            if theirs is not None and theirs.type is LinkType.LONG_DISTANCE:
                self._ld_only[requester] += 1
        return link_type

    def _retype(self, holder: int, op: ChangeType) -> int:
        held = self._holds[holder].get(op.peer)
        if held is not None:
            self._hold(holder, op.peer, _link(op.new, held.state))
            return 1
        theirs = self._holds[op.peer].get(holder)
        if theirs is None:
            return 0  # the peer let go in this same round; the next round asks afresh
        self._hold(holder, op.peer, _link(op.new, theirs.state))
        return 1


@dataclass(frozen=True, slots=True)
class _CountedAdjacency(Adjacency):
    """A live view whose cap count is the simulator's running count; `test_sim` holds it equal to the recount.

    Its fields in slots: every request reads three of them, from the target's view, at a
    random place in memory; slots keep them in the object (no separate dict to fetch).
    """

    counts: Sequence[int] | Mapping[int, int] = field(default_factory=dict)  # by node
    nid: int = 0

    def incoming_long_distance_only(self) -> int:
        return self.counts[self.nid]


class _WithPending(Mapping[int, Link]):
    """A node's held links plus its unanswered requests (as pending links), without copying."""

    __slots__ = ("_holds", "_pending")

    def __init__(self, holds: Mapping[int, Link], pending: Mapping[int, LinkType]) -> None:
        self._holds = holds
        self._pending = pending

    def __getitem__(self, peer: int) -> Link:
        link_type = self._pending.get(peer)
        if link_type is not None:
            return _link(link_type, LinkState.PENDING)
        return self._holds[peer]

    def get(self, peer: int, default: Link | None = None) -> Link | None:  # type: ignore[override]
        # Mapping.get goes through __getitem__ and a KeyError: too slow for every request.
        link_type = self._pending.get(peer)
        if link_type is not None:
            return _link(link_type, LinkState.PENDING)
        return self._holds.get(peer, default)

    def __contains__(self, peer: object) -> bool:
        return peer in self._pending or peer in self._holds

    def __iter__(self) -> Iterator[int]:
        yield from self._pending
        yield from (peer for peer in self._holds if peer not in self._pending)

    def __len__(self) -> int:
        return len(self._pending) + sum(1 for peer in self._holds if peer not in self._pending)


@dataclass(frozen=True)
class BuildResult:
    overlay: SymphonyOverlay
    settled: bool  # a round changed nothing and asked nothing before max_rounds ran out


def build_overlay(n: int, params: OverlayParams, rng: random.Random) -> BuildResult:
    """n nodes with random ids, linked round by round until they stop changing."""
    if n < 2:
        raise SimError("an overlay needs at least 2 nodes")
    with collector_paused():  # the tables made for every node too
        overlay = SymphonyOverlay(random_node_ids(n, rng), params, rng)
        return BuildResult(overlay, overlay.stabilise())
