import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evio.sdn.learning_table import Change, LearnedMac, LearningTable

A = "52:54:00:00:00:0a"
B = "52:54:00:00:00:0b"
C = "52:54:00:00:00:0c"
R1 = 0x1111_0000_0000_0000_0000_0000_0000_0000
R2 = 0x2222_0000_0000_0000_0000_0000_0000_0000
LOCAL_PORT = 1
TUNNEL_5 = 5
TUNNEL_6 = 6


def test_max_age_must_be_positive() -> None:
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            LearningTable(bad)


def test_learn_then_lookup() -> None:
    t = LearningTable(max_age=300)
    got = t.learn(A, TUNNEL_5, R1, now=10.0)
    assert got.change is Change.NEW and got.previous is None
    assert t.lookup(A, now=10.0) == LearnedMac(TUNNEL_5, R1, 10.0)
    assert t.lookup(B, now=10.0) is None
    assert len(t) == 1


def test_lookup_honours_expiry_at_exactly_max_age() -> None:
    t = LearningTable(max_age=300)
    t.learn(A, LOCAL_PORT, None, now=100.0)
    assert t.lookup(A, now=399.999) is not None
    assert t.lookup(A, now=400.0) is None
    # lookup does not remove: expire does, and reports it.
    assert len(t) == 1


def test_relearning_refreshes_last_seen() -> None:
    t = LearningTable(max_age=300)
    t.learn(A, TUNNEL_5, R1, now=0.0)
    got = t.learn(A, TUNNEL_5, R1, now=250.0)
    assert got.change is Change.REFRESHED and got.previous is None
    assert t.lookup(A, now=500.0) == LearnedMac(TUNNEL_5, R1, 250.0)


def test_move_to_another_port_is_reported_with_the_old_place() -> None:
    t = LearningTable(max_age=300, move_hold=0)  # the move hold has its own tests
    t.learn(A, TUNNEL_5, R1, now=0.0)
    got = t.learn(A, TUNNEL_6, R2, now=1.0)
    assert got.change is Change.MOVED
    assert got.previous == LearnedMac(TUNNEL_5, R1, 0.0)
    assert got.entry == LearnedMac(TUNNEL_6, R2, 1.0)
    assert t.macs_on_port(TUNNEL_5) == frozenset() and t.macs_on_port(TUNNEL_6) == {A}
    assert t.leaf_macs(R1) == frozenset() and t.leaf_macs(R2) == {A}


def test_move_to_another_root_behind_the_same_port_is_reported() -> None:
    t = LearningTable(max_age=300, move_hold=0)  # the move hold has its own tests
    t.learn(A, TUNNEL_5, R1, now=0.0)
    got = t.learn(A, TUNNEL_5, R2, now=1.0)
    assert got.change is Change.MOVED and got.previous == LearnedMac(TUNNEL_5, R1, 0.0)
    assert t.root_bridges() == {R2: frozenset({A})}


def test_packet_in_on_the_same_port_keeps_the_root_learned_from_an_frb() -> None:
    t = LearningTable(max_age=300)
    t.learn(A, TUNNEL_5, R1, now=0.0)
    got = t.learn(A, TUNNEL_5, None, now=5.0)
    assert got.change is Change.REFRESHED
    assert t.lookup(A, now=5.0) == LearnedMac(TUNNEL_5, R1, 5.0)


def test_moving_to_a_local_port_drops_the_root() -> None:
    t = LearningTable(max_age=300, move_hold=0)  # the move hold has its own tests
    t.learn(A, TUNNEL_5, R1, now=0.0)
    got = t.learn(A, LOCAL_PORT, None, now=5.0)
    assert got.change is Change.MOVED
    assert t.lookup(A, now=5.0) == LearnedMac(LOCAL_PORT, None, 5.0)
    assert t.root_bridges() == {}


def test_a_stale_entry_not_yet_expired_still_counts_as_the_old_place() -> None:
    # Flows towards it may still be installed, so the caller must hear of the move.
    t = LearningTable(max_age=10)
    t.learn(A, TUNNEL_5, R1, now=0.0)
    got = t.learn(A, TUNNEL_6, R1, now=50.0)
    assert got.change is Change.MOVED and got.previous is not None and got.previous.port == TUNNEL_5


