"""Many decision cores negotiating with each other over a randomised bus, in virtual time.

No asyncio and no controller: each `Orchestrator` is fed by a small event
scheduler that delivers every message, answer and tunnel event after a random
latency, so requests cross, collide and race with tunnel events in orders a
real network produces. Every seed is a different interleaving; the checks are
the protocol's promises.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from functools import partial

import pytest

from evio.config.model import OnDemandConfig, TopologyConfig
from evio.overlay.adjacency import LinkState, LinkType
from evio.overlay.adjacency_events import LinkUp
from evio.overlay.orchestrator import (
    Action,
    Connect,
    Disconnect,
    Failure,
    Notify,
    Orchestrator,
    SendLinkRequest,
    SendRelease,
    Timings,
)
from evio.signal.events import RemovalCause

TIMINGS = Timings(
    reevaluate_interval=5.0, membership_debounce=0.2, membership_max_delay=1.0, settle_after_login=0.5,
    request_timeout=2.0, collision_wait=2.0, orphan_grace=3.0, refused_retry=0.5, backoff_base=0.5,
    backoff_cap=4.0, await_tunnel=10.0, change_rate=20.0, change_burst=16,
)


class Bus:
    def __init__(self, seed: int, latency: float = 0.05, setup: float = 0.2) -> None:
        self.rng = random.Random(seed)
        self.latency = latency
        self.setup = setup
        self.now = 0.0
        self.cores: dict[int, Orchestrator] = {}
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._tunnel_ids = itertools.count(1)
        self.tunnels: dict[frozenset[int], str] = {}
        self.announced: dict[int, set[int]] = {}
        self.errors: list[str] = []
        self.tunnel_changes = 0
        self.after_step: Callable[[], None] | None = None  # a check run after every event
        # Cores fed something since their next wakeup was last read: only theirs can have changed.
        self.touched: set[int] = set()
        self._wakeups: dict[int, float | None] = {}

    # -- membership --------------------------------------------------------------------------

    def join(self, nid: int, topology: TopologyConfig) -> None:
        core = Orchestrator(nid, topology, random.Random(self.rng.random()), self.now, TIMINGS, name="ov")
        self.cores[nid] = core
        self.announced[nid] = set()
        self.apply(nid, core.signal_connected(self.now))
        for other in list(self.cores):
            if other != nid:
                self.apply(nid, core.peer_added(other, self.now))
                self.post(partial(self._membership, other, nid, True))

    def kill(self, nid: int) -> None:
        del self.cores[nid]
        self._wakeups.pop(nid, None)
        for pair in [p for p in self.tunnels if nid in p]:
            (other,) = pair - {nid}
            tid = self.tunnels.pop(pair)
            self.tunnel_changes += 1
            self.post(partial(self._tunnel_down, other, nid, tid, "peer silent"))
        for other in self.cores:
            self.post(partial(self._membership, other, nid, False), scale=10)

    def _membership(self, at: int, peer: int, added: bool) -> None:
        core = self.cores.get(at)
        if core is None:
            return
        if added:
            self.apply(at, core.peer_added(peer, self.now))
        else:
            self.apply(at, core.peer_removed(peer, RemovalCause.LEFT, self.now))

    # -- the bus ---------------------------------------------------------------------------

    def post(self, fn: Callable[[], None], scale: float = 1.0) -> None:
        delay = self.rng.uniform(0.001, self.latency * scale)
        heapq.heappush(self._queue, (self.now + delay, next(self._order), fn))

    def _event(self, at: int, feed: Callable[[Orchestrator], list[Action]]) -> None:
        core = self.cores.get(at)
        if core is not None:
            self.apply(at, feed(core))

    def apply(self, nid: int, actions: list[Action]) -> None:
        self.touched.add(nid)
        for action in actions:
            if isinstance(action, Notify):
                peer = action.event.peer
                if isinstance(action.event, LinkUp):
                    if peer in self.announced[nid]:
                        self.errors.append(f"{nid}: second LinkUp for {peer}")
                    self.announced[nid].add(peer)
                elif peer not in self.announced[nid]:
                    self.errors.append(f"{nid}: LinkDown for {peer} never up")
                else:
                    self.announced[nid].discard(peer)
            elif isinstance(action, SendLinkRequest):
                self.post(partial(self._deliver_link, nid, action))
            elif isinstance(action, SendRelease):
                self.post(partial(self._deliver_release, nid, action))
            elif isinstance(action, Connect):
                self.post(partial(self._connect, nid, action), scale=self.setup / self.latency)
            elif isinstance(action, Disconnect):
                self.post(partial(self._disconnect, nid, action.peer))

    def _tunnel_up(self, at: int, peer: int, tid: str) -> None:
        self._event(at, lambda c: c.tunnel_up(peer, tid, f"tap{peer}", self.now))

    def _tunnel_down(self, at: int, peer: int, tid: str, reason: str) -> None:
        self._event(at, lambda c: c.tunnel_down(peer, tid, reason, self.now))

    def _deliver_link(self, src: int, action: SendLinkRequest) -> None:
        dst = self.cores.get(action.peer)
        if dst is None:
            self.post(lambda: self._event(src, lambda c: c.link_answered(action.peer, action.seq, Failure.PEER_ABSENT, self.now)))
            return
        answer, actions = dst.link_request(src, action.request, self.now)
        self.apply(action.peer, actions)
        self.post(lambda: self._event(src, lambda c: c.link_answered(action.peer, action.seq, answer, self.now)))

    def _deliver_release(self, src: int, action: SendRelease) -> None:
        dst = self.cores.get(action.peer)
        if dst is None:
            self.post(lambda: self._event(src, lambda c: c.release_answered(action.peer, action.seq, Failure.PEER_ABSENT, self.now)))
            return
        answer, actions = dst.release_request(src, action.request, self.now)
        self.apply(action.peer, actions)
        self.post(lambda: self._event(src, lambda c: c.release_answered(action.peer, action.seq, answer, self.now)))

    def _connect(self, src: int, action: Connect) -> None:
        if src not in self.cores:
            return
        peer = action.peer
        pair = frozenset((src, peer))
        if peer not in self.cores:
            self.post(lambda: self._event(src, lambda c: c.connect_failed(peer, action.seq, "no peer", self.now)))
            return
        tid = self.tunnels.get(pair)
        if tid is None:  # a new tunnel: both ends hear of it, in either order
            tid = self.tunnels[pair] = f"t{next(self._tunnel_ids)}"
            self.tunnel_changes += 1
            for at, other in ((src, peer), (peer, src)):
                self.post(partial(self._tunnel_up, at, other, tid))
        self.post(lambda: self._event(src, lambda c: c.connect_succeeded(peer, action.seq, tid, f"tap{peer}", self.now)))

    def _disconnect(self, src: int, peer: int) -> None:
        tid = self.tunnels.pop(frozenset((src, peer)), None)
        if tid is not None:
            self.tunnel_changes += 1
            for at, other in ((src, peer), (peer, src)):
                self.post(partial(self._tunnel_down, at, other, tid, "closed"))
        self.post(lambda: self._event(src, lambda c: c.disconnected(peer, self.now)))

    def run_until(self, end: float) -> None:
        self.touched.update(self.cores)  # the test may have fed cores directly
        while True:
            self._read_wakeups()
            wake = min(((w, nid) for nid, w in self._wakeups.items() if w is not None), default=(float("inf"), 0))
            queued = self._queue[0][0] if self._queue else float("inf")
            t = min(wake[0], queued)
            if t > end:
                self.now = end
                return
            self.now = max(self.now, t)
            if queued <= wake[0]:
                heapq.heappop(self._queue)[2]()
            else:
                self.apply(wake[1], self.cores[wake[1]].tick(self.now))
            if self.after_step is not None:
                self.after_step()

    def _read_wakeups(self) -> None:
        """Refresh the next wakeup of the touched cores.

        An untouched core's answer cannot have changed: it depends on the time
        only through deadlines later than the one it gave, and that one is
        the earliest, so it is not passed before the core is ticked.
        """
        for nid in self.touched:
            core = self.cores.get(nid)
            if core is not None:
                self._wakeups[nid] = core.next_wakeup(self.now)
        self.touched.clear()

    # -- views -----------------------------------------------------------------------------

    def successors(self, nid: int, count: int) -> list[int]:
        ring = sorted(self.cores)
        i = ring.index(nid)
        return [ring[(i + d) % len(ring)] for d in range(1, min(count, len(ring) - 1) + 1)]

    def missing_successors(self) -> list[tuple[int, int]]:
        out = []
        for nid, core in self.cores.items():
            adjacency = core.adjacency()
            for succ in self.successors(nid, core.topology.successors):
                info = adjacency.get(succ)
                if (
                    info is None or info.state is not LinkState.UP or info.link_type is not LinkType.SUCCESSOR
                    or frozenset((nid, succ)) not in self.tunnels
                ):
                    out.append((nid, succ))
        return out

    def held_as(self, holder: int, peer: int) -> LinkType | None:
        link = self.cores[holder].view().outgoing.get(peer)
        return None if link is None else link.type

    def check_consistent(self) -> None:
        """Every tunnel is held by an end; each end's up links are exactly its tunnels."""
        for pair in self.tunnels:
            a, b = tuple(pair)
            assert self.held_as(a, b) or self.held_as(b, a), f"tunnel {a}-{b} held by nobody"
        for nid, core in self.cores.items():
            up = {p for p, i in core.adjacency().items() if i.state is LinkState.UP}
            tunnels = {next(iter(p - {nid})) for p in self.tunnels if nid in p}
            assert up == tunnels, (nid, up ^ tunnels)
            assert self.announced[nid] == up
        assert not self.errors, self.errors[:5]


