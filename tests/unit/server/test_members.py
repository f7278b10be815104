"""The member registry and join tokens (evio.server.members, evio.server.token, evio.server.join), over fakes."""

from __future__ import annotations

import base64
import datetime
import json
import stat
from pathlib import Path

import pytest

from evio.config import loads_config
from evio.server import token as join_token
from evio.server.join import config_document, node_files
from evio.server.members import MemberError, Registry, add_member, list_members, remove_member
from evio.server.settings import ServerSettings
from evio.testing.fake_server import FakeAccounts, FakeRelay, fake_server_host

NOW = datetime.datetime(2026, 11, 27, 20, 0, tzinfo=datetime.UTC)


@pytest.fixture
def server(tmp_path: Path) -> tuple[Registry, ServerSettings, FakeAccounts, FakeRelay]:
    return fake_server_host(tmp_path, NOW)


def test_add_makes_every_part_and_a_token_that_decodes(server: tuple) -> None:
    registry, settings, accounts, relay = server
    added = add_member(registry, settings, accounts, relay, "ov1", "node1", NOW)
    assert added.created_overlay and added.member.address == "10.254.0.1/16"
    assert "node1" in accounts.accounts and accounts.groups["ov1"] == {"node1"} and "node1" in relay.users
    token = join_token.decode(added.token, NOW, added.ca_fingerprint)
    assert token.node_id == added.member.node_id and token.jid == "node1@xmpp.example.net"
    assert token.xmpp_password == accounts.accounts["node1"] and token.turn_password == relay.users["node1"]
    assert token.turn_server == "203.0.113.1:3478" and token.stun == ("203.0.113.1:3478",)
    key_file = registry.overlay_dir("ov1") / "ca.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_addresses_and_ids_are_never_handed_out_twice_and_come_back_on_remove(server: tuple) -> None:
    registry, settings, accounts, relay = server
    first = [add_member(registry, settings, accounts, relay, "ov1", f"n{i}", NOW).member for i in range(3)]
    assert [m.address for m in first] == ["10.254.0.1/16", "10.254.0.2/16", "10.254.0.3/16"]
    assert len({m.node_id for m in first}) == 3
    remove_member(registry, accounts, relay, "ov1", "n1")
    assert "n1" not in accounts.accounts and "n1" not in relay.users and "n1" not in accounts.groups["ov1"]
    again = add_member(registry, settings, accounts, relay, "ov1", "n9", NOW).member
    assert again.address == "10.254.0.2/16"


def test_a_name_is_one_member_per_server(server: tuple) -> None:
    registry, settings, accounts, relay = server
    add_member(registry, settings, accounts, relay, "ov1", "node1", NOW)
    with pytest.raises(MemberError, match="already a member of overlay ov1"):
        add_member(registry, settings, accounts, relay, "ov2", "node1", NOW)


@pytest.mark.parametrize("name", ["", "Node1", "-x", "a" * 33, "a b", "a@b", "a/b"])
def test_bad_names_are_refused_before_anything_is_made(server: tuple, name: str) -> None:
    registry, settings, accounts, relay = server
    with pytest.raises(MemberError, match="not a member name"):
        add_member(registry, settings, accounts, relay, "ov1", name, NOW)
    assert not accounts.accounts and registry.overlays() == []


def test_a_failed_step_undoes_the_ones_before(server: tuple) -> None:
    registry, settings, accounts, relay = server
    add_member(registry, settings, accounts, relay, "ov1", "node1", NOW)
    accounts.fail_group = True
    with pytest.raises(RuntimeError):
        add_member(registry, settings, accounts, relay, "ov1", "node2", NOW)
    assert set(accounts.accounts) == {"node1"} and set(relay.users) == {"node1"}
    record = registry.load("ov1")
    assert record is not None and set(record.members) == {"node1"}


