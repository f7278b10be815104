"""`evio status` and `evio ping` against a node on fakes, through its real control socket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from evio.cli import main
from evio.cli.status_cmd import health_problems, render_probe, render_status
from evio.node.control import ControlError
from evio.node.control_client import find_peer
from evio.node.node import Node
from evio.node.plan import plan_node
from evio.signal.endpoint import SignalEndpoint
from evio.signal.errors import LoginFailure, SignalStep
from evio.testing.node_fleet import DOMAIN, Fleet, fleet_config, nid
from evio.testing.waiting import wait_until as until


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    """Three nodes, the real overlay controller (s = 2: all linked); node 1 answers on tmp_path/control.sock."""
    fleet = Fleet(3)
    plan = plan_node(fleet_config(1), nid(1), controller_port=6653, kernel_module_loaded=False)
    fleet.nodes[1] = Node(plan, fleet.platforms[1], control_socket=tmp_path / "control.sock")
    await fleet.start()
    stack = fleet.nodes[1].overlays["ov1"]
    await until(lambda: len([p for p, i in stack.controller.adjacency().items() if i.state.value == "up"]) == 2, 10)
    yield fleet
    await fleet.stop_all()


async def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_status_prints_overlays_signaling_and_one_line_per_link(
        fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await cli(capsys, "status", "--state-dir", str(tmp_path))
    assert (code, err) == (0, "")
    assert f"node {nid(1):032x}" in out
    assert "overlay ov1  address 10.254.0.1/16  bridge evbr-ov1 (netdev" in out
    assert f"signaling node1@{DOMAIN} via 127.0.0.1:5222: connected since" in out and "0 reconnects" in out
    assert "links up: 2" in out
    table = [line.strip() for line in out[out.index("PEER"):].splitlines()]
    assert len(table) == 3 and table[1].startswith(f"{nid(2):032x}"[:12]) and "node2" in table[1]
    assert "direct" in table[1] and "successor" in table[1]

    code, out, err = await cli(capsys, "status", "--state-dir", str(tmp_path), "--json")
    document = json.loads(out)
    assert code == 0 and document["version"] == 1
    ov = document["overlays"]["ov1"]
    assert [link["peer"] for link in ov["links"]] == [f"{nid(2):032x}", f"{nid(3):032x}"]
    assert {link["peer_name"] for link in ov["links"]} == {f"node2@{DOMAIN}", f"node3@{DOMAIN}"}
    assert ov["link_counts"] == {"successor": 2}
    assert ov["tunnels"]["up"] == 2 and ov["tunnels"]["setup_seconds"]["count"] == 2
    assert ov["signal"]["last_error"] is None


async def test_status_check_is_quiet_when_healthy_and_names_each_problem_when_not(
        fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await cli(capsys, "status", "--state-dir", str(tmp_path), "--check")
    assert (code, err) == (0, "") and "links up: 2" in out
    fleet.signal_hub.stop_server()
    code, out, err = await cli(capsys, "status", "--state-dir", str(tmp_path), "--check")
    assert code == 1 and "NOT connected" in out
    assert err == "evio status: overlay ov1: signaling not connected\n"
    code, _, err = await cli(capsys, "status", "--state-dir", str(tmp_path / "none"), "--check")
    assert code == 1 and "no daemon control socket" in err  # no daemon: as without --check


async def test_the_failed_step_reaches_status_json_text_and_check(
        fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    client = fleet.nodes[1].accounts[f"node1@{DOMAIN}"]
    assert isinstance(client, SignalEndpoint)
    fleet.signal_hub.stop_server()
    refused = LoginFailure(SignalStep.TCP, "TCP connect to 127.0.0.1:5222 failed: connection refused", 1795000000.0)
    client._login_failed(refused)
    code, out, _ = await cli(capsys, "status", "--state-dir", str(tmp_path), "--json")
    assert code == 0
    assert json.loads(out)["overlays"]["ov1"]["signal"]["last_error"] == {
        "step": "tcp", "message": refused.message, "since": 1795000000.0}
    code, out, err = await cli(capsys, "status", "--state-dir", str(tmp_path), "--check")
    assert code == 1
    assert "    last error (tcp, since 2026-11-18 11:06:40 UTC" in out and refused.message in out
    assert err == f"evio status: overlay ov1: signaling not connected (tcp: {refused.message})\n"


async def test_revocation_lists_left_out_of_presence_reach_status_json_and_text(
        fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Lists that did not fit the identity element (decision 0036, amended) are counted by the endpoint; the operator
    sees them in the status document and, once any was left out, under the signaling line."""
    client = fleet.nodes[1].accounts[f"node1@{DOMAIN}"]
    assert isinstance(client, SignalEndpoint)
    code, out, _ = await cli(capsys, "status", "--state-dir", str(tmp_path), "--json")
    signal = json.loads(out)["overlays"]["ov1"]["signal"]
    assert (signal["lists_left_out"], signal["lists_left_out_total"]) == ([], 0)
    code, out, _ = await cli(capsys, "status", "--state-dir", str(tmp_path))
    assert "left out of presence" not in out
    # What `_fit_document` keeps after making documents that left lists out (tests/unit/signal/
    # test_review21q_identity_document_outgrown.py makes them for real).
    client.lists_left_out, client.lists_left_out_total = ("ov1", "ov7"), 5
    code, out, _ = await cli(capsys, "status", "--state-dir", str(tmp_path), "--json")
    signal = json.loads(out)["overlays"]["ov1"]["signal"]
    assert (signal["lists_left_out"], signal["lists_left_out_total"]) == (["ov1", "ov7"], 5)
    code, out, _ = await cli(capsys, "status", "--state-dir", str(tmp_path))
    assert code == 0
    assert ("    revocation lists left out of presence: ov1, ov7 (5 left out so far; they spread over the overlay and "
            "from the file beside the CA)") in out.splitlines()