def test_expire_returns_what_it_removed() -> None:
    t = LearningTable(max_age=60)
    t.learn(A, TUNNEL_5, R1, now=0.0)
    t.learn(B, TUNNEL_5, R1, now=30.0)
    t.learn(C, LOCAL_PORT, None, now=59.0)
    assert t.expire(now=59.0) == []
    assert t.expire(now=60.0) == [(A, LearnedMac(TUNNEL_5, R1, 0.0))]
    assert t.expire(now=60.0) == []
    assert t.leaf_macs(R1) == {B}
    assert t.expire(now=1000.0) == [(B, LearnedMac(TUNNEL_5, R1, 30.0)), (C, LearnedMac(LOCAL_PORT, None, 59.0))]
    assert len(t) == 0 and t.root_bridges() == {} and t.macs_on_port(TUNNEL_5) == frozenset()


def test_forget_port_drops_its_entries_at_once() -> None:
    t = LearningTable(max_age=300)
    t.learn(B, TUNNEL_5, R1, now=0.0)
    t.learn(A, TUNNEL_5, R2, now=0.0)
    t.learn(C, TUNNEL_6, R2, now=0.0)
    assert t.forget_port(TUNNEL_5) == [A, B]
    assert t.lookup(A, now=1.0) is None and t.lookup(B, now=1.0) is None
    assert t.lookup(C, now=1.0) == LearnedMac(TUNNEL_6, R2, 0.0)
    assert t.root_bridges() == {R2: frozenset({C})}
    assert t.forget_port(TUNNEL_5) == []
    assert t.forget_port(99) == []


def test_forget_one_mac() -> None:
    t = LearningTable(max_age=300)
    t.learn(A, TUNNEL_5, R1, now=0.0)
    assert t.forget(A) == LearnedMac(TUNNEL_5, R1, 0.0)
    assert t.forget(A) is None
    assert t.root_bridges() == {} and len(t) == 0


def test_root_bridge_table_groups_leaf_macs_by_root() -> None:
    t = LearningTable(max_age=300)
    t.learn(A, TUNNEL_5, R1, now=0.0)
    t.learn(B, TUNNEL_6, R1, now=0.0)
    t.learn(C, TUNNEL_6, R2, now=0.0)
    t.learn("52:54:00:00:00:0d", LOCAL_PORT, None, now=0.0)
    assert t.root_bridges() == {R1: frozenset({A, B}), R2: frozenset({C})}
    assert t.leaf_macs(0xDEAD) == frozenset()


def test_announcement_replaces_the_roots_leaf_list() -> None:
    t = LearningTable(max_age=300)
    t.learn(A, TUNNEL_5, R1, now=0.0)
    t.learn(B, TUNNEL_5, R1, now=0.0)
    got = t.announce(R1, [B, C, C], TUNNEL_6, now=10.0)
    assert got.withdrawn == (A,)
    assert [(g.mac, g.change) for g in got.learned] == [(B, Change.MOVED), (C, Change.NEW)]
    assert t.lookup(A, now=10.0) is None
    assert t.leaf_macs(R1) == {B, C}
    assert t.lookup(C, now=10.0) == LearnedMac(TUNNEL_6, R1, 10.0, hops=1, hops_seen=10.0)


def test_empty_announcement_withdraws_every_leaf_of_that_root_only() -> None:
    t = LearningTable(max_age=300)
    t.learn(A, TUNNEL_5, R1, now=0.0)
    t.learn(C, TUNNEL_6, R2, now=0.0)
    got = t.announce(R1, [], TUNNEL_5, now=1.0)
    assert got.withdrawn == (A,) and got.learned == ()
    assert t.root_bridges() == {R2: frozenset({C})}


# ---------------------------------------------------------------- model-based check