def test_a_full_pool_says_so(server: tuple) -> None:
    registry, settings, accounts, relay = server
    add_member(registry, settings, accounts, relay, "ov1", "a", NOW, pool="10.9.0.0/30")
    add_member(registry, settings, accounts, relay, "ov1", "b", NOW)
    with pytest.raises(MemberError, match="is full"):
        add_member(registry, settings, accounts, relay, "ov1", "c", NOW)
    assert "c" not in accounts.accounts


def test_list_shows_who_is_online(server: tuple) -> None:
    registry, settings, accounts, relay = server
    for name in ("a", "b"):
        add_member(registry, settings, accounts, relay, "ov1", name, NOW)
    accounts.online = {"b"}
    rows = list_members(registry, accounts)
    assert [(r.member.name, r.online) for r in rows] == [("a", False), ("b", True)]


def _token(server: tuple) -> str:
    registry, settings, accounts, relay = server
    return add_member(registry, settings, accounts, relay, "ov1", "node1", NOW).token


def test_an_expired_token_says_when_and_what_to_do(server: tuple) -> None:
    with pytest.raises(join_token.TokenError, match="expired at 2026-11-28 20:00 UTC.*evio member remove node1"):
        join_token.decode(_token(server), NOW + datetime.timedelta(days=1, seconds=1))


def test_a_token_cut_short_or_mangled_is_refused(server: tuple) -> None:
    text = _token(server)
    for bad in (text[: len(text) // 2], text[:-5], text.replace(".", "", 1), "hello", "evio2.a.b", text + "!"):
        with pytest.raises(join_token.TokenError):
            join_token.decode(bad, NOW)


def test_a_token_edited_after_signing_is_refused(server: tuple) -> None:
    prefix, body, signature = _token(server).split(".")
    import zlib

    payload = json.loads(zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))
    payload["signal"]["server"] = "192.0.2.66"  # a man in the middle's server
    forged = base64.urlsafe_b64encode(zlib.compress(json.dumps(payload).encode())).rstrip(b"=").decode()
    with pytest.raises(join_token.TokenError, match="signature does not verify"):
        join_token.decode(f"{prefix}.{forged}.{signature}", NOW)


def test_a_pasted_token_with_line_breaks_still_decodes(server: tuple) -> None:
    text = _token(server)
    wrapped = "\n".join(text[i : i + 76] for i in range(0, len(text), 76)) + "\n"
    assert join_token.decode(wrapped, NOW).node_name == "node1"


def test_the_ca_pin_is_checked(server: tuple) -> None:
    with pytest.raises(join_token.TokenError, match="not the sha256:00"):
        join_token.decode(_token(server), NOW, "sha256:" + "00" * 32)


def test_the_node_files_make_a_config_the_daemon_takes(server: tuple, tmp_path: Path) -> None:
    token = join_token.decode(_token(server), NOW)
    files = node_files(token, tmp_path / "etc", tmp_path / "state")
    assert files[-1].path == tmp_path / "etc" / "config.json"
    modes = {f.path.name: f.mode for f in files}
    assert modes["xmpp.password"] == modes["turn.password"] == modes["node.key"] == modes["config.json"] == 0o600
    for f in files:
        f.path.parent.mkdir(parents=True, exist_ok=True)
        f.path.write_text(f.content)
    config = loads_config(files[-1].content, tmp_path)
    overlay = config.overlays["ov1"]
    assert overlay.trust is not None and str(overlay.bridge.address) == "10.254.0.1/16"
    assert config.node.id == token.node_id


def test_a_long_overlay_id_gets_a_bridge_name_that_fits(server: tuple, tmp_path: Path) -> None:
    registry, settings, accounts, relay = server
    added = add_member(registry, settings, accounts, relay, "a-very-long-overlay", "n1", NOW)
    doc = config_document(join_token.decode(added.token, NOW), tmp_path, tmp_path)
    assert len(doc["overlays"]["a-very-long-overlay"]["bridge"]["name"]) <= 15
