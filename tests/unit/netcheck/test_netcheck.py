"""evio netcheck: the classification (pure), and the probes against fake servers on loopback.

The fakes (evio.testing.fake_netcheck_servers) play a NAT by the address they claim to see, a STUN
server answering garbage or nothing, a TURN server refusing the credentials, and an XMPP server whose
certificate names another domain. Every bad server is named with its reason, and none delays the
others beyond its own deadline.
"""

from __future__ import annotations

import datetime
import json
import ssl
import time
from pathlib import Path

import pytest

from evio.cli import main
from evio.config.loader import load_config, loads_config
from evio.config.model import Config
from evio.netcheck.check import run_netcheck, targets
from evio.netcheck.findings import (
    BindingAnswer,
    FamilyReach,
    Observations,
    PathMtu,
    TurnAttempt,
    XmppCheck,
    classify,
    nat_mapping,
    render_text,
    to_json,
    udp_state,
)
from evio.netcheck.stun import _sizes, binding_request
from evio.server import tls
from evio.testing.fake_netcheck_servers import FakeStunServer, FakeXmppServer
from evio.tunnel.path.stun_guard import parse_stun

DOMAIN = "overlay.test"


def _binding(name: str, address: str, mapped: str | None, local: str = "10.1.0.2:5000") -> BindingAnswer:
    return BindingAnswer(name, address, "ipv4", 1.0 if mapped else None, mapped, local,
                         error=None if mapped else "no answer within 1 s")  # fmt: skip


# -- classification ---------------------------------------------------------------------------------------


def test_the_same_mapping_toward_two_servers_is_endpoint_independent() -> None:
    nat = nat_mapping("ipv4", [_binding("stun a", "203.0.113.10:3478", "198.51.100.11:5000"),
                               _binding("stun b", "203.0.113.11:3478", "198.51.100.11:5000")])  # fmt: skip
    assert nat.kind == "endpoint-independent", nat


def test_a_mapping_per_destination_is_endpoint_dependent() -> None:
    nat = nat_mapping("ipv4", [_binding("stun a", "203.0.113.10:3478", "198.51.100.11:40001"),
                               _binding("stun b", "203.0.113.10:3479", "198.51.100.11:52004")])  # fmt: skip
    assert nat.kind == "endpoint-dependent" and "need TURN" in nat.reason, nat


def test_our_own_address_seen_is_no_nat_and_one_destination_cannot_tell() -> None:
    own = _binding("stun a", "203.0.113.10:3478", "198.51.100.103:5000", local="198.51.100.103:5000")
    assert nat_mapping("ipv4", [own]).kind == "none"
    one = [_binding("stun a", "203.0.113.10:3478", "198.51.100.11:5000"),
           _binding("turn a", "203.0.113.10:3478", "198.51.100.11:5000")]  # fmt: skip
    assert nat_mapping("ipv4", one).kind == "unknown"
    assert nat_mapping("ipv4", [_binding("stun a", "203.0.113.10:3478", None)]).kind == "unknown"
    assert nat_mapping("ipv6", one).kind == "unknown"


def test_udp_is_blocked_when_only_tcp_answers() -> None:
    silent = (_binding("stun a", "203.0.113.10:3478", None),)
    tcp = (TurnAttempt("turn a", "tcp", "203.0.113.10:3478", "allocated", 3.0, "203.0.113.10:50000"),)
    assert udp_state(Observations(bindings=silent, turn=tcp))[0] == "blocked"
    assert udp_state(Observations(bindings=silent))[0] == "unknown"
    answered = (_binding("stun a", "203.0.113.10:3478", "198.51.100.11:5000"),)
    assert udp_state(Observations(bindings=answered, turn=tcp))[0] == "open"


def _xmpp_ok() -> XmppCheck:
    return XmppCheck("ov1", "203.0.113.10:5222", DOMAIN, "starttls", "203.0.113.10:5222", True, "valid", 1.0)


