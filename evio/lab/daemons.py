"""Full nodes in the lab: a private Open vSwitch and an `evio run` daemon in each node namespace.

Pure helpers (paths, the daemon's command line) and the reading of the
daemons' status documents (their local control API) into a topology: who is
linked to whom, by which link type, and whether successor links close the ring.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evio.bridge.ovs_instance import OvsInstance
from evio.lab.node_config import node_config_path, node_dir
from evio.lab.topology import LabNodePlan
from evio.node.control import socket_path

DAEMON_ROLE_PREFIX = "evio-"
DAEMON_STOP_GRACE = 15.0  # a daemon releases its links and deletes its bridge before it exits
# Daemons starting at once. Each one's start (imports, OVS bridge, controller, first XMPP login) costs
# about a second of CPU; started all together, 64 of them held a 2-core host at a load of 40-70 for
# minutes and their first tunnels timed out. A few at a time, early nodes link up while later ones start.
DAEMON_START_WINDOW = 8
# ... and more at a time once the host is loaded. A start is CPU bound (about 2 s of CPU: imports, config,
# bridge, controller), and a daemon that is up costs 1-2 % of a core while the overlay forms, so at 128 nodes
# the running ones alone want the whole host: 8 starting daemons among ~60 runnable tasks got a seventh of it,
# and 128 took 482 s to be ready. Each runnable task gets an equal share, so a window of half the load average
# gives the starting daemons about half the host, whatever the others want. Never more than the daemons
# already up, the load it answers: the load average lags a minute, and a lab started just after another
# was removed would otherwise start 32 at once on an idle host.
DAEMON_START_WINDOW_MAX = 32


def start_window(
    load: float, up: int | None = None, base: int = DAEMON_START_WINDOW, most: int = DAEMON_START_WINDOW_MAX
) -> int:
    """Daemons to keep starting at once on a host whose load average (runnable tasks) is `load`, with
    `up` of the lab's daemons ready: half the load, so the starting ones hold about half the CPU, but
    never more than `up` nor `most`, and never fewer than `base`."""
    wanted = min(most, int(load / 2), most if up is None else up)
    return max(base, wanted)


def host_start_window(up: int) -> int:
    return start_window(os.getloadavg()[0], up)


def daemon_role(node: LabNodePlan) -> str:
    return f"{DAEMON_ROLE_PREFIX}{node.name}"


def is_daemon_role(role: str) -> bool:
    return role.startswith(DAEMON_ROLE_PREFIX)


def ovs_instance(lab_dir: Path, node: LabNodePlan) -> OvsInstance:
    """The node's private ovsdb-server + ovs-vswitchd (run directory under the node's lab directory)."""
    return OvsInstance(node_dir(lab_dir, node) / "ovs", netns=node.netns)


def control_socket(lab_dir: Path, node: LabNodePlan) -> Path:
    return socket_path(node_dir(lab_dir, node) / "state")


def daemon_log(lab_dir: Path, node: LabNodePlan) -> Path:
    """The daemon's own log (the node config sends it to a file)."""
    return node_dir(lab_dir, node) / "evio.log"


def evio_command(python: str = sys.executable) -> tuple[str, ...]:
    """How to run this evio (the lab's own): its interpreter, `-m evio`."""
    return (python, "-m", "evio")


def daemon_argv(
    lab_dir: Path, node: LabNodePlan, python: str = sys.executable, evio: Sequence[str] | None = None
) -> list[str]:
    """`evio run` for the node, pointed at its own OVS by the variables OVS's tools read.

    `evio` is the command that runs the evio CLI, by default this one's (`evio_command`); another
    installation's (e.g. the previous release's, for a rolling upgrade) runs that release's daemon.

    `env` execs in place, as `ip netns exec` does, so the recorded PID is the daemon's.
    MALLOC_ARENA_MAX as in config/evio.service: glibc's arena per thread (os-ken's, the side
    loop's, the executor's) holds memory the daemon never gives back.
    """
    ovs = ovs_instance(lab_dir, node)
    return [
        "env",
        f"OVS_RUNDIR={ovs.run_dir}",
        f"OVS_DBDIR={ovs.db_dir}",
        f"OVS_LOGDIR={ovs.log_dir}",
        f"OVS_SYSCONFDIR={ovs.etc_dir}",
        "MALLOC_ARENA_MAX=2",
        *(evio or evio_command(python)), "run", "--config", str(node_config_path(lab_dir, node)),
    ]  # fmt: skip


