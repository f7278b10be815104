"""Presence to linked peers only (decisions 0052, 0059): membership from the overlay CA's member list.

Over the in-memory server (`FakeSignalHub`): members in no roster group know the contacts
`evio.signal.contacts` picks, the server carries O(n log n) presence stanzas instead of O(n^2), and
neither the server nor a member holding a good certificate gets in without the CA's list.
"""

from __future__ import annotations

import datetime
import random
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from evio.signal import identity, member_list
from evio.signal.contacts import RING, WIDTH, contacts
from evio.signal.drops import DropReason
from evio.signal.endpoint import OverlayIdentity
from evio.signal.errors import ErrorReason, RequestError
from evio.signal.events import PeerRemoved
from evio.testing.fake_signal import FakeSignalClient, FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

D = "x.test"
NOW = datetime.datetime.now(datetime.UTC)


class Overlay:
    """ov1 under one CA: node ids, certificates and the signed member list of `count` accounts."""

    def __init__(self, count: int, seed: int = 1) -> None:
        rng = random.Random(seed)
        self.ca_key, self.ca_cert = make_overlay_ca("ov1 CA", NOW, 3650)
        self.anchor = TrustAnchor("ov1", (self.ca_cert,))
        self.ids = {f"m{i}@{D}": rng.getrandbits(128) for i in range(count)}
        self.serial = 0

    def members(self, accounts: dict[str, int] | None = None) -> member_list.MemberList:
        self.serial += 1
        listed = {node: account for account, node in (accounts or self.ids).items()}
        return member_list.sign_members(self.ca_key, "ov1", self.serial, int(time.time()), listed)

    def identity(self, node_id: int, members: member_list.MemberList | None, tmp: Path) -> OverlayIdentity:
        key, cert = issue_node_certificate(self.ca_key, self.ca_cert, ["ov1"], node_id, NOW, 30)
        return OverlayIdentity(self.anchor, cert, key, members=members, member_file=tmp / "member-list.json")


async def _fleet(ov: Overlay, hub: FakeSignalHub, tmp: Path, count: int | None = None) -> list[FakeSignalClient]:
    listed = ov.members()
    clients = []
    for account, node_id in list(ov.ids.items())[:count]:
        c = hub.client(account, {"ov1": node_id}, identities={"ov1": ov.identity(node_id, listed, tmp)})
        clients.append(c)
        await c.start()
    return clients


def _know_contacts(clients: list[FakeSignalClient]) -> bool:
    return all(c.contacts("ov1") and c.contacts("ov1") <= c.peers("ov1").keys() for c in clients)


# ---------------------------------------------------------------------------------------------- the list


def test_member_list_verifies_only_under_its_ca_and_unchanged() -> None:
    ov = Overlay(5)
    ml = ov.members()
    loaded = member_list.load(member_list.to_text(ml))
    assert loaded == ml and member_list.refusal(ov.anchor, loaded) is None
    assert loaded.accounts() == ov.ids
    other_key, other_ca = make_overlay_ca("another CA", NOW, 3650)
    assert member_list.refusal(TrustAnchor("ov1", (other_ca,)), ml) == "not signed by the overlay CA"
    moved = dict(ml.members)
    moved[next(iter(moved))] = f"intruder@{D}"  # the server (or anyone) swaps an account in
    forged = member_list.MemberList("ov1", ml.serial, ml.issued, moved, ml.signature)
    assert member_list.refusal(ov.anchor, forged) == "not signed by the overlay CA"
    assert "ov2" in (member_list.refusal(TrustAnchor("ov2", (ov.ca_cert,)), ml) or "")


@pytest.mark.parametrize("text", [
    "[]", '{"overlay": "ov1"}', "not json",
    '{"overlay":"ov1","serial":1,"issued":1,"members":[["00","a@b"]],"sig":""}',
    '{"overlay":"ov1","serial":1,"issued":1,"members":[["' + "0" * 32 + '","no-at-sign"]],"sig":""}',
    '{"overlay":"ov1","serial":1,"issued":1,"members":[["' + "0" * 32 + '","a@b"],["' + "1" * 32
    + '","a@b"]],"sig":""}',
    '{"overlay":"ov1","serial":-1,"issued":1,"members":[],"sig":""}',
])  # fmt: skip
def test_a_malformed_member_list_is_refused_with_the_reason(text: str) -> None:
    with pytest.raises(identity.IdentityError):
        member_list.load(text)


