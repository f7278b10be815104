"""`evio join`: what it writes, what it refuses, and the systemd path (systemctl and the daemon faked)."""

from __future__ import annotations

import datetime
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from evio.cli import join_cmd, main
from evio.server.members import add_member
from evio.server.token import decode
from evio.signal.errors import PasswordChangeError
from evio.testing.fake_server import FakeAccounts, fake_server_host


@pytest.fixture
def accounts() -> FakeAccounts:
    return FakeAccounts()


@pytest.fixture
def token(tmp_path: Path, accounts: FakeAccounts) -> str:
    now = datetime.datetime.now(datetime.UTC)
    registry, settings, _, relay = fake_server_host(tmp_path / "server", now, address="203.0.113.10")
    return add_member(registry, settings, accounts, relay, "ov1", "node1", now).token


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, accounts: FakeAccounts) -> Path:
    etc = tmp_path / "etc-evio"
    monkeypatch.setattr(join_cmd, "_change_password", accounts.change_password)  # the XMPP server's side
    monkeypatch.setattr(join_cmd, "CONFIG_DIR", etc)
    monkeypatch.setattr(join_cmd, "STATE_DIR", tmp_path / "var-lib-evio")
    monkeypatch.setattr(join_cmd, "SYSTEMD_RUN_DIR", tmp_path / "no-systemd")
    monkeypatch.setattr(join_cmd, "_open_vswitch_problems", lambda: [])
    monkeypatch.setattr(join_cmd.os, "geteuid", lambda: 0)
    return etc


def test_join_writes_private_files_and_prints_the_command_without_systemd(
    node: Path, token: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["join", token]) == 0
    out = capsys.readouterr().out
    assert f"evio run --config {node / 'config.json'}" in out
    for name in ("config.json", "ov1/xmpp.password", "ov1/turn.password", "ov1/node.key"):
        assert stat.S_IMODE((node / name).stat().st_mode) == 0o600, name
    assert '"password":' not in (node / "config.json").read_text()  # secrets live in files beside it


def test_the_join_spends_the_token_and_a_second_use_changes_nothing(
    node: Path, token: str, accounts: FakeAccounts, capsys: pytest.CaptureFixture[str]
) -> None:
    """Decision 0083: the node's password is its own, not the token's; the token's no longer logs in."""
    from_token = decode(token, datetime.datetime.now(datetime.UTC)).xmpp_password
    assert main(["join", token]) == 0
    kept = (node / "ov1" / "xmpp.password").read_text().strip()
    assert accounts.accounts["node1"] == kept != from_token and len(kept) >= 32
    before = {p: p.read_bytes() for p in node.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["join", token, "--force"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "used already" in err and "nothing was written" in err, err
    assert {p: p.read_bytes() for p in node.rglob("*") if p.is_file()} == before
    assert accounts.accounts["node1"] == kept


def test_a_server_that_does_not_answer_leaves_nothing_and_the_token_good(
    node: Path, token: str, accounts: FakeAccounts, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def silent(*_args: Any) -> None:
        raise PasswordChangeError("no answer from 203.0.113.10:5222 within 30 s")

    monkeypatch.setattr(join_cmd, "_change_password", silent)
    assert main(["join", token]) == 1
    assert "run evio join again once the XMPP server answers" in capsys.readouterr().err
    assert not node.exists()
    monkeypatch.setattr(join_cmd, "_change_password", accounts.change_password)
    assert main(["join", token]) == 0


@pytest.mark.parametrize("mangle", [lambda t: t[:-8], lambda t: t.replace(".", "", 1), lambda t: "x" + t])
def test_a_bad_token_is_one_line_and_nothing_written(
    node: Path, token: str, mangle: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["join", mangle(token)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("evio join: ")
    assert not node.exists()


def test_an_existing_config_is_kept_unless_forced(node: Path, token: str, capsys: pytest.CaptureFixture[str]) -> None:
    node.mkdir()
    (node / "config.json").write_text('{"overlays": {}}')
    assert main(["join", token]) == 1
    assert "pass --force" in capsys.readouterr().err
    assert (node / "config.json").read_text() == '{"overlays": {}}'
    assert main(["join", token, "--force"]) == 0


def test_a_forced_join_that_fails_puts_back_the_files_it_replaced(
    node: Path, token: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["join", token]) == 0
    before = {p: p.read_bytes() for p in node.rglob("*") if p.is_file()}
    (node / "ov1" / "node.key").write_text("the key this node holds\n")
    before[node / "ov1" / "node.key"] = b"the key this node holds\n"
    capsys.readouterr()

    def refused(*_args: Any) -> list[str]:
        return ["the secret files are not the daemon's own"]

    monkeypatch.setattr("evio.config.secrets.secret_problems", refused)
    assert main(["join", token, "--force"]) == 1
    assert "none kept" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in node.rglob("*") if p.is_file()} == before  # nothing lost, nothing left


def test_open_vswitch_missing_stops_before_anything_is_written(
    node: Path, token: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(join_cmd, "_open_vswitch_problems", lambda: ["cannot reach OVSDB; start Open vSwitch"])
    assert main(["join", token]) == 1
    assert "nothing was written" in capsys.readouterr().err
    assert not node.exists()


def test_with_systemd_the_service_is_enabled_started_and_waited_for(
    node: Path, token: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "systemd").mkdir()
    monkeypatch.setattr(join_cmd, "SYSTEMD_RUN_DIR", tmp_path / "systemd")
    calls: list[list[str]] = []
    monkeypatch.setattr(
        join_cmd.subprocess, "run", lambda argv, **_: calls.append(argv) or subprocess.CompletedProcess(argv, 0, "", "")
    )
    answers = iter([
        {"overlays": {"ov1": {"signal": {"connected": False}, "links": []}}},
        {"overlays": {"ov1": {"signal": {"connected": True, "jid": "node1@x"}, "peers": {"a": "b"}, "links": [{"state": "up"}]}}},
    ])  # fmt: skip
    monkeypatch.setattr("evio.node.control_client.fetch_status", lambda *_a, **_k: next(answers))
    assert main(["join", token, "--wait", "10"]) == 0
    assert calls == [["systemctl", "enable", "evio.service"], ["systemctl", "restart", "evio.service"]]
    assert "linked: 1 link(s) up" in capsys.readouterr().out