def hops(neighbours: Callable[[str], Iterable[str]], a: str, b: str) -> int | None:
    """Hops from `a` to `b` on the shortest path of a graph given by its `neighbours` (None: no path)."""
    frontier, seen, distance = [a], {a}, 0
    while frontier:
        if b in frontier:
            return distance
        distance += 1
        frontier = [p for n in frontier for p in neighbours(n) if p not in seen]
        seen.update(frontier)
    return None


@dataclass(frozen=True)
class Usage:
    rss_bytes: int
    cpu_seconds: float  # user + system since the process started


def process_usage(pid: int, proc: Path = Path("/proc")) -> Usage | None:
    """RSS and CPU time of `pid` from /proc (None if it is gone)."""
    try:
        status = (proc / str(pid) / "status").read_text()
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    rss_kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return Usage(rss_kib * 1024, ticks / os.sysconf("SC_CLK_TCK"))


class DaemonsNotReady(TimeoutError):
    def __init__(self, late: Sequence[int], timeout: float) -> None:
        self.late = tuple(late)
        super().__init__(f"a daemon not ready {timeout:.0f} s after its start; not ready: "
                         + ", ".join(f"node{i}" for i in self.late))


def start_windowed(
    indices: Sequence[int],
    start: Callable[[int], object],
    ready: Callable[[int], bool],
    window: int | Callable[[int], int],
    timeout: float,
    report: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_interval: float = 0.1,
) -> None:
    """Start the daemons of `indices` in order, never more than `window` started and not yet `ready`;
    return once all are ready. `window` may be a function of the number ready so far, asked again
    before each round of starts (e.g. `host_start_window`, which follows the host's load). `ready(index)` raises if that daemon
    exited. Each daemon has `timeout` seconds from its own start (the later ones start on a host the
    earlier ones already load): raises DaemonsNotReady naming the nodes not ready (the started ones
    first) when one of them overstays."""
    def window_now() -> int:
        return window(done) if callable(window) else window

    done = 0
    if window_now() < 1:
        raise ValueError("window must be at least 1")
    queue = list(indices)
    started: dict[int, float] = {}  # started, not ready yet -> when
    while True:
        limit = max(window_now(), 1)
        while queue and len(started) < limit:
            index = queue.pop(0)
            start(index)
            started[index] = clock()
        for index in list(started):
            if ready(index):
                del started[index]
                done += 1
                if report is not None:
                    report(done)
        if not queue and not started:
            return
        now = clock()
        if any(now - at > timeout for at in started.values()):
            raise DaemonsNotReady([*started, *queue], timeout)
        if len(started) >= limit or not queue:  # nothing more to start now: let them get on
            sleep(poll_interval)


def is_ready(status: Mapping[str, Any]) -> bool:
    """A daemon is ready once every overlay's bridge is connected to its SDN controller (or, for a
    bridge that switches by STP and has no controller, once it exists)."""
    overlays = status.get("overlays") or {}
    return bool(overlays) and all(
        ov.get("bridge_ready") if ov.get("switching") == "stp" else ov.get("switch_connected")
        for ov in overlays.values()
    )


# -- topology --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkView:
    node: str  # lab node name holding the view
    peer: str  # lab node name (or the peer's node id if it is not a lab node)
    type: str  # successor, long_distance, on_demand (as the holder's controller names it)
    state: str
    tap: str | None
    port: int | None
    path: str | None
    up_since: float | None = None  # epoch seconds this end's link came up (its daemon's age of it), if up


