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
to count. The table is what one pass over all claims makes of them, diffed
against the previous one, so events are exact whatever the order of inputs;
it is kept incrementally (an input settles again only the accounts it names
and the node ids they touch, in that pass's order), so a presence costs
O(its account's sessions), not O(members).

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

Overlays whose membership is the overlay CA's member list (`set_listed`, decision 0059) take it from there
alone: the server's word (`set_membership`, `retain_bindings`) counts for nothing in them, and the list
outlives our own sessions (`clear` keeps it), so a login costs nothing per listed member.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from evio.signal.drops import DropReason
from evio.signal.events import PeerAdded, PeerRemoved, RemovalCause
from evio.signal.protocol import Announcement

# A node logs in with one resource, two during a relogin: the sessions of an account kept (the newest; an older
# one is forgotten, counted `too_many_sessions`), and of all accounts. Without them a server inventing resources
# grew the table without bound, each presence settled over all of its account's sessions (review21h H4).
MAX_SESSIONS_PER_ACCOUNT = 4
MAX_SESSIONS = 65536

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
        # overlay -> account -> the node id bound to it: one at most (`_bind` moves it)
        self._bound_of: dict[str, dict[str, int]] = {ov: {} for ov in self._own}
        self._revoked: dict[str, frozenset[int]] = {ov: frozenset() for ov in self._own}
        self._membership: dict[str, frozenset[str]] = {}
        self._listed: dict[str, frozenset[str]] = {}  # overlay -> the accounts the CA's member list names
        self._claims: dict[str, dict[str, _Claim]] = {}  # full jid -> overlay -> claim
        self._session_seq: dict[str, int] = {}  # full jid -> input seq of its first presence: newest wins
        self._features: dict[str, frozenset[str]] = {}  # full jid -> the features its presence announced
        self._owners: dict[str, dict[int, str]] = {ov: {} for ov in self._own}
        self._seq = 0
        # What the table derives from the claims, kept up to date one account at a time (`_settle`):
        self._entered: dict[str, int] = {}  # full jid -> when its claims entered `_claims` (its place there)
        self._sessions: dict[str, set[str]] = {}  # bare -> its full jids in `_claims`
        # overlay -> bare -> (session seq, full jid, claim) of the session that speaks for the account there
        self._speaker: dict[str, dict[str, tuple[int, str, _Claim]]] = {ov: {} for ov in self._own}
        self._claimants: dict[str, dict[int, set[str]]] = {ov: {} for ov in self._own}  # node id -> accounts
        # overlay -> node ids whose binding changed after they were settled: settled again on the next input
        self._unsettled: dict[str, set[int]] = {ov: set() for ov in self._own}
        self._entries = 0

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
        listed = self._listed.get(overlay)
        if listed is not None:
            return bare_jid(jid) in listed
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
        for overlay in self._own:
            if overlay not in new and overlay not in self._listed:
                self._unbind(overlay, bare)
        return self._settle({bare}, refusals_for=None, cause=RemovalCause.MEMBERSHIP_REVOKED)

    def set_listed(self, overlay: str, accounts: Iterable[str]) -> Update:
        """The accounts the overlay CA's member list names: from now on `overlay`'s membership (0059)."""
        if overlay not in self._own:
            return Update()
        old, new = self._listed.get(overlay, frozenset()), frozenset(accounts)
        self._listed[overlay] = new
        for account in old - new:
            self._unbind(overlay, account)
        return self._settle(set((old ^ new) & self._sessions.keys()), refusals_for=None,
                            cause=RemovalCause.MEMBERSHIP_REVOKED)  # fmt: skip

    def retain_bindings(self, members: Mapping[str, frozenset[str]], only: Iterable[str] | None = None) -> None:
        """The server's whole membership list (bare JID -> overlays): bindings of accounts not in it go.
        `only`: just these accounts changed (a roster push), the others' bindings are not looked at."""
        for overlay, accounts in self._bound_of.items():
            if overlay in self._listed:
                continue  # the CA's list says who is a member there (`set_listed`)
            among = accounts if only is None else [a for a in only if a in accounts]
            for account in [a for a in among if overlay not in members.get(a, frozenset())]:
                self._unbind(overlay, account)

    def set_revoked(self, overlay: str, node_ids: Iterable[int]) -> Update:
        """The overlay CA's revocation list for `overlay` (the newest verified one)."""
        if overlay not in self._own:
            return Update()
        revoked = frozenset(node_ids)
        if revoked == self._revoked[overlay]:
            return Update()
        self._revoked[overlay] = revoked
        for node_id in revoked:
            binding = self._bound[overlay].get(node_id)
            if binding is not None:
                self._unbind(overlay, binding.account)
        return self._settle(set(self._sessions), refusals_for=None, cause=RemovalCause.MEMBERSHIP_REVOKED)

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
        refused: list[Refusal] = []
        if claims and full_jid not in self._claims:
            sessions = self._sessions.get(bare_jid(full_jid), ())
            if len(sessions) >= MAX_SESSIONS_PER_ACCOUNT:
                oldest = min(sessions, key=lambda j: (self._session_seq.get(j, 0), j))
                overlay, claim = next(iter(self._claims[oldest].items()))
                refused.append(Refusal(oldest, overlay, claim.node_id, DropReason.TOO_MANY_SESSIONS))
                self._forget(oldest)
            elif len(self._claims) >= MAX_SESSIONS:
                overlay, claim = next(iter(claims.items()))
                return Update(refused=[Refusal(full_jid, overlay, claim.node_id, DropReason.TOO_MANY_SESSIONS)])
        if claims:
            if full_jid not in self._claims:
                self._entries += 1
                self._entered[full_jid] = self._entries
                self._sessions.setdefault(bare_jid(full_jid), set()).add(full_jid)
            self._claims[full_jid] = claims
            self._session_seq.setdefault(full_jid, self._seq)
            self._features[full_jid] = announcement.features
        else:
            self._forget(full_jid)
        update = self._settle({bare_jid(full_jid)}, refusals_for=full_jid, cause=RemovalCause.LEFT)
        update.refused.extend(refused)
        return update

    def on_unavailable(self, full_jid: str, returning: bool = False) -> Update:
        """The session went; `returning`: it said it logs in again at once."""
        if not self._forget(full_jid):
            return Update()
        cause = RemovalCause.RELOGIN if returning else RemovalCause.LEFT
        return self._settle({bare_jid(full_jid)}, refusals_for=None, cause=cause)

    def clear(self) -> Update:
        """Our session ended: forget every claim and membership (the server re-sends both).

        Bindings stay: they belong to accounts, which outlive our session (`retain_bindings` prunes them
        when the server's list comes back)."""
        accounts = set(self._sessions)
        for jid in list(self._claims):
            self._forget(jid)
        self._session_seq.clear()
        self._features.clear()
        self._membership.clear()
        return self._settle(accounts, refusals_for=None, cause=RemovalCause.SIGNAL_LOST)

    # ------------------------------------------------------------------ core
    #
    # The table is what one pass over all claims would make of them (the speaker of each account, the owner
    # of each node id, bindings made as owners are found, in the order the claims entered), kept up to date
    # incrementally: an input changes the speakers of the accounts it names, and only the node ids those
    # speakers leave or claim, and those whose binding changed, are settled again, in that same order.
    # A presence costs O(the sessions of its account), not O(members): a storm of n logins costs O(n), not
    # O(n^2) (docs/performance.md, the signaling plane at scale).

    def _forget(self, full_jid: str) -> bool:
        """`full_jid`'s session went: False if it claimed nothing here."""
        self._session_seq.pop(full_jid, None)
        self._features.pop(full_jid, None)
        if self._claims.pop(full_jid, None) is None:
            return False
        del self._entered[full_jid]
        bare = bare_jid(full_jid)
        sessions = self._sessions[bare]
        sessions.discard(full_jid)
        if not sessions:
            del self._sessions[bare]
        return True

    def _unbind(self, overlay: str, account: str) -> None:
        node_id = self._bound_of[overlay].pop(account, None)
        if node_id is not None:
            del self._bound[overlay][node_id]
            self._unsettled[overlay].add(node_id)

    def _settle(self, accounts: set[str], refusals_for: str | None, cause: RemovalCause) -> Update:
        update = Update()
        for overlay, own_node in self._own.items():
            refusal = None
            touched = self._unsettled[overlay]
            self._unsettled[overlay] = set()
            speakers = self._speaker[overlay]
            claimants = self._claimants[overlay]
            for bare in accounts:
                speaker, refused = self._speaker_of(overlay, own_node, bare, refusals_for)
                refusal = refusal or refused
                before = speakers.get(bare)
                if before is not None:
                    touched.add(before[2].node_id)
                    holders = claimants[before[2].node_id]
                    holders.discard(bare)
                    if not holders:
                        del claimants[before[2].node_id]
                if speaker is None:
                    speakers.pop(bare, None)
                else:
                    speakers[bare] = speaker
                    touched.add(speaker[2].node_id)
                    claimants.setdefault(speaker[2].node_id, set()).add(bare)
            if refusal is not None:
                update.refused.append(refusal)
            if refusals_for is not None:
                mine = self._claims.get(refusals_for, {}).get(overlay)
                current = speakers.get(bare_jid(refusals_for))
                if (mine is not None and current is not None and current[1] != refusals_for
                        and current[2].node_id != mine.node_id):
                    update.refused.append(Refusal(refusals_for, overlay, mine.node_id, DropReason.ACCOUNT_HAS_NODE))
            old, new = self._settle_owners(overlay, touched, refusals_for, update)
            update.events.extend(self._diff(overlay, old, new, cause))
        return update

    def _speaker_of(
        self, overlay: str, own_node: int, bare: str, refusals_for: str | None
    ) -> tuple[tuple[int, str, _Claim] | None, Refusal | None]:
        """The session that speaks for `bare` in `overlay` (its newest with a claim that may stand), and the
        refusal of `refusals_for`'s claim if it is one of its sessions and its claim may not stand."""
        best: tuple[int, str, _Claim] | None = None
        refusal = None
        for jid in self._sessions.get(bare, ()):
            claim = self._claims[jid].get(overlay)
            if claim is None:
                continue
            reason = self._refused(overlay, own_node, jid, claim)
            if reason is not None:
                if jid == refusals_for:
                    refusal = Refusal(jid, overlay, claim.node_id, reason)
                continue
            entry = (self._session_seq.get(jid, 0), jid, claim)
            if best is None or entry[:2] > best[:2]:
                best = entry
        return best, refusal

    def _refused(self, overlay: str, own_node: int, jid: str, claim: _Claim) -> DropReason | None:
        if not self.is_member(overlay, jid):
            return DropReason.NOT_MEMBER
        if claim.node_id == own_node:
            return DropReason.NODE_ID_CONFLICT
        if claim.node_id in self._revoked[overlay]:
            return DropReason.REVOKED
        return None

    def _place(self, overlay: str, node_id: int) -> int:
        """Where `node_id` comes in one pass over the claims: at the first session (in the order the claims
        entered) of any account claiming it that may claim in `overlay`."""
        own_node = self._own[overlay]
        return min(
            self._entered[jid]
            for bare in self._claimants[overlay][node_id]
            for jid in self._sessions[bare]
            if (claim := self._claims[jid].get(overlay)) is not None
            and self._refused(overlay, own_node, jid, claim) is None
        )

    def _settle_owners(
        self, overlay: str, touched: set[int], refusals_for: str | None, update: Update
    ) -> tuple[dict[int, str], dict[int, str]]:
        """Settle the owners of `touched` in the order one pass would; (old, new) owners of those settled.

        Binding an owner releases its account's other binding: a node id claimed after it (in pass order) is
        settled in this input, as in one pass; one settled before it, on the next input, as in one pass."""
        owners = self._owners[overlay]
        claimants = self._claimants[overlay]
        speakers = self._speaker[overlay]
        trusted = overlay in self._trusted
        old: dict[int, str] = {}
        new: dict[int, str] = {}
        for node_id in touched:
            if node_id not in claimants and node_id in owners:
                old[node_id] = owners.pop(node_id)
        queue = [(self._place(overlay, n), n) for n in touched if n in claimants]
        heapq.heapify(queue)
        queued = {n for _, n in queue}
        while queue:
            place, node_id = heapq.heappop(queue)
            entries = [
                (claim.seq, jid, trusted and claim.proven)
                for _, jid, claim in (speakers[bare] for bare in claimants[node_id])
            ]
            winner = _owner_of(entries, self._bound[overlay].get(node_id))
            previous = owners.get(node_id)
            if winner is not None:
                released = self._bind(overlay, node_id, winner, any(p for _, j, p in entries if j == winner))
                if released is not None and released in claimants:
                    if released in queued or self._place(overlay, released) < place:
                        self._unsettled[overlay].add(released)
                    else:
                        heapq.heappush(queue, (self._place(overlay, released), released))
                        queued.add(released)
            if refusals_for is not None and winner != refusals_for and any(j == refusals_for for _, j, _ in entries):
                update.refused.append(Refusal(refusals_for, overlay, node_id, DropReason.NODE_ID_CONFLICT))
            if previous != winner:
                if previous is not None:
                    old.setdefault(node_id, previous)
                if winner is None:
                    owners.pop(node_id, None)
                else:
                    owners[node_id] = winner
                    new[node_id] = winner
        return old, new

    def _bind(self, overlay: str, node_id: int, jid: str, proven: bool) -> int | None:
        """`node_id` is held by `jid`'s account: bound to it, and the account's other binding released (returned)."""
        bindings = self._bound[overlay]
        account = bare_jid(jid)
        current = bindings.get(node_id)
        if current is not None and current.account == account and (current.proven or not proven):
            return None
        released = self._bound_of[overlay].get(account)
        if released == node_id:
            released = None
        elif released is not None:
            del bindings[released]
        if current is not None:
            self._bound_of[overlay].pop(current.account, None)
        bindings[node_id] = _Binding(account, proven or (current is not None and current.proven))
        self._bound_of[overlay][account] = node_id
        return released

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