macs = st.sampled_from([f"52:54:00:00:00:{i:02x}" for i in range(6)])
ports = st.sampled_from([1, 5, 6, 7])
roots = st.sampled_from([None, R1, R2])
ops = st.one_of(
    st.tuples(st.just("learn"), macs, ports, roots, st.integers(0, 30)),
    st.tuples(st.just("expire"), st.integers(0, 30)),
    st.tuples(st.just("forget_port"), ports),
    st.tuples(
        st.just("announce"), st.sampled_from([R1, R2]), st.lists(macs, max_size=3), ports, st.integers(0, 30)
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=40))
def test_indexes_always_agree_with_the_entries(steps: list[tuple[object, ...]]) -> None:
    t = LearningTable(max_age=20, path_hold=0, move_hold=0)  # no hold: the model is plain learning (holds: tests below)
    now = 0.0
    model: dict[str, LearnedMac] = {}
    for step in steps:
        kind = step[0]
        if kind == "learn":
            _, mac, port, root, dt = step
            assert isinstance(mac, str) and isinstance(port, int) and isinstance(dt, int)
            assert root is None or isinstance(root, int)
            now += dt
            old = model.get(mac)
            kept = old.root if old and root is None and old.port == port else root
            got = t.learn(mac, port, root, now)
            same = old is not None and old.port == port and kept == old.root
            model[mac] = LearnedMac(port, kept, now, hops=old.hops if same and old else None,
                                    hops_seen=old.hops_seen if same and old else 0.0)
            expected = Change.NEW if old is None else (
                Change.REFRESHED if (old.port, old.root) == (port, kept) else Change.MOVED
            )
            assert got.change is expected
            assert got.previous == (old if expected is Change.MOVED else None)
        elif kind == "expire":
            assert isinstance(step[1], int)
            now += step[1]
            gone = t.expire(now)
            assert {m for m, _ in gone} == {m for m, e in model.items() if now - e.last_seen >= 20}
            for m, _ in gone:
                del model[m]
        elif kind == "forget_port":
            gone_macs = t.forget_port(step[1])  # type: ignore[arg-type]
            assert gone_macs == sorted(m for m, e in model.items() if e.port == step[1])
            for m in gone_macs:
                del model[m]
        else:
            _, root, announced, port, dt = step
            assert isinstance(root, int) and isinstance(announced, list) and isinstance(port, int)
            assert isinstance(dt, int)
            now += dt
            result = t.announce(root, announced, port, now)
            assert set(result.withdrawn) == {m for m, e in model.items() if e.root == root} - set(announced)
            for m in result.withdrawn:
                del model[m]
            for m in announced:
                model[m] = LearnedMac(port, root, now, hops=1, hops_seen=now)
        assert len(t) == len(model)
        for m, e in model.items():
            assert t.lookup(m, now) == (e if now - e.last_seen < 20 else None)
        by_root: dict[int, set[str]] = {}
        for m, e in model.items():
            if e.root is not None:
                by_root.setdefault(e.root, set()).add(m)
        assert t.root_bridges() == {r: frozenset(s) for r, s in by_root.items()}
        for p in (1, 5, 6, 7):
            assert t.macs_on_port(p) == {m for m, e in model.items() if e.port == p}


def test_a_claim_that_a_mac_moved_waits_until_its_place_fell_silent_for_the_move_hold() -> None:
    t = LearningTable(max_age=300, move_hold=10)
    t.learn(A, TUNNEL_5, R1, now=0.0)
    assert t.learn(A, TUNNEL_6, R2, now=1.0).change is Change.CONTESTED  # another root, another way
    assert t.learn(A, TUNNEL_5, R2, now=2.0).change is Change.CONTESTED  # another root, the same way
    assert t.learn(A, TUNNEL_6, None, now=3.0).change is Change.CONTESTED  # a plain frame by another way
    assert t.learn(A, TUNNEL_5, None, now=8.0).change is Change.REFRESHED  # its place speaks again
    assert t.learn(A, TUNNEL_6, R2, now=17.0).change is Change.CONTESTED
    got = t.learn(A, TUNNEL_6, R2, now=18.0)  # silent for 10 s: it may have moved
    assert got.change is Change.MOVED and got.previous is not None and got.previous.root == R1
    assert t.leaf_macs(R2) == {A}


def test_a_port_holds_its_share_of_the_table_and_churns_only_its_own() -> None:
    t = LearningTable(max_age=300, max_entries=16, max_per_port=4)
    t.learn(A, TUNNEL_5, R1, now=0.0)
    for i in range(10):
        got = t.learn(f"02:66:00:00:00:{i:02x}", TUNNEL_6, R2, now=1.0 + i)
        assert set(got.evicted) <= {f"02:66:00:00:00:{j:02x}" for j in range(10)}
    assert len(t.macs_on_port(TUNNEL_6)) == 4 and t.lookup(A, now=20.0) is not None