def test_health_problems_one_per_problem_with_the_failed_step() -> None:
    failing = {"step": "tls", "message": "TLS: the certificate of x:5222 was refused", "since": 100.0}
    status = {"overlays": {
        "a": {"signal": {"connected": False, "last_error": failing}, "link_counts": {}},
        "b": {"signal": {"connected": True, "last_error": {"step": "membership", "message": "account n@x is not a "
              "member of overlay b", "since": 5.0}}, "link_counts": {}},
        "c": {"signal": {"connected": True, "last_error": None}, "link_counts": {"successor": 1}},
    }}
    assert health_problems(status) == [
        "overlay a: signaling not connected (tls: TLS: the certificate of x:5222 was refused)",
        "overlay a: no link up",
        "overlay b: signaling membership: account n@x is not a member of overlay b",
        "overlay b: no link up",
    ]
    assert health_problems({"overlays": {}}) == ["no overlay is running"]


async def test_status_without_a_daemon_says_so_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await cli(capsys, "status", "--state-dir", str(tmp_path / "none"))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "no daemon control socket" in err


async def test_ping_by_name_and_by_id_prefix_prints_path_and_rtt(
        fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await cli(capsys, "ping", "node3", "--state-dir", str(tmp_path), "-c", "2", "-i", "0")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"pong from node3@{DOMAIN} via direct") for line in lines)
    code, out, _ = await cli(capsys, "ping", f"{nid(2):032x}"[:3], "--state-dir", str(tmp_path), "-c", "1")
    assert code == 0 and out.startswith(f"pong from node2@{DOMAIN}")
    code, out, err = await cli(capsys, "ping", "node9", "--state-dir", str(tmp_path), "-c", "1")
    assert code == 1 and out == "" and "no peer 'node9'" in err


async def test_probe_of_a_peer_without_a_link_says_whether_one_is_being_set_up(fleet: Fleet) -> None:
    node = fleet.nodes[1]
    answer = await node.probe({"peer": f"{nid(7):032x}"})
    assert answer["result"] == "no-link" and answer["setting_up"] is False and answer["peer_online"] is False
    assert "none is being set up" in render_probe(answer)
    with pytest.raises(ControlError, match="bad peer"):
        await node.probe({"peer": "zz"})
    with pytest.raises(ControlError, match="no overlay"):
        await node.probe({"overlay": "nope", "peer": f"{nid(2):032x}"})


def test_render_probe_of_a_link_being_set_up() -> None:
    text = render_probe({"result": "no-link", "setting_up": True, "overlay": "ov1", "peer": "ab" * 16,
                         "peer_name": "node2@x.test", "link_state": "pending", "tunnel_state": "connecting",
                         "peer_online": True})
    assert text == "no link to node2@x.test in ov1 yet: one is being set up (connecting); the peer is online"


