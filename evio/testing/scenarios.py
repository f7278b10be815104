"""Pure helpers for the paper's scenarios on a lab of full nodes (tests/lab): what a ping trace says,
whether successor links are complete, and the figures printed beside the paper's.

    trace = PingTrace.parse(text_of("ping -D -n -i 0.1 ..."), interval=0.1)
    outage = trace.outage_at(moment)        # gap in replies around `moment`, replies lost in it
    successor_gaps(topology, 2)             # ring neighbours without their successor link
    ring_shortfall(topology, 16, 2)         # why the ring is not whole, for a failure message
    Figure("E2", "IP relocation: ping outage", 0.1, "s", paper="6.15 s", target="<= 1 s")
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from evio.lab.daemons import Topology

# "[1795299635.616699] 64 bytes from 10.254.0.5: icmp_seq=14 ttl=64 time=2.71 ms" (ping -D)
_REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from .*?icmp_seq=(\d+)", re.MULTILINE)


@dataclass(frozen=True)
class Outage:
    """The replies on either side of a moment, and what was lost between them."""

    last_before: float | None  # epoch seconds of the last reply at or before the moment
    first_after: float | None  # the first reply after it (None: the ping never came back)
    lost: int  # echo requests between those two replies that got no answer

    @property
    def seconds(self) -> float | None:
        """How long no reply came (None if none came after the moment)."""
        if self.first_after is None or self.last_before is None:
            return None
        return self.first_after - self.last_before

    @property
    def resumed(self) -> bool:
        return self.first_after is not None


@dataclass(frozen=True)
class PingTrace:
    """The replies of one `ping -D` run: (icmp_seq, epoch seconds), in order of arrival."""

    interval: float
    replies: tuple[tuple[int, float], ...]

    @classmethod
    def parse(cls, text: str, interval: float) -> PingTrace:
        return cls(interval, tuple((int(seq), float(at)) for at, seq in _REPLY.findall(text)))

    def outage_at(self, moment: float) -> Outage:
        before = [(seq, at) for seq, at in self.replies if at <= moment]
        after = [(seq, at) for seq, at in self.replies if at > moment]
        last = before[-1] if before else None
        first = after[0] if after else None
        lost = 0
        if last is not None and first is not None:
            lost = max(0, first[0] - last[0] - 1)
        return Outage(last[1] if last else None, first[1] if first else None, lost)

    def max_gap(self, start: float, end: float) -> float:
        """The longest time without a reply between `start` and `end` (both ends count as replies)."""
        stamps = [start, *(at for _, at in self.replies if start < at < end), end]
        return max(b - a for a, b in zip(stamps, stamps[1:]))

    def lost_after(self, moment: float) -> int:
        """Echo requests that got no answer, from the last reply before `moment` to the last reply."""
        before = [seq for seq, at in self.replies if at <= moment]
        if not before or not self.replies:
            return 0
        first, last = before[-1], self.replies[-1][0]
        answered = {seq for seq, _ in self.replies}
        return sum(1 for seq in range(first, last + 1) if seq not in answered)


# -- topology ------------------------------------------------------------------------------------


def successor_gaps(topo: Topology, successors: int | Callable[[str], int]) -> list[tuple[str, str]]:
    """(node, ring neighbour) pairs among the live nodes that lack the successor link the node should have:
    each node is linked, by a link that is up at both ends and is a successor link, to its
    `successors` (or `successors(node)`) nearest live nodes clockwise. Empty: the ring is whole."""
    live = list(topo.live)
    count = len(live)
    gaps = []
    for i, node in enumerate(live):
        wanted = successors(node) if callable(successors) else successors
        for step in range(1, min(wanted, count - 1) + 1):
            peer = live[(i + step) % count]
            linked = any(l.type == "successor" and {l.node, l.peer} == {node, peer} for l in topo.links)
            if not (linked and topo.adjacent(node, peer)):
                gaps.append((node, peer))
    return gaps


def ring_shortfall(topo: Topology, nodes: int, successors: int | Callable[[str], int]) -> str:
    """What keeps the ring from being whole, for a failure message ("" when it is whole): the nodes that
    did not answer, and each missing successor link with what either end reports of it."""
    parts = [f"{node} not answering ({why})" for node, why in topo.unreachable.items()]
    if len(topo.live) != nodes and not parts:
        parts.append(f"{len(topo.live)} of {nodes} nodes live")
    for node, peer in successor_gaps(topo, successors):
        ends = []
        for a, b in ((node, peer), (peer, node)):
            views = [f"{l.type}/{l.state}" + (f"/{l.path}" if l.path else "") for l in topo.links
                     if l.node == a and l.peer == b]
            known = topo.members.get(a)
            stranger = "" if known is None or b in known else f", {b} not among its members"
            ends.append(f"{a}: {','.join(views) or 'none'}{stranger}")
        parts.append(f"{node}->{peer} ({'; '.join(ends)})")
    return "; ".join(parts)


def ring_whole_since(topo: Topology, successors: int) -> float | None:
    """When the ring `successor_gaps` finds whole became so (epoch seconds): the latest moment one of the
    required successor links came up, at the later of its two ends, as their daemons' link ages say.
    None if the ring is not whole or an age is missing. Unlike the time a poll saw the ring whole, this
    leaves out how long the poll took (16 status documents, read one after another)."""
    if successor_gaps(topo, successors):
        return None
    live = list(topo.live)
    count = len(live)
    latest = float("-inf")
    for i, node in enumerate(live):
        for step in range(1, min(successors, count - 1) + 1):
            peer = live[(i + step) % count]
            ends = [l for l in topo.links if {l.node, l.peer} == {node, peer} and l.state == "up"]
            if any(l.up_since is None for l in ends):
                return None
            latest = max(latest, *(l.up_since for l in ends if l.up_since is not None))
    return None if latest == float("-inf") else latest


def link_snapshot(topo: Topology) -> frozenset[tuple[str, str, str, str]]:
    """Every node's links as (node, peer, type, state): equal snapshots mean no link came or went."""
    return frozenset((l.node, l.peer, l.type, l.state) for l in topo.links)


