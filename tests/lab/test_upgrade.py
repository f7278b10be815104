"""A rolling upgrade: nodes of the previous release and of this one in one overlay, then upgraded in place.

The previous release (tests/lab/previous_release.py: its commit, built from git history into a
virtualenv of its own, cached) and this tree run side by side in a lab of four full nodes behind
mixed NATs, alternating round the ring (old, new, old, new) with one successor link each and no
long-distance or on-demand links: every link joins an old node to a new one, and every frame
between two nodes of one release is forwarded by a node of the other. The tests assert that

- the ring closes, every link old-new;
- a broadcast (an ARP request) from each node reaches every other node once;
- every pair pings over the overlay, and a TCP stream runs each way between an old and a new node;
- the old nodes, upgraded in place one at a time (stopped, started as this release), leave the other
  nodes' pairs connected but for a few seconds and are reachable from all of them again soon after,
  and the overlay, now all of this release, passes the checks above again;
- and no node counted an FRB, a signaling message, a negotiation body, a tunnel offer or a tunnel
  control record of the other release as malformed (status counters, and the daemons' logs for the
  counters a status does not show).

The lab tests need root (they are marked integration); the first test, that the previous release's
commit is in the clone's history, runs anywhere. The run takes about 40 s once the previous release
is cached, 75 s with its build (docs/operations.md, "Upgrades").
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from churn_lab import TcpStream
from previous_release import PreviousRelease, PreviousReleaseMissing, build, check_commit
from scenario_lab import FigureBook, PingProbe, daemon_log_tails, ring_timeout, wait_for

from evio.cli.lab_node_cmd import all_pairs_ping
from evio.lab import daemons as full_nodes
from evio.lab.lab import Lab
from evio.lab.node_config import bridge_name
from evio.node.control_client import ControlError
from evio.testing.labs import LabFactory
from evio.testing.scenarios import Figure, copies_per_node
from evio.tunnel import pmtu

NODES = 4
# One successor each, nothing else: a ring of four links, each one old-new (see the module docstring).
TOPOLOGY = {"successors": 1, "long_distance": 0, "on_demand": {"enabled": False}}
PING_INTERVAL = 0.2
MAX_GAP = 5.0  # seconds a pair of nodes that keep running may go unanswered while another is upgraded
REJOIN_TIMEOUT = 60.0  # for an upgraded node to be linked and answering again
STREAM_MESSAGES = 60  # echoed on each TCP stream: 3 s at its 20 messages a second

# What a node counts or logs when it does not understand a peer. Status counters first:
SWITCH_DROPS = ("MALFORMED_FRB", "FORWARD_TYPE", "UNKNOWN_FRB_TYPE")  # Bounded Flood drop reasons
TUNNEL_DROPS = ("bad-control", "unknown-control")  # evio.tunnel.datapath.interface.DropReason values
# This release's path MTU probes (docs/decisions/0050): the previous release refuses any feature announcement, so
# it cannot be told of them, and counts each as bad-control. A search is MAX_PROBES rounds of 5 sizes; unanswered,
# the path MTU stays "assumed" and nothing more is sent until pmtu's re-search (600 s, longer than these tests).
# Those are tolerated on a tunnel, and not one more.
PMTU_PROBES = pmtu.MAX_PROBES * 5
# ... and log lines, for what a status does not count (signal drops, negotiation bodies, tunnel offers).
MISUNDERSTOOD = re.compile(
    r"malformed|signal drop (?:unknown_kind|unsupported_version)|bad announcement|unknown_action|unknown field",
    re.IGNORECASE,
)

Mixed = tuple[Lab, PreviousRelease, tuple[int, ...]]  # the lab, the old release, the nodes running it


def test_the_previous_release_is_in_the_git_history() -> None:
    """Without it (a shallow clone) the rolling-upgrade test cannot run: fail, naming the commit."""
    try:
        check_commit()
    except PreviousReleaseMissing as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def previous() -> PreviousRelease:
    try:
        release = build()
    except PreviousReleaseMissing as exc:
        pytest.fail(str(exc))
    print(f"previous release {release.version} ({release.commit[:7]}) at {release.directory}: "
          f"{f'built in {release.build_seconds:.0f} s' if release.build_seconds else 'cached'}, "
          f"native data path: {release.native}")
    return release


@pytest.fixture(scope="module")
def mixed(module_lab_factory: LabFactory, previous: PreviousRelease, figures: FigureBook) -> Iterator[Mixed]:
    started = time.monotonic()
    lab = module_lab_factory(nodes=NODES, nat="mixed", topology=TOPOLOGY)
    # Old and new alternate round the ring (node id order), so that every successor link is old-new.
    ring = sorted(lab.nodes, key=lambda n: n.node_id)
    old = tuple(sorted(n.index for n in ring[0::2]))
    for node in lab.nodes:
        lab.start_ovs(node.index)
    for node in lab.nodes:
        lab.start_daemon(node.index, previous.evio if node.index in old else None)
    lab.wait_daemons([n.index for n in lab.nodes], 60.0)
    try:
        wait_for(lab.topology, lambda t: len(t.live) == NODES and not t.ring_gaps(), ring_timeout(NODES),
                 "the mixed ring")
    except AssertionError as exc:
        print(daemon_log_tails(lab))
        raise AssertionError("\n".join([str(exc), *misunderstood(lab)])) from None
    figures.record(Figure("upgrade", "mixed lab (2 old + 2 new): up and ring closed", time.monotonic() - started, "s",
                          note=f"previous release {previous.version} ({previous.commit[:7]})"))
    yield lab, previous, old


@pytest.mark.lab
def test_a_mixed_overlay_links_broadcasts_and_unicasts_across_releases(mixed: Mixed, figures: FigureBook) -> None:
    lab, previous, old = mixed
    started = time.monotonic()
    assert_runs(lab, previous, old)
    topo = lab.topology()
    assert not topo.ring_gaps(), f"ring gaps: {topo.ring_gaps()}"
    names = {n.index: n.name for n in lab.nodes}
    old_names = {names[i] for i in old}
    up = {frozenset((link.node, link.peer)) for link in topo.links if link.state == "up"}
    same_release = [sorted(pair) for pair in up if len(pair & old_names) != 1]
    assert not same_release, f"links between nodes of one release (the ring should alternate): {same_release}"

    # The old nodes run their own native data path where it was built (as a deployment of that release does).
    wanted = "native" if previous.native else "python"
    for index in old:
        links = lab.daemon_status(index)["overlays"][lab.plan.overlay]["links"]
        assert {link.get("datapath") for link in links} == {wanted}, f"node{index}'s links: {links}"

    for node in lab.nodes:
        assert_broadcast_reaches_every_node(lab, node.index)

    summary = all_pairs_ping(lab, count=2)
    assert not summary.failed, f"pairs that did not answer over the overlay: {summary.failed}"

    new = [n.index for n in lab.nodes if n.index not in old]
    for client, server in ((old[0], new[0]), (new[1], old[1])):
        with TcpStream(lab, client, server) as stream:
            stream.wait_flowing(15.0)
            wait_for(stream.report, lambda r: int(r.get("echoed", 0)) >= STREAM_MESSAGES, 30.0,
                     f"{STREAM_MESSAGES} messages echoed {names[client]} -> {names[server]}")
            result = stream.stop()
        assert result.broken is None, f"TCP stream {names[client]} -> {names[server]} broke: {result}"
        assert result.echoed > 0

    assert_understood(lab)
    figures.record(Figure("upgrade", "mixed overlay: broadcasts, all-pairs ping, TCP both ways",
                          time.monotonic() - started, "s"))


@pytest.mark.lab
def test_a_rolling_upgrade_keeps_the_overlay_connected(mixed: Mixed, figures: FigureBook) -> None:
    """The old nodes are upgraded in place one at a time, each while the three others run, pinging every pair."""
    lab, previous, old = mixed
    probes = {(a.index, b.index): PingProbe(lab, a.index, str(b.overlay_address.ip), PING_INTERVAL)
              for a in lab.nodes for b in lab.nodes if a.index != b.index}
    try:
        for probe in probes.values():
            probe.__enter__()
        for probe in probes.values():
            probe.wait_replies(3, 30.0)
        for step, upgraded in enumerate(old, start=1):
            gap, pair, rejoined = upgrade_in_place(lab, upgraded, probes)
            assert gap <= MAX_GAP, (f"node{pair[0]} -> node{pair[1]} went {gap:.1f} s unanswered while node{upgraded} "
                                    f"was upgraded (at most {MAX_GAP:g} s)")
            assert_runs(lab, previous, old[step:])
            figures.record(Figure("upgrade", f"rolling upgrade {step}/{len(old)}: longest gap, other pairs", gap, "s",
                                  target=f"<= {MAX_GAP:g} s", note=f"ping every {PING_INTERVAL:g} s"))
            figures.record(Figure("upgrade", f"rolling upgrade {step}/{len(old)}: stop -> upgraded node answers all",
                                  rejoined, "s"))
            summary = all_pairs_ping(lab, count=2)
            assert not summary.failed, f"pairs that did not answer after node{upgraded}'s upgrade: {summary.failed}"
            assert_broadcast_reaches_every_node(lab, upgraded)
            assert_understood(lab)
    finally:
        for probe in probes.values():
            probe.stop()


def upgrade_in_place(lab: Lab, upgraded: int, probes: dict[tuple[int, int], PingProbe]) -> tuple[float, tuple[int, int], float]:
    """Stop node `upgraded`'s daemon (SIGTERM: it releases its links, as `systemctl stop` does), start this release's
    in its place, and wait until the ring is whole and every pair of it answers again. The longest time a pair of
    the other nodes went unanswered, that pair, and the seconds from the stop until the upgraded node answered all."""
    stopping = time.time()
    lab.stop_daemon(upgraded)
    lab.start_daemon(upgraded, full_nodes.evio_command())
    restarted = time.time()
    lab.wait_daemons([upgraded], 60.0)
    wait_for(lab.topology, lambda t: len(t.live) == NODES and not t.ring_gaps(), REJOIN_TIMEOUT,
             f"the ring with node{upgraded} upgraded")
    for (a, b), probe in probes.items():
        if upgraded in (a, b):
            probe.wait_reply_after(restarted, REJOIN_TIMEOUT)
    now = time.time()
    for probe in probes.values():
        probe.wait_reply_after(now, 15.0)
    ended = time.time()
    gaps = {pair: probe.trace().max_gap(stopping, ended) for pair, probe in probes.items() if upgraded not in pair}
    worst = max(gaps, key=lambda pair: gaps[pair])
    answered = [probe.trace().outage_at(restarted).first_after for pair, probe in probes.items() if upgraded in pair]
    return gaps[worst], worst, max(at or ended for at in answered) - stopping


# -- checks --------------------------------------------------------------------------------------


def assert_runs(lab: Lab, previous: PreviousRelease, old: tuple[int, ...]) -> None:
    """Each daemon runs the release it should: the previous release's interpreter for `old`, ours for the rest."""
    for node in lab.nodes:
        record = lab.daemon(node.index)
        assert record is not None, f"{node.name}'s daemon is not running"
        with open(f"/proc/{record.pid}/cmdline", "rb") as cmdline:
            argv = cmdline.read().split(b"\0")
        runs_old = str(previous.python).encode() in argv
        assert runs_old == (node.index in old), (
            f"{node.name} runs {'the previous release' if runs_old else 'this tree'}: {argv}")


