"""Operating real nodes: `evio status`, `evio ping`, metrics, systemd notifications and SIGHUP reloads.

One lab of three full nodes (mixed NATs, s = 2: every pair linked) is shared by the tests of this
module, in file order: the reloads change the nodes' configs, and the last test restarts node3.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from evio.lab import daemons as full_nodes
from evio.lab.lab import Lab
from evio.lab.node_config import node_config_path
from evio.node.control_client import ControlError, fetch_status
from evio.testing.labs import unique_lab_name
from evio.testing.waiting import wait_for_value

pytestmark = pytest.mark.integration

T = TypeVar("T")
EVIO = str(Path(sys.executable).with_name("evio"))
RING_TIMEOUT = 90.0
OV2_NETWORK = "10.199.0"


def wait_for(get: Callable[[], T], good: Callable[[T], bool], timeout: float, what: str) -> T:
    return wait_for_value(get, good, timeout, what=what, interval=0.25)


@pytest.fixture(scope="module")
def ops_lab() -> Iterator[Lab]:
    if os.geteuid() != 0:
        pytest.skip("integration test: needs root")
    name = unique_lab_name()
    try:
        with Lab.up(name, nodes=3, nat="mixed", topology={"successors": 2}, daemons=True) as lab:
            wait_for(lambda: [links_up(lab, n.index, lab.plan.overlay) for n in lab.nodes],
                     lambda counts: counts == [2, 2, 2], RING_TIMEOUT, "every pair linked")
            yield lab
    finally:
        Lab.down(name)


def state_dir(lab: Lab, index: int) -> Path:
    return full_nodes.control_socket(lab.directory, lab.plan.node(index)).parent


def status(lab: Lab, index: int) -> dict[str, Any]:
    return fetch_status(full_nodes.control_socket(lab.directory, lab.plan.node(index)))


def links_up(lab: Lab, index: int, overlay: str) -> int:
    try:
        ov = status(lab, index)["overlays"].get(overlay)
    except ControlError:  # the daemon is restarting
        return -1
    return -1 if ov is None else sum(ov["link_counts"].values())


def evio(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EVIO, *argv], capture_output=True, text=True, timeout=timeout, check=False)


def link_snapshot(lab: Lab, overlay: str) -> dict[int, tuple[Any, ...]]:
    """Per node: link counters and each link's peer, tunnel setup time (same tunnel: same value)."""
    out = {}
    for node in lab.nodes:
        ov = status(lab, node.index)["overlays"][overlay]
        out[node.index] = (ov["link_events"]["up"], ov["link_events"]["down"], ov["tunnels"]["up"],
                           ov["tunnels"]["down"], tuple((l["peer"], l["setup_seconds"], l["tap"]) for l in ov["links"]))
    return out


class BackgroundPing:
    """`ping` over the overlay from node a to node b in a thread; `result()` is (sent, received)."""

    def __init__(self, lab: Lab, a: int, target: str, count: int, interval: float = 0.02) -> None:
        self._done: subprocess.CompletedProcess[str] | None = None
        argv = ["ping", "-n", "-q", "-i", str(interval), "-c", str(count), "-W", "1", target]
        self._thread = threading.Thread(target=self._run, args=(lab, a, argv, count * interval + 30), daemon=True)
        self._thread.start()

    def _run(self, lab: Lab, a: int, argv: list[str], timeout: float) -> None:
        self._done = lab.exec(a, argv, check=False, timeout=timeout)

    def result(self) -> tuple[int, int]:
        self._thread.join()
        assert self._done is not None
        match = re.search(r"(\d+) packets transmitted, (\d+) received", self._done.stdout)
        assert match is not None, self._done.stdout + self._done.stderr
        return int(match.group(1)), int(match.group(2))


def sighup(lab: Lab, index: int) -> None:
    record = lab.daemon(index)
    assert record is not None
    os.kill(record.pid, signal.SIGHUP)


def write_config(lab: Lab, index: int, change: Callable[[dict[str, Any]], None]) -> None:
    path = node_config_path(lab.directory, lab.plan.node(index))
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document, indent=2) + "\n")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- status and ping ---------------------------------------------------------------------------------


