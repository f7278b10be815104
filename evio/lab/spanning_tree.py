"""The spanning tree of a lab whose bridges switch by STP (`switching: stp`), and cutting one tunnel.

- `rstp_ports`: each port's RSTP role and state, as node `index`'s Open vSwitch reports them;
- `spanning_tree` (pure): from the overlay's links and those port states, the links the tree
  forwards on and the links RSTP keeps blocked (a port of theirs discarding);
- `tree_hops` (pure): switching hops between two nodes over the forwarding links, the only path
  frames take on a spanning tree;
- `cut_tunnel` / `mend_tunnel`: drop, in one node's namespace, everything to and from the public
  address its tunnel to a peer uses, so that tunnel dies at both ends (as an underlay failure
  would) while the rest of the node's tunnels, and a relayed replacement, still work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from evio.bridge.ovs_bridge import parse_rstp_ports
from evio.lab.daemons import Topology, hops
from evio.lab.errors import LabError
from evio.lab.lab import Lab

CUT_TABLE = "evio_cut"  # nftables table of the cut in the node's namespace
FORWARDING = "Forwarding"


def rstp_ports(lab: Lab, index: int) -> dict[str, tuple[str, str]]:
    """Port name -> (RSTP role, state) on node `index`'s bridge; empty if RSTP is off."""
    out = lab.ovs(index).vsctl("--format=csv", "--data=bare", "--no-headings", "--columns=name,rstp_status",
                               "list", "Port")  # fmt: skip
    return parse_rstp_ports(out)


@dataclass(frozen=True)
class SpanningTree:
    nodes: tuple[str, ...]
    forwarding: frozenset[frozenset[str]]  # links forwarding at both ends: the tree
    blocked: frozenset[frozenset[str]]  # links up at both ends that a discarding port keeps out of the tree
    undecided: frozenset[frozenset[str]]  # links whose ports RSTP does not report (yet)

    @property
    def is_tree(self) -> bool:
        """n - 1 forwarding links that reach every node: loop-free and connected."""
        return len(self.forwarding) == len(self.nodes) - 1 and all(
            tree_hops(self, self.nodes[0], node) is not None for node in self.nodes
        )

    def neighbours(self, node: str) -> set[str]:
        return {peer for link in self.forwarding if node in link for peer in link if peer != node}


def spanning_tree(topo: Topology, ports: Mapping[str, Mapping[str, tuple[str, str]]]) -> SpanningTree:
    """The tree from each node's links (`topo`) and its bridge's RSTP port states (`ports`, by node)."""
    forwarding: set[frozenset[str]] = set()
    blocked: set[frozenset[str]] = set()
    undecided: set[frozenset[str]] = set()
    for link in topo.links:
        if not topo.adjacent(link.node, link.peer):
            continue
        pair = frozenset((link.node, link.peer))
        ends = [_state(topo, ports, link.node, link.peer), _state(topo, ports, link.peer, link.node)]
        if None in ends:
            undecided.add(pair)
        elif all(state == FORWARDING for state in ends):
            forwarding.add(pair)
        else:
            blocked.add(pair)
    undecided -= forwarding | blocked
    return SpanningTree(topo.live, frozenset(forwarding), frozenset(blocked), frozenset(undecided))


def _state(topo: Topology, ports: Mapping[str, Mapping[str, tuple[str, str]]], node: str, peer: str) -> str | None:
    for link in topo.links_of(node):
        if link.peer == peer and link.tap is not None and link.tap in ports.get(node, {}):
            return ports[node][link.tap][1]
    return None


def tree_hops(tree: SpanningTree, a: str, b: str) -> int | None:
    """Hops from `a` to `b` over the tree's forwarding links (None: not connected)."""
    return hops(tree.neighbours, a, b)


def all_tree_hops(tree: SpanningTree, nodes: Iterable[str] | None = None) -> dict[tuple[str, str], int]:
    """(a, b) -> tree hops for every ordered pair of connected nodes."""
    names = list(nodes if nodes is not None else tree.nodes)
    hops = {}
    for a in names:
        for b in names:
            if a != b and (h := tree_hops(tree, a, b)) is not None:
                hops[(a, b)] = h
    return hops


def tunnel_endpoint(lab: Lab, index: int, peer_index: int) -> tuple[str, str]:
    """(remote IP, path) of node `index`'s tunnel to node `peer_index`, from its daemon's status."""
    peer_id = lab.node(peer_index).node_id
    for link in lab.daemon_status(index)["overlays"][lab.plan.overlay]["links"]:
        if link.get("peer") == peer_id and link.get("remote_address"):
            return str(link["remote_address"]).rpartition(":")[0].strip("[]"), str(link.get("path"))
    raise LabError(f"node{index} has no tunnel up to node{peer_index}")


def cut_tunnel(lab: Lab, index: int, peer_index: int) -> str:
    """Drop all traffic between node `index` and the public address of its direct tunnel to `peer_index`.

    Refuses a relayed tunnel: its remote address is the TURN server, which every relayed tunnel shares.
    Returns the address cut off.
    """
    address, path = tunnel_endpoint(lab, index, peer_index)
    if path != "direct":
        raise LabError(
            f"node{index}'s tunnel to node{peer_index} is {path}, not direct: cutting it would cut the relay"
        )
    family = "ip6" if ":" in address else "ip"
    rules = (
        f"table inet {CUT_TABLE} {{\n"
        f"  chain output {{ type filter hook output priority 0; {family} daddr {address} drop; }}\n"
        f"  chain input {{ type filter hook input priority 0; {family} saddr {address} drop; }}\n"
        "}\n"
    )
    lab.exec(index, ["nft", "-f", "-"], input=rules)
    return address


def mend_tunnel(lab: Lab, index: int) -> None:
    """Undo `cut_tunnel` on node `index` (nothing if there is no cut)."""
    lab.exec(index, ["nft", "delete", "table", "inet", CUT_TABLE], check=False)


def enable_broadcast_echo(lab: Lab) -> None:
    """Let every node answer pings to a broadcast address (Linux ignores them by default)."""
    for node in lab.nodes:
        lab.exec(node.index, ["sysctl", "-q", "-w", "net.ipv4.icmp_echo_ignore_broadcasts=0"])


def first_echo_answers(ping_output: str) -> dict[str, int]:
    """Source address -> how many answers to the first echo (icmp_seq=1) `ping -b -n` printed.

    On a loop-free switch every node answers a broadcast once: more than one
    answer from a source means the request or the answer was copied on the way.
    """
    seen: dict[str, int] = {}
    for line in ping_output.splitlines():
        if "icmp_seq=1 " in line and "bytes from" in line:
            source = line.split("bytes from", 1)[1].split(":", 1)[0].strip()
            seen[source] = seen.get(source, 0) + 1
    return seen


def broadcast_ping(lab: Lab, index: int) -> tuple[dict[str, int], str]:
    """Answers by source to a broadcast ping from node `index` (first echo only), and ping's output.

    Needs `enable_broadcast_echo` first.
    """
    broadcast = str(lab.node(index).overlay_address.network.broadcast_address)
    done = lab.exec(index, ["ping", "-b", "-n", "-c", "2", "-i", "1", "-w", "3", broadcast], check=False, timeout=15)
    return first_echo_answers(done.stdout), done.stdout + done.stderr
