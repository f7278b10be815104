"""The member list in the join token (decision 0063): a node added while the overlay runs starts with the list
that names it, written beside its CA by `evio join`; the members online get it from the server host."""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path

import pytest

from evio.config.model import TrustConfig
from evio.node.plan import overlay_identity
from evio.server import token as join_token
from evio.server.join import node_files
from evio.server.members import LIST_SEEDS, Registry, add_member, remove_member
from evio.signal import member_list
from evio.testing.fake_server import fake_server_host
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.overlay_ca import make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

NOW = datetime.datetime(2026, 11, 28, 9, 0, tzinfo=datetime.UTC)


def test_each_token_carries_the_list_that_names_its_member_and_join_writes_it_beside_the_ca(tmp_path: Path) -> None:
    registry, settings, accounts, relay = fake_server_host(tmp_path / "host", NOW)
    for name in ("n1", "n2"):
        add_member(registry, settings, accounts, relay, "ov1", name, NOW)
    added = add_member(registry, settings, accounts, relay, "ov1", "n3", NOW)
    tok = join_token.decode(added.token, NOW)
    listed = member_list.load(tok.member_list)
    assert listed.serial == 3 and listed.accounts() == {
        f"{m.name}@{settings.domain}": m.node_id for m in registry.load("ov1").members.values()  # type: ignore[union-attr]
    }
    assert tok.member_list == (registry.overlay_dir("ov1") / "member-list.json").read_text()
    files = {f.path.name: f for f in node_files(tok, tmp_path / "etc", tmp_path / "var")}
    assert files["member-list.json"].path.parent == files["ca.crt"].path.parent
    assert files["member-list.json"].mode == 0o644 and files["member-list.json"].content == tok.member_list
    # What the daemon makes of those files: the list as the overlay's membership, from the start.
    for f in files.values():
        f.path.parent.mkdir(parents=True, exist_ok=True)
        f.path.write_text(f.content)
    d = files["ca.crt"].path.parent
    trust = TrustConfig(ca_file=d / "ca.crt", cert_file=d / "node.crt", key_file=d / "node.key")
    anchor = TrustAnchor.from_file("ov1", d / "ca.crt")
    ident = overlay_identity("ov1", anchor, TunnelCertificate.from_files(d / "node.crt", d / "node.key"), trust)
    assert ident.members == listed and ident.member_file == d / "member-list.json"


def test_the_server_host_hands_each_new_list_to_the_members_online(tmp_path: Path) -> None:
    registry, settings, accounts, relay = fake_server_host(tmp_path, NOW)
    add_member(registry, settings, accounts, relay, "ov1", "n1", NOW)
    add_member(registry, settings, accounts, relay, "ov1", "n2", NOW)
    remove_member(registry, accounts, relay, "ov1", "n1", now=NOW, domain=settings.domain)
    sent = [(g, e, t) for g, ns, e, t in accounts.delivered if ns == member_list.NAMESPACE]
    assert [(g, e) for g, e, _ in sent] == [("ov1", "members")] * 3
    # The first list whole (there is none before it); then a change of the one before to most members, and the
    # whole list to the first few online, which flood it over the overlay (decision 0065).
    first = member_list.load(sent[0][2])
    assert first.serial == 1 and list(first.members.values()) == ["n1@" + settings.domain]
    lists = {1: first}
    for (_, _, text), (_, _, _, whole, seeds) in zip(sent[1:], accounts.seeded, strict=True):
        change, listed = member_list.load_change(text), member_list.load(whole)
        assert seeds == LIST_SEEDS and change.serial == listed.serial and change.base == listed.serial - 1
        assert member_list.apply_change(lists[change.base], change) == listed
        lists[listed.serial] = listed
    assert sorted(lists) == [1, 2, 3] and list(lists[3].members.values()) == ["n2@" + settings.domain]


def _token_with(registry: Registry, tok: join_token.JoinToken, text: str) -> str:
    ca_key, _ = registry.ca("ov1")
    return join_token.encode(dataclasses.replace(tok, member_list=text), ca_key)


def test_a_token_whose_list_is_not_the_ca_s_or_leaves_its_member_out_is_refused(tmp_path: Path) -> None:
    registry, settings, accounts, relay = fake_server_host(tmp_path, NOW)
    add_member(registry, settings, accounts, relay, "ov1", "n1", NOW)
    tok = join_token.decode(add_member(registry, settings, accounts, relay, "ov1", "n2", NOW).token, NOW)
    ca_key, _ = registry.ca("ov1")
    other_key, _ = make_overlay_ca("another CA", NOW, 3650)
    held = member_list.load(tok.member_list)
    forged = member_list.to_text(member_list.sign_members(other_key, "ov1", 9, 0, held.members))
    without = {n: a for n, a in held.members.items() if n != tok.node_id}
    left_out = member_list.to_text(member_list.sign_members(ca_key, "ov1", 9, 0, without))
    for text, message in ((forged, "not signed by the overlay CA"), ("{", "not a member list"),
                          (left_out, f"does not list {tok.jid}")):  # fmt: skip
        with pytest.raises(join_token.TokenError, match=message):
            join_token.decode(_token_with(registry, tok, text), NOW)


def test_a_token_without_a_list_still_joins_as_before(tmp_path: Path) -> None:
    registry, settings, accounts, relay = fake_server_host(tmp_path, NOW)
    tok = join_token.decode(add_member(registry, settings, accounts, relay, "ov1", "n1", NOW).token, NOW)
    old = dataclasses.replace(tok, member_list="")
    assert "members" not in old.payload()["trust"]
    again = join_token.decode(join_token.encode(old, registry.ca("ov1")[0]), NOW)
    assert again.member_list == "" and "member-list.json" not in {f.path.name for f in node_files(again)}
    assert json.loads(tok.member_list)["overlay"] == "ov1"
