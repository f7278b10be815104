"""E10: Flannel (real flanneld, etcd, CNI bridge/host-local) over evio on 3 nodes behind eim, symmetric and no NAT.

One lab, one run of evio/lab/flannel_scenario (`evio lab flannel` prints the same report): every
ordered pod pair pings and sends TCP with vxlan and with host-gw bound to the evio bridge, the NAT
routers' WAN captures hold no VXLAN and no pod address, vxlan bound to the LAN interface connects no
pods (the negative control), and host-gw pod-to-pod TCP keeps up with node-to-node TCP.
"""

from __future__ import annotations

import pytest
from scenario_lab import FigureBook, daemon_log_tails, ring_timeout, wait_for

from evio.lab import flannel_scenario
from evio.lab.flannel import check_tools, pair_label
from evio.testing.labs import LabFactory
from evio.testing.scenarios import Figure

pytestmark = pytest.mark.lab

NODES = 3  # nat="mixed": eim, symmetric, none
# host-gw's target is 90 % of node-to-node TCP (issue 11; `evio lab flannel` holds a run to it). On CI's
# two shared cores one run's medians still move by 10 % or more, so the test fails only below this floor,
# which double encapsulation or a detour through another node would fall under; the figure shows the ratio.
HOST_GW_FLOOR = 0.8


def test_e10_flannel_pods_talk_across_nats_only_over_evio(lab_factory: LabFactory, figures: FigureBook) -> None:
    check_tools()  # flanneld built by scripts/build-go-tools, etcd, CNI plugins: installed by bootstrap
    lab = lab_factory(nodes=NODES, nat="mixed", daemons=True, topology={"successors": 2})
    try:
        wait_for(lab.topology, lambda t: len(t.live) == NODES and not t.ring_gaps(), ring_timeout(NODES),
                 "the 3-node ring")
    except AssertionError:
        print(daemon_log_tails(lab))
        raise
    report = flannel_scenario.run(lab, src=1, dst=2, seconds=2, rounds=5, tcp_bytes="512K", log=print)
    print("\n".join(report.lines(lab)))

    for backend in ("vxlan", "host-gw"):
        conn = report.connectivity[backend]
        figures.record(Figure("E10", f"{backend}: pod pairs with ping and TCP", f"{conn.answered}/{len(conn.pairs)}",
                              paper="pods on NATed hosts reach each other",
                              note=", ".join(pair_label(lab, p.src, p.dst) for p in conn.pairs if not p.ok)))
        t = report.throughput[backend]
        figures.record(Figure("E10", f"{backend}: pod-to-pod TCP node1 -> node2", t.pod_mbit, "Mbit/s",
                              target=">= 90 % of node-to-node" if backend == "host-gw" else "",
                              note=f"node-to-node {t.node_mbit:.0f} Mbit/s, ratio {t.ratio:.0%}"))
    control = report.connectivity["lan"]
    figures.record(Figure("E10", "negative control (flannel on the LAN interface): pod pairs connected",
                          f"{control.answered}/{len(control.pairs)}", paper="none across NATs"))
    problems = report.problems(host_gw_target=HOST_GW_FLOOR)
    assert problems == [], "\n".join(problems)
    # The control's own captures see Flannel's VXLAN leave through the NAT: the capture check can fail.
    assert any(v.vxlan for v in control.captures.values()), "no VXLAN seen on the WAN in the negative control"
