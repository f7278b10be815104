"""The peer table kept incrementally against the one-pass table it replaced: the same events, refusals and
state after every input, over random sequences of presence, membership, revocation and our own reconnects.

`OnePassPeerTable` is evio/signal/peers.py's `PeerTable` as it was before it became incremental (issue 24:
it re-derived every claim on every input, O(members) a presence), kept verbatim as the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evio.signal.drops import DropReason
from evio.signal.events import PeerAdded, PeerRemoved, RemovalCause
from evio.signal.peers import PeerTable, Refusal, Update, _Binding, _Claim, _owner_of, bare_jid
from evio.signal.protocol import Announcement, Membership


class OnePassPeerTable:
    def __init__(
        self, own_jid: str, memberships: Mapping[str, int], trust_overlays: Iterable[str] = ()
    ) -> None:
        """`memberships`: our own overlay id -> node id; `trust_overlays`: those with an overlay CA."""
        self._own_jid = own_jid
        self._own = dict(memberships)
        self._trusted = frozenset(trust_overlays)
        # overlay -> node id -> the account it is bound to; kept across our own reconnects.
        self._bound: dict[str, dict[int, _Binding]] = {ov: {} for ov in self._own}
        self._revoked: dict[str, frozenset[int]] = {ov: frozenset() for ov in self._own}
        self._membership: dict[str, frozenset[str]] = {}
        self._claims: dict[str, dict[str, _Claim]] = {}  # full jid -> overlay -> claim
        self._session_seq: dict[str, int] = {}  # full jid -> input seq of its first presence: newest wins
        self._features: dict[str, frozenset[str]] = {}  # full jid -> the features its presence announced
        self._owners: dict[str, dict[int, str]] = {ov: {} for ov in self._own}
        self._seq = 0

    # ------------------------------------------------------------------ queries

    @property
    def overlays(self) -> frozenset[str]:
        return frozenset(self._own)

    def own_node_id(self, overlay: str) -> int | None:
        return self._own.get(overlay)

    def peers(self, overlay: str) -> dict[int, str]:
        """node id -> full JID of the current members of `overlay` (a copy)."""
        return dict(self._owners.get(overlay, {}))

    def jid_of(self, overlay: str, node_id: int) -> str | None:
        return self._owners.get(overlay, {}).get(node_id)

    def node_of(self, overlay: str, full_jid: str) -> int | None:
        """The node id `full_jid` currently holds in `overlay`, if it holds one."""
        claim = self._claims.get(full_jid, {}).get(overlay)
        if claim is not None and self._owners.get(overlay, {}).get(claim.node_id) == full_jid:
            return claim.node_id
        return None

    def features(self, overlay: str, node_id: int) -> frozenset[str]:
        """What the session holding `node_id` in `overlay` announced it reads (empty if none or absent)."""
        jid = self.jid_of(overlay, node_id)
        return self._features.get(jid, frozenset()) if jid is not None else frozenset()

    def is_member(self, overlay: str, jid: str) -> bool:
        return overlay in self._membership.get(bare_jid(jid), frozenset())

    def bound_account(self, overlay: str, node_id: int) -> str | None:
        """The account `node_id` is bound to in `overlay`, present or not."""
        binding = self._bound.get(overlay, {}).get(node_id)
        return binding.account if binding is not None else None

    def is_trusted(self, overlay: str) -> bool:
        return overlay in self._trusted

    def revoked(self, overlay: str) -> frozenset[int]:
        return self._revoked.get(overlay, frozenset())

    # ------------------------------------------------------------------ inputs

    def set_own_jid(self, full_jid: str) -> None:
        self._own_jid = full_jid

    def set_membership(self, bare: str, overlays: Iterable[str]) -> Update:
        new = frozenset(overlays)
        if self._membership.get(bare, frozenset()) == new:
            return Update()
        if new:
            self._membership[bare] = new
        else:
            self._membership.pop(bare, None)
        self._unbind(lambda overlay, account: account == bare and overlay not in new)
        return self._recompute(refusals_for=None, cause=RemovalCause.MEMBERSHIP_REVOKED)

    def retain_bindings(self, members: Mapping[str, frozenset[str]]) -> None:
        """The server's whole membership list (bare JID -> overlays): bindings of accounts not in it go."""
        self._unbind(lambda overlay, account: overlay not in members.get(account, frozenset()))

    def set_revoked(self, overlay: str, node_ids: Iterable[int]) -> Update:
        """The overlay CA's revocation list for `overlay` (the newest verified one)."""
        if overlay not in self._own:
            return Update()
        revoked = frozenset(node_ids)
        if revoked == self._revoked[overlay]:
            return Update()
        self._revoked[overlay] = revoked
        for node_id in revoked:
            self._bound[overlay].pop(node_id, None)
        return self._recompute(refusals_for=None, cause=RemovalCause.MEMBERSHIP_REVOKED)

    def on_available(
        self, full_jid: str, announcement: Announcement, proven: Iterable[str] = ()
    ) -> Update:
        """`proven`: the overlays whose claim in this announcement carries a verified identity proof."""
        proven_overlays = frozenset(proven)
        if full_jid == self._own_jid:
            return Update()
        self._seq += 1
        old = self._claims.get(full_jid, {})
        claims: dict[str, _Claim] = {}
        for m in announcement.members:
            if m.overlay not in self._own:
                continue  # the peer also serves overlays we are not in: not our business
            prev = old.get(m.overlay)
            seq = prev.seq if prev is not None and prev.node_id == m.node_id else self._seq
            claims[m.overlay] = _Claim(m.node_id, seq, m.overlay in proven_overlays)
        if claims:
            self._claims[full_jid] = claims
            self._session_seq.setdefault(full_jid, self._seq)
            self._features[full_jid] = announcement.features
        else:
            self._claims.pop(full_jid, None)
            self._session_seq.pop(full_jid, None)
            self._features.pop(full_jid, None)
        return self._recompute(refusals_for=full_jid, cause=RemovalCause.LEFT)

    def on_unavailable(self, full_jid: str, returning: bool = False) -> Update:
        """The session went; `returning`: it said it logs in again at once."""
        self._session_seq.pop(full_jid, None)
        self._features.pop(full_jid, None)
        if self._claims.pop(full_jid, None) is None:
            return Update()
        return self._recompute(refusals_for=None, cause=RemovalCause.RELOGIN if returning else RemovalCause.LEFT)

    def clear(self) -> Update:
        """Our session ended: forget every claim and membership (the server re-sends both).

        Bindings stay: they belong to accounts, which outlive our session (`retain_bindings` prunes them
        when the server's list comes back)."""
        self._claims.clear()
        self._session_seq.clear()
        self._features.clear()
        self._membership.clear()
        return self._recompute(refusals_for=None, cause=RemovalCause.SIGNAL_LOST)

    # ------------------------------------------------------------------ core

    def _unbind(self, drop: Callable[[str, str], bool]) -> None:
        for overlay, bindings in self._bound.items():
            for node_id in [n for n, b in bindings.items() if drop(overlay, b.account)]:
                del bindings[node_id]

    def _recompute(self, refusals_for: str | None, cause: RemovalCause) -> Update:
        update = Update()
        for overlay, own_node in self._own.items():
            trusted = overlay in self._trusted
            revoked = self._revoked[overlay]
            bound = self._bound[overlay]

            def refuse(jid: str, node_id: int, reason: DropReason, overlay: str = overlay) -> None:
                if jid == refusals_for:
                    update.refused.append(Refusal(jid, overlay, node_id, reason))

            # One claim per account: its newest session claiming in this overlay speaks for it.
            speaker: dict[str, tuple[int, str, _Claim]] = {}  # bare -> (session seq, full jid, claim)
            for jid, claims in self._claims.items():
                claim = claims.get(overlay)
                if claim is None:
                    continue
                if not self.is_member(overlay, jid):
                    refuse(jid, claim.node_id, DropReason.NOT_MEMBER)
                    continue
                if claim.node_id == own_node:
                    refuse(jid, claim.node_id, DropReason.NODE_ID_CONFLICT)
                    continue
                if claim.node_id in revoked:
                    refuse(jid, claim.node_id, DropReason.REVOKED)
                    continue
                bare = bare_jid(jid)
                entry = (self._session_seq.get(jid, 0), jid, claim)
                if bare not in speaker or entry[:2] > speaker[bare][:2]:
                    speaker[bare] = entry
            if refusals_for is not None:
                mine = self._claims.get(refusals_for, {}).get(overlay)
                current = speaker.get(bare_jid(refusals_for))
                if (mine is not None and current is not None and current[1] != refusals_for
                        and current[2].node_id != mine.node_id):
                    update.refused.append(Refusal(refusals_for, overlay, mine.node_id, DropReason.ACCOUNT_HAS_NODE))
            # node id -> [(account's claim seq, full jid, proven)]
            claimants: dict[int, list[tuple[int, str, bool]]] = {}
            for _, jid, claim in speaker.values():
                claimants.setdefault(claim.node_id, []).append((claim.seq, jid, trusted and claim.proven))
            owners: dict[int, str] = {}
            for node_id, entries in claimants.items():
                winner = _owner_of(entries, bound.get(node_id))
                if winner is not None:
                    owners[node_id] = winner
                    self._bind(overlay, node_id, winner, any(p for _, j, p in entries if j == winner))
                if refusals_for is not None and winner != refusals_for and any(j == refusals_for for _, j, _ in entries):
                    update.refused.append(Refusal(refusals_for, overlay, node_id, DropReason.NODE_ID_CONFLICT))
            update.events.extend(self._diff(overlay, self._owners[overlay], owners, cause))
            self._owners[overlay] = owners
        return update

    def _bind(self, overlay: str, node_id: int, jid: str, proven: bool) -> None:
        """`node_id` is held by `jid`'s account: bound to it, and the account's other binding released."""
        bindings = self._bound[overlay]
        account = bare_jid(jid)
        current = bindings.get(node_id)
        if current is not None and current.account == account and (current.proven or not proven):
            return
        for other in [n for n, b in bindings.items() if b.account == account and n != node_id]:
            del bindings[other]
        bindings[node_id] = _Binding(account, proven or (current is not None and current.proven))

    @staticmethod
    def _diff(
        overlay: str, old: dict[int, str], new: dict[int, str], cause: RemovalCause
    ) -> list[PeerAdded | PeerRemoved]:
        events: list[PeerAdded | PeerRemoved] = []
        for node_id in sorted(old.keys() - new.keys()):
            events.append(PeerRemoved(overlay, node_id, old[node_id], cause))
        for node_id in sorted(new.keys() & old.keys()):
            if bare_jid(old[node_id]) != bare_jid(new[node_id]):
                # Revoked and handed on at once: the holder's tunnels must still close.
                why = cause if cause is RemovalCause.MEMBERSHIP_REVOKED else RemovalCause.REPLACED
                events.append(PeerRemoved(overlay, node_id, old[node_id], why))
                events.append(PeerAdded(overlay, node_id, new[node_id]))
        for node_id in sorted(new.keys() - old.keys()):
            events.append(PeerAdded(overlay, node_id, new[node_id]))
        return events