def assert_broadcast_reaches_every_node(lab: Lab, initiator: int) -> None:
    """An ARP request from `initiator` for the next node's address: answered, and logged once by every other node."""
    overlay = lab.plan.overlay
    target = lab.node(initiator % NODES + 1)
    root = lab.node(initiator).node_id
    others = [n.name for n in lab.nodes if n.index != initiator]

    def logs() -> dict[str, dict[str, Any]]:
        return {n.name: lab.daemon_status(n.index)["overlays"][overlay]["broadcasts"] for n in lab.nodes}

    # The logs reach the status at the controller's tick (0.5 s): read them once they stand still, so that no
    # broadcast received before the ARP is reported after it (a node's own gratuitous ARPs, for one).
    last: list[dict[str, int]] = [{}]

    def received() -> bool:
        now = {name: int(log["received"]) for name, log in logs().items()}
        still, last[0] = now == last[0], now
        return still

    wait_for(received, bool, 15.0, "the broadcast logs standing still", poll=0.6)
    before = last[0]
    # A probe (`-0`, sender 0.0.0.0): this release's switches answer ordinary ARP for known addresses
    # themselves (decision 0044), a probe never, so it is flooded as any broadcast.
    done = lab.exec(initiator, ["arping", "-0", "-c", "1", "-w", "5", "-i", bridge_name(lab.plan),
                                str(target.overlay_address.ip)], check=False)
    assert done.returncode == 0, f"no ARP reply from {target.name} to node{initiator}:\n{done.stdout}{done.stderr}"

    def copies(now: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
        return copies_per_node({name: log["recent"] for name, log in now.items()}, before, root, ethertype=0x0806)

    def everywhere(seen: dict[str, dict[str, int]]) -> bool:
        """Some ARP broadcast rooted at the initiator came, and each one that came reached every other node.
        (Not only arping's: a node's gratuitous ARPs may still be on their way; they must arrive too.)"""
        frames = {frame for counts in seen.values() for frame in counts}
        return bool(frames) and all(frame in seen[name] for name in others for frame in frames)

    seen = wait_for(lambda: copies(logs()), everywhere, 15.0,
                    f"node{initiator}'s ARP request in every other node's broadcast log", poll=0.25)
    twice = {name: counts for name, counts in seen.items() if any(n > 1 for n in counts.values())}
    assert not twice, f"nodes that received a broadcast of node{initiator} more than once: {twice}"


def assert_understood(lab: Lab) -> None:
    """No node counted or logged input from the other release it could not read."""
    problems = misunderstood(lab)
    assert not problems, "input from the other release not understood:\n" + "\n".join(problems)


def misunderstood(lab: Lab) -> list[str]:
    """What each node counted (status) or logged (log file) of input it could not read."""
    overlay = lab.plan.overlay
    problems = []
    for node in lab.nodes:
        try:
            ov = lab.daemon_status(node.index)["overlays"][overlay]
        except (ControlError, KeyError) as exc:
            problems.append(f"{node.name}: no status ({exc!r})")
            continue
        if ov.get("frb_errors"):
            problems.append(f"{node.name}: FRB parse errors {ov['frb_errors']}")
        drops = {k: v for k, v in ov.get("drops", {}).items() if k in SWITCH_DROPS}
        if drops:
            problems.append(f"{node.name}: switch drops {drops}")
        for link in ov.get("links", []):
            bad = {k: v for k, v in link.get("drops", {}).items() if k in TUNNEL_DROPS}
            if bad.get("bad-control", 0) <= PMTU_PROBES:
                bad.pop("bad-control", None)
            if bad:
                problems.append(f"{node.name}: tunnel to {link['peer_name']} dropped {bad}")
        text = lab.daemon_log(node.index).read_text(errors="replace")
        problems += [f"{node.name} logged: {line}" for line in text.splitlines() if MISUNDERSTOOD.search(line)][:5]
    return problems

