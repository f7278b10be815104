"""The peer table: membership, presence in, peer events out, conflicts."""

from __future__ import annotations

from evio.signal.drops import DropReason
from evio.signal.events import PeerAdded, PeerRemoved, RemovalCause
from evio.signal.peers import PeerTable
from evio.signal.protocol import Announcement, Membership

ME = "me@x.test/evio"
OWN = {"ov1": 100, "ov2": 200}


def ann(*pairs: tuple[str, int]) -> Announcement:
    return Announcement(tuple(Membership(ov, nid) for ov, nid in pairs))


def table_with(*members: tuple[str, frozenset[str]]) -> PeerTable:
    table = PeerTable(ME, OWN)
    for bare, overlays in members:
        table.set_membership(bare, overlays)
    return table


def test_member_announcing_is_added_and_removed_on_unavailable() -> None:
    t = table_with(("a@x.test", frozenset({"ov1"})))
    up = t.on_available("a@x.test/r", ann(("ov1", 1)))
    assert up.events == [PeerAdded("ov1", 1, "a@x.test/r")] and up.refused == []
    assert t.peers("ov1") == {1: "a@x.test/r"}
    assert t.node_of("ov1", "a@x.test/r") == 1 and t.jid_of("ov1", 1) == "a@x.test/r"
    down = t.on_unavailable("a@x.test/r")
    assert down.events == [PeerRemoved("ov1", 1, "a@x.test/r", RemovalCause.LEFT)]
    assert t.peers("ov1") == {}
    assert t.on_unavailable("a@x.test/r").events == []  # twice is harmless


def test_a_session_ending_to_log_in_again_is_removed_as_returning() -> None:
    t = table_with(("a@x.test", frozenset({"ov1"})))
    t.on_available("a@x.test/r", ann(("ov1", 1)))
    down = t.on_unavailable("a@x.test/r", returning=True)
    assert down.events == [PeerRemoved("ov1", 1, "a@x.test/r", RemovalCause.RELOGIN)]


def test_presence_repeated_is_quiet() -> None:
    t = table_with(("a@x.test", frozenset({"ov1"})))
    t.on_available("a@x.test/r", ann(("ov1", 1)))
    again = t.on_available("a@x.test/r", ann(("ov1", 1)))
    assert again.events == [] and again.refused == []


def test_non_member_claim_is_refused() -> None:
    t = table_with(("a@x.test", frozenset({"ov2"})))
    up = t.on_available("a@x.test/r", ann(("ov1", 1), ("ov2", 2)))
    assert up.events == [PeerAdded("ov2", 2, "a@x.test/r")]
    assert [(r.overlay, r.reason) for r in up.refused] == [("ov1", DropReason.NOT_MEMBER)]
    assert t.peers("ov1") == {}
    stranger = t.on_available("z@x.test/r", ann(("ov1", 9)))
    assert stranger.events == [] and stranger.refused[0].reason is DropReason.NOT_MEMBER


def test_overlays_we_do_not_serve_are_ignored_not_refused() -> None:
    t = table_with(("a@x.test", frozenset({"ov1"})))
    up = t.on_available("a@x.test/r", ann(("ov1", 1), ("other", 5)))
    assert up.events == [PeerAdded("ov1", 1, "a@x.test/r")] and up.refused == []


def test_own_jid_and_own_node_id() -> None:
    t = table_with(("a@x.test", frozenset({"ov1"})), ("me@x.test", frozenset({"ov1"})))
    assert t.on_available(ME, ann(("ov1", 100))).events == []  # our own presence echoed back
    up = t.on_available("a@x.test/r", ann(("ov1", 100)))
    assert up.events == [] and up.refused[0].reason is DropReason.NODE_ID_CONFLICT


def test_claim_changes_node_id() -> None:
    t = table_with(("a@x.test", frozenset({"ov1"})))
    t.on_available("a@x.test/r", ann(("ov1", 1)))
    up = t.on_available("a@x.test/r", ann(("ov1", 2)))
    assert up.events == [PeerRemoved("ov1", 1, "a@x.test/r", RemovalCause.LEFT), PeerAdded("ov1", 2, "a@x.test/r")]
    gone = t.on_available("a@x.test/r", ann())  # presence without the overlay: stopped serving it
    assert gone.events == [PeerRemoved("ov1", 2, "a@x.test/r", RemovalCause.LEFT)]


