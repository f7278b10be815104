"""`evio lab` for real: namespaces, nftables NATs, prosody and coturn, and a clean teardown."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aioice import stun, turn
from slixmpp import JID, ClientXMPP

from evio.config.loader import load_config
from evio.lab.errors import LabCommandError
from evio.lab.lab import Lab, Progress
from evio.lab.nat_checks import stun_mapping, tcp_connect, turn_rest_credentials
from evio.lab.netns import LinuxHost, run_in, socket_in
from evio.lab.state import DEFAULT_ROOT, lab_dir, state_path
from evio.lab.topology import lab_prefix
from evio.testing.host_snapshot import netns_inodes, take_snapshot
from evio.testing.labs import LabFactory, lab_cli, lab_leftovers, unique_lab_name
from evio.testing.waiting import wait_until_blocking

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def mixed_lab() -> Iterator[Lab]:
    """Four nodes: eim, symmetric, none, eim. Shared by the read-only tests of this module."""
    if os.geteuid() != 0:
        pytest.skip("integration test: needs root")
    name = unique_lab_name()
    try:
        with Lab.up(name, nodes=4, nat="mixed") as lab:
            yield lab
    finally:
        Lab.down(name)  # no-op after a normal exit; cleans a half-built lab


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    wait_until_blocking(condition, timeout, what=what)


# -- reachability and NAT behaviour ------------------------------------------------------------


def test_every_node_reaches_xmpp_and_stun_through_its_nat(mixed_lab: Lab) -> None:
    pub = mixed_lab.public
    assert [n.nat for n in mixed_lab.nodes] == ["eim", "symmetric", "none", "eim"]
    for node in mixed_lab.nodes:
        assert tcp_connect(node.netns, str(pub.address), pub.xmpp_port) == "connected", node.name
        assert tcp_connect(node.netns, str(pub.address), pub.stun_port) == "connected", node.name  # TURN over TCP
        (mapped_host, _), = stun_mapping(node.netns, [(str(pub.address), pub.stun_port)])
        # Behind a NAT the server sees the router's public address; without NAT, the node's own.
        expected = node.address if node.nat == "none" else node.wan_address
        assert mapped_host == str(expected), node.name


def test_eim_keeps_one_mapping_and_symmetric_makes_one_per_destination(mixed_lab: Lab) -> None:
    pub = mixed_lab.public
    servers = [(str(pub.address), pub.stun_port), (str(pub.alt_address), pub.stun_port),
               (str(pub.address), pub.stun_port)]
    eim = stun_mapping(mixed_lab.node(1).netns, servers)
    assert eim[0] == eim[1] == eim[2]
    symmetric = stun_mapping(mixed_lab.node(2).netns, servers)
    assert symmetric[0][0] == symmetric[1][0] == str(mixed_lab.node(2).wan_address)
    assert symmetric[0][1] != symmetric[1][1]  # another destination, another port
    assert symmetric[0] == symmetric[2]  # the same destination keeps its mapping


def test_nat_drops_unsolicited_inbound_and_none_is_routed(mixed_lab: Lab) -> None:
    pub = mixed_lab.public.netns
    # A new connection to a NAT's public address is dropped, not refused.
    assert tcp_connect(pub, str(mixed_lab.node(1).wan_address), 4000, timeout=1.0) == "timeout"
    assert tcp_connect(pub, str(mixed_lab.node(2).wan_address), 4000, timeout=1.0) == "timeout"
    # The un-NATed node is reachable at its own address: its kernel answers with a RST.
    assert tcp_connect(pub, str(mixed_lab.node(3).address), 4000) == "refused"
    assert tcp_connect(mixed_lab.node(1).netns, str(mixed_lab.node(3).address), 4000) == "refused"


def test_turn_allocates_with_rest_credentials_only(mixed_lab: Lab) -> None:
    pub = mixed_lab.public
    username, password = turn_rest_credentials(pub.turn_secret, "node2", int(time.time()) + 600)

    async def allocate(secret_password: str) -> tuple[str, int]:
        transport, _ = await turn.create_turn_endpoint(
            asyncio.DatagramProtocol, server_addr=(str(pub.address), pub.stun_port),
            username=username, password=secret_password, lifetime=60,
        )
        try:
            relayed: tuple[str, int] = transport.get_extra_info("sockname")
            return relayed
        finally:
            transport.close()

    netns = mixed_lab.node(2).netns
    host, port = run_in(netns, lambda: asyncio.run(allocate(password)))
    assert host == str(pub.address) and pub.relay_ports[0] <= port <= pub.relay_ports[1]
    with pytest.raises(stun.TransactionFailed, match="401"):
        run_in(netns, lambda: asyncio.run(allocate("not-the-password")))


# -- XMPP ---------------------------------------------------------------------------------------


def xmpp_session(netns: str, jid: str, password: str, ca_file: Path, server: str, port: int,
                 room: str | None) -> tuple[list[str], str | None]:
    """Log in from `netns` with STARTTLS verified against `ca_file`; return (roster, MUC join result)."""

    async def session() -> tuple[list[str], str | None]:
        client = ClientXMPP(f"{jid}/labtest", password)
        client.enable_direct_tls = False  # STARTTLS port: skip slixmpp's failing direct-TLS attempt
        client.ca_certs = ca_file
        client.register_plugin("xep_0045")
        result: asyncio.Future[tuple[list[str], str | None]] = asyncio.get_running_loop().create_future()

        async def started(_: object) -> None:
            await client.get_roster()
            roster = sorted(str(j) for j in client.client_roster)  # before the room adds itself
            client.send_presence()
            joined = None
            if room is not None:
                presence = await client.plugin["xep_0045"].join_muc_wait(JID(room), jid.split("@")[0], timeout=10)
                joined = str(presence[0]["from"] if isinstance(presence, tuple) else presence["from"])
            result.set_result((roster, joined))

        client.add_event_handler("session_start", started)
        client.add_event_handler("failed_auth", lambda _: result.set_exception(PermissionError("auth failed")))
        client.connect(server, port)
        try:
            return await asyncio.wait_for(result, 20)
        finally:
            client.disconnect()

    return run_in(netns, lambda: asyncio.run(session()))


def test_nodes_log_in_over_tls_and_see_their_overlay(mixed_lab: Lab) -> None:
    pub = mixed_lab.public
    node = mixed_lab.node(2)  # behind the symmetric NAT
    roster, joined = xmpp_session(node.netns, node.jid, node.password, pub.ca_file, str(pub.address),
                                  pub.xmpp_port, pub.muc_room)
    assert roster == sorted(n.jid for n in mixed_lab.nodes if n.index != 2)  # the shared roster group
    assert joined == f"{pub.muc_room}/node2"  # the unlocked MUC room

    with pytest.raises(PermissionError):
        xmpp_session(node.netns, node.jid, "wrong", pub.ca_file, str(pub.address), pub.xmpp_port, None)

    outsider, password = mixed_lab.register_account("outsider")
    roster, _ = xmpp_session(node.netns, outsider, password, pub.ca_file, str(pub.address), pub.xmpp_port, None)
    assert roster == []  # a valid account outside the overlay group


def test_node_configs_load_with_the_daemon_loader(mixed_lab: Lab) -> None:
    for node in mixed_lab.nodes:
        config = load_config(node.config_path)
        overlay = config.overlays[mixed_lab.public.overlay]
        assert f"{config.node.id:032x}" == node.node_id
        assert overlay.signal.jid == node.jid and overlay.signal.password == node.password
        assert overlay.signal.ca_file == mixed_lab.public.ca_file
        assert config.node.state_dir.is_dir()


# -- exec, status, shaping ----------------------------------------------------------------------


def test_exec_and_status(mixed_lab: Lab) -> None:
    out = mixed_lab.exec("node3", ["ip", "-4", "-o", "addr", "show"]).stdout
    assert f"{mixed_lab.node(3).address}/24" in out
    assert mixed_lab.exec("pub", ["sh", "-c", "exit 3"], check=False).returncode == 3
    with pytest.raises(LabCommandError):
        mixed_lab.exec(1, ["false"])
    status = Lab.status(mixed_lab.name)
    assert status.healthy
    assert sorted(p.role for p in status.processes) == ["coturn", "prosody"]


def test_prosody_stops_and_starts_again(mixed_lab: Lab) -> None:
    pub, netns = mixed_lab.public, mixed_lab.node(1).netns
    mixed_lab.stop_service("prosody")
    assert tcp_connect(netns, str(pub.address), pub.xmpp_port) == "refused"
    record = mixed_lab.start_service("prosody")
    assert tcp_connect(netns, str(pub.address), pub.xmpp_port) == "connected"
    assert Lab.status(mixed_lab.name).healthy and record in Lab.attach(mixed_lab.name).processes


def _upload_mbit(lab: Lab, node: int, seconds: float) -> float:
    """TCP throughput from a node to a sink in the public namespace, measured at the receiver."""
    server = socket_in(lab.public.netns, socket.AF_INET, socket.SOCK_STREAM)
    server.bind((str(lab.public.address), 0))
    server.listen(1)
    port = server.getsockname()[1]
    received: list[tuple[float, int]] = []

    def sink() -> None:
        conn, _ = server.accept()
        with conn:
            total = 0
            while data := conn.recv(1 << 16):
                total += len(data)
                received.append((time.monotonic(), total))

    thread = threading.Thread(target=sink)
    thread.start()
    client = socket_in(lab.node(node).netns, socket.AF_INET, socket.SOCK_STREAM)
    with server, client:
        client.connect((str(lab.public.address), port))
        chunk = b"\0" * (1 << 16)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            client.sendall(chunk)
        client.shutdown(socket.SHUT_WR)
        thread.join(timeout=30)
    # Skip the first quarter: the token bucket's initial burst would inflate a short measurement.
    start = received[len(received) // 4]
    (t1, b1) = received[-1]
    return (b1 - start[1]) * 8 / (t1 - start[0]) / 1e6


def test_shaping_limits_a_nodes_rate(mixed_lab: Lab) -> None:
    mixed_lab.shape(4, 8)
    try:
        shaped = _upload_mbit(mixed_lab, 4, 1.5)
    finally:
        mixed_lab.unshape(4)
    unshaped = _upload_mbit(mixed_lab, 4, 0.5)
    assert 2 < shaped < 10, shaped
    assert unshaped > 3 * shaped, (unshaped, shaped)


# -- teardown -----------------------------------------------------------------------------------


def test_down_removes_namespaces_links_processes_and_files(lab_factory: LabFactory) -> None:
    name = unique_lab_name()
    before = take_snapshot()
    lab = lab_factory(name=name, nodes=3, nat="eim", rate_mbit=50)
    inodes = netns_inodes(list(lab.plan.namespaces))
    lab.spawn(1, ["sleep", "600"], role="sleeper")
    # Something started behind the lab's back (e.g. a daemon a test launched itself): found by namespace.
    stray = subprocess.Popen(["ip", "netns", "exec", lab.node(2).netns, "sleep", "600"], start_new_session=True)
    assert lab_leftovers(name, before, inodes)  # the lab is there
    reaper = threading.Thread(target=stray.wait)  # it is our child: reap it as soon as down stops it
    reaper.start()
    report = Lab.down(name)
    reaper.join(timeout=10)
    assert stray.returncode == -signal.SIGTERM
    assert len(report.processes) == 4  # prosody, coturn, two sleeps
    assert lab_leftovers(name, before, inodes) == set()


def test_failed_or_interrupted_up_removes_what_it_made() -> None:
    name = unique_lab_name()
    before = take_snapshot()

    def interrupt(progress: Progress) -> None:
        if progress.step == "routers" and progress.done == 2:
            raise KeyboardInterrupt  # what Ctrl-C raises

    with pytest.raises(KeyboardInterrupt):
        Lab.up(name, nodes=3, nat="mixed", progress=interrupt)
    assert lab_leftovers(name, before) == set()

    def fail_after_services(progress: Progress) -> None:
        if progress.step == "prosody":
            raise RuntimeError("injected")

    with pytest.raises(RuntimeError):
        Lab.up(name, nodes=2, progress=fail_after_services)
    assert lab_leftovers(name, before) == set()


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return lab_cli(*args, timeout=timeout, cwd=REPO)


@pytest.mark.parametrize("kill_when", ["namespaces", "prosody"])
def test_down_removes_a_lab_whose_up_was_killed(kill_when: str) -> None:
    name = unique_lab_name()
    before = take_snapshot()
    proc = subprocess.Popen([sys.executable, "-m", "evio", "lab", "up", "--name", name, "--nodes", "4"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        state = state_path(DEFAULT_ROOT, name)

        def reached() -> bool:
            if kill_when == "namespaces":
                return any(ns.startswith(lab_prefix(name)) for ns in LinuxHost().netns_list())
            return state.exists() and '"role": "prosody"' in state.read_text()

        wait_for(reached, 60, f"up to reach {kill_when}")
        proc.send_signal(signal.SIGKILL)  # a crash: no cleanup code runs
        proc.wait(timeout=10)
        inodes = netns_inodes([ns for ns in LinuxHost().netns_list() if ns.startswith(lab_prefix(name))])
        assert lab_leftovers(name, before, inodes)
        if state.exists():
            state.write_text(state.read_text()[: len(state.read_text()) // 2])  # and a half-written state file
        result = _cli("down", "--name", name)
        assert result.returncode == 0, result.stderr
        assert lab_leftovers(name, before, inodes) == set()
    finally:
        if proc.poll() is None:
            proc.kill()
        Lab.down(name)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_cli_up_interrupted_removes_what_it_made(signum: int) -> None:
    name = unique_lab_name()
    before = take_snapshot()
    # As from a terminal: a run started in the background of a script inherits SIGINT ignored (POSIX),
    # and a Python started so keeps it ignored, so Ctrl-C would never reach `up`.
    proc = subprocess.Popen([sys.executable, "-m", "evio", "lab", "up", "--name", name, "--nodes", "12"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_for(lambda: any(ns.startswith(lab_prefix(name)) for ns in LinuxHost().netns_list()), 60,
                 "namespaces to appear")
        proc.send_signal(signum)  # Ctrl-C, or a service manager stopping it
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert lab_leftovers(name, before) == set()
    finally:
        if proc.poll() is None:
            proc.kill()
        Lab.down(name)


def test_cli_up_8_nodes_then_down_leaves_the_machine_as_it_was() -> None:
    name = unique_lab_name()
    before = take_snapshot()
    try:
        up = _cli("up", "--nodes", "8", "--nat", "mixed", "--name", name)
        assert up.returncode == 0, up.stderr
        assert "configs" in up.stderr and "8/8" in up.stderr  # progress was shown
        status = _cli("status", "--name", name, "--json")
        assert status.returncode == 0, status.stderr
        document = json.loads(status.stdout)
        assert len(document["nodes"]) == 8 and all(p["running"] for p in document["processes"])
        inodes = netns_inodes(list(Lab.attach(name).plan.namespaces))
        ran = _cli("exec", "--name", name, "5", "--", "ip", "-4", "-o", "addr", "show")
        assert ran.returncode == 0 and "10.10.5.2/24" in ran.stdout
        down = _cli("down", "--name", name)
        assert down.returncode == 0, down.stderr
        assert lab_leftovers(name, before, inodes) == set()
        # Nothing of ours anywhere in the whole-machine comparison either.
        after = take_snapshot()
        prefix = lab_prefix(name)
        assert not [n for n in after.namespaces ^ before.namespaces if n.startswith(prefix)]
        assert not [n for n in after.root_links ^ before.root_links if n.startswith(prefix)]
        assert not [f for f in after.lab_files ^ before.lab_files if f.startswith(str(lab_dir(DEFAULT_ROOT, name)))]
    finally:
        Lab.down(name)