def test_the_exit_status_says_whether_the_node_reaches_what_it_needs() -> None:
    stun = (_binding("stun a", "203.0.113.10:3478", "198.51.100.11:5000"),)
    alive = TurnAttempt("turn a", "udp", "203.0.113.10:3478", "allocated", 2.0, "203.0.113.10:50000")
    dead = TurnAttempt("turn b", "udp", "203.0.113.20:3478", "no-answer", detail="no answer within 1 s")
    refused = TurnAttempt("turn c", "udp", "203.0.113.30:3478", "refused", detail="401 Unauthorized")
    base = Observations((FamilyReach("ipv4", "10.1.0.2"),), stun, (alive,), ("turn a",), (_xmpp_ok(),))
    assert classify(base).exit_status == 0

    # A dead TURN server beside one that allocates is a warning; alone, or one refusing, a problem.
    two = classify(Observations(base.families, stun, (alive, dead), ("turn a", "turn b"), base.xmpp))
    assert two.exit_status == 0 and [v.level for v in two.verdicts if v.subject == "turn b"] == ["warning"]
    assert classify(Observations(base.families, stun, (dead,), ("turn b",), base.xmpp)).exit_status == 1
    refusing = classify(Observations(base.families, stun, (alive, refused), ("turn a", "turn c"), base.xmpp))
    assert [v.subject for v in refusing.problems] == ["turn c"] and "401" in refusing.problems[0].text

    # No STUN answer at all, or an XMPP server not reached, or its certificate not valid: a problem each.
    silent = (_binding("stun a", "203.0.113.10:3478", None),)
    assert classify(Observations(base.families, silent, (alive,), ("turn a",), base.xmpp)).exit_status == 1
    wrong = XmppCheck("ov1", "203.0.113.10:5222", DOMAIN, "starttls", "203.0.113.10:5222", True, "invalid", 1.0,
                      "certificate: Hostname mismatch")  # fmt: skip
    report = classify(Observations(base.families, stun, (alive,), ("turn a",), (wrong,)))
    assert report.exit_status == 1 and "Hostname mismatch" in report.problems[0].text
    assert "verdict: 1 problem(s): xmpp 203.0.113.10:5222 (ov1)" in render_text(report)
    assert json.loads(to_json(report))["exit_status"] == 1


def test_one_of_several_xmpp_servers_down_is_a_warning_all_down_a_problem() -> None:
    """Several servers of one service (decision 0051): the node signs in to another when one is down."""
    stun = (_binding("stun a", "203.0.113.10:3478", "198.51.100.11:5000"),)
    alive = TurnAttempt("turn a", "udp", "203.0.113.10:3478", "allocated", 2.0, "203.0.113.10:50000")
    down = XmppCheck("ov1", "203.0.113.11:5222", DOMAIN, "starttls", "203.0.113.11:5222", False,
                     detail="connection refused")  # fmt: skip
    families = (FamilyReach("ipv4", "10.1.0.2"),)
    one_down = classify(Observations(families, stun, (alive,), ("turn a",), (_xmpp_ok(), down)))
    assert one_down.exit_status == 0
    assert [(v.level, v.text) for v in one_down.verdicts if v.subject == "xmpp 203.0.113.11:5222 (ov1)"] == [
        ("warning", "unreachable: connection refused; another of its servers is reachable")]
    all_down = classify(Observations(families, stun, (alive,), ("turn a",), (down,)))
    assert all_down.exit_status == 1 and all_down.problems[0].subject == "xmpp 203.0.113.11:5222 (ov1)"
    document = {"overlays": {"ov1": {"signal": {"jid": "n1@x.test", "password": "pw",
                                                "servers": ["203.0.113.10:5222", "203.0.113.11:5223"]}}}}
    xmpp = targets(loads_config(json.dumps(document)))[2]
    assert [(x.host, x.port) for x in xmpp] == [("203.0.113.10", 5222), ("203.0.113.11", 5223)]


# -- the STUN codec -------------------------------------------------------------------------------------


def test_a_padded_probe_has_the_size_asked_and_parses() -> None:
    for size in (24, 100, 1472):
        datagram = binding_request(b"x" * 12, size)
        assert len(datagram) == size
        assert parse_stun(datagram).transaction_id == b"x" * 12
    with pytest.raises(ValueError):
        binding_request(b"x" * 12, 1471)
    sizes = _sizes(576, 1500, 12)
    assert sizes[0] == 576 and sizes[-1] == 1500 and all(s % 4 == 0 for s in sizes) and len(sizes) <= 13


