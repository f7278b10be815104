"""Review21g G9 (low): a local user who can write the node's overlay CA file (or the directory of its trust files)
decides whom the node trusts, and `evio run` says nothing.

Attack: `secret_problems` refuses a config file that group or others may change ("it decides what evio runs as
root") and private keys and passwords others may read, but never looks at `trust.ca_file`, the member list beside
it, `signal.ca_file`, or the directories holding any of them. In trust mode the CA file is the whole anchor: a
local user who can write it appends a CA of their own, mints certificates for any node id and overlay address, and
this node then takes that user's tunnels, host claims, revocation and member lists as any member's (H2/H4's
protections all rest on it). A writable directory lets them replace node.key and node.crt as well.

Measured: with the files `evio join` writes (a real token from `add_member`), ca.crt, member-list.json, xmpp-ca.crt
and node.crt made 0666 and the overlay's directory 0777, `secret_problems` returned [] (nothing refused).

Fixed as proposed (the directory holding each file; its parents not). Proposed at the review: check trust anchors as the config file is checked (owned by root or the daemon's user, not writable
by group or others), and the directories of every file `secret_problems` checks (not writable by group or others
unless sticky and owned by root).
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from evio.config.loader import load_config
from evio.config.secrets import secret_problems
from evio.server import token as join_token
from evio.server.join import node_files
from evio.server.members import add_member
from evio.testing.fake_server import fake_server_host


def test_an_overlay_ca_file_others_may_change_is_refused(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    registry, settings, accounts, relay = fake_server_host(tmp_path / "server", now, address="203.0.113.10")
    token = join_token.decode(add_member(registry, settings, accounts, relay, "ov1", "node1", now).token, now)
    for file in node_files(token, tmp_path / "etc", tmp_path / "var"):
        file.path.parent.mkdir(parents=True, exist_ok=True)
        file.path.write_text(file.content)
        os.chmod(file.path, file.mode)
    config = tmp_path / "etc" / "config.json"
    assert secret_problems(config, load_config(config)) == []
    os.chmod(tmp_path / "etc" / "ov1" / "ca.crt", 0o666)
    problems = secret_problems(config, load_config(config))
    assert any("ca.crt" in problem for problem in problems), problems


def test_a_directory_others_may_change_is_refused_and_a_sticky_root_one_is_not(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    registry, settings, accounts, relay = fake_server_host(tmp_path / "server", now, address="203.0.113.10")
    token = join_token.decode(add_member(registry, settings, accounts, relay, "ov1", "node1", now).token, now)
    for file in node_files(token, tmp_path / "etc", tmp_path / "var"):
        file.path.parent.mkdir(parents=True, exist_ok=True)
        file.path.write_text(file.content)
        os.chmod(file.path, file.mode)
    config = tmp_path / "etc" / "config.json"
    os.chmod(tmp_path / "etc" / "ov1" / "member-list.json", 0o664)
    os.chmod(tmp_path / "etc" / "ov1", 0o777)
    problems = secret_problems(config, load_config(config))
    assert any("member-list.json" in p for p in problems) and any(p.startswith(f"{tmp_path / 'etc' / 'ov1'}:") for p in problems)
    os.chmod(tmp_path / "etc" / "ov1" / "member-list.json", 0o644)
    os.chmod(tmp_path / "etc" / "ov1", 0o1777)  # sticky and root's (we are root in CI; else owned by us)
    assert secret_problems(config, load_config(config)) == [] or os.geteuid() != 0
