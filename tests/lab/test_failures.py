"""E3 and E4: a node fails (its daemon is SIGKILLed) under a running ping (paper sections 4.1, 5.5).

E3, s = 1: node X pings Y, its successor's successor, while its successor fails. X is not linked
to Y, so with its successor gone X has no neighbour between itself and Y and its bounded floods
cannot reach Y: the ring is partitioned there. Learned unicast paths need not follow the ring, so
the test takes a pair whose ping leaves X through the successor (up to 6 tried), read from X's
bridge (its flow, its port names) and the same for a second before the kill: two paths of equal
length may take turns. The ping stops until the overlay links X to Y, its new successor, then
resumes.

E4, s = 2: X pings the node three successor edges away while its successor fails; X's second
successor link leads past it, so the ping goes on. Then, as in the paper, the two successors of a
node fail at once, which s = 2 does not cover: measured where the ping leaves through one of them,
the ping stops until the overlay repairs.

Neighbours notice a killed node when its XMPP presence goes (the server sees its connection close):
they probe its tunnels, which then fail within a few RTTs (at least 0.25 s) instead of after the
dead-peer time (5 s); meanwhile its predecessors already link to the peer after it (a stand-in), so
the ring is whole again about when the probe ends. The ping waits for the probe: until then frames
still go to the dead node.

"Ring whole again" is when the last missing successor link came up at its later end, from the
daemons' own ages of their links; a poll of all 16 status documents takes 0.3-0.6 s on a loaded
host, and is reported beside it.

"Does not interrupt" (E4): the paper watched a running ping (one echo a second) go on. Our probe
sends ten a second; we ask that no gap between two replies reaches one second, i.e. a default ping
would not have missed a reply, and report how many 100 ms probes were lost.

Each overlay here repairs itself: every surviving node gets its s successor links again.
Both scenarios kill nodes, so each has its own lab (n nodes, mixed NATs, k = 2 as in the paper).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from scenario_lab import (
    FigureBook,
    PingProbe,
    index_of,
    next_hop,
    overlay_ip,
    ring_timeout,
    scenario_nodes,
    wait_for,
    wait_quiet,
    wait_ring,
)

from evio.config.model import TunnelConfig
from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.testing.labs import LabFactory
from evio.testing.scenarios import Figure, Outage, PingTrace, ring_offset, ring_whole_since, successor_gaps

pytestmark = pytest.mark.lab

NODES = scenario_nodes()
LONG_DISTANCE = 2  # the paper's k for E3 and E4
PING_INTERVAL = 0.05  # fine enough that a repair in 0.2 s still loses >= 2 probes (E3 asserts the cut)
NO_INTERRUPTION = 1.0  # longest gap between replies that is not an interruption (a 1/s ping misses nothing)
REPAIR_TARGET = 1.0  # E11: the ring repaired within 1 s of a crash (a direct replacement link)
AFTER_REPAIR = 2.0  # seconds the probe keeps running once the ring is whole again
QUIET = 3.0  # seconds without a link change before the next failure
PATH_WATCH = 1.0  # seconds the ping's next hop must stay the same before a failure on its path
CANDIDATES = 6  # pinging nodes tried, from the middle of the ring, for one whose ping leaves through the victims


def form_lab(lab_factory: LabFactory, successors: int) -> Lab:
    lab = lab_factory(nodes=NODES, nat="mixed", daemons=True,
                      topology={"successors": successors, "long_distance": LONG_DISTANCE})
    wait_ring(lab, NODES, successors, f"a ring of {successors} successor links per node")
    return lab


def candidates(topo: Topology, target_steps: int, start: int = 0) -> list[str]:
    """Nodes not linked to the node `target_steps` successors away (so a ping crosses other nodes),
    in ring order from the `start`-th live node."""
    live = list(topo.live)
    ordered = [live[(start + i) % len(live)] for i in range(len(live))]
    found = [node for node in ordered if not topo.adjacent(node, ring_offset(topo, node, target_steps))]
    assert found, f"every node is linked to its successor {target_steps} edges away; nothing to test"
    return found


@dataclass(frozen=True)
class FailureRun:
    trace: PingTrace
    killed_at: float  # epoch seconds, as the ping trace's
    dead_at: float  # when every victim's process was gone: a reply after this did not cross a victim
    repaired: float  # seconds from the kill until every survivor had its s successor links again (link ages)
    seen: float  # ... until a poll of every daemon's status saw it so (the poll's own time included)
    via: str | None  # the neighbour the pinging node sent the target's frames to before the kill
    node: str
    target: str
    victims: tuple[str, ...]
    after: Topology  # the repaired overlay

    def path_to(self, peer: str) -> str:
        """How the pinging node's link to `peer` runs after the repair (direct, relay), as the topology says."""
        paths = {l.path for l in self.after.links if {l.node, l.peer} == {self.node, peer} and l.state == "up"}
        return "/".join(sorted(p or "?" for p in paths)) or "no link"

    @property
    def outage(self) -> Outage:
        return self.trace.outage_at(self.dead_at)

    @property
    def longest_gap(self) -> float:
        """The longest time without a reply, from the last reply before the kill to the last reply."""
        start = self.outage.last_before
        assert start is not None, "no reply before the failure"
        return self.trace.max_gap(start, self.trace.replies[-1][1])

    @property
    def lost(self) -> int:
        return self.trace.lost_after(self.dead_at)

    def path_note(self) -> str:
        if self.via is None:
            return "next hop unknown"
        return f"next hop {self.via}{' (failed)' if self.via in self.victims else ''}"


