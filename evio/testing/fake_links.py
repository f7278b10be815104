"""In-memory tunnels for overlay controller tests: a `LinkProvider` per node over one `FakeLinkNetwork`.

A tunnel joins two endpoints. `FakeLinks.connect(peer)` opens one (or joins
the one already opening or up between the two, as the tunnel manager reuses an
active tunnel) and returns its `TunnelInfo` once it is up; both ends' `on_event`
get `TunnelUp`, and later `TunnelDown`, exactly as `evio.tunnel.manager.TunnelManager`
reports them: a tunnel that never came up is reported down (state FAILED) to
the ends that took part, one that was up is reported down (CLOSED) to both.

`FakeOverlay` puts it together: N `OverlayController`s over one
`FakeSignalHub` and one `FakeLinkNetwork`, with join, graceful leave and
crash, and views of the resulting topology.

Faults, for tests: `block(a, b)` makes every setup between a and b fail (after
`fail_delay`); `cut(a, b)` kills an up tunnel as liveness would; `kill(node)`
makes a node vanish: its tunnels go down at the other ends, and it reports
nothing any more. Setup takes `setup_delay` seconds (0: the next loop turns).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable

from evio.config.model import TopologyConfig
from evio.overlay.adjacency import LinkState, LinkType
from evio.overlay.adjacency_events import AdjacencyEvent, LinkUp
from evio.overlay.controller import OverlayController, Timings
from evio.testing.fake_signal import FakeSignalClient, FakeSignalHub
from evio.tunnel.errors import SetupError
from evio.tunnel.session import TunnelDown, TunnelEvent, TunnelInfo, TunnelState, TunnelUp

log = logging.getLogger(__name__)

TAP_PREFIX = "evt"


def tap_name(peer: int) -> str:
    """The TAP a node gives its tunnel to `peer` (as TunnelConfig.tap_name: at most 15 characters)."""
    return (TAP_PREFIX + f"{peer:032x}")[:15]


class _FakeTunnel:
    def __init__(self, tunnel_id: str, initiator: int, responder: int) -> None:
        self.tunnel_id = tunnel_id
        self.initiator = initiator
        self.responder = responder
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
            tap=tap_name(peer),
            reason=reason,
        )


class FakeLinkNetwork:
    def __init__(self, setup_delay: float = 0.0, fail_delay: float = 0.0) -> None:
        self.setup_delay = setup_delay
        self.fail_delay = fail_delay
        self._endpoints: dict[int, FakeLinks] = {}
        self._tunnels: dict[frozenset[int], _FakeTunnel] = {}
        self._blocked: set[frozenset[int]] = set()
        self._dead: set[int] = set()
        self._ids = itertools.count(1)
        self.setups = 0  # tunnels that came up
        self.failed_setups = 0
        self.teardowns = 0  # tunnels that were up and went down

    def endpoint(self, node_id: int, on_event: Callable[[TunnelEvent], None] | None = None) -> FakeLinks:
        links = FakeLinks(self, node_id, on_event)
        self._endpoints[node_id] = links
        self._dead.discard(node_id)
        return links

    # -- faults ----------------------------------------------------------------------------

    def block(self, a: int, b: int) -> None:
        self._blocked.add(frozenset((a, b)))

    def unblock(self, a: int, b: int) -> None:
        self._blocked.discard(frozenset((a, b)))

    def cut(self, a: int, b: int, reason: str = "peer silent") -> None:
        tunnel = self._tunnels.get(frozenset((a, b)))
        if tunnel is not None:
            self._end(tunnel, reason)

    def kill(self, node: int) -> None:
        """The node is gone: no goodbye, its peers see their tunnels die."""
        self._dead.add(node)
        self._endpoints.pop(node, None)
        for tunnel in [t for t in self._tunnels.values() if node in t.ends]:
            self._end(tunnel, "peer silent")

    # -- views -----------------------------------------------------------------------------

    def up_pairs(self) -> set[frozenset[int]]:
        return {pair for pair, t in self._tunnels.items() if t.state is TunnelState.UP}

    def tunnel(self, a: int, b: int) -> TunnelInfo | None:
        """`a`'s view of its tunnel to `b`, if any."""
        t = self._tunnels.get(frozenset((a, b)))
        return None if t is None else t.info(a, t.state)

    def open_tunnels(self) -> int:
        return len(self._tunnels)

    async def close(self) -> None:
        """End every tunnel and setup task (for test teardown)."""
        for tunnel in list(self._tunnels.values()):
            self._end(tunnel, "network closed")
        tasks = [t.task for t in self._tunnels.values() if t.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- mechanics -------------------------------------------------------------------------

    def _open(self, initiator: int, responder: int) -> _FakeTunnel:
        tunnel = _FakeTunnel(f"fake-{next(self._ids)}", initiator, responder)
        self._tunnels[frozenset(tunnel.ends)] = tunnel
        tunnel.task = asyncio.get_running_loop().create_task(self._setup(tunnel), name=f"fake tunnel {tunnel.tunnel_id}")
        tunnel.task.add_done_callback(_observe)
        return tunnel

    async def _setup(self, tunnel: _FakeTunnel) -> None:
        pair = frozenset(tunnel.ends)
        fails = pair in self._blocked or tunnel.responder not in self._endpoints
        await asyncio.sleep(self.fail_delay if fails else self.setup_delay)
        if tunnel.state is not TunnelState.NEGOTIATING:
            return  # closed meanwhile
        if fails or tunnel.responder not in self._endpoints or tunnel.initiator not in self._endpoints:
            self._end(tunnel, "setup failed")
            return
        tunnel.state = TunnelState.UP
        self.setups += 1
        for node in tunnel.ends:
            self._emit(node, TunnelUp(tunnel.info(node, TunnelState.UP)))
        if not tunnel.done.done():
            tunnel.done.set_result(None)

    def _end(self, tunnel: _FakeTunnel, reason: str) -> None:
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
            self._emit(node, TunnelDown(tunnel.info(node, tunnel.state, reason)))
        if not tunnel.done.done():
            tunnel.done.set_exception(SetupError(reason))
            tunnel.done.exception()  # retrieved: nobody may be waiting

    def _emit(self, node: int, event: TunnelEvent) -> None:
        endpoint = self._endpoints.get(node)
        if endpoint is None or endpoint.on_event is None:
            return
        try:
            endpoint.on_event(event)
        except Exception:
            log.exception("fake tunnel event subscriber of %032x failed", node)


class FakeLinks:
    """One node's `LinkProvider` on a `FakeLinkNetwork`."""

    def __init__(
        self, network: FakeLinkNetwork, node_id: int, on_event: Callable[[TunnelEvent], None] | None = None
    ) -> None:
        self._network = network
        self.node_id = node_id
        self.on_event = on_event
        self.connects = 0
        self.disconnects = 0

    async def connect(self, peer: int) -> TunnelInfo:
        if peer == self.node_id:
            raise ValueError("a tunnel needs two different nodes")
        if self._network._endpoints.get(self.node_id) is not self:
            raise SetupError("this endpoint is gone")
        self.connects += 1
        tunnel = self._network._tunnels.get(frozenset((self.node_id, peer)))
        if tunnel is None or tunnel.state in (TunnelState.CLOSED, TunnelState.FAILED):
            tunnel = self._network._open(self.node_id, peer)
        await asyncio.shield(tunnel.done)
        return tunnel.info(self.node_id, TunnelState.UP)

    async def disconnect(self, peer: int) -> None:
        self.disconnects += 1
        tunnel = self._network._tunnels.get(frozenset((self.node_id, peer)))
        if tunnel is not None:
            self._network._end(tunnel, "closed by peer")
            await asyncio.sleep(0)  # as a real close, it takes at least a loop turn


def _observe(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("fake tunnel setup failed", exc_info=task.exception())


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
    ) -> None:
        self.overlay = overlay
        self.timings = timings or Timings()
        self.hub = FakeSignalHub()
        self.network = FakeLinkNetwork(setup_delay, fail_delay)
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
            clock=asyncio.get_running_loop().time,
            reevaluate_interval=self.timings.reevaluate_interval,
            timings=self.timings,
        )
        links.on_event = controller.on_tunnel_event
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
