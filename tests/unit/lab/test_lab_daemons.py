"""Full lab nodes, the pure parts: daemon command line, readiness, topology and ring checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from evio.lab import daemons
from evio.lab.topology import plan_lab

PLAN = plan_lab("t1", ("eim", "symmetric", "none"))
IDS = {"a" * 32: "node1", "b" * 32: "node2", "c" * 32: "node3"}  # text order = ring order


def link(peer: str, kind: str = "successor", state: str = "up", port: int | None = 1) -> dict[str, Any]:
    return {"peer": peer, "type": kind, "state": state, "tap": "evt" + peer[:12], "port": port, "path": "direct"}


def status(*links: dict[str, Any], connected: bool = True) -> dict[str, Any]:
    return {"overlays": {"ov1": {"switch_connected": connected, "links": list(links)}}}


def test_daemon_runs_evio_with_the_node_config_and_its_own_ovs() -> None:
    node = PLAN.node(2)
    argv = daemons.daemon_argv(Path("/run/evio-lab/t1"), node, python="/venv/bin/python")
    assert argv[0] == "env"
    assert "OVS_RUNDIR=/run/evio-lab/t1/nodes/node2/ovs/run" in argv
    assert argv[-6:] == ["/venv/bin/python", "-m", "evio", "run", "--config", "/run/evio-lab/t1/nodes/node2/config.json"]
    assert daemons.control_socket(Path("/run/evio-lab/t1"), node) == Path("/run/evio-lab/t1/nodes/node2/state/control.sock")
    assert daemons.daemon_role(node) == "evio-node2" and daemons.is_daemon_role("evio-node2")
    assert not daemons.is_daemon_role("prosody")


def test_ready_once_every_bridge_is_connected() -> None:
    assert daemons.is_ready(status())
    assert not daemons.is_ready(status(connected=False))
    assert not daemons.is_ready({"overlays": {}})
    # A bridge switching by STP has no controller to connect to: ready once it exists.
    assert daemons.is_ready({"overlays": {"ov1": {"switching": "stp", "switch_connected": False, "bridge_ready": True}}})
    assert not daemons.is_ready({"overlays": {"ov1": {"switching": "stp", "bridge_ready": False}}})


def test_a_ring_of_successor_links_held_by_either_end() -> None:
    statuses = {
        "node1": status(link("b" * 32), link("c" * 32, "long_distance")),
        "node2": status(link("a" * 32, "long_distance"), link("c" * 32)),
        "node3": status(link("a" * 32), link("b" * 32, "long_distance")),
    }
    topo = daemons.topology(statuses, IDS, "ov1")
    assert topo.order == ("node1", "node2", "node3")
    assert topo.ring_gaps() == []
    lines = daemons.format_topology(topo, {"node1": "10.254.0.1"})
    assert lines[0] == "node1 (10.254.0.1): 2 links"
    assert lines[1].split() == ["successor", "node2", "[evtbbbbbbbbbbbb,", "port", "1,", "direct]"]
    assert lines[-1] == "ring: closed (node1 -> node2 -> node3 -> node1)"


def test_gaps_pending_links_one_sided_links_and_silent_nodes() -> None:
    statuses: dict[str, dict[str, Any] | str] = {
        "node1": status(link("b" * 32, state="pending", port=None), link("c" * 32)),
        "node2": status(link("a" * 32, state="pending", port=None)),
        "node3": "no daemon control socket",
    }
    topo = daemons.topology(statuses, IDS, "ov1")
    assert topo.live == ("node1", "node2")
    assert topo.ring_gaps() == [("node1", "node2"), ("node2", "node1")]  # only pending between them
    assert not topo.adjacent("node1", "node3")  # node3 did not confirm the link
    text = "\n".join(daemons.format_topology(topo, {}))
    assert "PENDING" in text and "node3 (?): NOT ANSWERING: no daemon control socket" in text
    assert "ring: NOT CLOSED" in text and "(left out of the ring): node3" in text


def test_each_node_s_members_are_the_peers_its_signaling_knows_by_lab_name() -> None:
    node1 = status(link("b" * 32))
    node1["overlays"]["ov1"]["peers"] = {"b" * 32: "node2@overlay.test/evio-b", "f" * 32: "other@overlay.test/x"}
    topo = daemons.topology({"node1": node1, "node2": status()}, IDS, "ov1")
    assert topo.members == {"node1": frozenset({"node2", "f" * 32}), "node2": frozenset()}


def test_a_daemon_without_the_lab_overlay_is_reported() -> None:
    topo = daemons.topology({"node1": {"overlays": {"other": {}}}}, IDS, "ov1")
    assert topo.unreachable == {"node1": "daemon serves no overlay ov1"}


def test_process_usage_reads_rss_and_cpu_from_proc(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "status").write_text("Name:\tpython\nVmRSS:\t   51200 kB\n")
    # pid (comm with spaces) state ppid ... utime=field 14, stime=field 15
    fields = ["S"] + ["0"] * 10 + ["300", "100"] + ["0"] * 30
    (tmp_path / "42" / "stat").write_text("42 (py thon) " + " ".join(fields) + "\n")
    usage = daemons.process_usage(42, proc=tmp_path)
    assert usage is not None and usage.rss_bytes == 51200 * 1024
    assert usage.cpu_seconds == 400 / os.sysconf("SC_CLK_TCK")
    assert daemons.process_usage(43, proc=tmp_path) is None


def test_hops_follow_links_up_at_both_ends() -> None:
    ids = {f"{c}" * 32: f"node{i}" for i, c in enumerate("abcd", start=1)}
    chain = {  # node1 - node2 - node3 - node4, and a one-sided node1 -> node4
        "node1": status(link("b" * 32), link("d" * 32)),
        "node2": status(link("a" * 32), link("c" * 32)),
        "node3": status(link("b" * 32), link("d" * 32)),
        "node4": status(link("c" * 32)),
    }
    topo = daemons.topology(chain, ids, "ov1")
    assert topo.hops("node1", "node4") == 3 and topo.hops("node2", "node2") == 0
    assert daemons.topology({"node1": status()}, ids, "ov1").hops("node1", "node2") is None


class FakeDaemons:
    """Daemons that become ready `polls_to_ready` polls after their start, on a fake clock."""

    def __init__(self, polls_to_ready: int = 2, never: frozenset[int] = frozenset()) -> None:
        self.polls_to_ready, self.never = polls_to_ready, never
        self.polls: dict[int, int] = {}
        self.order: list[int] = []
        self.most_starting = 0
        self.now = 0.0

    def start(self, index: int) -> None:
        self.order.append(index)
        self.polls[index] = 0
        self.most_starting = max(self.most_starting, sum(1 for i in self.polls if not self.is_done(i)))

    def is_done(self, index: int) -> bool:
        return index not in self.never and self.polls[index] >= self.polls_to_ready

    def ready(self, index: int) -> bool:
        self.polls[index] += 1
        return self.is_done(index)

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_windowed_start_keeps_at_most_window_daemons_starting_and_starts_all_in_order() -> None:
    fake = FakeDaemons(polls_to_ready=3)
    reported: list[int] = []
    daemons.start_windowed(range(1, 11), fake.start, fake.ready, 3, 60.0, reported.append,
                           clock=lambda: fake.now, sleep=fake.sleep)
    assert fake.order == list(range(1, 11))
    assert fake.most_starting == 3
    assert reported == list(range(1, 11))


def test_windowed_start_gives_each_daemon_the_timeout_from_its_own_start() -> None:
    fake = FakeDaemons(polls_to_ready=30)  # 3 s each at 0.1 s a poll: 10 in a window of 2 take 15 s
    daemons.start_windowed(range(1, 11), fake.start, fake.ready, 2, 5.0, clock=lambda: fake.now, sleep=fake.sleep)
    assert fake.order == list(range(1, 11)) and fake.now > 5.0


def test_windowed_start_names_the_late_daemons_started_first() -> None:
    fake = FakeDaemons(polls_to_ready=1, never=frozenset({2}))
    with pytest.raises(daemons.DaemonsNotReady) as caught:
        daemons.start_windowed([1, 2, 3, 4], fake.start, fake.ready, 1, 5.0,
                               clock=lambda: fake.now, sleep=fake.sleep)
    assert caught.value.late == (2, 3, 4)  # 2 never became ready, so 3 and 4 were never started
    assert fake.order == [1, 2]
    assert "node2, node3, node4" in str(caught.value)
    assert fake.now <= 5.0 + 0.2  # given up soon after node2's own timeout


def test_windowed_start_asks_a_window_function_before_each_round() -> None:
    fake = FakeDaemons(polls_to_ready=3)
    windows: list[int] = []

    def window(ready: int) -> int:  # the host "loads up" as daemons become ready: 2 at a time, then 5
        windows.append(2 if ready < 4 else 5)
        return windows[-1]

    daemons.start_windowed(range(1, 21), fake.start, fake.ready, window, 60.0, clock=lambda: fake.now, sleep=fake.sleep)
    assert fake.order == list(range(1, 21))
    assert fake.most_starting == 5 and windows[0] == 2 and len(windows) > 2


def test_start_window_is_half_the_load_within_its_bounds() -> None:
    assert daemons.start_window(0.3) == daemons.DAEMON_START_WINDOW  # an idle host: the base window
    assert daemons.start_window(2 * daemons.DAEMON_START_WINDOW + 1) == daemons.DAEMON_START_WINDOW
    assert daemons.start_window(41.0) == 20
    assert daemons.start_window(96.0) == daemons.DAEMON_START_WINDOW_MAX
    assert daemons.start_window(30.0, base=4, most=10) == 10 and daemons.start_window(3.0, base=4, most=10) == 4


def test_start_window_grows_no_wider_than_the_daemons_already_up() -> None:
    # The load average lags a minute: just after another lab was removed it is high on an idle host.
    assert daemons.start_window(64.0, up=0) == daemons.DAEMON_START_WINDOW
    assert daemons.start_window(64.0, up=12) == 12
    assert daemons.start_window(64.0, up=100) == daemons.DAEMON_START_WINDOW_MAX
    assert daemons.start_window(10.0, up=100) == daemons.DAEMON_START_WINDOW


def test_windowed_start_refuses_an_empty_window() -> None:
    with pytest.raises(ValueError):
        daemons.start_windowed([1], lambda i: None, lambda i: True, 0, 1.0)
    with pytest.raises(ValueError):
        daemons.start_windowed([1], lambda i: None, lambda i: True, lambda ready: 0, 1.0)