def fail_under_ping(
    lab: Lab, node: str, target: str, victims: list[str], successors: int, only_if_via_victim: bool = False
) -> FailureRun | None:
    """Ping `target` from `node`, SIGKILL the daemons of `victims` together, wait until every survivor
    holds its `successors` successor links again, and keep pinging a little longer.

    With `only_if_via_victim`, nothing is killed (None) unless the ping's next hop is a victim."""
    survivors = {n.name for n in lab.nodes if lab.daemon(n.index) is not None} - set(victims)
    with PingProbe(lab, index_of(node), overlay_ip(lab, target), PING_INTERVAL) as probe:
        probe.wait_replies(10, timeout=30)
        via = steady_next_hop(lab, node, target)
        if only_if_via_victim and via not in victims:
            return None
        killed_at = time.time()
        for victim in victims:
            lab.kill_daemon(index_of(victim))
        # A reply already past a victim can still arrive while it dies (a CI run saw one 53 ms after
        # the signal and counted the cut as 0 lost): the outage is measured from its death.
        dead_at = time.time()
        after = wait_for(lab.topology, lambda t: set(t.live) == survivors and not successor_gaps(t, successors),
                         ring_timeout(NODES), "the ring repaired among the survivors", poll=0.2)
        seen = time.time() - killed_at
        whole_at = ring_whole_since(after, successors)
        assert whole_at is not None, "the repaired ring's links carry no age"
        probe.wait_reply_after(killed_at, timeout=30)
        time.sleep(AFTER_REPAIR)  # the probe's rate is the measurement: keep watching after the repair
    return FailureRun(probe.trace(), killed_at, dead_at, whole_at - killed_at, seen, via, node, target,
                      tuple(victims), after)


def steady_next_hop(lab: Lab, node: str, target: str) -> str | None:
    """The neighbour `node` sends `target`'s frames to, if it stays the same over PATH_WATCH seconds
    (None if not, or if there is no such flow). Two paths of equal length may take turns (a unicast
    packet-in moves a MAC once its path's confirmation is older than the learning table's hold): the
    premise "the ping leaves through the failing node" needs the path it has now, and will have."""
    hops: list[str | None] = []
    deadline = time.monotonic() + PATH_WATCH
    while not hops or time.monotonic() < deadline:
        hops.append(next_hop(lab, lab.topology([index_of(node)]), node, target))
        time.sleep(0.05)
    hops.append(next_hop(lab, lab.topology([index_of(node)]), node, target))  # the last, just before the failure
    return hops[0] if len(set(hops)) == 1 else None


