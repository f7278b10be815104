"""The server host's member list message (decision 0063): adopted from our server's domain only, written beside
the CA; from anyone else dropped and counted before any signature is checked."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

from cryptography import x509

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


def test_only_the_server_host_hands_a_member_list_in_a_message(tmp_path: Path) -> None:
    ca_key, ca_cert = make_overlay_ca("ov1 CA", NOW, 3650)
    key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], 5, NOW, 30)
    first = member_list.sign_members(ca_key, "ov1", 1, int(time.time()), {5: "a@x.test"})
    newer = member_list.sign_members(ca_key, "ov1", 2, int(time.time()), {5: "a@x.test", 6: "b@x.test"})
    path = tmp_path / "member-list.json"
    path.write_text(member_list.to_text(first))
    ident = OverlayIdentity(TrustAnchor("ov1", (ca_cert,)), cert, key, members=first, member_file=path)
    client = FakeSignalHub(VirtualClock()).client("a@x.test", {"ov1": 5}, identities={"ov1": ident})
    adopted: list[MemberListAdopted] = []
    client.subscribe(MemberListAdopted, adopted.append)
    client._members_message("b@x.test/evio", member_list.to_text(newer))  # a member: not the server host
    client._members_message("x.test.evil", member_list.to_text(newer))
    assert client.listed_members("ov1") == first and client.drop_counts() == {"not_member": 2}
    client._members_message("x.test", member_list.to_text(newer))
    assert client.listed_members("ov1") == newer
    assert adopted == [MemberListAdopted("ov1", 2, "x.test")]
    assert member_list.load(path.read_text()) == newer and oct(path.stat().st_mode & 0o777) == "0o644"


class Recorder:
    """A client's member list messages, as sent (the transport's `_send_members`)."""

    def __init__(self, client: FakeSignalClient) -> None:
        self.sent: list[tuple[str, str]] = []
        client._send_members = lambda to, text: self.sent.append((to, text))  # type: ignore[method-assign]


def _client(tmp_path: Path, held: member_list.MemberList, account: str, node_id: int,
            ca: tuple[identity.CaKey, x509.Certificate]) -> FakeSignalClient:  # fmt: skip
    key, cert = issue_node_certificate(ca[0], ca[1], ["ov1"], node_id, NOW, 30)
    path = tmp_path / account / "member-list.json"
    path.parent.mkdir()
    path.write_text(member_list.to_text(held))
    ident = OverlayIdentity(TrustAnchor("ov1", (ca[1],)), cert, key, members=held, member_file=path)
    return FakeSignalHub(VirtualClock()).client(account, {"ov1": node_id}, identities={"ov1": ident})


def test_asks_are_answered_to_listed_members_only_once_a_while_and_lists_taken_only_from_whom_we_asked(
    tmp_path: Path,
) -> None:
    ca = make_overlay_ca("ov1 CA", NOW, 3650)
    held = member_list.sign_members(ca[0], "ov1", 4, int(time.time()), {5: "a@x.test", 6: "b@x.test"})
    a = _client(tmp_path, held, "a@x.test", 5, ca)
    sent = Recorder(a).sent
    a._members_message("c@x.test/evio", '{"ask": "ov1"}')  # not on our list: nothing sent
    a._members_message("b@x.test/evio", '{"ask": "ov1"}')
    a._members_message("b@x.test/evio", '{"ask": "ov1"}')  # again at once: held back
    a._members_message("b@x.test/evio", '{"ask": 7}')
    assert sent == [("b@x.test/evio", member_list.to_text(held))]
    assert a.drop_counts() == {"not_member": 1, "peer_overloaded": 1, "malformed": 1}
    # A list nobody asked for, even a good newer one from a member, is not taken.
    newer = member_list.sign_members(ca[0], "ov1", 5, int(time.time()), {5: "a@x.test", 6: "b@x.test", 7: "c@x.test"})
    a._members_message("b@x.test/evio", member_list.to_text(newer))
    assert a.listed_members("ov1") == held and a.drop_counts()["not_member"] == 2


async def test_a_presence_with_a_newer_serial_is_asked_for_its_list_once_per_interval(tmp_path: Path) -> None:
    ca = make_overlay_ca("ov1 CA", NOW, 3650)
    held = member_list.sign_members(ca[0], "ov1", 4, int(time.time()), {5: "a@x.test", 6: "b@x.test"})
    newer = member_list.sign_members(ca[0], "ov1", 5, int(time.time()), {5: "a@x.test", 6: "b@x.test", 7: "c@x.test"})
    a = _client(tmp_path, held, "a@x.test", 5, ca)
    await a.start()
    sent = Recorder(a).sent
    a._presence_available("c@x.test/evio", None, None, members_json='{"ov1": 4}')  # what we hold: nothing asked
    a._presence_available("c@x.test/evio", None, None, members_json='{"ov1": "x"}')
    assert sent == [] and a.drop_counts() == {"malformed": 1}
    a._presence_available("c@x.test/evio", None, None, members_json='{"ov1": 5}')
    a._presence_available("d@x.test/evio", None, None, members_json='{"ov1": 5}')  # asked for that one already
    assert sent == [("c@x.test/evio", '{"ask": "ov1"}')]
    a._members_message("c@x.test/evio", member_list.to_text(newer))  # the answer: verified and adopted
    assert a.listed_members("ov1") == newer
    a._presence_available("d@x.test/evio", None, None, members_json='{"ov1": 9}')  # newer still: asked at once
    a._presence_available("e@x.test/evio", None, None, members_json='{"ov1": 9}')
    assert sent[1:] == [("d@x.test/evio", '{"ask": "ov1"}')]
    await a.clock.advance(mod.MEMBERS_ASK_INTERVAL)  # type: ignore[attr-defined]
    a._presence_available("e@x.test/evio", None, None, members_json='{"ov1": 9}')  # d never answered
    assert sent[2:] == [("e@x.test/evio", '{"ask": "ov1"}')]
    forged = member_list.sign_members(make_overlay_ca("x", NOW, 1)[0], "ov1", 9, 0, {5: "a@x.test"})
    a._members_message("d@x.test/evio", member_list.to_text(forged))  # asked, but not the CA's: refused
    assert a.listed_members("ov1") == newer and a.drop_counts()["bad_revocation"] == 1
    await a.stop()


async def test_members_holding_the_lists_of_their_own_tokens_all_come_to_the_newest_and_know_each_other(
    tmp_path: Path,
) -> None:
    """The operator's path: tokens made one after another carry serials 1..n, each listing the members so
    far; the members join later, each with its own token's list. They ask each other (decision 0063)."""
    ca = make_overlay_ca("ov1 CA", NOW, 3650)
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    accounts = {f"n{i}@x.test": (i + 1) << 120 for i in range(6)}
    clients = []
    for i, (account, node_id) in enumerate(accounts.items()):
        so_far = {n: a for a, n in list(accounts.items())[: i + 1]}
        held = member_list.sign_members(ca[0], "ov1", i + 1, int(time.time()), so_far)
        key, cert = issue_node_certificate(ca[0], ca[1], ["ov1"], node_id, NOW, 30)
        path = tmp_path / account / "member-list.json"
        path.parent.mkdir()
        path.write_text(member_list.to_text(held))
        ident = OverlayIdentity(TrustAnchor("ov1", (ca[1],)), cert, key, members=held, member_file=path)
        clients.append(hub.client(account, {"ov1": node_id}, identities={"ov1": ident}))
    for c in clients:
        await c.start()
    await wait_until(lambda: all(c.listed_members("ov1").serial == 6 for c in clients),  # type: ignore[union-attr]
                     30, clock=clock, what="every member holds the newest list")
    await wait_until(lambda: all(c.contacts("ov1") and c.contacts("ov1") <= c.peers("ov1").keys() for c in clients),
                     60, clock=clock, what="every member knows its contacts")
    assert all(member_list.load((tmp_path / a / "member-list.json").read_text()).serial == 6 for a in accounts)
    for c in clients:
        await c.stop()