ME = "me@x.test/evio"
OWN = {"ov1": 100, "ov2": 200}
TRUSTED = ("ov2",)
ACCOUNTS = ["a@x.test", "b@x.test", "c@x.test", "d@x.test"]
JIDS = [f"{a}/{r}" for a in ACCOUNTS for r in ("r1", "r2")] + [ME]
NODE_IDS = [1, 2, 3, 100, 200]
CLAIMED = [1, 2, 1, 2, 3, 100, 200]  # drawn from: collisions on 1 and 2 are what is tested
OVERLAYS = ["ov1", "ov2", "ov9"]  # ov9: one we are not in

overlay_sets = st.frozensets(st.sampled_from(["ov1", "ov2"]))
announcements = st.lists(
    st.tuples(st.sampled_from(["ov1", "ov1", "ov2", "ov9"]), st.sampled_from(CLAIMED)), max_size=3, unique_by=lambda m: m[0]
)
features = st.frozensets(st.sampled_from(["f1", "f2"]), max_size=1)

inputs = st.one_of(
    st.tuples(st.just("membership"), st.sampled_from(ACCOUNTS), overlay_sets),
    st.tuples(st.just("available"), st.sampled_from(JIDS), announcements, overlay_sets, features),
    st.tuples(st.just("available"), st.sampled_from(JIDS), announcements, overlay_sets, features),
    st.tuples(st.just("unavailable"), st.sampled_from(JIDS), st.booleans()),
    st.tuples(st.just("revoked"), st.sampled_from(OVERLAYS), st.frozensets(st.sampled_from(NODE_IDS), max_size=2)),
    st.tuples(st.just("retain"), st.dictionaries(st.sampled_from(ACCOUNTS), overlay_sets, max_size=4)),
    st.tuples(st.just("clear")),
)