# -- probes against fake servers ------------------------------------------------------------------------


def _config(tmp_path: Path, stun: list[str], turn: list[str], xmpp: tuple[str, int], ca: Path | None = None) -> Config:
    signal: dict[str, object] = {"jid": f"node1@{DOMAIN}", "password": "pw", "server": xmpp[0], "port": xmpp[1]}
    if ca is not None:
        signal["ca_file"] = str(ca)
    document = {"overlays": {"ov1": {"signal": signal, "nat_traversal": {
        "stun": stun, "turn": [{"server": t, "username": "u", "password": "wrong"} for t in turn]}}}}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(document))
    path.chmod(0o600)
    return load_config(path)


def _certificate(tmp_path: Path, name: str) -> tuple[Path, ssl.SSLContext]:
    """A CA file and a server context with a certificate for `name` from that CA."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert = tls.make_ca(name, now)
    key, cert = tls.issue_server_certificate(ca_key, ca_cert, name, "127.0.0.1", now)
    (tmp_path / "ca.crt").write_bytes(tls.certificate_pem(ca_cert))
    (tmp_path / "server.pem").write_bytes(tls.certificate_pem(cert) + tls.key_pem(key))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "server.pem")
    return tmp_path / "ca.crt", context


async def test_an_eim_nat_seen_by_two_servers_and_a_valid_certificate(tmp_path: Path) -> None:
    ca, context = _certificate(tmp_path, DOMAIN)
    mapped = ("198.51.100.11", 40000)
    async with FakeStunServer("answer", mapped) as a, FakeStunServer("answer", mapped) as b, \
            FakeXmppServer(context) as xmpp:  # fmt: skip
        report = await run_netcheck(_config(tmp_path, [a.endpoint, b.endpoint], [], xmpp.address, ca), 1.0)
    nat = {n.family: n for n in report.nat}
    assert nat["ipv4"].kind == "endpoint-independent", nat
    assert report.udp == "open"
    assert report.exit_status == 0, render_text(report)
    [check] = report.observations.xmpp
    assert check.tls == "valid", check
    # Loopback's route MTU is 65535: DF-set probes far beyond 1500 bytes are answered (a burst of 64 KiB
    # datagrams may overflow the fake's receive buffer, so not necessarily the very largest).
    assert all(m.mtu is not None and m.mtu > 9000 for m in report.observations.mtu), report.observations.mtu
    assert len(report.observations.mtu) == 2 and a.largest > 9000


async def test_a_nat_mapping_per_server_is_endpoint_dependent(tmp_path: Path) -> None:
    ca, context = _certificate(tmp_path, DOMAIN)
    async with FakeStunServer("answer", ("198.51.100.11", 40001)) as a, \
            FakeStunServer("answer", ("198.51.100.11", 40002)) as b, FakeXmppServer(context) as xmpp:  # fmt: skip
        report = await run_netcheck(_config(tmp_path, [a.endpoint, b.endpoint], [], xmpp.address, ca), 1.0)
    assert [n.kind for n in report.nat if n.family == "ipv4"] == ["endpoint-dependent"]


async def test_a_server_over_ipv6_is_asked_over_ipv6(tmp_path: Path) -> None:
    ca, context = _certificate(tmp_path, DOMAIN)
    try:
        server = FakeStunServer("answer", host="::1")
        await server.__aenter__()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    try:
        async with FakeXmppServer(context) as xmpp:
            report = await run_netcheck(_config(tmp_path, [server.endpoint], [], xmpp.address, ca), 1.0)
    finally:
        await server.__aexit__(None, None, None)
    [answer] = report.observations.bindings
    assert answer.family == "ipv6" and answer.mapped is not None and answer.mapped.startswith("[::1]:"), answer
    assert report.reached["ipv6"] == [f"stun {server.endpoint}"]
    # Our own address seen: no NAT over IPv6; and the v6 loopback's MTU found by DF-set probes.
    assert [n.kind for n in report.nat if n.family == "ipv6"] == ["none"]
    [mtu] = report.observations.mtu
    assert mtu.mtu is not None and mtu.mtu > 9000, mtu


async def test_bad_servers_are_named_with_their_reason_and_stall_nothing(tmp_path: Path) -> None:
    # The certificate names another domain: the XMPP check fails on the name.
    ca, context = _certificate(tmp_path, "other.test")
    timeout = 1.5
    async with FakeStunServer("answer") as good, FakeStunServer("garbage") as garbage, \
            FakeStunServer("silent") as silent, FakeStunServer("answer") as turn, \
            FakeStunServer("garbage") as garbage_turn, FakeXmppServer(context) as xmpp:  # fmt: skip
        config = _config(tmp_path, [good.endpoint, garbage.endpoint, silent.endpoint],
                         [turn.endpoint, garbage_turn.endpoint], xmpp.address, ca)  # fmt: skip
        started = time.monotonic()
        report = await run_netcheck(config, timeout)
        took = time.monotonic() - started
    text = render_text(report)
    verdicts = {v.subject: v for v in report.verdicts}
    assert verdicts[f"stun {good.endpoint}"].level == "ok", text
    assert "answered garbage" in verdicts[f"stun {garbage.endpoint}"].text, text
    assert "no answer within" in verdicts[f"stun {silent.endpoint}"].text, text
    assert verdicts[f"turn {turn.endpoint}"].level == "problem" and "401" in verdicts[f"turn {turn.endpoint}"].text
    assert turn.allocates == 2  # the first Allocate, then the retry with the realm and nonce
    assert "udp: answered garbage" in verdicts[f"turn {garbage_turn.endpoint}"].text, text
    xmpp_verdict = verdicts[f"xmpp 127.0.0.1:{xmpp.address[1]} (ov1)"]
    assert xmpp_verdict.level == "problem" and "Hostname mismatch" in xmpp_verdict.text, text
    assert report.exit_status == 1
    # The good server's round trip is its own, not the silent one's deadline; the whole run is one
    # deadline for the probes plus at most one for the path MTU, never one per bad server.
    good_answer = next(b for b in report.observations.bindings if b.name == f"stun {good.endpoint}")
    assert good_answer.rtt_ms is not None and good_answer.rtt_ms < 500
    assert took < 2 * timeout + 1.0, took


# -- the command line -----------------------------------------------------------------------------------


def test_a_config_that_cannot_be_read_is_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["netcheck", "--config", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.json" in err[0], err
    bad = tmp_path / "bad.json"
    bad.write_text('{"overlays": {"ov1": {"signal": {"jid": "a@b", "password": "x", "nope": 1}}}}')
    bad.chmod(0o600)
    assert main(["netcheck", "--config", str(bad)]) == 2
    assert "nope" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon", "61"])
def test_a_bad_timeout_is_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["netcheck", "--timeout", value])
    assert exited.value.code == 2
    assert "--timeout" in capsys.readouterr().err


def test_json_and_the_exit_status_from_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Nothing listens on these loopback ports: every server fails fast or at its deadline, status 1.
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"overlays": {"ov1": {
        "signal": {"jid": f"n@{DOMAIN}", "password": "pw", "server": "127.0.0.1", "port": 1},
        "nat_traversal": {"stun": ["127.0.0.1:9"]}}}}))  # fmt: skip
    config.chmod(0o600)
    assert main(["netcheck", "--config", str(config), "--json", "--timeout", "0.5"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is False
    assert {v["subject"] for v in document["verdicts"] if v["level"] == "problem"} == {"xmpp 127.0.0.1:1 (ov1)", "stun"}


async def test_a_probe_that_raises_what_it_did_not_expect_is_that_servers_verdict() -> None:
    from evio.netcheck.check import _or_error

    async def surprised() -> PathMtu:
        raise RuntimeError("a bug, or a library's surprise")

    got = await _or_error(surprised(), PathMtu("stun a", "203.0.113.10:3478", None, "unknown"), "how")
    assert got.how == "unexpected RuntimeError: a bug, or a library's surprise" and got.mtu is None
