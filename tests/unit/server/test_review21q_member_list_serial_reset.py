"""Review21q Q4 (low): a member-list.json the server host cannot read restarts the list's serial at 1, and every
node then ignores every list after it, silently.

Attack (no attacker: a damaged or restored file on the server host): `write_member_list` takes the next serial from
`member-list.json` and falls back to 1 when the file is missing *or unreadable* (`except (OSError,
IdentityError)`), and so does `read_member_list` (None). Nodes adopt a member list only with a higher serial than
the one they hold (`SignalEndpoint._adopt_members`: `ml.serial <= current.serial` returns False, neither counted nor
logged). So after a truncated file, an operator's hand edit or a restore from an older backup, `evio member add`
prints a token and exits 0, and every running node ignores the new list (and the token's list, too: same serial
rule) until the serial climbs past the old one: the new member is refused everywhere, in links mode (decision
0059) where the list is the membership. `revoked.json` is handled the other way (`load_revocations` raises
MemberError: "cannot read the revocation list"), and its serial has the same restore problem.

Measured: two members added (serial 2), the file truncated to half, a third added: its list was written with
serial 1 and `evio member add` succeeded.

Fixed: `read_member_list` refuses a file that is there but does not load, naming it and what is wrong
(MemberError, as `load_revocations`), and `evio member add` and `remove` read it before they change anything; a
node counts a list (or change) whose serial is below the one it holds, or equal with other contents, as the drop
`stale_list` in its status, instead of ignoring it silently. Not done: a restore from an older (intact) backup still
steps the serial back; the nodes now count it.

Suggested fix: refuse, as `load_revocations` does, when the file exists but does not verify; and never go below
what was issued: e.g. the serial at least the issue time in seconds (`issued`), so a restored or lost file cannot
step back.
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

import pytest

from evio.cli import member_cmd
from evio.server.members import (
    MEMBER_LIST_FILE,
    MemberError,
    add_member,
    read_member_list,
    remove_member,
    revocation_path,
)
from evio.signal import member_list
from evio.signal.endpoint import OverlayIdentity
from evio.testing.fake_server import fake_server_host
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

NOW = datetime.datetime(2026, 11, 29, 1, 0, tzinfo=datetime.UTC)


def _damaged(tmp_path: Path) -> tuple:
    """A server host with node1 and node2 in ov1 (member list serial 2), whose member-list.json was cut in half."""
    registry, settings, accounts, relay = fake_server_host(tmp_path, NOW)
    add_member(registry, settings, accounts, relay, "ov1", "node1", NOW)
    add_member(registry, settings, accounts, relay, "ov1", "node2", NOW)
    held = read_member_list(registry, "ov1")
    assert held is not None and held.serial == 2  # what every node holds now
    path = registry.overlay_dir("ov1") / MEMBER_LIST_FILE
    path.write_text(path.read_text()[: len(path.read_text()) // 2])  # damaged (or a hand edit gone wrong)
    return registry, settings, accounts, relay, path


def test_a_damaged_member_list_does_not_restart_its_serial(tmp_path: Path) -> None:
    registry, settings, accounts, relay, path = _damaged(tmp_path)
    before = (path.read_bytes(), registry.load("ov1"), dict(accounts.accounts), dict(relay.users))
    with pytest.raises(MemberError, match=f"{path}: cannot read the member list: not JSON") as refused:
        add_member(registry, settings, accounts, relay, "ov1", "node3", NOW + datetime.timedelta(minutes=1))
    print(f"evio member add: {refused.value}")
    assert (path.read_bytes(), registry.load("ov1"), dict(accounts.accounts), dict(relay.users)) == before
    revoked = revocation_path(registry, "ov1")
    with pytest.raises(MemberError, match="cannot read the member list"):
        remove_member(registry, accounts, relay, "ov1", "node2", now=NOW, domain=settings.domain)
    assert (path.read_bytes(), registry.load("ov1"), dict(accounts.accounts), dict(relay.users)) == before
    assert not revoked.exists()  # nothing revoked either


def test_the_command_says_so_and_exits_non_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    registry, settings, accounts, relay, path = _damaged(tmp_path)
    monkeypatch.setattr(member_cmd, "_services", lambda _: (settings, accounts, relay))
    args = argparse.Namespace(state_dir=registry.state_dir, overlay="ov1", name="node3", pool=None, expires=None,
                              token_file=None)  # fmt: skip
    assert member_cmd.add_command(args) != 0
    out = capsys.readouterr()
    assert out.out == "" and str(path) in out.err and "cannot read the member list" in out.err
    assert "node3" not in registry.load("ov1").members


def test_a_node_counts_a_list_whose_serial_went_back() -> None:
    """A server host whose serial went back (a restored file): the node keeps its list, and says why."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert = make_overlay_ca("ov1 CA", now, 3650)
    key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], 5, now, 30)
    held = member_list.sign_members(ca_key, "ov1", 2, int(time.time()), {5: "a@x.test", 6: "b@x.test"})
    ident = OverlayIdentity(TrustAnchor("ov1", (ca_cert,)), cert, key, members=held, member_file=None)
    client = FakeSignalHub(VirtualClock()).client("a@x.test", {"ov1": 5}, identities={"ov1": ident})
    client._members_message("x.test", member_list.to_text(held))  # the same list again: nothing to say
    assert client.drop_counts() == {}
    back = member_list.sign_members(ca_key, "ov1", 1, int(time.time()), {5: "a@x.test", 7: "c@x.test"})
    client._members_message("x.test", member_list.to_text(back))  # from the server host
    assert client.receive_member_list(member_list.to_text(back), "/etc/evio/ov1/member-list.json") is False
    other = member_list.sign_members(ca_key, "ov1", 2, int(time.time()), {5: "a@x.test", 7: "c@x.test"})
    assert client.receive_member_list(member_list.to_text(other), "x.test") is False  # same serial, other members
    assert client.listed_members("ov1") == held and client.drop_counts() == {"stale_list": 3}