def fail_on_path(lab: Lab, victim_steps: tuple[int, ...], target_steps: int, successors: int) -> FailureRun:
    """`fail_under_ping` for the first node (of up to CANDIDATES, from the middle of the ring) whose ping to the node
    `target_steps` successors away leaves it through one of the nodes `victim_steps` away."""
    wait_quiet(lab, QUIET, ring_timeout(NODES))  # every link up: the ping's path is the settled one
    topo = lab.topology()
    for node in candidates(topo, target_steps, start=len(topo.live) // 2)[:CANDIDATES]:
        victims = [ring_offset(topo, node, steps) for steps in victim_steps]
        target = ring_offset(topo, node, target_steps)
        run = fail_under_ping(lab, node, target, victims, successors, only_if_via_victim=True)
        if run is not None:
            return run
    pytest.fail(f"no ping among {CANDIDATES} tried left its node steadily through the nodes {victim_steps} "
                "successors away")


def test_e3_with_one_successor_a_failure_partitions_the_ring_until_it_is_repaired(
    lab_factory: LabFactory, figures: FigureBook
) -> None:
    lab = form_lab(lab_factory, successors=1)

    run = fail_on_path(lab, victim_steps=(1,), target_steps=2, successors=1)
    outage = run.outage

    assert outage.resumed, f"{run.node}'s ping to {run.target} never resumed"
    assert outage.lost >= 2, (f"{run.node}'s ping to {run.target} went on ({outage.lost} lost): "
                              f"the failure of {run.victims[0]} should partition them")
    figures.record(Figure("E3", "s=1: ping to the successor's successor stopped for", outage.seconds or 0.0, "s",
                          paper="interrupted until repair",
                          note=f"{outage.lost} probes lost; {run.path_note()}; n={NODES}, k=2"))
    figures.record(Figure("E3", "s=1: ring whole again among the survivors after", run.repaired, "s",
                          paper="repaired, ping resumed", target=f"<= {REPAIR_TARGET:.0f} s",
                          note=f"new successor link {run.node}-{run.target}: {run.path_to(run.target)}; "
                               f"a status poll saw it after {run.seen:.2f} s"))
    # The target is the figure's; the test asks only that repair did not wait for the tunnel's silence.
    assert run.repaired < TunnelConfig.dead_after, (
        f"the ring took {run.repaired:.2f} s to repair after {run.victims[0]} failed: as long as waiting "
        f"for its tunnels to go silent ({TunnelConfig.dead_after} s), not acting on its presence")


def test_e4_with_two_successors_one_failure_does_not_interrupt_a_ping(
    lab_factory: LabFactory, figures: FigureBook
) -> None:
    lab = form_lab(lab_factory, successors=2)
    wait_quiet(lab, QUIET, ring_timeout(NODES))  # every link up: the ping's path is the settled one
    topo = lab.topology()
    node = candidates(topo, target_steps=3)[0]
    successor, target = ring_offset(topo, node, 1), ring_offset(topo, node, 3)

    run = fail_under_ping(lab, node, target, [successor], successors=2)
    assert run is not None

    assert run.longest_gap < NO_INTERRUPTION, (f"{node}'s ping to {target} stopped for {run.longest_gap:.2f} s "
                                               f"when {successor} failed ({run.lost} lost; {run.path_note()})")
    figures.record(Figure("E4", "s=2, successor fails: ping 3 edges away, longest gap", run.longest_gap, "s",
                          paper="not interrupted", target=f"< {NO_INTERRUPTION:.0f} s",
                          note=f"{run.lost} probes lost; {run.path_note()}; n={NODES}, k=2"))
    figures.record(Figure("E4", "s=2, successor fails: ring whole again after", run.repaired, "s", paper="repaired",
                          note=f"a status poll saw it after {run.seen:.2f} s"))

    # The paper's second case: a node's two successors fail together, which s = 2 does not cover;
    # measured where the ping leaves through one of them (else the ping could not notice).
    double = fail_on_path(lab, victim_steps=(1, 2), target_steps=3, successors=2)
    outage = double.outage

    assert outage.resumed, f"{double.node}'s ping to {double.target} never resumed after {double.victims} failed"
    figures.record(Figure("E4", "s=2, both successors fail: ping 3 edges away stopped for", outage.seconds or 0.0,
                          "s", paper="interrupted until repair",
                          note=f"{outage.lost} probes lost; {double.path_note()}"))
    figures.record(Figure("E4", "s=2, both successors fail: ring whole again after", double.repaired, "s",
                          paper="repaired", note=f"a status poll saw it after {double.seen:.2f} s"))