@dataclass(frozen=True)
class Topology:
    order: tuple[str, ...]  # lab node names in ring (node id) order
    links: tuple[LinkView, ...]
    unreachable: Mapping[str, str]  # node -> why its daemon could not be asked
    members: Mapping[str, frozenset[str]] = field(default_factory=dict)  # node -> the peers its signaling knows

    def links_of(self, node: str) -> list[LinkView]:
        return [link for link in self.links if link.node == node]

    def adjacent(self, a: str, b: str) -> bool:
        """Both ends report a link that is up."""
        return any(l.node == a and l.peer == b and l.state == "up" for l in self.links) and any(
            l.node == b and l.peer == a and l.state == "up" for l in self.links
        )

    @property
    def live(self) -> tuple[str, ...]:
        """The nodes whose daemon answered, in ring order: the ring they should form."""
        return tuple(n for n in self.order if n not in self.unreachable)

    def hops(self, a: str, b: str) -> int | None:
        """Overlay hops on the shortest path of links that are up (None: no path)."""
        return hops(self.neighbours, a, b)

    def neighbours(self, node: str) -> set[str]:
        return {l.peer for l in self.links if l.node == node and self.adjacent(node, l.peer)}

    def ring_gaps(self) -> list[tuple[str, str]]:
        """Pairs of ring neighbours (clockwise, among live nodes) not joined by a link that is up at
        both ends and that at least one end holds as a successor link: empty when successor links
        form the ring."""
        gaps = []
        live = self.live
        count = len(live)
        if count < 2:
            return []
        for i, a in enumerate(live):
            b = live[(i + 1) % count]
            successor = any(
                l.type == "successor" and {l.node, l.peer} == {a, b} for l in self.links
            )
            if not (successor and self.adjacent(a, b)):
                gaps.append((a, b))
        return gaps


def topology(
    statuses: Mapping[str, Mapping[str, Any] | str],
    names_by_id: Mapping[str, str],
    overlay: str,
    read_at: Mapping[str, float] | None = None,
) -> Topology:
    """The overlay's topology from each node's status document (or the error asking it gave).

    `read_at`: when each node's document was read (epoch seconds); with it, an up link's `up_since`
    is that time less the link's age as its daemon reports it."""
    ring = sorted(names_by_id.items())  # node ids are fixed-width hex: text order is ring order
    links: list[LinkView] = []
    unreachable: dict[str, str] = {}
    members: dict[str, frozenset[str]] = {}
    for node, status in statuses.items():
        if isinstance(status, str):
            unreachable[node] = status
            continue
        ov = (status.get("overlays") or {}).get(overlay)
        if ov is None:
            unreachable[node] = f"daemon serves no overlay {overlay}"
            continue
        at = (read_at or {}).get(node)
        members[node] = frozenset(names_by_id.get(str(p), str(p)) for p in ov.get("peers") or {})
        for link in ov.get("links", []):
            peer_id = str(link.get("peer"))
            age = link.get("age")
            up = str(link.get("state")) == "up" and at is not None and isinstance(age, int | float)
            links.append(LinkView(
                node=node,
                peer=names_by_id.get(peer_id, peer_id),
                type=str(link.get("type")),
                state=str(link.get("state")),
                tap=link.get("tap"),
                port=link.get("port"),
                path=link.get("path"),
                up_since=at - age if up else None,
            ))  # fmt: skip
    return Topology(tuple(name for _, name in ring), tuple(links), unreachable, members)


def format_topology(topo: Topology, addresses: Mapping[str, str], types: Sequence[str] = ("successor", "long_distance", "on_demand")) -> list[str]:
    """One block per node: its links grouped by type, each with peer, TAP, OpenFlow port and path."""
    lines = []
    for node in topo.order:
        head = f"{node} ({addresses.get(node, '?')})"
        if node in topo.unreachable:
            lines.append(f"{head}: NOT ANSWERING: {topo.unreachable[node]}")
            continue
        mine = topo.links_of(node)
        lines.append(f"{head}: {len(mine)} link{'s' if len(mine) != 1 else ''}")
        for kind in types:
            of_kind = [l for l in mine if l.type == kind]
            if not of_kind:
                continue
            cells = []
            for l in sorted(of_kind, key=lambda l: topo.order.index(l.peer) if l.peer in topo.order else 0):
                extra = [l.tap or "no tap", f"port {l.port}" if l.port is not None else "no port"]
                if l.path:
                    extra.append(l.path)
                if l.state != "up":
                    extra.append(l.state.upper())
                cells.append(f"{l.peer} [{', '.join(extra)}]")
            lines.append(f"  {kind:<13} {'; '.join(cells)}")
        others = [l for l in mine if l.type not in types]
        for l in others:
            lines.append(f"  {l.type:<13} {l.peer} [{l.tap}, {l.state}]")
    gaps = topo.ring_gaps()
    live = topo.live
    if gaps:
        lines.append("ring: NOT CLOSED, missing successor links " + ", ".join(f"{a}->{b}" for a, b in gaps))
    else:
        lines.append("ring: closed (" + " -> ".join([*live, live[0]] if live else []) + ")")
    if topo.unreachable:
        lines.append(f"not answering (left out of the ring): {', '.join(topo.unreachable)}")
    return lines
