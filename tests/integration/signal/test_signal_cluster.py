"""Signaling past one server (issue 24 item 2, issue 22 item 3): members on a three-node ejabberd cluster.

A real ejabberd cluster on loopback (evio.testing.ejabberd_cluster: Mnesia, one domain, Erlang distribution
between the nodes) and four `evio.node.Node`s whose signaling is the real `SignalClient`, each listing the
three cluster nodes in its own order (`signal.servers`), so the members sign in to different cluster nodes.
Their overlay controllers are the daemon's; their tunnels are `evio.testing.fake_links` (in memory: what is
measured here is signaling, and a tunnel torn down shows as a teardown of the link network).

* The members, on different cluster nodes, find each other and close the ring.
* One cluster node is killed (SIGKILL of its Erlang VM, as a crash): its members sign in to the next
  server in their list; measured until every member is signed in again and knows every other
  (target 10 s), and the tunnels torn down meanwhile (target 0); the ring stays whole.
* A reload that takes a member's server out of its list moves it to another at once, its overlay and
  tunnels kept.
* A member whose first server is down at its start signs in to the next.

Printed with -s: the figures and the machine's load.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slixmpp import ClientXMPP

from evio.config.model import BridgeConfig, Config, NodeConfig, OverlayConfig, SignalConfig
from evio.node.node import Node
from evio.node.plan import plan_node
from evio.signal.client import SignalClient, SignalSettings
from evio.signal.endpoint import PROBE_AFTER
from evio.signal.events import Connected
from evio.signal.interface import Signaling
from evio.signal.protocol import Announcement, Membership, encode_announcement
from evio.testing.ejabberd_cluster import DOMAIN, EjabberdCluster
from evio.testing.fake_links import FakeLinkHub
from evio.testing.fake_node import FakePlatform
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.node_fleet import nid
from evio.testing.waiting import wait_until

pytestmark = pytest.mark.integration

OVERLAY = "ov1"
MEMBERS = 4
BACK_WITHIN = 10.0  # issue 24: every member signed in again within 10 s of losing a cluster node
RING_TIMEOUT = 60.0
TRIES = 60  # at the cluster's race of first presences (decision 0067): 1 try in 1-8 hit it (loads 6-9), so 60
# all miss it at about 1 in 10^6


class ClusterPlatform(FakePlatform):
    """The fake node platform with the real XMPP client: signaling over the cluster, tunnels in memory."""

    def signal_client(self, settings: SignalSettings) -> Signaling:
        client = SignalClient(settings)
        self.clients.append(client)
        return client


def member_config(index: int, servers: list[str]) -> Config:
    signal = SignalConfig(jid=f"node{index}@{DOMAIN}", servers=tuple(servers), password=f"pw{index}",
                          insecure_plaintext=True)  # fmt: skip
    bridge = BridgeConfig(name=f"evbr-{OVERLAY}", address=ipaddress.IPv4Interface(f"10.254.0.{index}/16"))
    return Config(overlays={OVERLAY: OverlayConfig(id=OVERLAY, signal=signal, bridge=bridge)}, node=NodeConfig(id=nid(index)))


@pytest.fixture(scope="module")
def cluster() -> Iterator[EjabberdCluster]:
    directory = Path(tempfile.mkdtemp(prefix="evio-cluster-"))  # not under pytest's 0700 tmp: ejabberd is its own user
    try:
        directory.chmod(0o755)
        with EjabberdCluster(directory / "cluster", f"clustertest{os.getpid()}") as made:
            made.add_members(OVERLAY, {f"node{i}": f"pw{i}" for i in range(1, MEMBERS + 2)})
            try:
                yield made
            except BaseException:
                print(made.diagnose())
                raise
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class Members:
    def __init__(self, cluster: EjabberdCluster) -> None:
        self.link_hub = FakeLinkHub()
        self.platforms: dict[int, ClusterPlatform] = {}
        self.nodes: dict[int, Node] = {}
        self.runs: dict[int, asyncio.Task[str | None]] = {}
        self.cluster = cluster

    def add(self, index: int, order: list[int]) -> None:
        platform = ClusterPlatform(FakeSignalHub(), self.link_hub, seed=index)
        plan = plan_node(member_config(index, self.cluster.servers(order)), nid(index), controller_port=6653,
                         kernel_module_loaded=False)  # fmt: skip
        self.platforms[index] = platform
        self.nodes[index] = Node(plan, platform, freeze_startup_objects=False)
        self.runs[index] = asyncio.create_task(self.nodes[index].run())

    def client(self, index: int) -> SignalClient:
        client = self.platforms[index].clients[0]
        assert isinstance(client, SignalClient)
        return client

    def ring_whole(self) -> bool:
        indexes = sorted(self.nodes)
        for a, b in zip(indexes, indexes[1:] + indexes[:1]):
            links = self.platforms[a].links_made.get(OVERLAY)
            if links is None or nid(b) not in links.tunnels():
                return False
        return True

    def all_known(self) -> bool:
        for index in self.nodes:
            if not self.platforms[index].clients:
                return False  # not started yet
            client = self.client(index)
            others = {nid(i) for i in self.nodes if i != index}
            if not client.connected or set(client.peers(OVERLAY)) != others:
                return False
        return True

    def state(self) -> str:
        """Each member's signaling and links, for a failure's message."""
        lines = []
        for index, platform in sorted(self.platforms.items()):
            links = platform.links_made.get(OVERLAY)
            tunnels = sorted(peer >> 124 for peer in links.tunnels()) if links is not None else []
            if not platform.clients:
                lines.append(f"node{index}: not started ({self.runs[index]})")
                continue
            c = self.client(index)
            lines.append(f"node{index}: connected={c.connected} sessions={c.sessions} server={c.rotation.current} "
                         f"peers={sorted(p >> 124 for p in c.peers(OVERLAY))} tunnels={tunnels} "
                         f"error={c.last_error(OVERLAY)}")  # fmt: skip
        return "\n".join(lines)

    def teardowns(self) -> int:
        return sum(network.teardowns for network in self.link_hub.networks.values())

    async def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()
        await asyncio.gather(*self.runs.values(), return_exceptions=True)
        await self.link_hub.close()


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


async def test_members_on_a_three_node_cluster_survive_the_loss_of_one(cluster: EjabberdCluster) -> None:
    members = Members(cluster)
    # Member i lists the cluster nodes starting from node (i - 1) % 3 + 1: nodes 1 and 2 get two members each
    # over four members, node 3 none at first, so it takes in the members of node 2 when node 2 goes.
    orders = {1: [1, 2, 3], 2: [2, 3, 1], 3: [1, 2, 3], 4: [2, 3, 1]}
    try:
        started = time.monotonic()
        for index, order in orders.items():
            members.add(index, order)
        await wait_until(members.all_known, RING_TIMEOUT, what="every member knowing every other")
        await wait_until(members.ring_whole, RING_TIMEOUT, what="the ring of successor links")
        ring_at = time.monotonic() - started
        on_node = await asyncio.to_thread(cluster.users_on, 3)
        assert on_node == {1: {"node1", "node3"}, 2: {"node2", "node4"}, 3: set()}, on_node
        print(f"\n[cluster] {MEMBERS} members on 2 of 3 cluster nodes: all known and ring whole {ring_at:.2f} s "
              f"after start ({load()})")  # fmt: skip

        # Node 2 crashes: node2 and node4 sign in to node 3, their next server.
        sessions = {i: members.client(i).sessions for i in members.nodes}
        teardowns = members.teardowns()
        killed_at = time.monotonic()
        await asyncio.to_thread(cluster.kill, 2)

        def back() -> bool:
            return all(members.client(i).sessions > sessions[i] and members.client(i).connected for i in (2, 4))

        await wait_until(back, 30, what="node2 and node4 signed in again")
        signed_in = time.monotonic() - killed_at
        await wait_until(members.all_known, 30, what="every member knowing every other again")
        known = time.monotonic() - killed_at
        on_node = await asyncio.to_thread(cluster.users_on, 3)
        dropped = members.teardowns() - teardowns
        print(f"[cluster] node 2 of 3 killed: its members signed in again after {signed_in:.2f} s, every member "
              f"knows every other after {known:.2f} s (target {BACK_WITHIN:.0f} s); tunnels dropped: {dropped} "
              f"(target 0); {load()}")  # fmt: skip
        assert on_node == {1: {"node1", "node3"}, 2: set(), 3: {"node2", "node4"}}, on_node
        assert members.client(2).server == members.client(4).server == cluster.servers([3])[0]  # what status shows
        assert all(members.client(i).sessions == sessions[i] for i in (1, 3))  # the others never noticed
        assert signed_in <= BACK_WITHIN and known <= BACK_WITHIN
        assert dropped == 0
        assert members.ring_whole()
        assert sorted(cluster.running_nodes()) == sorted([cluster.node(1).erlang_node, cluster.node(3).erlang_node])

        # A reload that takes node 3 out of node2's list: node2 signs in to node 1 at once, its overlay kept.
        before = members.client(2).sessions
        reloaded_at = time.monotonic()
        await members.nodes[2].reload(plan_node(member_config(2, cluster.servers([1])), nid(2), controller_port=6653,
                                                kernel_module_loaded=False))  # fmt: skip
        await wait_until(lambda: members.client(2).sessions > before and members.client(2).connected, BACK_WITHIN,
                         what="node2 signed in to node 1 after the reload")  # fmt: skip
        await wait_until(members.all_known, 30, what="every member knowing every other after the reload")
        print(f"[cluster] node2 reloaded with node 1 only: signed in there and known to all after "
              f"{time.monotonic() - reloaded_at:.2f} s")  # fmt: skip
        assert members.client(2).server == cluster.servers([1])[0]
        assert members.teardowns() == teardowns and members.ring_whole()

        # A member whose first server is the dead node signs in to its next at start, and joins the ring.
        joined_at = time.monotonic()
        members.add(5, [2, 1, 3])
        await wait_until(members.all_known, RING_TIMEOUT, what="node5 known to every member and knowing them")
        await wait_until(members.ring_whole, RING_TIMEOUT, what="the ring with node5")
        client5 = members.client(5)
        assert client5.rotation.current == (cluster.node(1).address, cluster.node(1).port)
        print(f"[cluster] node5, its first server down, signed in to its second and joined the ring in "
              f"{time.monotonic() - joined_at:.2f} s ({client5.failed_logins} failed login)")  # fmt: skip
        assert client5.failed_logins == 1  # (its joining may release links no longer wanted: not counted)
    except BaseException:
        print(members.state())
        raise
    finally:
        await members.stop()



class PlainMember:
    """A member announcing its node id from a plain slixmpp client: its first presence goes out when the test says."""

    def __init__(self, cluster: EjabberdCluster, index: int, node: int) -> None:
        self.xmpp = ClientXMPP(f"node{index}@{DOMAIN}/plain", f"pw{index}")
        self.xmpp.enable_plaintext, self.xmpp.enable_starttls, self.xmpp.enable_direct_tls = True, False, False
        self.xmpp.plugin["feature_mechanisms"].unencrypted_plain = True
        self.xmpp.auto_authorize = self.xmpp.auto_subscribe = False
        self.started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.xmpp.add_event_handler("session_start", self._session_start)
        self.announcement = encode_announcement(Announcement((Membership(OVERLAY, nid(index)),)))
        host, port = cluster.servers([node])[0].rsplit(":", 1)
        self.xmpp.connect(host, int(port))

    def _session_start(self, _: object) -> None:
        if not self.started.done():
            self.started.set_result(None)

    def available(self) -> None:
        presence = self.xmpp.make_presence()
        presence["evio"]["json"] = self.announcement
        presence.send()


async def race_once(cluster: EjabberdCluster, attempt: int) -> bool:
    """node1 (evio) signs in on cluster node 1 as node2..node5 (plain) send their first presence on node 3; node1
    must know them all in the end. True if a presence came only on node1's probe: lost at the login."""
    plain = {i: PlainMember(cluster, i, node=3) for i in (2, 3, 4, 5)}  # four chances at the race per try
    settings = SignalSettings(jid=f"node1@{DOMAIN}", server=cluster.node(1).address, port=cluster.node(1).port,
                              memberships={OVERLAY: nid(1)}, password="pw1", insecure_plaintext=True)  # fmt: skip
    a = SignalClient(settings)

    def go(_: Connected) -> None:  # node1's first presence is on its way: theirs go too
        for member in plain.values():
            member.available()

    try:
        await asyncio.wait_for(asyncio.gather(*(m.started for m in plain.values())), 60)
        a.subscribe(Connected, go)
        await a.start()
        await wait_until(lambda: set(a.peers(OVERLAY)) == {nid(i) for i in plain}, PROBE_AFTER * 1.25 + 10,
                         what=f"node1 knowing node2..node5 (attempt {attempt})")  # fmt: skip
        # Presences that came after node1 probed them, and only then.
        print(f"\n[cluster] attempt {attempt}: presences lost at node1's login, come on its probe: "
              f"{a.presences_recovered} of 4; {load()}")  # fmt: skip
        return a.presences_recovered > 0
    finally:
        await a.stop()
        await asyncio.wait_for(asyncio.gather(*(m.xmpp.disconnect() for m in plain.values())), 10)


async def test_a_presence_the_cluster_lost_at_login_comes_on_the_probe(cluster: EjabberdCluster) -> None:
    """Two first presences at the same moment on two cluster nodes: each node looks for the other's session before
    Mnesia has copied it there, and both are lost for good (decision 0067). The probe a few seconds after the
    login brings the other's. Tried until the race is hit: a try that misses it costs a login, about 1 s."""
    for attempt in range(1, TRIES + 1):
        if await race_once(cluster, attempt):
            return
    pytest.fail(f"the race was never hit in {TRIES} tries: the probe was not tested")