def test_conflict_the_id_stays_bound_to_its_account_while_it_is_a_member() -> None:
    t = table_with(("a@x.test", frozenset({"ov1"})), ("b@x.test", frozenset({"ov1"})))
    t.on_available("a@x.test/r", ann(("ov1", 1)))
    clash = t.on_available("b@x.test/r", ann(("ov1", 1)))
    assert clash.events == []
    assert [(r.jid, r.reason) for r in clash.refused] == [("b@x.test/r", DropReason.NODE_ID_CONFLICT)]
    assert t.jid_of("ov1", 1) == "a@x.test/r"
    assert t.node_of("ov1", "b@x.test/r") is None  # so its messages are refused
    # The holder leaving does not hand the id over (issue 21 H2): it stays bound to a's account.
    gone = t.on_unavailable("a@x.test/r")
    assert gone.events == [PeerRemoved("ov1", 1, "a@x.test/r", RemovalCause.LEFT)]
    assert t.jid_of("ov1", 1) is None and t.bound_account("ov1", 1) == "a@x.test"
    back = t.on_available("a@x.test/r2", ann(("ov1", 1)))
    assert back.events == [PeerAdded("ov1", 1, "a@x.test/r2")] and back.refused == []
    # Once a is no longer a member, the id is free: the waiting claim takes it.
    handover = t.set_membership("a@x.test", frozenset())
    assert handover.events == [
        PeerRemoved("ov1", 1, "a@x.test/r2", RemovalCause.MEMBERSHIP_REVOKED),  # its tunnels close
        PeerAdded("ov1", 1, "b@x.test/r"),
    ]
    assert t.bound_account("ov1", 1) == "b@x.test"


def test_conflict_order_does_not_depend_on_account_names() -> None:
    t = table_with(("z@x.test", frozenset({"ov1"})), ("b@x.test", frozenset({"ov1"})))
    t.on_available("z@x.test/r", ann(("ov1", 1)))
    t.on_available("b@x.test/r", ann(("ov1", 1)))
    assert t.jid_of("ov1", 1) == "z@x.test/r"


def test_reconnect_of_same_account_takes_over_silently() -> None:
    t = table_with(("a@x.test", frozenset({"ov1"})))
    t.on_available("a@x.test/old", ann(("ov1", 1)))
    newer = t.on_available("a@x.test/new", ann(("ov1", 1)))
    assert newer.events == [] and newer.refused == []
    assert t.jid_of("ov1", 1) == "a@x.test/new"
    # The stale session's late unavailable does not remove the peer.
    assert t.on_unavailable("a@x.test/old").events == []
    assert t.jid_of("ov1", 1) == "a@x.test/new"


def test_membership_revoked_and_restored() -> None:
    t = table_with(("a@x.test", frozenset({"ov1", "ov2"})))
    t.on_available("a@x.test/r", ann(("ov1", 1), ("ov2", 2)))
    revoked = t.set_membership("a@x.test", {"ov2"})
    assert revoked.events == [PeerRemoved("ov1", 1, "a@x.test/r", RemovalCause.MEMBERSHIP_REVOKED)]
    assert t.peers("ov2") == {2: "a@x.test/r"}
    restored = t.set_membership("a@x.test", {"ov1", "ov2"})
    assert restored.events == [PeerAdded("ov1", 1, "a@x.test/r")]
    assert t.set_membership("a@x.test", {"ov1", "ov2"}).events == []


def test_presence_before_membership_is_admitted_once_membership_arrives() -> None:
    t = PeerTable(ME, OWN)
    early = t.on_available("a@x.test/r", ann(("ov1", 1)))
    assert early.events == [] and early.refused[0].reason is DropReason.NOT_MEMBER
    late = t.set_membership("a@x.test", {"ov1"})
    assert late.events == [PeerAdded("ov1", 1, "a@x.test/r")]


def test_clear_removes_everything_as_signal_lost() -> None:
    t = table_with(("a@x.test", frozenset({"ov1"})), ("b@x.test", frozenset({"ov1", "ov2"})))
    t.on_available("a@x.test/r", ann(("ov1", 1)))
    t.on_available("b@x.test/r", ann(("ov1", 2), ("ov2", 3)))
    cleared = t.clear()
    assert {(e.overlay, e.node_id) for e in cleared.events} == {("ov1", 1), ("ov1", 2), ("ov2", 3)}
    assert all(isinstance(e, PeerRemoved) and e.cause is RemovalCause.SIGNAL_LOST for e in cleared.events)
    assert t.peers("ov1") == {} and not t.is_member("ov1", "a@x.test")