def apply(table: PeerTable | OnePassPeerTable, step: tuple[object, ...]) -> Update | None:
    kind = step[0]
    if kind == "membership":
        return table.set_membership(step[1], step[2])  # type: ignore[arg-type]
    if kind == "available":
        _, jid, pairs, proven, feats = step
        ann = Announcement(tuple(Membership(ov, nid) for ov, nid in pairs), feats)  # type: ignore[attr-defined, arg-type]
        return table.on_available(jid, ann, proven)  # type: ignore[arg-type]
    if kind == "unavailable":
        return table.on_unavailable(step[1], step[2])  # type: ignore[arg-type]
    if kind == "revoked":
        return table.set_revoked(step[1], step[2])  # type: ignore[arg-type]
    if kind == "retain":
        table.retain_bindings(step[1])  # type: ignore[arg-type]
        return None
    return table.clear()


def state(table: PeerTable | OnePassPeerTable) -> object:
    return [
        (
            ov,
            table.peers(ov),
            {n: table.bound_account(ov, n) for n in NODE_IDS},
            {j: table.node_of(ov, j) for j in JIDS},
            {n: table.features(ov, n) for n in NODE_IDS},
            table.revoked(ov),
            {a: table.is_member(ov, a) for a in ACCOUNTS},
        )
        for ov in OVERLAYS
    ]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), st.lists(inputs, max_size=60))