def test_find_peer_by_id_prefix_jid_or_user_and_ambiguity() -> None:
    status = {"overlays": {
        "a": {"peers": {"ab" + "0" * 30: "node2@x.test/evio-1"}, "links": []},
        "b": {"peers": {"ab" + "1" * 30: "node3@x.test/evio-2"},
              "links": [{"peer": "cd" + "0" * 30, "peer_name": "node4@x.test"}]},
    }}
    assert find_peer(status, "node2").peer == "ab" + "0" * 30
    assert find_peer(status, "NODE3@x.test").overlay == "b"
    assert find_peer(status, "node4").peer == "cd" + "0" * 30  # linked, not online: still found
    assert find_peer(status, "ab", overlay="a").overlay == "a"
    with pytest.raises(ControlError, match="more than one peer"):
        find_peer(status, "ab")
    with pytest.raises(ControlError, match="no peer"):
        find_peer(status, "node5")


def test_render_status_of_a_disconnected_overlay() -> None:
    text = render_status({"node_id": "ab" * 16, "pid": 1, "uptime": 75, "overlays": {"ov1": {
        "signal": {"jid": "n@x", "server": "x:5222", "connected": False, "reconnects": 3}, "links": [],
    }}}, now=0.0)
    assert "up 1m15s" in text and "NOT connected (3 reconnects so far)" in text and "links up: 0 (none)" in text
    assert "last error" not in text


def test_render_status_shows_the_failed_step_under_the_signaling_line() -> None:
    error = {"step": "sasl", "message": "SASL SCRAM-SHA-1 login as n@x refused (not-authorized): wrong password, or "
             "no such account on the server (the server answers both alike)", "since": 1795000000.0}
    text = render_status({"node_id": "ab" * 16, "pid": 1, "uptime": 75, "overlays": {"ov1": {
        "signal": {"jid": "n@x", "server": "x:5222", "connected": False, "reconnects": 0, "last_error": error},
        "links": [],
    }}}, now=1795000302.0)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "signaling n@x via x:5222: NOT connected" in line)
    assert lines[at + 1] == ("    last error (sasl, since 2026-11-18 11:06:40 UTC, 5m02s ago): SASL SCRAM-SHA-1 login "
                             "as n@x refused (not-authorized): wrong password, or no such account on the server (the "
                             "server answers both alike)")


def test_no_access_to_the_socket_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    import evio.node.control_client as client

    class Refused(socket.socket):
        def connect(self, address: object) -> None:
            raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(client.socket, "socket", Refused)
    code = main(["status", "--state-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err == f"evio status: no access to {tmp_path / 'control.sock'} (the control socket is root's only)\n"


def test_render_status_shows_each_links_mtu_and_how_the_path_mtu_was_found() -> None:
    link = {"peer": "cd" * 16, "state": "up", "tx": {}, "rx": {}, "drops": {"path-too-big": 3}, "mtu": 1428}
    links = [{**link, "path_mtu": 1280, "mtu_source": "probed"}, {**link, "peer": "ef" * 16, "mtu_source": "assumed"}]
    text = render_status({"node_id": "ab" * 16, "pid": 1, "uptime": 75, "overlays": {"ov1": {
        "signal": {"jid": "n@x", "server": "x:5222", "connected": True, "reconnects": 0}, "links": links,
    }}}, now=0.0)
    rows = {line.split()[0]: line for line in text.splitlines() if line.strip().startswith(("cdcd", "efef"))}
    assert rows["cdcdcdcdcdcd"].endswith("1428 path 1280 probed") and "path-too-big=3" in rows["cdcdcdcdcdcd"]
    assert rows["efefefefefef"].endswith("1428 assumed")


def test_render_status_marks_a_relayed_link_whose_standby_is_ready() -> None:
    link = {"peer": "cd" * 16, "state": "up", "tx": {}, "rx": {}, "drops": {}, "mtu": 1428, "path": "relay",
            "transport": "tcp", "local_candidate": "relay", "remote_candidate": "relay"}  # fmt: skip
    relay = {"allocations": 2, "server": "192.0.2.1:3478", "standby": "ready", "standby_server": "192.0.2.1:3490", "failovers": 0}
    links = [{**link, "relay": relay}, {**link, "peer": "ef" * 16, "relay": {**relay, "standby": "checking"}}]
    text = render_status({"node_id": "ab" * 16, "pid": 1, "uptime": 75, "overlays": {"ov1": {
        "signal": {"jid": "n@x", "server": "x:5222", "connected": True, "reconnects": 0}, "links": links,
    }}}, now=0.0)
    rows = {line.split()[0]: line for line in text.splitlines() if line.strip().startswith(("cdcd", "efef"))}
    assert "relay/tcp+standby relay->relay" in rows["cdcdcdcdcdcd"]
    assert "relay/tcp relay->relay" in rows["efefefefefef"]  # not checked yet: no standby to count on