def test_many_peers() -> None:
    t = PeerTable(ME, {"ov1": 0})
    for i in range(1, 201):
        t.set_membership(f"n{i}@x.test", {"ov1"})
        t.on_available(f"n{i}@x.test/r", ann(("ov1", i)))
    assert len(t.peers("ov1")) == 200
    assert t.on_unavailable("n7@x.test/r").events == [PeerRemoved("ov1", 7, "n7@x.test/r", RemovalCause.LEFT)]


# -- one node id per member account per overlay (issue 9) ---------------------------------------


def test_one_account_with_many_resources_holds_one_node_id() -> None:
    t = table_with(("a@x.test", frozenset({"ov1"})))
    for i in range(50):
        t.on_available(f"a@x.test/r{i}", ann(("ov1", 1000 + i)))
    # Before: 50 node ids. Now: the account's newest session's claim only.
    assert t.peers("ov1") == {1049: "a@x.test/r49"}


def test_newer_session_claiming_another_id_replaces_the_older_one() -> None:
    t = table_with(("a@x.test", frozenset({"ov1"})))
    t.on_available("a@x.test/old", ann(("ov1", 1)))
    newer = t.on_available("a@x.test/new", ann(("ov1", 2)))
    assert newer.events == [PeerRemoved("ov1", 1, "a@x.test/old", RemovalCause.LEFT), PeerAdded("ov1", 2, "a@x.test/new")]
    assert t.node_of("ov1", "a@x.test/old") is None  # its messages are refused from now on
    # The older session announcing again is refused and counted, not re-admitted.
    again = t.on_available("a@x.test/old", ann(("ov1", 1)))
    assert again.events == []
    assert [(r.jid, r.node_id, r.reason) for r in again.refused] == [
        ("a@x.test/old", 1, DropReason.ACCOUNT_HAS_NODE)
    ]
    # When the newest session leaves, the account's remaining session holds its id again.
    back = t.on_unavailable("a@x.test/new")
    assert back.events == [PeerRemoved("ov1", 2, "a@x.test/new", RemovalCause.LEFT), PeerAdded("ov1", 1, "a@x.test/old")]


def test_a_second_account_cannot_take_a_held_id_even_with_many_resources() -> None:
    t = table_with(("a@x.test", frozenset({"ov1"})), ("b@x.test", frozenset({"ov1"})))
    t.on_available("a@x.test/r", ann(("ov1", 1)))
    refused = [t.on_available(f"b@x.test/r{i}", ann(("ov1", 1))).refused for i in range(5)]
    assert all(r and r[0].reason is DropReason.NODE_ID_CONFLICT for r in refused)
    assert t.peers("ov1") == {1: "a@x.test/r"}


def test_one_id_per_account_in_each_overlay_independently() -> None:
    t = table_with(("a@x.test", frozenset({"ov1", "ov2"})))
    t.on_available("a@x.test/r1", ann(("ov1", 1), ("ov2", 2)))
    t.on_available("a@x.test/r2", ann(("ov1", 3)))
    # r2 is newest in ov1 only; in ov2 r1 is the account's only claimant.
    assert t.peers("ov1") == {3: "a@x.test/r2"} and t.peers("ov2") == {2: "a@x.test/r1"}


def test_the_features_a_session_announced_are_kept_while_it_holds_its_node_id() -> None:
    t = table_with(("a@x.test", frozenset({"ov1", "ov2"})))
    assert t.features("ov1", 1) == frozenset()
    t.on_available("a@x.test/r", Announcement((Membership("ov1", 1), Membership("ov2", 2)), frozenset({"frb.x"})))
    assert t.features("ov1", 1) == t.features("ov2", 2) == frozenset({"frb.x"})
    t.on_available("a@x.test/r", ann(("ov1", 1), ("ov2", 2)))  # restarted as an older release: none now
    assert t.features("ov1", 1) == frozenset()
    t.on_available("a@x.test/r", Announcement((Membership("ov1", 1),), frozenset({"frb.x"})))
    t.on_unavailable("a@x.test/r")
    assert t.features("ov1", 1) == frozenset()