def test_incremental_table_is_the_one_pass_table(members_first: bool, steps: list[tuple[object, ...]]) -> None:
    new = PeerTable(ME, OWN, TRUSTED)
    old = OnePassPeerTable(ME, OWN, TRUSTED)
    if members_first:  # most sequences then reach claims that stand and collide
        steps = [("membership", a, frozenset({"ov1", "ov2"})) for a in ACCOUNTS] + steps
    for i, step in enumerate(steps):
        got, want = apply(new, step), apply(old, step)
        assert got == want, (i, step)
        assert state(new) == state(old), (i, step)


def test_an_id_released_by_a_move_is_settled_in_pass_order() -> None:
    """a holds 1 and moves to 2 while b claims 1: b gets 1 in that same input if b's claim comes after a's in
    one pass over the claims, else on the next input (here: a membership change of an unrelated account)."""
    def avail(jid: str, node_id: int) -> tuple[object, ...]:
        return ("available", jid, [("ov1", node_id)], frozenset(), frozenset())

    members: list[tuple[object, ...]] = [("membership", a, frozenset({"ov1"})) for a in ACCOUNTS]
    a_first = [avail("a@x.test/r1", 1), avail("b@x.test/r1", 1)]
    # b's session enters before a's: a's leaves (its account keeps the id bound) and comes back.
    b_first = [avail("a@x.test/r1", 1), ("unavailable", "a@x.test/r1", False), avail("b@x.test/r1", 1),
               avail("a@x.test/r1", 1)]  # fmt: skip
    # a away (1 stays bound to it), b claims 1 meanwhile, a comes back: 1 is settled before a's new claim.
    away = [avail("a@x.test/r1", 1), ("unavailable", "a@x.test/r1", False), avail("b@x.test/r1", 1)]
    move = [avail("a@x.test/r1", 2), ("membership", "c@x.test", frozenset())]
    for opening, b_holds_at_once in ((a_first, True), (b_first, False), (away, False)):
        new, old = PeerTable(ME, OWN), OnePassPeerTable(ME, OWN)
        held = []
        for step in [*members, *opening, *move]:
            assert apply(new, step) == apply(old, step), step
            assert state(new) == state(old), step
            held.append(new.peers("ov1"))
        assert held[-2] == ({1: "b@x.test/r1", 2: "a@x.test/r1"} if b_holds_at_once else {2: "a@x.test/r1"})
        assert held[-1] == {1: "b@x.test/r1", 2: "a@x.test/r1"}