def ring_offset(topo: Topology, node: str, steps: int) -> str:
    """The live node `steps` places clockwise from `node`."""
    live = list(topo.live)
    return live[(live.index(node) + steps) % len(live)]


# -- broadcasts (E1) -----------------------------------------------------------------------------


def copies_per_node(
    logs: Mapping[str, Sequence[Mapping[str, Any]]],
    after_seq: Mapping[str, int],
    root: str,
    ethertype: int | None = None,
) -> dict[str, dict[str, int]]:
    """node -> {frame digest: times received} for the broadcasts rooted at `root` (of `ethertype`, if
    given) that each node logged after its `after_seq`. `logs` holds each node's `recent` list from
    its daemon status (entries with seq, root, frame, ethertype, ...)."""
    copies: dict[str, dict[str, int]] = {}
    for node, entries in logs.items():
        counts: dict[str, int] = {}
        for entry in entries:
            if entry["root"] != root or entry["seq"] <= after_seq.get(node, 0):
                continue
            if ethertype is not None and entry["ethertype"] != ethertype:
                continue
            counts[entry["frame"]] = counts.get(entry["frame"], 0) + 1
        copies[node] = counts
    return copies


# -- figures -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One measured figure of a scenario, beside the paper's and our target."""

    scenario: str  # "E2"
    quantity: str  # what was measured
    measured: float | int | str
    unit: str = ""
    paper: str = ""  # the paper's figure or finding, as text
    target: str = ""  # ours, if it differs from the paper's
    note: str = ""

    def measured_text(self) -> str:
        value = f"{self.measured:.2f}" if isinstance(self.measured, float) else str(self.measured)
        return f"{value} {self.unit}".strip()

    def line(self) -> str:
        parts = [f"{self.scenario:<4} {self.quantity:<56} {self.measured_text():>13}"]
        parts.append(f"paper: {self.paper or '-'}")
        if self.target:
            parts.append(f"target: {self.target}")
        if self.note:
            parts.append(self.note)
        return "  |  ".join(parts)

    def json(self) -> str:
        return json.dumps(asdict(self))


def figure_lines(figures: Iterable[Figure]) -> list[str]:
    """The figures sorted by scenario (E1, E2, ..., then the rest), one line each."""

    def key(figure: Figure) -> tuple[int, str]:
        digits = figure.scenario.removeprefix("E")
        return (int(digits) if digits.isdigit() else 1000, figure.scenario)

    return [figure.line() for figure in sorted(figures, key=key)]
