"""Signaling clients inside lab nodes, and the 8-node signaling benchmark.

Each node's ``SignalClient`` runs on its own asyncio loop in its own thread,
and that thread has entered the node's network namespace (``setns`` affects
only the calling thread), so every socket the client opens, reconnects
included, goes through the node's NAT router to the lab's prosody. One
process, real namespaces, real NATs, real TLS.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from evio.lab.lab import Lab, NodeInfo
from evio.lab.netns import run_in
from evio.signal.client import SignalClient, SignalSettings
from evio.signal.events import Connected, PeerAdded
from evio.signal.protocol import Body

T = TypeVar("T")


class NamespaceLoop:
    """An asyncio event loop running on a thread inside network namespace `netns`."""

    def __init__(self, netns: str) -> None:
        self.netns = netns
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._main, name=f"loop-{netns}", daemon=True)

    def start(self) -> NamespaceLoop:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"event loop in {self.netns} did not start")
        if self._failure:
            raise self._failure[0]
        return self

    def _main(self) -> None:
        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        try:
            run_in(self.netns, serve)
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._failure.append(exc)
            self._ready.set()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return self.submit(coro).result(timeout)

    def close(self) -> None:
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def node_settings(lab: Lab, node: NodeInfo, **overrides: Any) -> SignalSettings:
    """SignalSettings for lab node `node`: its account, the lab's prosody, STARTTLS against the lab CA."""
    public = lab.public
    values: dict[str, Any] = dict(
        jid=node.jid,
        password=node.password,
        server=str(public.address),
        port=public.xmpp_port,
        ca_file=public.ca_file,
        memberships={public.overlay: int(node.node_id, 16)},
        reconnect_base=0.25,
        reconnect_cap=4.0,
    )
    values.update(overrides)
    return SignalSettings(**values)


@dataclass
class LabNode:
    """A SignalClient in a lab node, with what the tests and the benchmark watch."""

    info: NodeInfo
    loop: NamespaceLoop
    client: SignalClient
    peer_added_at: dict[int, float] = field(default_factory=dict)  # node id -> monotonic time last added
    connected_at: list[float] = field(default_factory=list)
    started_at: float = 0.0  # monotonic time of client.start()

    @property
    def node_id(self) -> int:
        return int(self.info.node_id, 16)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return self.loop.call(coro, timeout)

    def request(self, overlay: str, peer: int, action: str, body: Body, timeout: float = 10.0) -> Body:
        return self.call(self.client.request(overlay, peer, action, body, timeout), timeout + 5)


def start_nodes(lab: Lab, indices: list[int] | None = None, **overrides: Any) -> list[LabNode]:
    """A started SignalClient in each listed lab node (all by default)."""
    nodes: list[LabNode] = []
    try:
        for info in lab.nodes if indices is None else [lab.node(i) for i in indices]:
            loop = NamespaceLoop(info.netns).start()
            client = loop.call(_make_client(node_settings(lab, info, **overrides)))
            node = LabNode(info, loop, client)
            _watch(node)
            nodes.append(node)
        for node in nodes:
            node.started_at = time.monotonic()
            node.call(node.client.start())
    except BaseException:
        stop_nodes(nodes)
        raise
    return nodes


async def _make_client(settings: SignalSettings) -> SignalClient:
    return SignalClient(settings)


def _watch(node: LabNode) -> None:
    def added(event: PeerAdded) -> None:
        node.peer_added_at[event.node_id] = time.monotonic()

    def connected(event: Connected) -> None:
        node.connected_at.append(time.monotonic())

    async def subscribe() -> None:
        node.client.subscribe(PeerAdded, added)
        node.client.subscribe(Connected, connected)

    node.call(subscribe())


def stop_nodes(nodes: list[LabNode]) -> None:
    for node in nodes:
        try:
            node.call(node.client.stop(), timeout=10)
        finally:
            node.loop.close()


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll `condition` until true; the seconds it took. TimeoutError naming `what` otherwise."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.005)
    return time.monotonic() - started


def all_discovered(nodes: list[LabNode], overlay: str) -> bool:
    expected = {n.node_id for n in nodes}
    return all(set(n.client.peers(overlay)) == expected - {n.node_id} for n in nodes)


@dataclass(frozen=True)
class BenchResult:
    nodes: int
    login_seconds: tuple[float, ...]  # per node: TCP connect -> announcement sent (STARTTLS + SCRAM)
    all_logged_in: float  # start() of the first client -> every client logged in
    all_peers_known: float  # start() of the first client -> every node knows every other
    rtts: tuple[float, ...]  # remote-action round trips, seconds

    def lines(self) -> list[str]:
        logins = sorted(self.login_seconds)
        rtt = sorted(self.rtts)
        return [
            f"signal bench: {self.nodes} nodes behind NATs, prosody STARTTLS + SCRAM, CA-verified",
            f"  login per node (connect -> presence sent): median {statistics.median(logins) * 1e3:.0f} ms, "
            f"min {logins[0] * 1e3:.0f} ms, max {logins[-1] * 1e3:.0f} ms",
            f"  all {self.nodes} logged in:   {self.all_logged_in * 1e3:.0f} ms after start",
            f"  all peers known:    {self.all_peers_known * 1e3:.0f} ms after start",
            f"  remote action RTT ({len(rtt)} requests): median {statistics.median(rtt) * 1e3:.2f} ms, "
            f"p90 {rtt[int(len(rtt) * 0.9)] * 1e3:.2f} ms, max {rtt[-1] * 1e3:.2f} ms",
        ]


async def echo_handler(overlay: str, peer: int, body: Body) -> Body:
    return body


def run_bench(lab: Lab, requests: int = 200) -> BenchResult:
    """Start a client in every lab node, time logins and discovery, then time echo requests."""
    overlay = lab.public.overlay
    nodes = start_nodes(lab)
    started = min(n.started_at for n in nodes)
    try:
        for node in nodes:
            node.call(_register(node.client, "bench.echo", echo_handler))
        wait_for(lambda: all(n.connected_at for n in nodes), 60, "every node logged in")
        wait_for(lambda: all_discovered(nodes, overlay), 60, "every node knows every other")
        all_logged_in = max(n.connected_at[0] for n in nodes) - started
        all_known = max(max(n.peer_added_at.values()) for n in nodes) - started
        logins = tuple(n.client.last_login_seconds or 0.0 for n in nodes)
        rtts: list[float] = []
        for i in range(requests):
            a = nodes[i % len(nodes)]
            b = nodes[(i * 3 + 1) % len(nodes)]
            if a is b:
                b = nodes[(i + 1) % len(nodes)]
            rtts.append(a.call(_timed_request(a.client, overlay, b.node_id)))
        return BenchResult(len(nodes), logins, all_logged_in, all_known, tuple(rtts))
    finally:
        stop_nodes(nodes)


async def _register(client: SignalClient, action: str, handler: Any) -> None:
    client.register_handler(action, handler)


async def _timed_request(client: SignalClient, overlay: str, peer: int) -> float:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    body = await client.request(overlay, peer, "bench.echo", {"t": t0}, timeout=10)
    assert body == {"t": t0}
    return loop.time() - t0