def random_ids(rng: random.Random, n: int) -> list[int]:
    ids: set[int] = set()
    while len(ids) < n:
        ids.add(rng.getrandbits(128))
    return sorted(ids, key=lambda _: rng.random())


@pytest.mark.parametrize("seed", range(12))
def test_random_interleavings_converge_to_symphony_and_stop_changing(seed: int) -> None:
    bus = Bus(seed, latency=0.05 + 0.05 * (seed % 3))
    s = 1 + seed % 2
    ids = random_ids(bus.rng, 12 + seed % 5)
    for nid in ids:  # everybody at once: maximal crossing of requests
        bus.join(nid, TopologyConfig(successors=s))
    bus.run_until(15.0)
    assert bus.missing_successors() == []
    bus.check_consistent()
    changes = bus.tunnel_changes
    bus.run_until(40.0)  # several periodic evaluations later
    assert bus.tunnel_changes == changes
    bus.check_consistent()


@pytest.mark.parametrize("seed", range(6))
def test_mixed_settings_and_on_demand_converge(seed: int) -> None:
    bus = Bus(100 + seed)
    ids = sorted(random_ids(bus.rng, 16))
    settings = [
        TopologyConfig(successors=1, on_demand=OnDemandConfig(enabled=False)),
        TopologyConfig(successors=2, long_distance=1),
        TopologyConfig(successors=2, on_demand=OnDemandConfig(enabled=False)),
        TopologyConfig(successors=2, log_form="log10"),
    ]
    for i, nid in enumerate(ids):
        bus.join(nid, settings[i * 4 // len(ids)])
    for i, nid in enumerate(ids):
        bus.cores[nid].want_on_demand(ids[(i + 8) % 16], bus.now)
    bus.run_until(20.0)
    assert bus.missing_successors() == []
    bus.check_consistent()
    for i, nid in enumerate(ids):
        if settings[i * 4 // len(ids)].on_demand.enabled:
            assert frozenset((nid, ids[(i + 8) % 16])) in bus.tunnels
    changes = bus.tunnel_changes
    bus.run_until(45.0)
    assert bus.tunnel_changes == changes


@pytest.mark.parametrize("seed", range(8))
def test_churn_repairs_and_keeps_the_successor_floor_for_joins(seed: int) -> None:
    bus = Bus(200 + seed)
    s = 2
    ids = random_ids(bus.rng, 20)
    for nid in ids[:14]:
        bus.join(nid, TopologyConfig(successors=s))
    bus.run_until(15.0)
    assert bus.missing_successors() == []
    # Joins: after no event does an established node hold fewer than s up successor links.
    floor_broken: list[tuple[float, int]] = []
    established = set(ids[:14])

    def check_floor() -> None:  # only a core fed in this step can have lost a link
        for nid in bus.touched & established:
            if bus.cores[nid].view().successors_up() < s:
                floor_broken.append((bus.now, nid))

    bus.after_step = check_floor
    for nid in ids[14:]:
        bus.join(nid, TopologyConfig(successors=s))
    bus.run_until(bus.now + 15.0)
    bus.after_step = None
    assert floor_broken == []
    assert bus.missing_successors() == []
    # Crashes: repaired.
    for nid in bus.rng.sample(sorted(bus.cores), 3):
        bus.kill(nid)
    bus.run_until(bus.now + 20.0)
    assert bus.missing_successors() == []
    bus.check_consistent()
