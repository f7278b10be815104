"""Tunnels for real: endpoint processes in lab namespaces behind nftables NATs, coturn, TAPs.

NAT cases use the lab (evio.lab); the attacker and kill cases that need no
NAT use a bare two-namespace veth testbed with the ``evt`` prefix.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from evio.config.model import TunnelConfig
from evio.lab.lab import Lab, NodeInfo
from evio.lab.tunnel_testbed import EndpointProcess, VethTestbed, iperf, ping_rtt, run, unique_prefix
from evio.testing.labs import LabFactory
from evio.testing.waiting import wait_for_value, wait_until_blocking
from evio.tunnel.datapath.tap import TX_QUEUE_LEN

pytestmark = pytest.mark.integration

ID_A = "aa" * 16
ID_B = "bb" * 16
# Both data paths, native (Rust, tunnel.datapath) and Python, each with TAP offloads and TSO (vnet headers,
# UDP GRO, super-frames from the TAP cut by the daemon, records joined into super-frames for it) and with one
# frame per TAP read/write; where the data path is the point, also offloads without TSO.
NATIVE, PYTHON = ["--datapath", "native"], ["--datapath", "python"]
DATAPATHS = pytest.mark.parametrize(
    "datapath", [NATIVE, [*NATIVE, "--no-offload"], PYTHON, [*PYTHON, "--no-offload"]],
    ids=["native-tso", "native-no-offload", "python-tso", "python-no-offload"])
# TSO is on by default (tunnel.tso); --no-tso keeps the offloads without it.
ALL_DATAPATHS = pytest.mark.parametrize(
    "datapath", [NATIVE, [*NATIVE, "--no-tso"], [*NATIVE, "--no-offload"], PYTHON, [*PYTHON, "--no-tso"],
                 [*PYTHON, "--no-offload"]],
    ids=["native-tso", "native-offload", "native-no-offload", "python-tso", "python-offload", "python-no-offload"])


KERNEL_TX_QUEUE_LEN = 1000  # a new interface's txqueuelen


@dataclass
class Pair:
    a: EndpointProcess
    b: EndpointProcess
    up_a: dict[str, object]
    up_b: dict[str, object]


@contextmanager
def endpoints(
    netns_a: str,
    netns_b: str,
    ids: tuple[str, str],
    addresses: tuple[str, str],
    extra: list[str],
    workdir: Path,
    extra_a: list[str] | None = None,
    extra_b: list[str] | None = None,
    expect_up: bool = True,
) -> Iterator[Pair]:
    """B waits for the offer, A connects; both stopped on exit whatever happened."""
    common = ["--signal-dir", str(workdir), "-v", *extra]
    procs: list[EndpointProcess] = []
    try:
        args_b = ["--node", ids[1], "--peer", ids[0], "--address", addresses[1], "--exit-on-down", *common, *(extra_b or [])]
        b = EndpointProcess(netns_b, args_b, workdir / "b.log")
        procs.append(b)
        b.wait_event("ready")
        args_a = ["--node", ids[0], "--peer", ids[1], "--connect", "--address", addresses[0], *common, *(extra_a or [])]
        a = EndpointProcess(netns_a, args_a, workdir / "a.log")
        procs.append(a)
        up_a: dict[str, object] = {}
        up_b: dict[str, object] = {}
        if expect_up:
            up_a = a.wait_event("up", timeout=15)
            up_b = b.wait_event("up", timeout=15)
        yield Pair(a, b, up_a, up_b)
    finally:
        for p in procs:
            p.stop()


def lab_endpoints(lab: Lab, workdir: Path, extra: list[str] | None = None, **kwargs: object) -> AbstractContextManager[Pair]:
    n1, n2 = lab.node(1), lab.node(2)
    pub = lab.public
    args = [
        "--stun", f"{pub.address}:{pub.stun_port}",
        "--turn", f"{pub.address}:{pub.stun_port}",
        "--turn-secret", pub.turn_secret,
        *(extra or []),
    ]
    return endpoints(n1.netns, n2.netns, (n1.node_id, n2.node_id), (str(n1.overlay_address), str(n2.overlay_address)), args, workdir, **kwargs)  # type: ignore[arg-type]


def ping(netns: str, address: str, count: int = 5) -> float:
    """Average RTT in ms; asserts no loss."""
    avg, received = ping_rtt(netns, address, count, interval=0.05)
    assert received == count, (address, received)
    return avg


def taps_in(netns: str) -> list[str]:
    out = run(["ip", "-br", "link", "show", "type", "tun"], netns, check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="evt-") as d:
        yield Path(d)


@pytest.fixture
def veth() -> Iterator[VethTestbed]:
    with VethTestbed(unique_prefix()) as tb:
        yield tb


# -- NAT traversal -------------------------------------------------------------------------------


def check_traffic(lab: Lab, n1: NodeInfo, n2: NodeInfo, pair: Pair, datapath: list[str], relayed: bool = False) -> None:
    ping(n1.netns, str(n2.overlay_address.ip))
    ping(n2.netns, str(n1.overlay_address.ip))
    result = iperf(n1.netns, n2.netns, str(n2.overlay_address.ip), seconds=2)
    # A functional check that TCP flows through the tunnel; throughput targets
    # belong to benchmarks/tunnel_bench.py, not to a test on a shared machine.
    sent, received = pair.a.stats(), pair.b.stats()
    assert result["mbit"] > 1, (result, sent, received)
    if "--no-tso" not in datapath and "--no-offload" not in datapath:
        # The kernel handed A's tunnel TCP super-frames (bulk TCP always makes some) and A cut them.
        assert sent["gso_reads"] > 0 and sent["tap_reads"] < sent["tx_frames"], sent
    else:
        assert sent["gso_reads"] == 0 and sent["tap_reads"] == sent["tx_frames"], sent
    assert sent["datapath"] == received["datapath"] == datapath[1], (sent, received)
    if "--no-offload" in datapath:
        # A plain TAP: every frame is its own write (no GRO, no coalescer).
        assert received["gro_writes"] == 0 and received["tap_writes"] == received["rx_frames"], received
    elif not relayed:
        # B (Python or native) joined records into super-frames: a burst leaves A in one UDP GSO message
        # and arrives in one GRO buffer (a TURN relay forwards datagrams one by one, so no promise there).
        assert received["gro_writes"] > 0 and received["tap_writes"] < received["rx_frames"], received
    assert not sent["drops"].get("bad-offload"), sent


@ALL_DATAPATHS
def test_eim_nats_give_a_direct_tunnel(lab_factory: LabFactory, workdir: Path, datapath: list[str]) -> None:
    lab = lab_factory(nodes=2, nat="eim")
    with lab_endpoints(lab, workdir, datapath) as pair:
        for up in (pair.up_a, pair.up_b):
            assert isinstance(up["setup"], float) and up["setup"] < 2.0
        # Up on whichever path connected first; on the direct one soon after if that was the relay.
        for end in (pair.a, pair.b):
            settled = wait_for_value(end.stats, lambda s: s["path"] == "direct", 5, what="the direct path", interval=0.1)
            assert settled["remote"] in ("srflx", "prflx"), settled  # across two NATs
        check_traffic(lab, lab.node(1), lab.node(2), pair, datapath)
        assert not pair.a.stats()["drops"].get("forged")


@DATAPATHS
def test_symmetric_nat_gives_a_relayed_tunnel(lab_factory: LabFactory, workdir: Path, datapath: list[str]) -> None:
    lab = lab_factory(nodes=2, nat=["eim", "symmetric"])
    # The direct attempt is given 6 s, far beyond the relay's setup even on a loaded host, so "up before
    # the direct attempt ended" is told apart by the order of events rather than by a tight timing.
    with lab_endpoints(lab, workdir, [*datapath, "--direct-timeout", "6"]) as pair:
        for up in (pair.up_a, pair.up_b):
            assert (up["path"], up["local"], up["remote"]) == ("relay", "relay", "relay"), up
            # Traffic flows on the relay at once: it did not wait for the direct attempt to fail.
            assert isinstance(up["setup"], float) and up["setup"] < 4.0, up
        check_traffic(lab, lab.node(1), lab.node(2), pair, datapath, relayed=True)
        # The direct attempt went on beside the relay and failed: the pair stays relayed.
        for p in (pair.a, pair.b):
            stats = p.stats()
            assert (stats["path"], stats["path_moves"]) == ("relay", 0), stats
    # Both ended cleanly, so both gave their allocation back to coturn.
    for p in (pair.a, pair.b):
        assert "TURN allocation deleted" in p.log_path.read_text(), p.log_tail()


def test_a_peer_behind_a_symmetric_nat_is_reached_directly_at_its_peer_reflexive_address(
        lab_factory: LabFactory, workdir: Path) -> None:
    """Node 2's symmetric NAT maps its checks to node 1 to a port its STUN server never saw: node 1 learns
    that address from node 2's check (peer-reflexive, through the candidate filter and its cap: 0061) and
    the tunnel goes direct there."""
    lab = lab_factory(nodes=2, nat=["none", "symmetric"])
    with lab_endpoints(lab, workdir) as pair:
        settled = wait_for_value(pair.a.stats, lambda s: s["path"] == "direct", 5, what="the direct path", interval=0.1)
        assert settled["remote"] == "prflx", settled
        ping(lab.node(1).netns, str(lab.node(2).overlay_address.ip))
        ping(lab.node(2).netns, str(lab.node(1).overlay_address.ip))


@contextmanager
def direct_path_blocked(lab: Lab) -> Iterator[Callable[[], None]]:
    """Node 1's NAT drops UDP to and from node 2's NAT (their direct path), not to the TURN server;
    yields the call that lifts the block (the lab's namespaces go at the end in any case)."""
    router, other = lab.node(1).router_netns, lab.node(2).wan_address
    ruleset = (
        "table inet evio_block_direct {\n"
        "  chain forward {\n"
        "    type filter hook forward priority -10; policy accept;\n"
        f"    ip daddr {other} meta l4proto udp drop\n"
        f"    ip saddr {other} meta l4proto udp drop\n"
        "  }\n"
        "}\n"
    )
    subprocess.run(["ip", "netns", "exec", router, "nft", "-f", "-"], input=ruleset, text=True, check=True, timeout=10)

    def lift() -> None:
        run(["nft", "delete", "table", "inet", "evio_block_direct"], router)

    yield lift


def start_ping(netns: str, address: str, count: int, interval: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["ip", "netns", "exec", netns, "ping", "-q", "-c", str(count), "-i", f"{interval:g}", "-W", "3", address],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def ping_received(proc: subprocess.Popen[str]) -> int:
    out, _ = proc.communicate(timeout=60)
    found = re.search(r"(\d+) received", out)
    assert found, out
    return int(found.group(1))


def released(log: Path) -> bool:
    return "TURN allocation deleted" in log.read_text()


@pytest.mark.parametrize("datapath", [NATIVE, PYTHON], ids=["native", "python"])
def test_relay_carries_traffic_at_once_then_the_tunnel_moves_to_direct_losing_nothing(
    lab_factory: LabFactory, workdir: Path, datapath: list[str]
) -> None:
    """Relay first (docs/design.md, "Relay first, then direct"): with the direct path blocked at first,
    the tunnel comes up on the relay well before the direct attempt ends; the block lifted, the direct
    attempt connects and both ends move to it under a running ping each way, which loses no echo."""
    lab = lab_factory(nodes=2, nat="eim")
    n1, n2 = lab.node(1), lab.node(2)
    with direct_path_blocked(lab) as lift, lab_endpoints(lab, workdir, ["--direct-timeout", "8", *datapath]) as pair:
        for up in (pair.up_a, pair.up_b):
            assert up["path"] == "relay", up
            assert isinstance(up["setup"], float) and up["setup"] < 4.0, up  # not waiting out the 8 s attempt
        count = 1000  # 10 s at 0.01 s: the move comes within the first few
        pings = [start_ping(n1.netns, str(n2.overlay_address.ip), count, 0.01),
                 start_ping(n2.netns, str(n1.overlay_address.ip), count, 0.01)]  # fmt: skip
        try:
            # Echoes cross the relay before the direct path opens.
            wait_until_blocking(lambda: pair.b.stats()["rx_frames"] > 20, 10, what="echoes over the relay")
            assert pair.b.stats()["path"] == "relay"
            lift()
            wait_for_value(
                lambda: (pair.a.stats()["path"], pair.b.stats()["path"]), lambda paths: paths == ("direct", "direct"),
                9, what="both ends on the direct path", interval=0.2,
            )
            assert all(p.poll() is None for p in pings), "the pings ended before the move: nothing was in flight"
            received = [ping_received(p) for p in pings]
        finally:
            for p in pings:
                if p.poll() is None:
                    p.kill()
                    p.wait(5)
        assert received == [count, count]  # every sequence number answered, both ways
        for end in (pair.a, pair.b):
            stats = end.stats()
            assert (stats["path"], stats["path_moves"]) == ("direct", 1), stats
            assert not stats["drops"].get("forged"), stats
        # The relay allocations go once the grace after the move is over.
        for log in (pair.a.log_path, pair.b.log_path):
            wait_until_blocking(partial(released, log), 10, what="relay released")


def test_wrong_fingerprint_never_yields_a_link(lab_factory: LabFactory, workdir: Path) -> None:
    lab = lab_factory(nodes=2, nat="eim")
    for liar in ("a", "b"):
        with lab_endpoints(lab, workdir, expect_up=False, **{f"extra_{liar}": ["--wrong-fingerprint"]}) as pair:
            error = pair.a.wait_event("error", "up", timeout=15)
            assert error["event"] == "error", error
            down = pair.b.wait_event("down", "up", timeout=15)
            assert down["event"] == "down", down
            assert not any(e["event"] == "up" for e in pair.a.events + pair.b.events)
            assert pair.b.proc.wait(10) == 0
            for node in (lab.node(1), lab.node(2)):
                assert taps_in(node.netns) == []


def test_forged_member_is_refused_only_with_a_trust_anchor(lab_factory: LabFactory, workdir: Path) -> None:
    """Node 2's place is taken by whoever runs signaling: a self-signed certificate whose fingerprint it carries."""
    from evio.cli import main

    lab = lab_factory(nodes=2, nat="eim")
    n1 = lab.node(1)
    assert main(["pki", "ca", "--name", "ov1 CA", "--out", str(workdir / "ca")]) == 0
    assert main(["pki", "issue", "--ca", str(workdir / "ca"), "--overlay", "ov1", "--node", n1.node_id, "--out", str(workdir / "n1")]) == 0
    member = ["--cert", str(workdir / "n1" / "node.crt"), "--key", str(workdir / "n1" / "node.key")]
    anchored = [*member, "--trust-ca", str(workdir / "ca" / "ca.crt")]
    with lab_endpoints(lab, workdir, expect_up=False, extra_a=anchored) as pair:
        error = pair.a.wait_event("error", "up", timeout=15)
        assert error["event"] == "error", error
        assert "untrusted certificate: not issued by the overlay CA" in str(error["reason"]), error
        assert pair.b.wait_event("down", "up", timeout=15)["event"] == "down"
        assert not any(e["event"] == "up" for e in pair.a.events + pair.b.events)
    for node in (lab.node(1), lab.node(2)):
        assert taps_in(node.netns) == []
    # XMPP-only trust (the default): the same forgery is a working tunnel.
    with lab_endpoints(lab, workdir, extra_a=member) as pair:
        assert pair.up_a["event"] == "up" and pair.up_b["event"] == "up"


# -- attacks and failures on a bare underlay ------------------------------------------------------


@DATAPATHS
def test_replayed_tampered_and_truncated_datagrams_are_dropped_and_counted(veth: VethTestbed, workdir: Path, datapath: list[str]) -> None:
    with endpoints(veth.a.netns, veth.b.netns, (ID_A, ID_B), ("10.99.0.1/24", "10.99.0.2/24"), datapath, workdir) as pair:
        assert pair.up_a["path"] == "direct"
        pinger = subprocess.Popen(["ip", "netns", "exec", veth.a.netns, "ping", "-c", "100", "-i", "0.02", "10.99.0.2"], stdout=subprocess.DEVNULL)
        try:
            injector = run(
                [sys.executable, "-m", "evio.testing.tunnel_attacker", "--iface", veth.a.interface, "--dst", veth.b.address, "--count", "5"],
                veth.a.netns,
                timeout=30,
            )
        finally:
            pinger.wait(30)
        sent = json.loads(injector.stdout)
        assert sent == {"captured": 5, "replayed": 5, "tampered": 5, "truncated": 1}

        def drops() -> dict[str, int]:
            return pair.b.stats()["drops"]

        counted = wait_for_value(drops, lambda d: sum(d.values()) >= 11, 5, what="11 bad records counted", interval=0.05)
        assert counted.get("replayed") == 5, counted
        assert counted.get("forged") == 5, counted
        assert counted.get("truncated") == 1, counted
        # The tunnel shrugs it off.
        ping(veth.a.netns, "10.99.0.2")
        assert not any(e["event"] == "down" for e in pair.a.events + pair.b.events)


def test_a_native_end_talks_to_a_python_end(veth: VethTestbed, workdir: Path) -> None:
    with endpoints(veth.a.netns, veth.b.netns, (ID_A, ID_B), ("10.99.0.1/24", "10.99.0.2/24"), [], workdir,
                   extra_a=NATIVE, extra_b=PYTHON) as pair:  # fmt: skip
        ping(veth.a.netns, "10.99.0.2")
        ping(veth.b.netns, "10.99.0.1")
        result = iperf(veth.a.netns, veth.b.netns, "10.99.0.2", seconds=2)
        assert result["mbit"] > 1, result
        sent, received = pair.a.stats(), pair.b.stats()
        assert (sent["datapath"], received["datapath"]) == ("native", "python")
        # The TAPs queue more than the kernel's default 1000 frames for the tunnel to read (tap.TX_QUEUE_LEN),
        # but where the tunnel reads TCP super-frames (tunnel.tso, on by default): the kernel's 1000 are plenty.
        expected = KERNEL_TX_QUEUE_LEN if TunnelConfig().tso else TX_QUEUE_LEN
        for netns in (veth.a.netns, veth.b.netns):
            queues = {tap: json.loads(run(["ip", "-j", "link", "show", "dev", tap], netns).stdout)[0]["txqlen"]
                      for tap in taps_in(netns)}  # fmt: skip
            assert queues and set(queues.values()) == {expected}, queues
        assert sent["tx_frames"] > 100 and received["rx_frames"] > 100, (sent, received)
        # Every record of the native end opened at the Python end (a datagram lost on the way is no drop).
        assert not {"forged", "replayed", "unknown-epoch", "truncated"} & set(received["drops"]), received


def test_killed_peer_is_detected_and_everything_is_cleaned_up(veth: VethTestbed, workdir: Path) -> None:
    with endpoints(veth.a.netns, veth.b.netns, (ID_A, ID_B), ("10.99.0.1/24", "10.99.0.2/24"), ["--dead-after", "3"], workdir) as pair:
        ping(veth.a.netns, "10.99.0.2")
        assert len(taps_in(veth.a.netns)) == 1 and len(taps_in(veth.b.netns)) == 1
        killed_at = time.monotonic()
        pair.a.kill()
        down = pair.b.wait_event("down", timeout=10)
        detected_after = down["t"] - killed_at  # both clocks are CLOCK_MONOTONIC of this machine
        assert down["reason"] == "peer-silent", down
        assert detected_after <= 5.0, detected_after
        assert pair.b.proc.wait(10) == 0
        # The killed side's TAP went with its fd, the survivor removed its own.
        assert taps_in(veth.a.netns) == [] and taps_in(veth.b.netns) == []
        assert run(["ss", "-uanp"], veth.b.netns).stdout.count("python") == 0


def test_killed_relayed_peer_survivor_frees_its_turn_allocation(lab_factory: LabFactory, workdir: Path) -> None:
    lab = lab_factory(nodes=2, nat=["symmetric", "symmetric"])
    with lab_endpoints(lab, workdir) as pair:
        assert pair.up_b["path"] == "relay"
        pair.a.kill()
        down = pair.b.wait_event("down", timeout=10)
        assert down["reason"] == "peer-silent", down
        assert pair.b.proc.wait(10) == 0
    assert "TURN allocation deleted" in pair.b.log_path.read_text(), pair.b.log_tail()
    assert taps_in(lab.node(2).netns) == []


def test_lab_tunnel_command_reports_path_and_setup_time(lab_factory: LabFactory, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from evio.cli import lab_tunnel_cmd

    lab = lab_factory(nodes=3, nat=["eim", "eim", "symmetric"])
    parser = argparse.ArgumentParser()
    lab_tunnel_cmd.register(parser.add_subparsers())
    for pair, path in ((("1", "node2"), "direct"), (("n1", "3"), "relay")):
        args = parser.parse_args(["tunnel", "--name", lab.name, *pair, "--duration", "0"])
        assert args.handler(args) == 0
        out = capsys.readouterr().out
        assert f": {path} path," in out, out
        assert "setup:" in out and "through the tunnel: 3/3" in out and out.rstrip().endswith("closed"), out
    for node in lab.nodes:
        assert taps_in(node.netns) == []
    args = parser.parse_args(["tunnel", "--name", lab.name, "1", "1", "--duration", "0"])
    assert args.handler(args) == 2
