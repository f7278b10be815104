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

Suggested fix: refuse, as `load_revocations` does, when the file exists but does not verify; and never go below
what was issued: e.g. the serial at least the issue time in seconds (`issued`), so a restored or lost file cannot
step back.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from evio.server.members import MEMBER_LIST_FILE, MemberError, add_member, read_member_list
from evio.testing.fake_server import fake_server_host

NOW = datetime.datetime(2026, 11, 29, 1, 0, tzinfo=datetime.UTC)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="review21q Q4: the serial restarts at 1")
def test_a_damaged_member_list_does_not_restart_its_serial(tmp_path: Path) -> None:
    registry, settings, accounts, relay = fake_server_host(tmp_path, NOW)
    add_member(registry, settings, accounts, relay, "ov1", "node1", NOW)
    add_member(registry, settings, accounts, relay, "ov1", "node2", NOW)
    held = read_member_list(registry, "ov1")
    assert held is not None and held.serial == 2  # what every node holds now
    path = registry.overlay_dir("ov1") / MEMBER_LIST_FILE
    path.write_text(path.read_text()[: len(path.read_text()) // 2])  # damaged (or an older backup put back)
    try:
        add_member(registry, settings, accounts, relay, "ov1", "node3", NOW + datetime.timedelta(minutes=1))
    except MemberError:
        return  # refused with a clear error: nothing lost
    listed = read_member_list(registry, "ov1")
    assert listed is not None
    print(f"nodes hold serial {held.serial}; node3 added with a list of serial {listed.serial}")
    assert listed.serial > held.serial, "the nodes ignore this list: node3 is refused everywhere"
