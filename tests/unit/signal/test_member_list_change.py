"""A change to the overlay CA's member list from the server host (decision 0065): about 250 bytes whatever the
overlay's size, applied to the list held and adopted only if the CA signed the whole list it makes; from
anyone but the server host, malformed, not of the list held, or not the CA's, dropped and counted."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import pytest

from evio.signal import endpoint as mod
from evio.signal import identity, member_list
from evio.signal.endpoint import OverlayIdentity
from evio.signal.events import MemberListAdopted
from evio.testing.fake_signal import FakeSignalClient, FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

NOW = datetime.datetime.now(datetime.UTC)
CA_KEY, CA_CERT = make_overlay_ca("ov1 CA", NOW, 3650)
BIG = {n: f"m{n}@x.test" for n in range(1, 1001)}


def _list(serial: int, members: dict[int, str], key: identity.CaKey = CA_KEY) -> member_list.MemberList:
    return member_list.sign_members(key, "ov1", serial, int(time.time()), members)


def test_a_change_is_small_whatever_the_overlay_and_makes_exactly_the_list_the_ca_signed() -> None:
    old = _list(7, BIG)
    added = _list(8, {**BIG, 5000: "new@x.test"})
    removed = _list(9, {n: a for n, a in added.members.items() if n != 3})
    for before, after in ((old, added), (added, removed)):
        text = member_list.change_to_text(member_list.change_between(before, after))
        assert len(text) < 300 < len(member_list.to_text(after)) // 200  # the whole list: about 70 KB
        made = member_list.apply_change(before, member_list.load_change(text))
        assert made == after and member_list.refusal(TrustAnchor("ov1", (CA_CERT,)), made) is None
    moved = _list(10, {**removed.members, 4: "other@x.test"})  # an id given another account: out, then in
    change = member_list.change_between(removed, moved)
    assert change.removed == (4,) and dict(change.added) == {4: "other@x.test"}
    assert member_list.apply_change(removed, change) == moved
    with pytest.raises(identity.IdentityError, match="not of the list held"):
        member_list.apply_change(old, member_list.change_between(added, removed))


@pytest.mark.parametrize("edit, reason", [
    (lambda d: {**d, "base": d["serial"]}, "below its serial"),
    (lambda d: {**d, "add": [["zz", "a@x.test"]]}, "bad node id"),
    (lambda d: {**d, "add": [[f"{5:032x}", "a@x.test"], [f"{5:032x}", "b@x.test"]]}, "twice"),
    (lambda d: {**d, "remove": [f"{3:032x}", f"{3:032x}"]}, "twice"),
    (lambda d: {**d, "remove": "x"}, "lists"),
    (lambda d: {**d, "extra": 1}, "expected an object"),
    (lambda d: {**d, "add": [[f"{n:032x}", f"a{n}@x.test"] for n in range(100)]}, "at most 4096 bytes"),
])  # fmt: skip
def test_a_malformed_or_oversize_change_is_refused_with_the_reason(edit: object, reason: str) -> None:
    good = json.loads(member_list.change_to_text(member_list.change_between(_list(1, {1: "a@x.test"}),
                                                                            _list(2, {1: "a@x.test", 2: "b@x.test"}))))
    with pytest.raises(identity.IdentityError, match=reason):
        member_list.load_change(json.dumps(edit(good)))  # type: ignore[operator]


def _client(tmp_path: Path, held: member_list.MemberList) -> FakeSignalClient:
    key, cert = issue_node_certificate(CA_KEY, CA_CERT, ["ov1"], 1, NOW, 30)
    path = tmp_path / "member-list.json"
    path.write_text(member_list.to_text(held))
    ident = OverlayIdentity(TrustAnchor("ov1", (CA_CERT,)), cert, key, members=held, member_file=path)
    return FakeSignalHub(VirtualClock()).client("m1@x.test", {"ov1": 1}, identities={"ov1": ident})


def test_the_server_hosts_change_is_adopted_not_flooded_and_kept_beside_the_ca(tmp_path: Path) -> None:
    held = _list(4, {1: "m1@x.test", 2: "m2@x.test"})
    newer = _list(5, {**held.members, 3: "m3@x.test"})
    text = member_list.change_to_text(member_list.change_between(held, newer))
    client = _client(tmp_path, held)
    adopted: list[MemberListAdopted] = []
    client.subscribe(MemberListAdopted, adopted.append)
    client._members_message("m2@x.test/evio", text)  # a member: only the server host sends changes
    client._members_message("x.test.evil", text)
    assert client.listed_members("ov1") == held and client.drop_counts() == {"not_member": 2}
    client._members_message("x.test", text)
    assert client.listed_members("ov1") == newer
    assert adopted == [MemberListAdopted("ov1", 5, "x.test", flood=False)]
    assert member_list.load((tmp_path / "member-list.json").read_text()) == newer
    client._members_message("x.test", text)  # again (or after the overlay brought it): nothing to do
    assert len(adopted) == 1 and client.drop_counts() == {"not_member": 2}


def test_a_change_not_signed_by_the_ca_or_of_another_list_is_dropped_counted_and_not_adopted(tmp_path: Path) -> None:
    held = _list(4, {1: "m1@x.test", 2: "m2@x.test"})
    client = _client(tmp_path, held)
    other_ca, _ = make_overlay_ca("another CA", NOW, 3650)
    forged = _list(5, {**held.members, 3: "evil@x.test"}, key=other_ca)
    client._members_message("x.test", member_list.change_to_text(member_list.change_between(held, forged)))
    assert client.drop_counts() == {"bad_revocation": 1}
    # The change of a list we missed (serial 5 -> 6): counted; the whole list is asked of a contact later.
    five = _list(5, {**held.members, 3: "m3@x.test"})
    six = _list(6, {**five.members, 4: "m4@x.test"})
    client._members_message("x.test", member_list.change_to_text(member_list.change_between(five, six)))
    client._members_message("x.test", '{"base": 1}')
    assert client.drop_counts() == {"bad_revocation": 1, "member_list_gap": 1, "malformed": 1}
    assert client.listed_members("ov1") == held
    assert member_list.load((tmp_path / "member-list.json").read_text()) == held


def test_a_revocation_list_from_the_server_host_is_not_announced_again_one_from_elsewhere_is(tmp_path: Path) -> None:
    """The server host sent it to every member online: every member telling every link again would cost the
    server O(members x links) presences of 1.1 KB (decision 0065). One from a file or a peer is passed on."""
    client = _client(tmp_path, _list(1, {1: "m1@x.test"}))
    announced: list[None] = []
    client._announce_again = lambda: announced.append(None)  # type: ignore[method-assign]
    for serial, source in ((1, "x.test"), (2, "/etc/evio/ov1/revoked.json")):
        rl = identity.sign_list(CA_KEY, "ov1", serial, int(time.time()), {9: int(time.time()) + 3600})
        assert client.receive_revocation_list(identity.list_to_text(rl), source)
    assert len(announced) == 1


async def test_a_member_that_missed_a_change_asks_a_present_contact_for_the_whole_list(tmp_path: Path) -> None:
    """Decision 0065: a change of a list we do not hold is counted, and, if the list has not come over the
    overlay meanwhile, one present contact is asked for it about `MEMBERS_GAP_WAIT` later."""
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    accounts = {f"n{i}@x.test": (i + 1) << 120 for i in range(3)}
    first = _list(1, {n: a for a, n in accounts.items()})
    clients = []
    for account, node_id in accounts.items():
        key, cert = issue_node_certificate(CA_KEY, CA_CERT, ["ov1"], node_id, NOW, 30)
        (tmp_path / account).mkdir()
        ident = OverlayIdentity(TrustAnchor("ov1", (CA_CERT,)), cert, key, members=first,
                                member_file=tmp_path / account / "member-list.json")  # fmt: skip
        clients.append(hub.client(account, {"ov1": node_id}, identities={"ov1": ident}))
    for c in clients:
        await c.start()
    await wait_until(lambda: all(c.contacts("ov1") <= c.peers("ov1").keys() for c in clients), 30, clock=clock,
                     what="every member knows its contacts")  # fmt: skip
    second = _list(2, {**first.members, 9 << 120: "n9@x.test"})
    third = _list(3, {**second.members, 10 << 120: "n10@x.test"})
    for c in clients[1:]:  # they had the list of serial 2 (and 3) whole; n0 was away for serial 2
        assert c.receive_member_list(member_list.to_text(third), "overlay")
    clients[0]._members_message("x.test", member_list.change_to_text(member_list.change_between(second, third)))
    assert clients[0].drop_counts() == {"member_list_gap": 1} and clients[0].listed_members("ov1") == first
    await wait_until(lambda: clients[0].listed_members("ov1") == third, 2 * mod.MEMBERS_GAP_WAIT, clock=clock,
                     what="n0 asked a contact for the list")  # fmt: skip
    for c in clients:
        await c.stop()
