"""The lab's reading of a spanning tree: which overlay links RSTP forwards on and which it blocks."""

from __future__ import annotations

from pathlib import Path

from evio.lab.daemons import LinkView, Topology
from evio.lab.spanning_tree import all_tree_hops, first_echo_answers, spanning_tree, tree_hops
from evio.plots.comparison import draw_mode_comparison


def ring_of_four() -> Topology:
    """node1..node4 in a ring, each link up at both ends, TAP named after the peer."""
    names = ("node1", "node2", "node3", "node4")
    links = []
    for i, a in enumerate(names):
        for b in (names[i - 1], names[(i + 1) % 4]):
            links.append(LinkView(a, b, "successor", "up", f"t-{b}", None, "direct"))
    return Topology(names, tuple(links), {})


def test_a_discarding_port_blocks_its_link_and_the_rest_is_the_tree() -> None:
    topo = ring_of_four()
    forwarding = ("Designated", "Forwarding")
    ports = {name: {f"t-{peer}": forwarding for peer in ("node1", "node2", "node3", "node4")} for name in topo.order}
    ports["node3"]["t-node4"] = ("Alternate", "Discarding")  # node3-node4 blocked at node3's end
    tree = spanning_tree(topo, ports)
    assert tree.blocked == {frozenset(("node3", "node4"))}
    assert len(tree.forwarding) == 3 and tree.is_tree and not tree.undecided
    # Around the ring the other way: node3 -> node2 -> node1 -> node4.
    assert tree_hops(tree, "node3", "node4") == 3
    hops = all_tree_hops(tree)
    assert len(hops) == 12 and max(hops.values()) == 3


def test_ports_not_reported_leave_their_links_undecided_and_no_tree() -> None:
    topo = ring_of_four()
    tree = spanning_tree(topo, {"node1": {"t-node2": ("Root", "Forwarding")}})
    assert not tree.forwarding and len(tree.undecided) == 4 and not tree.is_tree


def test_the_comparison_plot_is_written(tmp_path: Path) -> None:
    path = tmp_path / "e9.png"
    draw_mode_comparison({"BF": [1, 2, 2], "STP": [1, 3, 4]}, {"BF": [300.0, None], "STP": [200.0, 100.0]},
                         ["1->2", "3->4"], path, "E9")  # fmt: skip
    assert path.stat().st_size > 1000


def test_answers_to_the_first_broadcast_echo_are_counted_by_source() -> None:
    output = """PING 10.254.255.255 (10.254.255.255) 56(84) bytes of data.
64 bytes from 10.254.0.3: icmp_seq=1 ttl=64 time=0.022 ms
64 bytes from 10.254.0.4: icmp_seq=1 ttl=64 time=54.3 ms
64 bytes from 10.254.0.14: icmp_seq=1 ttl=64 time=54.3 ms (DUP!)
64 bytes from 10.254.0.14: icmp_seq=1 ttl=64 time=54.4 ms (DUP!)
64 bytes from 10.254.0.4: icmp_seq=11 ttl=64 time=1.1 ms
64 bytes from 10.254.0.3: icmp_seq=2 ttl=64 time=0.020 ms

--- 10.254.255.255 ping statistics ---
2 packets transmitted, 2 received, +3 duplicates, 0% packet loss, time 1000ms
"""
    assert first_echo_answers(output) == {"10.254.0.3": 1, "10.254.0.4": 1, "10.254.0.14": 2}
    assert first_echo_answers("ping: connect: Network is unreachable\n") == {}
