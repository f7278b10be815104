"""A lab whose signaling is a three-node ejabberd cluster (issue 24): `Lab.up(xmpp="ejabberd-cluster")`.

Five full nodes behind mixed NATs, each listing the cluster's three nodes from its own
((i - 1) mod 3 + 1: evio.lab.ejabberd.server_order), so they sign in to different cluster nodes.
The ring closes, each member is signed in to its own first server, and pings cross the overlay between
members of different cluster nodes. And what the README names, typed as a user types it: `evio lab up --xmpp
ejabberd-cluster` with three nodes, `topology --wait`, `pingall`, `down`, nothing left behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evio.lab import ejabberd
from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.testing.host_snapshot import netns_inodes, take_snapshot
from evio.testing.labs import LabFactory, lab_cli, lab_leftovers, unique_lab_name
from evio.testing.waiting import wait_for_value

pytestmark = pytest.mark.integration

NODES = 5
RING_TIMEOUT = 120.0
REPO = Path(__file__).resolve().parents[3]


def users_on(lab: Lab) -> dict[int, set[str]]:
    """Cluster node index -> the accounts signed in to it, as cluster node 1 sees the whole cluster."""
    servers = lab.ejabberd_servers
    index = {server.erlang_node: server.index for server in servers}
    users: dict[int, set[str]] = {server.index: set() for server in servers}
    listing = lab.exec("pub", servers[0].ctl_argv("connected_users_info"), timeout=120).stdout
    for line in listing.splitlines():
        fields = line.split("\t")  # jid, connection, ip, port, priority, node, uptime, status, resource, text
        if len(fields) > 5 and fields[5] in index:
            users[index[fields[5]]].add(fields[0].split("@", 1)[0])
    return users


def test_a_lab_over_an_ejabberd_cluster_closes_its_ring_and_pings_across(lab_factory: LabFactory) -> None:
    lab = lab_factory(nodes=NODES, nat="mixed", daemons=True, xmpp="ejabberd-cluster")
    assert len(lab.ejabberd_servers) == 3
    assert not any(record.role == "prosody" for record in lab.processes)

    def closed(topo: Topology) -> bool:
        return len(topo.live) == NODES and not topo.ring_gaps()

    wait_for_value(lab.topology, closed, RING_TIMEOUT, what=f"a ring of {NODES} over the cluster", interval=1.0)
    # Each member on its own first server: the cluster carries members on every node.
    expected = {k: {f"node{i}" for i in range(1, NODES + 1) if ejabberd.server_order(i, 3)[0] == k} for k in (1, 2, 3)}
    assert users_on(lab) == expected
    for a in range(1, NODES + 1):
        b = (a + 1) % NODES + 1  # two along the ring
        target = str(lab.node(b).overlay_address.ip)
        done = lab.exec(a, ["ping", "-c", "3", "-i", "0.2", "-W", "2", target], check=False, timeout=30)
        assert done.returncode == 0, f"node {a} -> node {b}: {done.stdout}"


def test_evio_lab_up_xmpp_ejabberd_cluster_typed_closes_the_ring_pings_all_and_goes() -> None:
    """The commands of the README, end to end, on a lab of the command's under a fresh name; `Lab.down` removes
    it should an assertion fail first."""
    name, before, nodes = unique_lab_name(), take_snapshot(), 3
    try:
        up = lab_cli("up", "--name", name, "--nodes", str(nodes), "--nat", "mixed", "--xmpp", "ejabberd-cluster",
                     timeout=180, cwd=REPO)  # fmt: skip
        assert up.returncode == 0, up.stderr
        status = lab_cli("status", "--name", name, "--json", cwd=REPO)
        assert status.returncode == 0, status.stderr
        document = json.loads(status.stdout)
        assert document["xmpp"] == "ejabberd-cluster" and len(document["xmpp_servers"]) == 3
        assert not any(process["role"] == "prosody" for process in document["processes"])
        topology = lab_cli("topology", "--name", name, "--wait", f"{RING_TIMEOUT:g}", timeout=RING_TIMEOUT + 60,
                           cwd=REPO)  # fmt: skip
        assert topology.returncode == 0, topology.stdout + topology.stderr  # 0: the ring closed
        pingall = lab_cli("pingall", "--name", name, timeout=120, cwd=REPO)
        pairs = nodes * (nodes - 1)
        assert pingall.returncode == 0 and f"{pairs}/{pairs} pairs answered" in pingall.stdout, pingall.stdout
        inodes = netns_inodes(list(Lab.attach(name).plan.namespaces))
        down = lab_cli("down", "--name", name, cwd=REPO)
        assert down.returncode == 0, down.stderr
        assert lab_leftovers(name, before, inodes) == set()
    finally:
        Lab.down(name)