def test_status_shows_paths_rtt_and_counters_and_answers_fast(ops_lab: Lab) -> None:
    lab, overlay = ops_lab, ops_lab.plan.overlay
    done = evio("status", "--state-dir", str(state_dir(lab, 1)))
    assert done.returncode == 0, done.stderr
    assert f"overlay {overlay}" in done.stdout and "links up: 2" in done.stdout and "connected since" in done.stdout

    def links() -> list[dict[str, Any]]:
        return status(lab, 1)["overlays"][overlay]["links"]

    # RTTs come with the echoes (every keepalive interval): wait for one on each link.
    ready = wait_for(links, lambda ls: len(ls) == 2 and all(l["rtt_ms"] is not None for l in ls), 20, "RTTs")
    for link in ready:
        assert link["path"] in ("direct", "relay") and link["local_candidate"] and link["remote_candidate"]
        assert link["peer_name"].startswith("node") and link["mtu"] == 1428 and link["tunnel_state"] == "up"
        assert link["tx"]["frames"] >= 0 and 0 < link["rtt_ms"] < 1000
    as_json = json.loads(evio("status", "--state-dir", str(state_dir(lab, 1)), "--json").stdout)
    assert as_json["version"] == 1 and as_json["overlays"][overlay]["signal"]["reconnects"] == 0

    # Latency of a status query (what `evio status` and the HEALTHCHECK do), in-process and as a command.
    socket_path = full_nodes.control_socket(lab.directory, lab.plan.node(1))
    timings = []
    for _ in range(50):
        started = time.perf_counter()
        fetch_status(socket_path)
        timings.append(time.perf_counter() - started)
    started = time.perf_counter()
    assert evio("status", "--state-dir", str(state_dir(lab, 1)), "--json").returncode == 0
    command = time.perf_counter() - started
    print(f"\nstatus query, 2 links: median {statistics.median(timings) * 1000:.2f} ms, "
          f"p95 {percentile(timings, 0.95) * 1000:.2f} ms, max {max(timings) * 1000:.2f} ms; "
          f"`evio status --json` process {command * 1000:.0f} ms")
    assert statistics.median(timings) < 0.05


def test_status_without_a_daemon_fails_with_one_line(tmp_path: Path) -> None:
    done = evio("status", "--state-dir", str(tmp_path))
    assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1


def test_ping_probes_through_the_tunnel(ops_lab: Lab) -> None:
    lab = ops_lab
    done = evio("ping", "node2", "--state-dir", str(state_dir(lab, 1)), "-c", "3", "-i", "0.2")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3, done.stdout
    for line in lines:
        assert re.fullmatch(r"pong from node2@\S+ via (direct|relay) \S+->\S+ \S+ in [0-9.]+ms", line), line
    missing = evio("ping", "node9", "--state-dir", str(state_dir(lab, 1)), "-c", "1")
    assert missing.returncode == 1 and "no peer 'node9'" in missing.stderr


# -- reloads -------------------------------------------------------------------------------------------


def test_reload_with_an_unchanged_config_changes_no_link_and_loses_no_ping(ops_lab: Lab) -> None:
    lab, overlay = ops_lab, ops_lab.plan.overlay
    before = link_snapshot(lab, overlay)
    ping = BackgroundPing(lab, 1, str(lab.node(2).overlay_address.ip), count=250)  # 5 s
    time.sleep(1.0)  # the reload lands in the middle of the ping
    for node in lab.nodes:
        sighup(lab, node.index)
    wait_for(lambda: [status(lab, n.index)["reloads"] for n in lab.nodes], lambda r: r == [1, 1, 1], 20, "reloads")
    sent, received = ping.result()
    assert (sent, received) == (250, 250), f"lost {sent - received} of {sent} pings across the reload"
    assert link_snapshot(lab, overlay) == before


def test_reload_enables_metrics_and_a_scrape_parses(ops_lab: Lab) -> None:
    lab, overlay = ops_lab, ops_lab.plan.overlay
    before = link_snapshot(lab, overlay)
    write_config(lab, 1, lambda doc: doc.update(metrics={"enabled": True, "listen": "127.0.0.1:9470"}))
    sighup(lab, 1)
    wait_for(lambda: status(lab, 1)["reloads"], lambda r: r == 2, 20, "the reload")
    script = (
        "import json,time,urllib.request\n"
        "times=[]\n"
        "for _ in range(50):\n"
        "    t=time.perf_counter(); body=urllib.request.urlopen('http://127.0.0.1:9470/metrics',timeout=5).read()\n"
        "    times.append(time.perf_counter()-t)\n"
        "print(json.dumps({'times':times,'body':body.decode()}))\n"
    )
    done = lab.exec(1, [sys.executable, "-c", script], timeout=60)
    result = json.loads(done.stdout)
    times = result["times"]
    print(f"\nmetrics scrape over HTTP, 2 links: median {statistics.median(times) * 1000:.2f} ms, "
          f"p95 {percentile(times, 0.95) * 1000:.2f} ms, max {max(times) * 1000:.2f} ms")
    assert statistics.median(times) < 0.02
    parsed = {family.name: family for family in text_string_to_metric_families(result["body"])}
    links = {s.labels["type"]: s.value for s in parsed["evio_links"].samples if s.labels["overlay"] == overlay}
    assert links["successor"] == 2
    tx = [s for s in parsed["evio_tunnel_transmit_bytes"].samples if s.name.endswith("_total")]
    assert len(tx) == 2 and all(s.value > 0 for s in tx)  # echoes at least, likely pings too
    setup = [s for s in parsed["evio_tunnel_setup_seconds"].samples if s.name.endswith("_count")]
    assert setup and setup[0].value >= 2
    assert any(s.value > 0 for s in parsed["evio_switch_packet_ins"].samples if s.name.endswith("_total"))
    for name in ("evio_frb_sent", "evio_frb_forwarded", "evio_switch_drops", "evio_signal_reconnects",
                 "evio_tunnel_rtt_seconds"):
        assert name in parsed, name
    # Loopback only: the node's own LAN address has nothing listening on the port.
    lan = str(lab.plan.node(1).address)
    probe = f"import socket\ntry:\n    socket.create_connection(('{lan}', 9470), timeout=1)\nexcept OSError:\n    print('refused')"
    assert lab.exec(1, [sys.executable, "-c", probe]).stdout.strip() == "refused"
    assert link_snapshot(lab, overlay) == before


