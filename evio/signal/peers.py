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

Conflicts between accounts (two accounts claiming one node id in one
overlay): the account holding it keeps it while present and the other is
refused (`NODE_ID_CONFLICT`, counted); the other takes over when the holder
leaves. Nothing binds a node id to an account before it is first claimed: a
member may still squat the id of a member that has not logged in yet, at the
price of its own (the one id its account may hold), and the real owner's
node counts and logs the conflict. Binding ids to accounts needs an
authority the server does not provide (see the overlay trust anchor).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


class PeerTable:
    def __init__(self, own_jid: str, memberships: Mapping[str, int]) -> None:
        """`memberships`: our own overlay id -> node id."""
        self._own_jid = own_jid
        self._own = dict(memberships)
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
        return self._recompute(refusals_for=None, cause=RemovalCause.MEMBERSHIP_REVOKED)

    def on_available(self, full_jid: str, announcement: Announcement) -> Update:
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
            claims[m.overlay] = _Claim(m.node_id, seq)
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
        """Our session ended: forget every claim and membership (the server re-sends both)."""
        self._claims.clear()
        self._session_seq.clear()
        self._features.clear()
        self._membership.clear()
        return self._recompute(refusals_for=None, cause=RemovalCause.SIGNAL_LOST)

    # ------------------------------------------------------------------ core

    def _recompute(self, refusals_for: str | None, cause: RemovalCause) -> Update:
        update = Update()
        for overlay, own_node in self._own.items():
            # One claim per account: its newest session claiming in this overlay speaks for it.
            speaker: dict[str, tuple[int, str, _Claim]] = {}  # bare -> (session seq, full jid, claim)
            for jid, claims in self._claims.items():
                claim = claims.get(overlay)
                if claim is None:
                    continue
                if not self.is_member(overlay, jid):
                    if jid == refusals_for:
                        update.refused.append(Refusal(jid, overlay, claim.node_id, DropReason.NOT_MEMBER))
                    continue
                if claim.node_id == own_node:
                    if jid == refusals_for:
                        update.refused.append(Refusal(jid, overlay, claim.node_id, DropReason.NODE_ID_CONFLICT))
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
            # node id -> [(account's claim seq, full jid)]
            claimants: dict[int, list[tuple[int, str]]] = {}
            for _, jid, claim in speaker.values():
                claimants.setdefault(claim.node_id, []).append((claim.seq, jid))
            owners: dict[int, str] = {}
            for node_id, entries in claimants.items():
                incumbent = self._owners[overlay].get(node_id)
                held = [e for e in entries if incumbent is not None and bare_jid(e[1]) == bare_jid(incumbent)]
                # The holder's account keeps the id while present; otherwise the earliest claim wins.
                owners[node_id] = (held[0] if held else min(entries))[1]
                if (refusals_for is not None and owners[node_id] != refusals_for
                        and any(jid == refusals_for for _, jid in entries)):
                    update.refused.append(Refusal(refusals_for, overlay, node_id, DropReason.NODE_ID_CONFLICT))
            update.events.extend(self._diff(overlay, self._owners[overlay], owners, cause))
            self._owners[overlay] = owners
        return update

    @staticmethod
    def _diff(
        overlay: str, old: dict[int, str], new: dict[int, str], cause: RemovalCause
    ) -> list[PeerAdded | PeerRemoved]:
        events: list[PeerAdded | PeerRemoved] = []
        for node_id in sorted(old.keys() - new.keys()):
            events.append(PeerRemoved(overlay, node_id, old[node_id], cause))
        for node_id in sorted(new.keys() & old.keys()):
            if bare_jid(old[node_id]) != bare_jid(new[node_id]):
                events.append(PeerRemoved(overlay, node_id, old[node_id], RemovalCause.REPLACED))
                events.append(PeerAdded(overlay, node_id, new[node_id]))
        for node_id in sorted(new.keys() - old.keys()):
            events.append(PeerAdded(overlay, node_id, new[node_id]))
        return events
