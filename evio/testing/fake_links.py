"""In-memory tunnels: a `LinkProvider` / `LinkManager` per node over one `FakeLinkNetwork` per overlay.

The one fake of `evio.tunnel.manager.TunnelManager`'s contract, for the
overlay controller's tests (`FakeOverlay`) and the daemon's (`FakeLinkHub`,
used by `evio.testing.fake_node.FakePlatform`).

A tunnel joins two endpoints. `FakeLinks.connect(peer)` opens one (or joins
the one already opening or up between the two, as the tunnel manager reuses an
active tunnel) and returns its `TunnelInfo` once it is up; both ends' `on_event`
get `TunnelUp`, and later `TunnelDown`, exactly as the tunnel manager reports
them: a tunnel that never came up is reported down (state FAILED) to the ends
that took part, one that was up is reported down (CLOSED) to both. An endpoint
takes part once started (`start()`, as the manager serves offers once
started) and until `close()`; TAP names are `evio.tunnel.config.tap_name`.

`FakeOverlay` puts it together: N `OverlayController`s over one
`FakeSignalHub` and one `FakeLinkNetwork`, with join, graceful leave, crash
and restart, and views of the resulting topology.

Faults, for tests: `block(a, b)` makes every setup between a and b fail (after
`fail_delay`); `cut(a, b)` kills an up tunnel as liveness would; `kill(node)`
makes a node vanish: its tunnels go down at the other ends, and it reports
nothing any more; `vanish(node, dead_after)` does the same, but the other ends
notice only after `dead_after` seconds (liveness), and a tunnel the node opens
again under the same id meanwhile replaces the stale one there (as the tunnel
manager does with a new offer from a peer it thinks it is connected to).
Setup takes `setup_delay` seconds (0: the next loop turns).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from evio.clock import REAL_CLOCK, Clock, Timer
from evio.config.model import TopologyConfig
from evio.overlay.adjacency import LinkState, LinkType
from evio.overlay.adjacency_events import AdjacencyEvent, LinkUp
from evio.overlay.controller import OverlayController, Timings
from evio.testing.fake_signal import FakeSignalClient, FakeSignalHub
from evio.tunnel.config import tap_name
from evio.tunnel.datapath.interface import DatapathStats
from evio.tunnel.errors import SetupError, TunnelError
from evio.tunnel.liveness import RttStats
from evio.tunnel.path.ice import PathKind
from evio.tunnel.session import TunnelDown, TunnelEvent, TunnelInfo, TunnelState, TunnelUp

log = logging.getLogger(__name__)

EventHandler = Callable[[TunnelEvent], None]


class _FakeTunnel:
    def __init__(self, tunnel_id: str, initiator: FakeLinks, responder: FakeLinks) -> None:
        self.tunnel_id = tunnel_id
        self.initiator = initiator.node_id
        self.responder = responder.node_id
        # The endpoints it was made with: a node that restarted has a new one, and this tunnel is stale.
        self.links = {initiator.node_id: initiator, responder.node_id: responder}
        self.state = TunnelState.NEGOTIATING
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None

    @property
    def ends(self) -> tuple[int, int]:
        return self.initiator, self.responder

    def other(self, node: int) -> int:
        return self.responder if node == self.initiator else self.initiator

    def info(self, node: int, state: TunnelState, reason: str | None = None) -> TunnelInfo:
        peer = self.other(node)
        return TunnelInfo(
            peer=peer,
            tunnel_id=self.tunnel_id,
            initiator=node == self.initiator,
            controlling=node > peer,
            state=state,
            path=PathKind.DIRECT if state is not TunnelState.NEGOTIATING else None,
            tap=tap_name(self.links[node].tap_prefix, peer),
            setup_seconds=0.0 if state is not TunnelState.NEGOTIATING else None,
            reason=reason,
        )


@dataclass(frozen=True)
class FakeTunnelView:
    """What `FakeLinks.get` returns: the tunnel as one end sees it (the manager returns its `Tunnel`)."""

    info: TunnelInfo
    rtt: RttStats = RttStats()
    up_since: float | None = None
    mtu: int = 1428

    def stats(self) -> DatapathStats:
        return DatapathStats()

    async def probe(self, timeout: float) -> float:
        if self.info.state is not TunnelState.UP:
            raise TunnelError(f"tunnel is {self.info.state.value}, not up")
        return 0.0


class FakeLinkNetwork:
    def __init__(self, setup_delay: float = 0.0, fail_delay: float = 0.0, clock: Clock = REAL_CLOCK) -> None:
        self.clock = clock  # setup and failure delays, and liveness after `vanish`, run on it
        self.setup_delay = setup_delay
        self.fail_delay = fail_delay
        self._endpoints: dict[int, FakeLinks] = {}
        self._tunnels: dict[frozenset[int], _FakeTunnel] = {}
        self._blocked: set[frozenset[int]] = set()
        self._liveness: list[Timer] = []
        self._ids = itertools.count(1)
        # Faults on demand: a setup between (initiator, responder) for which this says True fails
        # after `fail_delay`, as a tunnel whose ICE or DTLS gives up on a loaded machine.
        self.setup_fails: Callable[[int, int], bool] | None = None
        self.setups = 0  # tunnels that came up
        self.failed_setups = 0
        self.teardowns = 0  # tunnels that were up and went down

    def endpoint(
        self, node_id: int, on_event: EventHandler | None = None, tap_prefix: str = "evt", start: bool = True
    ) -> FakeLinks:
        """Node `node_id`'s links; started at once unless `start` is False (then `start()` them)."""
        links = FakeLinks(self, node_id, on_event, tap_prefix)
        if start:
            links.start()
        return links

    # -- faults ----------------------------------------------------------------------------

    def block(self, a: int, b: int) -> None:
        self._blocked.add(frozenset((a, b)))

    def unblock(self, a: int, b: int) -> None:
        self._blocked.discard(frozenset((a, b)))

    def kill(self, node: int) -> None:
        """The node is gone: no goodbye, its peers see their tunnels die."""
        self._endpoints.pop(node, None)
        for tunnel in [t for t in self._tunnels.values() if node in t.ends]:
            self._end(tunnel, "peer silent")

    def vanish(self, node: int, dead_after: float) -> None:
        """The node is gone and its peers notice only after `dead_after` seconds (their tunnels' liveness)."""
        self._endpoints.pop(node, None)
        for tunnel in [t for t in self._tunnels.values() if node in t.ends]:
            self._liveness.append(self.clock.call_later(dead_after, partial(self._end, tunnel, "peer silent")))

    # -- views -----------------------------------------------------------------------------

    def up_pairs(self) -> set[frozenset[int]]:
        return {pair for pair, t in self._tunnels.items() if t.state is TunnelState.UP}

    def tunnel(self, a: int, b: int) -> TunnelInfo | None:
        """`a`'s view of its tunnel to `b`, if any."""
        t = self._tunnels.get(frozenset((a, b)))
        return None if t is None else t.info(a, t.state)

    def open_tunnels(self) -> int:
        return len(self._tunnels)

    def attached(self) -> set[int]:
        """Nodes with a started endpoint."""
        return set(self._endpoints)

    def stale_tunnels(self) -> set[frozenset[int]]:
        """Pairs whose tunnel goes to an earlier run of a node (after `vanish`), not yet replaced or timed out."""
        return {pair for pair, t in self._tunnels.items() if not self._current(t)}

    def expire_stale(self) -> None:
        """The liveness of every stale tunnel gives up now."""
        for pair in self.stale_tunnels():
            self._end(self._tunnels[pair], "peer silent")

    async def close(self) -> None:
        """End every tunnel and setup task (for test teardown)."""
        for handle in self._liveness:
            handle.cancel()
        self._liveness.clear()
        tunnels = list(self._tunnels.values())
        for tunnel in tunnels:
            self._end(tunnel, "network closed")
        tasks = [t.task for t in tunnels if t.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- mechanics -------------------------------------------------------------------------

    def _current(self, tunnel: _FakeTunnel) -> bool:
        """Both ends still run the endpoints the tunnel was made with."""
        return all(self._endpoints.get(node) is links for node, links in tunnel.links.items())

    def _open(self, initiator: FakeLinks, peer: int) -> _FakeTunnel:
        # An absent responder is recorded as a closed endpoint of its own: the setup fails.
        responder = self._endpoints.get(peer) or FakeLinks(self, peer, None, initiator.tap_prefix)
        tunnel = _FakeTunnel(f"fake-{next(self._ids)}", initiator, responder)
        self._tunnels[frozenset(tunnel.ends)] = tunnel
        tunnel.task = asyncio.get_running_loop().create_task(self._setup(tunnel), name=f"fake tunnel {tunnel.tunnel_id}")
        tunnel.task.add_done_callback(_observe)
        return tunnel

    def _reachable(self, tunnel: _FakeTunnel) -> bool:
        return frozenset(tunnel.ends) not in self._blocked and self._current(tunnel)

    async def _setup(self, tunnel: _FakeTunnel) -> None:
        responder = tunnel.links[tunnel.responder]
        if responder.offer_policy is not None and not responder.offer_policy(tunnel.initiator):
            responder.refused_offers += 1  # refused at once, as the manager refuses the offer
            self._end(tunnel, "offer refused: no link negotiated")
            return
        fails = self.setup_fails is not None and self.setup_fails(tunnel.initiator, tunnel.responder)
        await self.clock.sleep(self.setup_delay if self._reachable(tunnel) and not fails else self.fail_delay)
        if tunnel.state is not TunnelState.NEGOTIATING:
            return  # closed meanwhile
        if fails or not self._reachable(tunnel):
            self._end(tunnel, "setup failed")
            return
        tunnel.state = TunnelState.UP
        self.setups += 1
        for node in tunnel.ends:
            self._emit(tunnel, node, TunnelUp(tunnel.info(node, TunnelState.UP)))
        if not tunnel.done.done():
            tunnel.done.set_result(None)

    def _end(self, tunnel: _FakeTunnel, reason: str, closer: int | None = None) -> None:
        """The tunnel is gone: each end still running hears it (`closer`'s peer hears "closed by peer")."""
        if self._tunnels.get(frozenset(tunnel.ends)) is tunnel:
            del self._tunnels[frozenset(tunnel.ends)]
        if tunnel.state in (TunnelState.CLOSED, TunnelState.FAILED):
            return
        was_up = tunnel.state is TunnelState.UP
        tunnel.state = TunnelState.CLOSED if was_up else TunnelState.FAILED
        if was_up:
            self.teardowns += 1
        else:
            self.failed_setups += 1
        for node in tunnel.ends:
            why = reason if closer is None or node == closer else "closed by peer"
            self._emit(tunnel, node, TunnelDown(tunnel.info(node, tunnel.state, why)))
        if not tunnel.done.done():
            tunnel.done.set_exception(SetupError(reason))
            tunnel.done.exception()  # retrieved: nobody may be waiting

    def _emit(self, tunnel: _FakeTunnel, node: int, event: TunnelEvent) -> None:
        links = tunnel.links[node]
        if self._endpoints.get(node) is not links or links.on_event is None:
            return  # that end is gone (crashed, closed, or restarted: the new run never knew this tunnel)
        try:
            links.on_event(event)
        except Exception:
            log.exception("fake tunnel event subscriber of %032x failed", node)


class FakeLinks:
    """One node's links on a `FakeLinkNetwork`: the contract of `evio.tunnel.manager.TunnelManager`."""

    def __init__(
        self, network: FakeLinkNetwork, node_id: int, on_event: EventHandler | None = None, tap_prefix: str = "evt"
    ) -> None:
        self._network = network
        self.node_id = node_id
        self.on_event = on_event
        self.tap_prefix = tap_prefix
        self.connects = 0
        self.disconnects = 0
        self.reconfigured: list[object] = []  # tunnel settings given by reloads
        self.transit = None  # no data path here, so no transit fast path
        self.offer_policy: Callable[[int], bool] | None = None
        self.refused_offers = 0

    def admit_offers(self, policy: Callable[[int], bool]) -> None:
        """As the tunnel manager: a tunnel from a peer `policy` does not admit fails at this end."""
        self.offer_policy = policy
        self.probes = 0

    @property
    def running(self) -> bool:
        return self._network._endpoints.get(self.node_id) is self

    def start(self) -> None:
        """Take part in the network (a node restarted under the same id replaces its old endpoint)."""
        self._network._endpoints[self.node_id] = self

    def reconfigure(self, config: object) -> None:
        self.reconfigured.append(config)

    def get(self, peer: int) -> FakeTunnelView | None:
        tunnel = self._tunnel(peer)
        return None if tunnel is None else FakeTunnelView(tunnel.info(self.node_id, tunnel.state))

    def tunnels(self) -> dict[int, TunnelInfo]:
        """Active tunnels by peer, as this end sees them."""
        out = {}
        for tunnel in list(self._network._tunnels.values()):
            if tunnel.links.get(self.node_id) is self:
                out[tunnel.other(self.node_id)] = tunnel.info(self.node_id, tunnel.state)
        return out

    async def connect(self, peer: int) -> TunnelInfo:
        if peer == self.node_id:
            raise ValueError("a tunnel needs two different nodes")
        if not self.running:
            raise SetupError("this endpoint is not running")
        self.connects += 1
        network = self._network
        tunnel = network._tunnels.get(frozenset((self.node_id, peer)))
        if tunnel is not None and tunnel.links[self.node_id] is not self:
            # Made by an earlier run of this node: the peer takes our offer as its replacement.
            network._end(tunnel, "replaced by a new offer from the peer")
            tunnel = None
        if tunnel is None or tunnel.state in (TunnelState.CLOSED, TunnelState.FAILED):
            tunnel = network._open(self, peer)
        await asyncio.shield(tunnel.done)
        return tunnel.info(self.node_id, TunnelState.UP)

    def doubt(self, peer: int) -> None:
        """As the tunnel's doubt: a tunnel to a peer that vanished (or restarted since) goes down now."""
        self.probes += 1
        tunnel = self._tunnel(peer) if self.running else None
        if tunnel is not None and tunnel.state is TunnelState.UP and not self._network._current(tunnel):
            self._network._end(tunnel, "peer-silent")

    async def disconnect(self, peer: int) -> None:
        self.disconnects += 1
        tunnel = self._tunnel(peer) if self.running else None  # a crashed node closes nothing
        if tunnel is not None:
            self._network._end(tunnel, "closed locally", closer=self.node_id)
        await asyncio.sleep(0)  # as a real close, it takes at least a loop turn

    async def close(self) -> None:
        """Close every tunnel and stop taking part (the manager's close at shutdown)."""
        if not self.running:
            return  # crashed, or never started
        for peer in list(self.tunnels()):
            tunnel = self._tunnel(peer)
            if tunnel is not None:
                self._network._end(tunnel, "node shutting down", closer=self.node_id)
        del self._network._endpoints[self.node_id]
        await asyncio.sleep(0)

    def _tunnel(self, peer: int) -> _FakeTunnel | None:
        tunnel = self._network._tunnels.get(frozenset((self.node_id, peer)))
        return tunnel if tunnel is not None and tunnel.links.get(self.node_id) is self else None


def _observe(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("fake tunnel setup failed", exc_info=task.exception())


class FakeLinkHub:
    """One `FakeLinkNetwork` per overlay, for daemons that serve several (evio.testing.fake_node)."""

    def __init__(self, setup_delay: float = 0.0, fail_delay: float = 0.0, clock: Clock = REAL_CLOCK) -> None:
        self.clock = clock
        self.setup_delay = setup_delay
        self.fail_delay = fail_delay
        self.networks: dict[str, FakeLinkNetwork] = {}
        self._blocked: set[tuple[int, int]] = set()

    def network(self, overlay: str) -> FakeLinkNetwork:
        network = self.networks.get(overlay)
        if network is None:
            network = self.networks[overlay] = FakeLinkNetwork(self.setup_delay, self.fail_delay, self.clock)
            for a, b in self._blocked:
                network.block(a, b)
        return network

    def links(self, overlay: str, node_id: int, on_event: EventHandler, tap_prefix: str = "evt") -> FakeLinks:
        """A node's links in `overlay`, not yet started (as a TunnelManager before `start()`)."""
        return self.network(overlay).endpoint(node_id, on_event, tap_prefix, start=False)

    def block(self, a: int, b: int) -> None:
        """`a` and `b` cannot reach each other, in every overlay."""
        self._blocked.add((a, b))
        for network in self.networks.values():
            network.block(a, b)

    def attached(self) -> set[tuple[str, int]]:
        """(overlay, node) of every started endpoint."""
        return {(overlay, node) for overlay, network in self.networks.items() for node in network.attached()}

    async def close(self) -> None:
        for network in self.networks.values():
            await network.close()


# -- an in-process overlay: N controllers over one FakeSignalHub and one FakeLinkNetwork -----------


class FakeOverlayNode:
    """One member of a `FakeOverlay`: its signaling client, links, controller and the events it reported."""

    def __init__(
        self, node_id: int, topology: TopologyConfig, client: FakeSignalClient, links: FakeLinks,
        controller: OverlayController,
    ) -> None:
        self.node_id = node_id
        self.topology = topology
        self.client = client
        self.links = links
        self.controller = controller
        self.events: list[AdjacencyEvent] = []
        self.event_errors: list[str] = []  # LinkUp twice or LinkDown without LinkUp for a peer
        self._up: dict[int, str] = {}
        controller.subscribe(self._on_event)

    def _on_event(self, event: AdjacencyEvent) -> None:
        self.events.append(event)
        if isinstance(event, LinkUp):
            if event.peer in self._up:
                self.event_errors.append(f"LinkUp for {event.peer:032x} while up")
            self._up[event.peer] = event.tap
        else:
            if self._up.pop(event.peer, None) is None:
                self.event_errors.append(f"LinkDown for {event.peer:032x} while not up")

    def announced(self) -> set[int]:
        """Peers whose link this node reported up and not yet down."""
        return set(self._up)


class FakeOverlay:
    """Controllers of one overlay running in this process, linked by fakes: the overlay tests' ground."""

    def __init__(
        self,
        overlay: str = "ov",
        timings: Timings | None = None,
        setup_delay: float = 0.0,
        fail_delay: float = 0.0,
        seed: int = 0,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        self.overlay = overlay
        self.timings = timings or Timings()
        self.clock = clock  # every part's: give it an evio.testing.virtual_clock.VirtualClock to drive time
        self.hub = FakeSignalHub(clock)
        self.network = FakeLinkNetwork(setup_delay, fail_delay, clock)
        self.nodes: dict[int, FakeOverlayNode] = {}
        self.gone: list[FakeOverlayNode] = []
        self._rng = random.Random(seed)
        self._jids: set[str] = set()

    @staticmethod
    def jid(node_id: int) -> str:
        return f"n{node_id:032x}@overlay.test"

    def random_ids(self, count: int) -> list[int]:
        return [self._rng.randrange(1 << 128) for _ in range(count)]

    async def add(
        self, node_id: int, topology: TopologyConfig | None = None, start_controller: bool = True
    ) -> FakeOverlayNode:
        """A node joins: its account enters the group, its client logs in, its controller starts.

        With `start_controller` False the caller starts it (e.g. several in the same loop turn).
        """
        topology = topology or TopologyConfig()
        jid = self.jid(node_id)
        self._jids.add(jid)
        self.hub.set_group(self.overlay, self._jids)
        client = self.hub.client(jid, {self.overlay: node_id}, rng=random.Random(self._rng.random()))
        links = self.network.endpoint(node_id)
        controller = OverlayController(
            self.overlay, node_id, topology, client, links,
            rng=random.Random(self._rng.random()),
            clock=self.clock,
            reevaluate_interval=self.timings.reevaluate_interval,
            timings=self.timings,
        )
        links.on_event = controller.on_tunnel_event
        links.admit_offers(controller.expects_tunnel)
        node = FakeOverlayNode(node_id, topology, client, links, controller)
        self.nodes[node_id] = node
        await client.start()
        if start_controller:
            await controller.start()
        return node

    async def leave(self, node_id: int) -> None:
        """A graceful departure: the controller releases and closes its links, then signs off."""
        node = self.nodes.pop(node_id)
        await node.controller.stop()
        await node.client.stop()
        self._forget(node)

    async def kill(self, node_id: int) -> None:
        """A crash: signaling session and tunnels vanish without a word."""
        node = self.nodes.pop(node_id)
        await node.client.stop()
        self.network.kill(node_id)
        await node.controller.stop()  # only reaps its tasks: it can no longer reach anyone
        self._forget(node)

    async def restart(self, node_id: int, dead_after: float) -> FakeOverlayNode:
        """The node's process dies and is started again at once with the same id and account.

        Its peers' tunnels to the old run stay up until their liveness gives up
        after `dead_after` seconds; the new run knows none of them.
        """
        node = self.nodes.pop(node_id)
        self.network.vanish(node_id, dead_after)
        await node.client.stop()
        await node.controller.stop()  # only reaps its tasks: its endpoint is gone
        self.gone.append(node)
        return await self.add(node_id, node.topology)

    def _forget(self, node: FakeOverlayNode) -> None:
        self._jids.discard(self.jid(node.node_id))
        self.hub.set_group(self.overlay, self._jids)
        self.gone.append(node)

    async def close(self) -> None:
        for node_id in list(self.nodes):
            await self.leave(node_id)
        await self.network.close()

    # -- views -----------------------------------------------------------------------------

    def ring(self) -> list[int]:
        return sorted(self.nodes)

    def successors_of(self, node_id: int, count: int) -> list[int]:
        ring = self.ring()
        i = ring.index(node_id)
        return [ring[(i + d) % len(ring)] for d in range(1, min(count, len(ring) - 1) + 1)]

    def successors_up(self, node_id: int) -> int:
        """Links this node holds as successor that are up."""
        adjacency = self.nodes[node_id].controller.adjacency()
        return sum(
            1 for info in adjacency.values()
            if info.link_type is LinkType.SUCCESSOR and info.state is LinkState.UP
        )

    def missing_successors(self) -> list[tuple[int, int]]:
        """(node, successor) pairs of the Symphony ring that are not yet an up successor link."""
        missing = []
        for node_id, node in self.nodes.items():
            adjacency = node.controller.adjacency()
            for succ in self.successors_of(node_id, node.topology.successors):
                info = adjacency.get(succ)
                if (
                    info is None
                    or info.state is not LinkState.UP
                    or info.link_type is not LinkType.SUCCESSOR
                    or frozenset((node_id, succ)) not in self.network.up_pairs()
                ):
                    missing.append((node_id, succ))
        return missing

    def graph(self) -> dict[int, set[int]]:
        """Up tunnels between live nodes."""
        graph: dict[int, set[int]] = {nid: set() for nid in self.nodes}
        for pair in self.network.up_pairs():
            a, b = tuple(pair)
            if a in graph and b in graph:
                graph[a].add(b)
                graph[b].add(a)
        return graph

    def connected(self) -> bool:
        graph = self.graph()
        if not graph:
            return True
        start = next(iter(graph))
        seen = {start}
        todo = [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return len(seen) == len(graph)