# ---------------------------------------------------------------------------------------------- contacts


def test_contacts_are_the_ring_neighbours_and_fingers_and_reach_past_silent_ones() -> None:
    rng = random.Random(3)
    listed = sorted(rng.getrandbits(128) for _ in range(1000))
    own = listed[500]
    chosen = contacts(listed, own)
    assert {listed[501], listed[502], listed[503], listed[504], listed[499], listed[496]} <= chosen
    assert own not in chosen
    assert 2 * WIDTH <= len(chosen) <= 2 * WIDTH + 10  # O(log n), not n
    half = min(listed, key=lambda n: (n - (own + RING // 2)) % RING)  # the first at or past the opposite point
    assert half in chosen
    silent = {listed[501], listed[502]}
    widened = contacts(listed, own, skip=silent)
    assert not silent & widened and {listed[505], listed[506]} <= widened
    assert contacts([own], own) == frozenset()
    assert contacts([own, listed[0]], own) == {listed[0]}


def test_contacts_are_mostly_mutual_so_a_late_member_is_told_by_its_neighbours() -> None:
    rng = random.Random(4)
    listed = sorted(rng.getrandbits(128) for _ in range(300))
    plans = {n: contacts(listed, n) for n in listed}
    for i, n in enumerate(listed):  # the ring neighbours are mutual: whoever comes back is told by them
        for step in range(1, WIDTH + 1):
            neighbour = listed[(i + step) % len(listed)]
            assert n in plans[neighbour] and neighbour in plans[n]


# ---------------------------------------------------------------------------------------------- over the server


async def test_members_in_no_group_know_their_contacts_with_o_n_log_n_presence(tmp_path: Path) -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)  # no group at all: the server says nobody is a member
    ov = Overlay(60)
    clients = await _fleet(ov, hub, tmp_path)
    await wait_until(lambda: _know_contacts(clients), 10, clock=clock, what="every member knows its contacts")
    n = len(clients)
    assert hub.directed < 3 * n * (2 * WIDTH + n.bit_length()), f"{hub.directed} directed presence stanzas"
    assert hub.directed < n * (n - 1) / 2  # fewer than the shared group's, which sends each pair both ways
    assert all(c.drop_counts() == {} for c in clients)
    # The peers are proven and listed: requests go through as with the group.
    a, b = clients[0], clients[1]
    assert all(c.last_error("ov1") is None for c in clients)  # no group is not a membership failure here
    for c in clients:
        await c.stop()
    assert a.sessions == b.sessions == 1


async def test_neither_the_server_nor_a_certified_stranger_gets_in_without_the_list(tmp_path: Path) -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    ov = Overlay(6)
    stranger, stranger_id = f"stranger@{D}", 0x5 << 124
    hub.set_group("ov1", [*ov.ids, stranger])  # the server lists the stranger: for the roster's overlays only
    clients = await _fleet(ov, hub, tmp_path)
    # It holds a certificate of the CA (an earlier member, say), but is not on the CA's list.
    s = hub.client(stranger, {"ov1": stranger_id}, identities={"ov1": ov.identity(stranger_id, None, tmp_path)})
    await s.start()
    await wait_until(lambda: _know_contacts(clients), 10, clock=clock, what="contacts known")
    for c in clients:
        s._send_directed(c.account, answer=False)  # it tells everyone anyway
    await clock.advance(1.0)
    assert all(stranger_id not in c.peers("ov1") for c in clients)
    assert sum(c.drops.count(DropReason.NOT_MEMBER) for c in clients) >= len(clients)
    # A listed account that claims another listed member's id is refused too.
    victim = clients[0].node_id("ov1")
    liar_account = clients[1].account
    liar = hub.client(liar_account, {"ov1": victim}, resource="liar",
                      identities={"ov1": ov.identity(victim, None, tmp_path)})  # fmt: skip
    await liar.start()
    liar._send_directed(clients[2].account, answer=False)
    await clock.advance(1.0)
    assert all(not c.peers("ov1").get(victim, "").startswith(liar_account) for c in clients)


async def test_a_member_that_leaves_is_removed_and_known_again_when_back(tmp_path: Path) -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    ov = Overlay(20)
    clients = await _fleet(ov, hub, tmp_path)
    await wait_until(lambda: _know_contacts(clients), 10, clock=clock, what="contacts known")
    leaver = clients[7]
    gone: list[PeerRemoved] = []
    neighbours = [c for c in clients if leaver.node_id("ov1") in c.contacts("ov1")]
    for c in neighbours:
        c.subscribe(PeerRemoved, gone.append)
    await leaver.stop()
    await wait_until(lambda: len(gone) == len(neighbours), 5, clock=clock, what="the leaver's contacts told")
    leaver.started = False
    await leaver.start()
    await wait_until(lambda: _know_contacts(clients), 60, clock=clock, what="known again")


async def test_a_server_restart_is_a_login_storm_that_settles(tmp_path: Path) -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    clients = await _fleet(Overlay(40), hub, tmp_path)
    await wait_until(lambda: _know_contacts(clients), 10, clock=clock, what="contacts known")
    hub.stop_server()
    assert all(c.peers("ov1") == {} for c in clients)
    hub.start_server()
    await wait_until(lambda: _know_contacts(clients), 10, clock=clock, what="contacts known after the restart")


async def test_a_request_to_a_listed_member_not_told_yet_reaches_it(tmp_path: Path) -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    ov = Overlay(40)
    clients = await _fleet(ov, hub, tmp_path)
    await wait_until(lambda: _know_contacts(clients), 10, clock=clock, what="contacts known")
    asker = clients[0]
    far = next(c for c in clients[1:] if c.node_id("ov1") not in asker.peers("ov1"))

    async def echo(_overlay: str, _peer: int, body: object) -> object:
        return body

    far.register_handler("t.echo", echo)  # type: ignore[arg-type]
    answer = await asker.request("ov1", far.node_id("ov1"), "t.echo", {"x": 1})
    assert answer == {"x": 1}
    with pytest.raises(RequestError) as refused:  # not on the list: no one to reach
        await asker.request("ov1", 0x7 << 124, "t.echo", {"x": 1})
    assert refused.value.reason is ErrorReason.UNKNOWN_PEER


async def test_a_newer_list_from_the_file_adds_a_member_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    ov = Overlay(8)
    first = dict(list(ov.ids.items())[:7])
    newcomer, newcomer_id = list(ov.ids.items())[7]
    clients = await _fleet(ov, hub, tmp_path, count=7)
    for c in clients:  # the list they started with had all 8; make it the 7 they have, as at start
        assert c.receive_member_list(member_list.to_text(ov.members(first)), "test")
    await wait_until(lambda: _know_contacts(clients), 10, clock=clock, what="contacts known")
    late = hub.client(newcomer, {"ov1": newcomer_id},
                      identities={"ov1": ov.identity(newcomer_id, ov.members(), tmp_path)})  # fmt: skip
    await late.start()
    # Not on their list, but its presence says it holds a newer one: its contacts ask it for the list
    # (decision 0063), and the newcomer is known without anyone copying a file.
    await wait_until(lambda: all(c.listed_members("ov1").serial == ov.serial for c in clients),  # type: ignore[union-attr]
                     10, clock=clock, what="the newcomer's list asked for and adopted")
    await wait_until(lambda: _know_contacts([*clients, late]), 60, clock=clock, what="the newcomer known")
    newest = member_list.to_text(ov.members())
    (tmp_path / "member-list.json").write_text(newest)
    await wait_until(lambda: all(c.listed_members("ov1") and c.listed_members("ov1").serial == ov.serial  # type: ignore[union-attr]
                                 for c in clients), 10, clock=clock, what="the newer list adopted from the file")
    bad_key = ec.generate_private_key(ec.SECP256R1())
    forged = member_list.sign_members(bad_key, "ov1", ov.serial + 5, int(time.time()), {1: f"x@{D}"})
    assert not clients[0].receive_member_list(member_list.to_text(forged), "test")
    assert clients[0].listed_members("ov1").serial == ov.serial  # type: ignore[union-attr]


def test_the_stanza_escape_is_slixmpps_own_made_faster() -> None:
    """evio.signal.client replaces slixmpp's per-character escape (half a member's CPU in a storm) by one
    translate: the same text out for any text in, and what slixmpp's serializer then calls."""
    import importlib

    from evio.signal import client

    tostring = importlib.import_module("slixmpp.xmlstream.tostring")
    assert tostring.escape is client._escape
    rng = random.Random(5)
    for _ in range(500):
        text = "".join(rng.choice("ab&<>\"' é\n{}:") for _ in range(rng.randint(0, 60)))
        for cdata in (False, True):
            assert client._escape(text, cdata) == client._slixmpp_escape(text, cdata)
