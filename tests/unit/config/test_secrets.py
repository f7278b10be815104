"""Secrets (issue 9): owner and mode checked, bounded reads, never in a repr, never in a -vv log."""

from __future__ import annotations

import io
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from evio.config.loader import ConfigError, ConfigFileError, load_config, loads_config
from evio.config.model import LoggingConfig
from evio.config.secrets import FileCheckError, read_password_file, secret_problems
from evio.node.logs import configure_logging
from evio.node.plan import plan_node
from evio.tunnel.config import from_overlay_config
from evio.tunnel.path.offer_answer import IceParameters
from evio.tunnel.path.turn_credentials import rest_credentials

SECRET = "hunter2-the-password"
TURN_SECRET = "turn-master-secret-xyz"


def write(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def config_text(password_file: Path | None = None, inline: bool = False) -> str:
    signal: dict[str, object] = {"jid": "n1@overlay.test"}
    if inline:
        signal["password"] = SECRET
    else:
        signal["password_file"] = str(password_file)
    overlay = {
        "signal": signal,
        "nat_traversal": {"turn": [{"server": "turn.test:3478", "rest_secret": TURN_SECRET}]} if inline else {},
    }
    return json.dumps({"overlays": {"ov1": overlay}})


# -- bounded reads -----------------------------------------------------------------------------


def test_password_file_dev_zero_is_refused_not_read_until_memory_runs_out() -> None:
    # Before: readline() on /dev/zero never found a newline and grew without bound.
    with pytest.raises(FileCheckError, match="not a regular file"):
        read_password_file(Path("/dev/zero"))
    document = {"overlays": {"ov1": {"signal": {"jid": "a@b", "password_file": "/dev/zero"}}}}
    with pytest.raises(ConfigError) as caught:
        loads_config(json.dumps(document))
    assert any("/dev/zero: not a regular file" in p.reason for p in caught.value.problems)


def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pw.fifo"
    os.mkfifo(fifo)
    result: list[BaseException | str] = []
    reader = threading.Thread(target=lambda: _capture(result, lambda: read_password_file(fifo)), daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "blocked on a FIFO"
    assert isinstance(result[0], FileCheckError)


def _capture(into: list[BaseException | str], call: object) -> None:
    try:
        into.append(call())  # type: ignore[operator]
    except BaseException as exc:  # noqa: BLE001 - recorded for the test
        into.append(exc)


def test_huge_password_and_config_files_are_refused(tmp_path: Path) -> None:
    big = write(tmp_path / "pw", "x" * 10_000 + "\n", 0o600)
    with pytest.raises(FileCheckError, match="larger than 4096 bytes"):
        read_password_file(big)
    huge = write(tmp_path / "evio.json", " " * (2 << 20) + "{}", 0o600)
    with pytest.raises(ConfigFileError, match="larger than"):
        load_config(huge)


def test_password_file_first_line(tmp_path: Path) -> None:
    assert read_password_file(write(tmp_path / "pw", f"{SECRET}\r\nsecond line\n", 0o600)) == SECRET


# -- owner and mode ------------------------------------------------------------------------------


def test_group_or_world_readable_password_file_is_refused_naming_the_fix(tmp_path: Path) -> None:
    pw = write(tmp_path / "pw", SECRET + "\n", 0o644)
    cfg = write(tmp_path / "evio.json", config_text(pw), 0o644)
    problems = secret_problems(cfg, load_config(cfg))
    assert problems == [
        f"{pw}: permissions 0644 are too open: it holds a secret and must not be accessible by group or others; "
        f"fix: chmod 600 {pw}"
    ]
    pw.chmod(0o600)
    assert secret_problems(cfg, load_config(cfg)) == []  # a config without inline secrets may be 0644


def test_config_with_inline_secrets_must_be_private_and_nobody_else_may_write_any_config(tmp_path: Path) -> None:
    cfg = write(tmp_path / "evio.json", config_text(inline=True), 0o640)
    (problem,) = secret_problems(cfg, load_config(cfg))
    assert "holds passwords or TURN secrets inline" in problem and f"chmod 600 {cfg}" in problem
    cfg.chmod(0o600)
    assert secret_problems(cfg, load_config(cfg)) == []
    pw = write(tmp_path / "pw", SECRET + "\n", 0o600)
    shared = write(tmp_path / "shared.json", config_text(pw), 0o666)
    (problem,) = secret_problems(shared, load_config(shared))
    assert "let group or others change it" in problem and f"chmod go-w {shared}" in problem


def test_secret_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    pw = write(tmp_path / "pw", SECRET + "\n", 0o600)
    cfg = write(tmp_path / "evio.json", config_text(pw), 0o600)
    config = load_config(cfg)
    other = 4242 if os.geteuid() != 4242 else 4343
    if os.geteuid() == 0:
        os.chown(pw, other, -1)
        problems = secret_problems(cfg, config)
    else:  # as another user would see it: the file is ours, not theirs (nor root's)
        problems = secret_problems(cfg, config, euid=other)
    assert any("not by the user evio runs as" in p and "fix: chown" in p for p in problems)


def test_client_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    key = write(tmp_path / "client.key", "-----BEGIN PRIVATE KEY-----\n", 0o644)
    cert = write(tmp_path / "client.crt", "-----BEGIN CERTIFICATE-----\n", 0o644)
    document = {"overlays": {"ov1": {"signal": {"jid": "a@b", "client_cert": str(cert), "client_key": str(key)}}}}
    cfg = write(tmp_path / "evio.json", json.dumps(document), 0o600)
    from evio.config.loader import _build

    config = _build(document, tmp_path)  # skip the PEM checks: only the file's mode matters here
    (problem,) = secret_problems(cfg, config)
    assert str(key) in problem and "chmod 600" in problem


def test_turn_password_file_is_checked_as_the_signal_one_and_read_by_the_node(tmp_path: Path) -> None:
    pw = write(tmp_path / "pw", SECRET + "\n", 0o600)
    turn_pw = write(tmp_path / "turn.pw", "turn-pass\n", 0o640)
    document = {"overlays": {"ov1": {
        "signal": {"jid": "n1@overlay.test", "password_file": str(pw)},
        "nat_traversal": {"turn": [{"server": "turn.test:3478", "username": "evio", "password_file": str(turn_pw)},
                                   {"server": "rest.test:3478", "rest_secret": TURN_SECRET}]},
    }}}  # fmt: skip
    cfg = write(tmp_path / "evio.json", json.dumps(document), 0o600)
    (problem,) = secret_problems(cfg, load_config(cfg))
    assert problem.startswith(f"{turn_pw}: permissions 0640 are too open") and f"chmod 600 {turn_pw}" in problem
    turn_pw.chmod(0o600)
    assert secret_problems(cfg, load_config(cfg)) == []
    plan = plan_node(load_config(cfg), 1, controller_port=6653, kernel_module_loaded=False)
    relays = plan.overlays[0].tunnel.ice.turn
    assert [(r.host, r.username, r.password, r.secret) for r in relays] == [
        ("turn.test", "evio", "turn-pass", None), ("rest.test", None, None, TURN_SECRET)]
    assert "turn-pass" not in repr(plan)


def test_overlay_trust_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    pw = write(tmp_path / "pw", SECRET + "\n", 0o600)
    key = write(tmp_path / "node.key", "-----BEGIN PRIVATE KEY-----\n", 0o644)
    document = {"overlays": {"ov1": {"signal": {"jid": "a@b", "password_file": str(pw)},
                                     "trust": {"ca_file": "ca.crt", "cert_file": "node.crt", "key_file": str(key)}}}}
    cfg = write(tmp_path / "evio.json", json.dumps(document), 0o600)
    from evio.config.loader import _build

    (problem,) = secret_problems(cfg, _build(document, tmp_path))  # only the key's mode matters here
    assert problem.startswith(f"{key}: permissions 0644 are too open") and f"chmod 600 {key}" in problem


async def test_sighup_refuses_a_config_the_start_would_refuse(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from evio.cli.run_cmd import reload_config
    from evio.testing.node_fleet import Fleet, fleet_config

    fleet = Fleet(1)
    await fleet.start()
    try:
        cfg = write(tmp_path / "evio.json", json.dumps({"overlays": {"ov1": {
            "signal": {"jid": "node1@x.test", "password": SECRET}, "bridge": {"name": "evbr-ov1"}}}}), 0o644)
        with caplog.at_level(logging.ERROR):
            await reload_config(fleet.nodes[1], str(cfg), fleet_config(1), 6653, False)
        assert f"reload refused, the running config stays: {cfg}: permissions 0644 are too open" in caplog.text
        assert fleet.nodes[1].reloads == 0
    finally:
        await fleet.stop_all()


# -- never in a repr ------------------------------------------------------------------------------


def test_no_settings_object_prints_a_secret(tmp_path: Path) -> None:
    cfg = write(tmp_path / "evio.json", config_text(inline=True), 0o600)
    config = load_config(cfg)
    plan = plan_node(config, 1, controller_port=6653, kernel_module_loaded=False)
    tunnel = from_overlay_config(config.overlays["ov1"])
    credentials = rest_credentials(TURN_SECRET, "user", 0.0)
    ice = IceParameters("abcd", "p" * 22, ())
    for thing in (config, plan, plan.accounts[0].settings, tunnel, tunnel.ice, credentials, ice):
        text = repr(thing)
        assert SECRET not in text and TURN_SECRET not in text and credentials.password not in text, type(thing)
        assert "p" * 22 not in text


# -- never in a -vv log -------------------------------------------------------------------------


@pytest.fixture
def debug_log() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    configure_logging(LoggingConfig(level="debug"), verbose=2)
    root.handlers[0].setStream(stream)  # type: ignore[attr-defined]
    try:
        yield stream
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])


def test_debug_logs_of_raw_stanzas_carry_no_sasl_or_ice_credentials(debug_log: io.StringIO) -> None:
    # What slixmpp logs at DEBUG for every stanza (its "SEND"/"RECV" lines).
    raw = logging.getLogger("slixmpp.xmlstream.xmlstream")
    raw.debug("SEND: %s", '<auth xmlns="urn:ietf:params:xml:ns:xmpp-sasl" mechanism="PLAIN">AG4xAGh1bnRlcjI=</auth>')
    raw.debug("SEND: %s", '<response xmlns="urn:ietf:params:xml:ns:xmpp-sasl">Yz1iaXdzLHI9cHJvb2Y=</response>')
    offer = json.dumps({"direct": {"ufrag": "abcd", "pwd": "icepasswordicepassword22", "candidates": []}})
    raw.debug("RECV: %s", f'<message><evio xmlns="urn:x-evio:signal:1">{offer}</evio></message>')
    text = debug_log.getvalue()
    assert "SEND" in text and "RECV" in text  # still logged ...
    for secret in ("AG4xAGh1bnRlcjI=", "Yz1iaXdzLHI9cHJvb2Y=", "icepasswordicepassword22"):
        assert secret not in text  # ... without the credentials
