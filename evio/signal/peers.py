"""Overlay membership and the peer table (node id -> JID per overlay).

Pure. Inputs are what the XMPP adapter learns:

* ``set_membership(bare_jid, overlays)``: the overlays the *server* lists that
  account in (its shared-roster groups). This is the authority: a claim for an
  overlay the server does not list the account in is refused.
* ``on_available(full_jid, announcement)``: a presence carrying the peer's
  (overlay, node id) claims.
* ``on_unavailable(full_jid)``: that session left.
* ``clear()``: our own connection is gone, nothing we knew still holds.

Each returns an ``Update``: the peer events to publish and the refused claims
to count. The table is recomputed from the claims after each input and diffed
against the previous one, so events are exact whatever the order of inputs.

One node id per member account (bare JID) per overlay: of an account's
sessions, the newest one (by first presence seen) speaks for the account in
each overlay it claims. Its claim replaces whatever an older session of the
same account claimed (a reconnect whose old session the server has not
noticed yet, or a node restarted with a new id); the older sessions' claims
are ignored, and refused (`ACCOUNT_HAS_NODE`) when they announce a different
id, until the newest session leaves. So one account cannot hold more node
ids than it has overlays, however many resources it binds.

Node ids are bound to their owner (issue 21, H2). The first account seen
holding a node id keeps it *bound* for as long as that account stays a member
of the overlay, present or not: another account claiming it is refused
(`NODE_ID_CONFLICT`, counted) and never takes it over, not when the owner
logs in again, not when it is away. An account holds one binding per overlay
(claiming another id moves it), so a member cannot reserve ids in bulk. What
remains without trust: a member may squat the id of a member this node has
never seen, until that member is removed or the squatter leaves the group.

Overlays in trust mode (`trust_overlays`) bind ids to what the overlay CA
signed: a claim the adapter found *proven* (the node certificate naming the
id plus the node key's signature over the claiming session's JID, see
`evio.signal.identity`) beats any unproven claim, takes over an id an
unproven claim had bound, and binds it for good. Unproven claims (nodes of
the previous release, which send no proof) are still accepted, first come,
without takeover rights: their tunnels are refused by the DTLS check anyway
unless their certificate names the id.

Revoked node ids (`set_revoked`: the overlay CA's signed revocation list) are
never held: their claims are refused (`REVOKED`) and a holder is removed as
`MEMBERSHIP_REVOKED`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from evio.signal.drops import DropReason
from evio.signal.events import PeerAdded, PeerRemoved, RemovalCause
from evio.signal.protocol import Announcement


def bare_jid(jid: str) -> str:
    return jid.split("/", 1)[0]


@dataclass(frozen=True)
class Refusal:
    jid: str
    overlay: str
    node_id: int
    reason: DropReason


@dataclass
class Update:
    events: list[PeerAdded | PeerRemoved] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)


@dataclass
class _Claim:
    node_id: int
    seq: int  # input sequence number of the first claim of this node id by this session
    proven: bool = False  # trust mode: signed by the node key, certificate from the overlay CA


@dataclass(frozen=True)
class _Binding:
    account: str  # bare JID
    proven: bool


class PeerTable:
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


def _owner_of(entries: list[tuple[int, str, bool]], binding: _Binding | None) -> str | None:
    """Who of the claimants (claim seq, full jid, proven) holds a node id bound to `binding`; None: nobody.

    A proven claim beats unproven ones. The bound account keeps its id, present or not, unless it was bound
    by an unproven claim and a proven one arrives. Otherwise the earliest claim wins.
    """
    proven = [e for e in entries if e[2]]
    candidates = proven or entries
    if binding is not None:
        holder = [e for e in candidates if bare_jid(e[1]) == binding.account]
        if holder:
            return min(holder)[1]
        if binding.proven or not proven:
            return None  # reserved for its account, which is away or claims another id for now
    return min(candidates)[1]
