"""A lab whose signaling is a three-node ejabberd cluster (issue 24): `Lab.up(xmpp="ejabberd-cluster")`.

Five full nodes behind mixed NATs, each listing the cluster's three nodes from its own
((i - 1) mod 3 + 1: evio.lab.ejabberd.server_order), so they sign in to different cluster nodes.
The ring closes, each member is signed in to its own first server, and pings cross the overlay between
members of different cluster nodes.
"""

from __future__ import annotations

import pytest

from evio.lab import ejabberd
from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.testing.labs import LabFactory
from evio.testing.waiting import wait_for_value

pytestmark = pytest.mark.integration

NODES = 5
RING_TIMEOUT = 120.0


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
