"""Review21g G2: a hostile join token's overlay id is a path: `evio join` (root) overwrites, then deletes, files of
its choosing outside /etc/evio.

Attack: a token is checked against the CA inside it (unless `--ca-fingerprint` pins one), so whoever hands an
operator a token chooses every field. `token._from_payload` takes `overlay` as any string, and `join.node_files`
puts the overlay's files at `CONFIG_DIR / token.overlay`: an overlay of `../victim` (or an absolute path such as
`/usr/local/share/ca-certificates`) names another directory. `_write_files` opens xmpp.password, turn.password,
node.key, xmpp-ca.crt, ca.crt and node.crt there with O_TRUNC and writes the token's contents; only then does the
daemon's config loader refuse the overlay id, and the rollback *unlinks* every file it wrote, including the ones
that existed before.

Measured: with `victim/node.key` and `victim/ca.crt` present, `evio join` of a token for overlay `../victim`
(its own CA, a node certificate naming that overlay) printed "the config made from the token is refused" and
exited 1, and both files were gone (overwritten with the token's, then removed). Nothing else is needed: no
--force, no existing config.

Fixed: `token.decode` refuses an overlay that is not an overlay id (`members.check_overlay`'s pattern:
1-32 of A-Z a-z 0-9 _ -) and checks the other fields that become names or config (node name, jid) before
anything is written; `_write_files` creates each file with O_EXCL (or writes to a temporary name and renames) and
its rollback removes only what it created, never a file that was there.
"""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from evio.cli import join_cmd, main
from evio.server import token as join_token
from evio.server.members import add_member
from evio.testing.fake_server import fake_server_host
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca


def test_a_token_whose_overlay_is_a_path_leaves_files_outside_etc_evio_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    now = datetime.datetime.now(datetime.UTC)
    registry, settings, accounts, relay = fake_server_host(tmp_path / "server", now, address="203.0.113.10")
    honest = join_token.decode(add_member(registry, settings, accounts, relay, "ov1", "node1", now).token, now)
    overlay = "../victim"
    ca_key, ca = make_overlay_ca("hostile", now, 30)
    key, cert = issue_node_certificate(ca_key, ca, [overlay], honest.node_id, now, 30)
    pem = serialization.Encoding.PEM
    hostile = join_token.encode(dataclasses.replace(
        honest, overlay=overlay, member_list="", ca_pem=ca.public_bytes(pem).decode(),
        cert_pem=cert.public_bytes(pem).decode(),
        key_pem=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode(),
    ), ca_key)  # fmt: skip
    etc = tmp_path / "etc-evio"
    etc.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "node.key").write_text("someone else's key\n")
    (victim / "ca.crt").write_text("someone else's CA\n")
    monkeypatch.setattr(join_cmd, "CONFIG_DIR", etc)
    monkeypatch.setattr(join_cmd, "STATE_DIR", tmp_path / "var-lib-evio")
    monkeypatch.setattr(join_cmd, "SYSTEMD_RUN_DIR", tmp_path / "no-systemd")
    monkeypatch.setattr(join_cmd, "_open_vswitch_problems", lambda: [])
    monkeypatch.setattr(join_cmd.os, "geteuid", lambda: 0)

    assert main(["join", hostile]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("evio join: ")
    assert (victim / "node.key").read_text() == "someone else's key\n"
    assert (victim / "ca.crt").read_text() == "someone else's CA\n"