def test_reload_with_an_invalid_config_keeps_the_running_one(ops_lab: Lab) -> None:
    lab = ops_lab
    path = node_config_path(lab.directory, lab.plan.node(2))
    good = path.read_text()
    write_config(lab, 2, lambda doc: doc["overlays"][lab.plan.overlay]["bridge"].update(mtu=99999))
    reloads = status(lab, 2)["reloads"]
    sighup(lab, 2)
    log = lab.daemon_log(2)
    wait_for(lambda: log.read_text(), lambda text: "bridge.mtu" in text, 20, "the refusal in the log")
    path.write_text(good)
    assert status(lab, 2)["reloads"] == reloads and links_up(lab, 2, lab.plan.overlay) == 2
    assert re.search(r"reload refused, the running config stays: \S+: \$\.overlays\.\w+\.bridge\.mtu", log.read_text())


def test_reload_adding_an_overlay_brings_its_ring_up_while_the_first_keeps_every_ping(ops_lab: Lab) -> None:
    lab, overlay = ops_lab, ops_lab.plan.overlay
    accounts = {node.index: lab.register_account(f"b{node.name}") for node in lab.nodes}
    lab.add_overlay_group("ov2", [jid for jid, _ in accounts.values()])

    def add_ov2(index: int) -> Callable[[dict[str, Any]], None]:
        def change(doc: dict[str, Any]) -> None:
            second = json.loads(json.dumps(doc["overlays"][overlay]))
            second["signal"].update(jid=accounts[index][0], password=accounts[index][1])
            second["bridge"].update(name="evbr-ov2", address=f"{OV2_NETWORK}.{index}/24")
            doc["overlays"]["ov2"] = second
        return change

    before = link_snapshot(lab, overlay)
    ping = BackgroundPing(lab, 1, str(lab.node(2).overlay_address.ip), count=750)  # 15 s
    time.sleep(1.0)  # the change lands in the middle of the ping (pacing, as above)
    started = time.monotonic()
    for node in lab.nodes:
        write_config(lab, node.index, add_ov2(node.index))
        sighup(lab, node.index)
    wait_for(lambda: [links_up(lab, n.index, "ov2") for n in lab.nodes], lambda c: c == [2, 2, 2], RING_TIMEOUT,
             "the ov2 ring")
    ring_seconds = time.monotonic() - started
    over_ov2 = lab.exec(1, ["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", f"{OV2_NETWORK}.3"], check=False)
    sent, received = ping.result()
    print(f"\nreload adding ov2: its ring up {ring_seconds:.1f} s after the SIGHUPs; ov1 pings {received}/{sent}")
    assert over_ov2.returncode == 0, over_ov2.stdout
    assert (sent, received) == (750, 750), f"ov1 lost {sent - received} of {sent} pings while ov2 came up"
    assert link_snapshot(lab, overlay) == before


# -- systemd notifications from a real daemon ------------------------------------------------------------


def test_daemon_notifies_ready_watchdog_reloading_and_stopping(ops_lab: Lab, tmp_path: Path) -> None:
    lab = ops_lab
    node = lab.plan.node(3)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    address = str(tmp_path / "notify.sock")
    listener.bind(address)
    listener.settimeout(0.5)
    messages: list[str] = []

    def lines() -> list[str]:
        while True:
            try:
                messages.append(listener.recv(4096).decode())
            except TimeoutError:
                break
        return [line for message in messages for line in message.split("\n")]

    try:
        lab.stop_daemon(3)
        argv = full_nodes.daemon_argv(lab.directory, node)
        lab.spawn(3, ["env", f"NOTIFY_SOCKET={address}", "WATCHDOG_USEC=1000000", *argv],
                  role=full_nodes.daemon_role(node))
        wait_for(lines, lambda ls: "READY=1" in ls, 60, "READY=1")
        assert all(s["signal"]["connected"] for s in status(lab, 3)["overlays"].values())  # sent after login
        wait_for(lines, lambda ls: ls.count("WATCHDOG=1") >= 3, 10, "watchdog pings every 0.5 s")
        assert any(line.startswith("STATUS=") and "links up" in line for line in lines())
        count = len(messages)
        sighup(lab, 3)
        wait_for(lines, lambda ls: len(messages) > count and "RELOADING=1" in "\n".join(messages[count:])
                 and "READY=1" in "\n".join(messages[count:]), 20, "RELOADING=1 then READY=1")
        lab.stop_daemon(3)
        assert "STOPPING=1" in lines()
    finally:
        listener.close()
        if lab.daemon(3) is None:
            lab.start_daemon(3)
