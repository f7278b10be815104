"""SignalEndpoint: the transport-independent half of a signaling client.

It glues the pure core (protocol, peer table, transactions, drop accounting)
to asyncio: futures for callers, one deadline timer, handler tasks, typed
events. It does no I/O: a subclass supplies ``_transmit`` and feeds in what its
transport receives (``_membership_changed``, ``_presence_available``,
``_presence_unavailable``, ``_payload_received``, ``_bounced``,
``_session_up``, ``_session_down``). ``SignalClient`` does this over XMPP,
``evio.testing.fake_signal.FakeSignalClient`` in memory, so both run the same
logic.

Revocation sticks: the endpoint remembers which accounts held each node id it
has seen (`_known`, bounded), across its own reconnects: every account an id
passed through since its tunnels last closed, since an up tunnel outlives a
hand-over of its id to another account (the holder left, another claimed it).
Whenever the server's
membership list arrives (the roster fetched at every login, a roster push),
every remembered node id whose account is no longer a member is reported
`PeerRemoved(MEMBERSHIP_REVOKED)`, present or not, so the overlay closes its
tunnels even to a member removed while it was away or while this node was
offline. `check_membership()` asks for that list again (the subclass decides
how: the XMPP client logs in again, since a server caches the roster of an
online session and pushes no group change).

Presence to linked peers only (decisions 0052, 0059): an overlay whose identity carries the overlay
CA's member list (`OverlayIdentity.member_file`) takes its membership from that list, not from the
roster, accepts only proven claims of the node id the list gives the account, and sends its presence
only to the members `evio.signal.contacts` picks (`_reach_contacts`), answering whoever sends it
theirs once per session (`_send_directed`, the transport's). The server then carries O(log n)
presence stanzas per login instead of O(n).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import logging
import os
import random
import re
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from evio.clock import REAL_CLOCK, Clock, Timer
from evio.ratelimit import LogLimiter, PeerRateLimiter, Rate, TokenBucket
from evio.signal import identity, member_list, protocol
from evio.signal.contacts import contacts
from evio.signal.drops import DropAccounting, DropReason
from evio.signal.errors import (
    ErrorReason,
    HandlerBadRequest,
    HandlerRejected,
    LoginFailure,
    Malformed,
    ProtocolError,
    RequestError,
)
from evio.signal.events import (
    Connected,
    Disconnected,
    E,
    EventRegistry,
    MemberListAdopted,
    PeerAdded,
    PeerRemoved,
    RemovalCause,
    RevocationAdopted,
    Subscription,
)
from evio.signal.interface import Handler
from evio.signal.peers import PeerTable, Update, bare_jid
from evio.signal.protocol import Announcement, Body, ErrorReply, Membership, Request, Response
from evio.signal.transactions import TransactionTable

log = logging.getLogger(__name__)

# A login failing the same way again is logged once, then again at most this often (seconds).
FAILURE_RELOG_INTERVAL = 600.0


@dataclass(frozen=True)
class EndpointLimits:
    request_timeout: float = 10.0  # default for request()
    handler_timeout: float = 10.0  # a local handler taking longer is answered with "timeout"
    max_payload_bytes: int = protocol.MAX_PAYLOAD_BYTES
    drop_log_interval: float = 60.0
    max_inflight_handlers: int = 64
    max_inflight_per_peer: int = 8  # so one peer cannot fill the shared limit and starve the others
    max_outstanding_requests: int = 1024
    max_known_peers: int = 4096  # node id -> account remembered for revocation


@dataclass(frozen=True)
class OverlayIdentity:
    """Trust mode for one overlay: its CA, and this node's certificate and key issued under it."""

    anchor: identity.TrustAnchor
    cert: x509.Certificate
    # Not compared (keys compare by identity): the certificate names the key, and a config reload must see
    # the same files as the same settings, or it would log the account in again.
    key: ec.EllipticCurvePrivateKey = field(compare=False)
    # A list known at start (e.g. from a file). Not compared, as `members`: the running client adopts a newer list
    # in the file as it comes, and a reload after the operator dropped one there must not log the account in
    # again (review21q Q3: it stopped the account, and its tunnels, for what the watcher does anyway).
    revocations: identity.RevocationList | None = field(default=None, compare=False)
    # Watched while we run: a list the operator drops here is adopted within `REVOCATION_POLL` s, whatever
    # the XMPP server does (it is then passed on to the other members in our presence).
    revocation_file: Path | None = None
    # Presence to linked peers only (0059): the overlay CA's member list is the membership. Set (the file need
    # not exist yet) for such an overlay; watched as the revocation file is. `members`: the list known at start.
    member_file: Path | None = None
    # Not compared: a newer list in the file is adopted as it comes, and must not log the account in again.
    members: member_list.MemberList | None = field(default=None, compare=False)
    # Where this node keeps the newest list of each kind it adopted (its state directory's `lists/<overlay>`), apart
    # from the files beside the CA, which are the operator's: a file there put back from a backup, older than what
    # the node held, cannot set the serial back at start (decision 0063, amended). None: nothing kept.
    kept_dir: Path | None = None


KEPT_REVOCATIONS, KEPT_MEMBERS = "revoked.json", "member-list.json"  # in `OverlayIdentity.kept_dir`
_Signed = TypeVar("_Signed", identity.RevocationList, member_list.MemberList)


REVOCATION_POLL = 2.0  # seconds between looks at the revocation files
# Presence to linked peers only: the contacts still silent are told again this often (a member that was
# offline, or came back from a restart without telling us), and one silent a whole round is skipped.
RECONTACT_INTERVAL = 30.0
# ... and no sooner than this many times our own last login took: while a storm keeps the server busy, the
# silent ones are mostly still signing in, and telling them again (or skipping them) only adds to the storm.
RECONTACT_LOGINS = 4.0
ANSWER_WAIT = 10.0  # a request to a listed member not present waits this long at most for its presence
# Overlays whose membership is the roster (decision 0067): the server may lose a presence for good. Two members
# whose first presence goes out at the same moment on two nodes of an ejabberd cluster each find the other not
# online there yet (the nodes copy their sessions to each other a little later), so neither hears of the other.
# About this long after each login (0.75-1.25x; longer after a slow login, as the server is busy), the roster
# members we hold no presence of are probed: the server answers with the presence of those online. Another round
# follows (each PROBE_GROWTH times later) only if the last one brought a presence, PROBE_ROUNDS at most.
PROBE_AFTER = 5.0
PROBE_LOGINS = 4.0
PROBE_GROWTH = 3.0
PROBE_ROUNDS = 3
MAX_PROOF_CACHE = 4096  # verified proofs remembered, so a repeated presence costs no signature check
# A newer member list seen in a presence (decision 0063): we ask its sender for it, and ask for the same serial
# again (of whoever says it next) only after this long (one answer is enough; a forged serial costs one small
# ask); we accept the list from whom we asked for this long, and answer one member's asks at most this often.
MEMBERS_ASK_INTERVAL = 5.0
# A member's presence whose member list serials changed is answered again at most this often (review21q Q2): a
# list changes a few times an hour at most, and a member that took a newer one tells its silent contacts again
# every RECONTACT_INTERVAL, so one held back is answered within a round.
HINT_ANSWER_INTERVAL = 10.0
MEMBERS_ASK_WAIT = 30.0
MEMBERS_ANSWER_INTERVAL = 10.0
MAX_MEMBERS_HINT_BYTES = 4096
# Member list answers over all askers (review21h H9): the XMPP server writes any sender, so an ask in every listed
# member's name drew one freshly made copy of the whole list each, O(members^2) every 10 s. Askers holding a proven
# claim here share the first budget; the others (whose ask the server may have written) a small part of it. An
# asker held back asks again, or another member answers it.
MEMBERS_ANSWER_RATE = Rate(8 / MEMBERS_ANSWER_INTERVAL, 8)
MEMBERS_ANSWER_UNPROVEN_RATE = Rate(2 / MEMBERS_ANSWER_INTERVAL, 2)
# Member lists parsed from messages (review21h H2): a full parse of an 8 MB list costs ~0.24 s of the loop, and the
# server host's messages were all parsed, any number a second. Two at once, then one per ask interval (~5% of the
# loop at most); one more is held (the highest serial) and parsed when the budget allows, the others dropped as
# `peer_overloaded`. A list whose overlay and serial (read first, from its head) say it is not newer costs nothing.
# A change of the held list (decision 0065) costs a whole list's check: it takes a token of the same budget (I1).
MEMBERS_PARSE_RATE = Rate(1 / MEMBERS_ASK_INTERVAL, 2)
_LIST_HEAD_RE = re.compile(r'\{\s*"overlay":\s*"([A-Za-z0-9_-]{1,32})",\s*"serial":\s*(\d{1,16})[,\s]')
# A member list change whose base we do not hold (decision 0065): a present contact is asked for the whole list
# after about this long (0.5-1.5x), unless it came meanwhile (over the overlay, most often).
MEMBERS_GAP_WAIT = 2.0
# Identity proofs checked per account (a chain and a signature, ~0.85 ms each) when not in the cache: an account sends
# one per overlay at login and when its identity element changes; any account of the server may send presence,
# each with new signature bytes, at its c2s rate (review21e E7: 1000 checks for 1000 presences).
PROOF_CHECK_RATE = Rate(2.0, 20)
# Accounts in none of our overlays share one such budget, and all accounts together another (review21f F5): an
# operator of another overlay on a shared server makes accounts at will, and the server may write any sender (or,
# in roster mode, list any account), so a budget per account alone bounds nothing. The second is wide enough for a
# 1,000-member overlay's presences at once, and at most 8.5% of the loop after.
STRANGER_PROOF_RATE = Rate(2.0, 20)
ALL_PROOF_RATE = Rate(100.0, 2000)


class SignalEndpoint:
    def __init__(
        self,
        account: str,
        memberships: Mapping[str, int],
        limits: EndpointLimits,
        rng: random.Random,
        clock: Clock = REAL_CLOCK,
        identities: Mapping[str, OverlayIdentity] | None = None,
    ) -> None:
        self.account = account  # bare JID, for logs
        self.clock = clock  # request deadlines, handler timeouts and drop logging run on it
        self.limits = limits
        self._rng = rng
        self._events = EventRegistry()
        self.drops = DropAccounting(limits.drop_log_interval)
        self.ignored_fields = 0  # messages and announcements that carried fields this release does not read
        # Requests and responses this node sent through the server, by action ("response" for answers), and the
        # requests it was sent: what signaling costs the server (decision 0064's measurement).
        self.messages_out: Counter[str] = Counter()
        self.requests_in: Counter[str] = Counter()
        self._ignored_logged = LogLimiter[str](limits.drop_log_interval)
        self._handlers: dict[str, Handler] = {}
        self._transactions: TransactionTable[asyncio.Future[Body]] = TransactionTable(
            rng, limits.max_outstanding_requests
        )
        self._identities = {ov: i for ov, i in (identities or {}).items() if ov in memberships}
        self._table = PeerTable("", memberships, trust_overlays=self._identities)
        self._lists: dict[str, identity.RevocationList] = {}  # overlay -> newest verified revocation list
        self._proof_cache: OrderedDict[tuple[str, str, bytes, bytes], bool] = OrderedDict()
        # (overlay, node id) -> (certificate, its key) of a proven claim: the overlay CA issued it for that id.
        self._claimed_keys: OrderedDict[tuple[str, int], tuple[bytes, ec.EllipticCurvePublicKey]] = OrderedDict()
        self._proof_checks = PeerRateLimiter[str](PROOF_CHECK_RATE)  # by account: what a sender may cost us
        self._stranger_proof_checks = PeerRateLimiter[None](STRANGER_PROOF_RATE)  # one bucket, key None
        self._all_proof_checks = PeerRateLimiter[None](ALL_PROOF_RATE)
        self._own_proofs: tuple[str, tuple[identity.ClaimProof, ...]] = ("", ())
        self._own_document: tuple[tuple[str, tuple[tuple[str, int], ...]], str] = (("", ()), "")
        self._refused_lists: OrderedDict[bytes, None] = OrderedDict()  # signatures of lists that did not verify
        self._file_seen: dict[Path, tuple[int, int]] = {}  # revocation file -> (mtime ns, size) last read
        self._file_timer: Timer | None = None
        self._membership: dict[str, frozenset[str]] = {}
        # (overlay, node id, account): the accounts that held each id since its tunnels last closed, revoked
        # even when absent (most recent last). One id may have passed through several (a tunnel made with one
        # outlives the id's hand-over to another: removing the first must still close it).
        self._known: OrderedDict[tuple[str, int, str], None] = OrderedDict()
        self._known_of: dict[tuple[str, int], set[str]] = {}  # (overlay, node id) -> its accounts in `_known`
        # Presence to linked peers only: overlay -> the CA's newest member list (None until one verifies).
        self._links_mode: dict[str, member_list.MemberList | None] = {
            ov: i.members for ov, i in self._identities.items() if i.member_file is not None or i.members is not None
        }
        for ov, ml in list(self._links_mode.items()):
            if ml is not None and member_list.refusal(self._identities[ov].anchor, ml) is not None:
                log.warning("signal member list overlay=%s serial=%d: not the overlay CA's: ignored", ov, ml.serial)
                self._links_mode[ov] = None
        self._roster_membership: dict[str, frozenset[str]] = {}  # what the server's roster says (group overlays)
        for ov, ml in self._links_mode.items():
            self._table.set_listed(ov, frozenset(ml.members.values()) - {account} if ml is not None else ())
        # Full JIDs our presence went to in this session (directed) as an answer: the member list serials each said
        # then, and when (a changed hint is answered again at most once per HINT_ANSWER_INTERVAL, review21q Q2).
        self._told: dict[str, tuple[dict[str, int], float, dict[str, int]]] = {}  # ..., the highest answered
        # Bare account -> when a session of it was last answered, kept past that session's end (review21s finding 2:
        # a session cycling available and unavailable was a new one each time, answered at once); pruned once older
        # than HINT_ANSWER_INTERVAL, oldest first. Full JID -> the hint of a presence held back, and when it is due:
        # answered then (`_answer_owed`) if the session is still there.
        self._answered: OrderedDict[str, float] = OrderedDict()
        self._owed: dict[str, tuple[dict[str, int], float]] = {}
        self._owed_timer: Timer | None = None
        self._owed_due = 0.0
        # full JID -> the member list serials its last presence said it holds (decision 0063): a change means
        # it may have refused our presence under its older list, so it is answered again.
        self._hints: dict[str, dict[str, int]] = {}
        self._members_asked: OrderedDict[str, float] = OrderedDict()  # full JID -> when we asked it for a list
        self._members_asked_at: dict[str, tuple[int, float]] = {}  # overlay -> the serial we last asked for, when
        self._members_answered: OrderedDict[str, float] = OrderedDict()  # bare JID -> when we last sent it ours
        self._answer_budgets: tuple[TokenBucket, TokenBucket] | None = None  # all askers, unproven ones (H9)
        # (document, overlay) -> (serial, text) of the member list or revocation list held, made once per serial:
        # O(entries) to make, asked for by every asker answered (review21h H9) and every list the floods send
        self._texts: dict[tuple[str, str], tuple[int, str]] = {}
        self._parse_budget: TokenBucket | None = None  # member lists parsed from messages (H2)
        self._list_held: tuple[int, str, str] | None = None  # (serial read, text, sender): parsed when budget allows
        self._change_held: tuple[member_list.MemberChange, str] | None = None  # a change (and its sender), likewise
        self._list_timer: Timer | None = None
        self._reached: set[str] = set()  # bare JIDs we sent our presence to in this session
        self._silent: dict[str, set[int]] = {}  # overlay -> contacts silent for two rounds: skipped
        self._retold: dict[str, set[int]] = {}  # overlay -> contacts silent for one round: told again
        self._recontact_timer: Timer | None = None
        self._probe_timer: Timer | None = None
        self._probed: set[str] = set()  # bare JIDs our last round probed: not heard of since
        self._probe_answers: list[str] = []  # of those, the ones heard of since (the server had lost them)
        self.presence_probes = 0  # roster members probed (decision 0067), all sessions
        self.presences_recovered = 0  # ... whose presence came then: the server had not passed it on
        self._members_reask: dict[str, Timer] = {}  # overlay -> when a held-back ask goes to another contact
        self._contacts_cache: dict[str, tuple[tuple[int, frozenset[int], frozenset[int]], frozenset[int]]] = {}
        self._timer: Timer | None = None
        self._handler_tasks: set[asyncio.Task[None]] = set()
        self._inflight_by_peer: dict[str, int] = {}  # sender JID -> its requests being served
        self._ready = asyncio.Event()
        self._connected = False
        self.sessions = 0  # completed logins, for tests and diagnostics
        self.connected_since: float | None = None  # wall-clock time of the current session's login
        self._account_failure: LoginFailure | None = None  # why the account is not logged in (None: it is, or trying)
        self._membership_failures: dict[str, LoginFailure] = {}  # overlay -> logged in but not a member
        self._failure_log: LogLimiter[tuple[str, str]] = LogLimiter(FAILURE_RELOG_INTERVAL)
        self.failures_in_row = 0  # login attempts that failed since the last login
        # Overlays whose revocation list did not fit in our presence's identity element now (decision 0081), and
        # how many lists were left out of the documents made so far.
        self.lists_left_out: tuple[str, ...] = ()
        self.lists_left_out_total = 0
        self._load_initial_lists()

    # ------------------------------------------------------------------ public API

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def overlays(self) -> frozenset[str]:
        return self._table.overlays

    @property
    def server(self) -> str | None:
        """See evio.signal.interface.Signaling.server: the transport's, if it has servers."""
        return None

    def use_servers(self, servers: tuple[tuple[str, int], ...]) -> None:
        """See evio.signal.interface.Signaling.use_servers; a transport without servers has nothing to change."""

    def last_error(self, overlay: str) -> LoginFailure | None:
        """Why `overlay`'s signaling is not working now: the account's login, else its membership; None when fine."""
        return self._account_failure or self._membership_failures.get(overlay)

    def node_id(self, overlay: str) -> int:
        nid = self._table.own_node_id(overlay)
        if nid is None:
            raise KeyError(overlay)
        return nid

    def peers(self, overlay: str) -> dict[int, str]:
        """node id -> full JID of the members of `overlay` currently present."""
        return self._table.peers(overlay)

    def peer_features(self, overlay: str, node_id: int) -> frozenset[str]:
        """The features node `node_id` of `overlay` announced (empty for a release before 0.2.0 or an absent
        peer): send a feature's messages to it only if the feature is here (evio.signal.protocol)."""
        return self._table.features(overlay, node_id)

    def subscribe(self, event_type: type[E], callback: Callable[[E], None]) -> Subscription[E]:
        return self._events.subscribe(event_type, callback)

    def presence_to_links(self, overlay: str) -> bool:
        """Whether `overlay` takes its membership from the CA's member list and sends presence to links only."""
        return overlay in self._links_mode

    def listed_members(self, overlay: str) -> member_list.MemberList | None:
        """The overlay CA's newest member list held here (presence to linked peers only), or None."""
        return self._links_mode.get(overlay)

    def member_list_text(self, overlay: str) -> str | None:
        ml = self._links_mode.get(overlay)
        return self._member_text(ml) if ml is not None else None

    def is_listed(self, overlay: str, node_id: int) -> bool:
        ml = self._links_mode.get(overlay)
        return ml is not None and node_id in ml.members

    def listed_ids(self, overlay: str) -> frozenset[int]:
        ml = self._links_mode.get(overlay)
        return frozenset(ml.members) if ml is not None else frozenset()

    def contacts(self, overlay: str) -> frozenset[int]:
        """Presence to linked peers only: the node ids we send our presence to (evio.signal.contacts)."""
        ml = self._links_mode.get(overlay)
        own = self._table.own_node_id(overlay)
        if ml is None or own is None:
            return frozenset()
        revoked = self._table.revoked(overlay)
        skip = frozenset(self._silent.get(overlay, ()))
        key = (ml.serial, revoked, skip)
        cached = self._contacts_cache.get(overlay)
        if cached is None or cached[0] != key:  # O(n) to make: asked at every presence and round
            listed = sorted(n for n in ml.members if n not in revoked)
            cached = self._contacts_cache[overlay] = (key, contacts(listed, own, skip))
        return cached[1]

    def receive_member_list(self, text: str, source: str = "local") -> bool:
        """A member list from anywhere (a file, the server host): adopted if it verifies and is newer."""
        try:
            ml = member_list.load(text)
        except identity.IdentityError as exc:
            self._drop(DropReason.BAD_REVOCATION, source, f"member list: {exc}")
            return False
        return self._adopt_members(ml, source)

    def revoked_nodes(self, overlay: str) -> frozenset[int]:
        """The node ids the overlay CA's newest revocation list we hold revokes now."""
        return self._table.revoked(overlay)

    def certificate_key(self, overlay: str, node_id: int) -> ec.EllipticCurvePublicKey | None:
        """The key of `node_id`'s certificate, from a claim in its presence whose proof held (checked against
        the overlay CA and the node id); None if none came, or it is revoked. Offers along the ring are sealed
        to it (decision 0064)."""
        known = self._claimed_keys.get((overlay, node_id))
        if known is None or node_id in self._table.revoked(overlay):
            return None
        return known[1]

    def _keep_claimed_key(self, proof: identity.ClaimProof) -> None:
        key = (proof.overlay, proof.node_id)
        known = self._claimed_keys.get(key)
        if known is None or known[0] != proof.cert_der:
            public = identity.load_certificate(proof.cert_der).public_key()  # read once: the proof held
            if not isinstance(public, ec.EllipticCurvePublicKey):
                return
            self._claimed_keys[key] = (proof.cert_der, public)
        self._claimed_keys.move_to_end(key)
        while len(self._claimed_keys) > MAX_PROOF_CACHE:
            self._claimed_keys.popitem(last=False)

    def message_counts(self) -> dict[str, dict[str, int]]:
        return {"out": dict(self.messages_out), "requests_in": dict(self.requests_in)}

    def drop_counts(self) -> dict[str, int]:
        return {reason.value: n for reason, n in sorted(self.drops.counts.items(), key=lambda i: i[0].value) if n}

    def presence_lists_left_out(self) -> dict[str, list[str] | int]:
        return {"lists_left_out": list(self.lists_left_out), "lists_left_out_total": self.lists_left_out_total}

    def revocation_list(self, overlay: str) -> identity.RevocationList | None:
        return self._lists.get(overlay)

    def revocation_list_text(self, overlay: str) -> str | None:
        rl = self._lists.get(overlay)
        if rl is None:
            return None
        return self._text("revocations", overlay, rl.serial, lambda: identity.list_to_text(rl))

    def receive_revocation_list(self, text: str, source: str = "local") -> bool:
        """A revocation list from anywhere (a file, the server host, a peer): adopted if it verifies and is newer."""
        try:
            rl = identity.load_list(text)
        except identity.IdentityError as exc:
            self._drop(DropReason.BAD_REVOCATION, source, str(exc))
            return False
        return self._adopt_list(rl, source)

    def check_membership(self) -> None:
        """See evio.signal.interface.Signaling.check_membership; the transport decides how."""
        if self._links_mode.keys() >= self._table.overlays:
            return  # the CA's member list is the membership, watched in its file; the roster says nothing
        self._refresh_membership()

    def register_handler(self, action: str, handler: Handler) -> None:
        """Serve requests named `action`; the handler returns the response body.

        Raise HandlerRejected / HandlerBadRequest to answer with that error; any
        other exception answers ``internal`` (and is logged here).
        """
        if not protocol.is_valid_action(action):
            raise ValueError(f"bad action name {action!r}")
        if action in self._handlers:
            raise ValueError(f"a handler for {action!r} is already registered")
        self._handlers[action] = handler

    async def wait_connected(self, timeout: float | None = None) -> None:
        await self.clock.wait_for(self._ready.wait(), timeout)

    async def request(
        self, overlay: str, peer: int, action: str, body: Body, timeout: float | None = None
    ) -> Body:
        """Send `action` to node `peer` of `overlay`; the response body, or RequestError.

        ProtocolError if `body` itself cannot be sent (not plain JSON, too large).
        """
        own = self._table.own_node_id(overlay)
        if own is None:
            raise RequestError(ErrorReason.UNKNOWN_PEER, f"not a member of overlay {overlay}")
        if not self._connected:
            raise RequestError(ErrorReason.NOT_CONNECTED)
        jid = self._table.jid_of(overlay, peer)
        limit = self.limits.request_timeout if timeout is None else timeout
        if jid is None:
            jid = await self._reach(overlay, peer, min(limit, ANSWER_WAIT))
        if jid is None:
            raise RequestError(ErrorReason.UNKNOWN_PEER, f"{peer:032x} is not present in {overlay}")
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Body] = loop.create_future()
        pending = self._transactions.start(overlay, peer, action, self.clock.now(), limit, waiter)
        try:
            text = protocol.encode(
                Request(overlay, own, peer, pending.txid, action, body), self.limits.max_payload_bytes
            )
        except ProtocolError:
            self._transactions.cancel(pending.txid)
            raise
        self._transmit(jid, text, pending.txid)
        self.messages_out[action] += 1
        self._arm_timer()
        try:
            return await waiter
        finally:
            self._transactions.cancel(pending.txid)  # a no-op unless the caller was cancelled

    # ------------------------------------------------------------------ for the transport

    def _transmit(self, to: str, text: str, msg_id: str | None) -> None:
        raise NotImplementedError

    def _refresh_membership(self) -> None:
        """Get the server's membership list again and feed it to `_membership_changed`."""
        raise NotImplementedError

    def _send_directed(self, to: str, answer: bool) -> None:
        """Send our presence (announcement and identity) to `to` alone; `answer`: it answers theirs."""
        raise NotImplementedError

    def _send_members(self, to: str, text: str) -> None:
        """Send a member list message (a list, or an ask for one) to `to` alone; the transport does it."""

    def _send_probe(self, to: str) -> None:
        """Ask the server for the presence of the bare JID `to` (a presence probe); the transport does it."""

    def _members_hint(self) -> str | None:
        """For our presence: the serial of each overlay's member list we hold (decision 0063), or None."""
        serials = {ov: ml.serial for ov, ml in sorted(self._links_mode.items()) if ml is not None}
        return json.dumps(serials, separators=(",", ":")) if serials else None

    def _announcement(self) -> str:
        members = sorted(self._table_memberships().items())
        memberships = tuple(Membership(ov, nid) for ov, nid in members)
        return protocol.encode_announcement(Announcement(memberships, protocol.FEATURES))

    def _identity_document(self, own_full_jid: str) -> str | None:
        """The identity element for our presence (trust mode): our proofs and the lists we hold; None without trust."""
        if not self._identities:
            return None
        if self._own_proofs[0] != own_full_jid:  # signed once per session JID
            proofs = tuple(
                identity.make_proof(i.key, i.cert, own_full_jid, ov, self.node_id(ov))
                for ov, i in sorted(self._identities.items())
            )[: identity.MAX_CLAIMS]
            self._own_proofs = (own_full_jid, proofs)
        key = (own_full_jid, tuple((ov, rl.serial) for ov, rl in sorted(self._lists.items())))
        if self._own_document[0] != key:  # encoded once per session and list: sent in every directed presence
            self._own_document = (key, self._fit_document(self._own_proofs[1]))
        return self._own_document[1]

    def _fit_document(self, proofs: tuple[identity.ClaimProof, ...]) -> str:
        """Our claims and the lists that fit beside them (`identity.encode_within`, decision 0081); what is left
        out is counted and logged here, once per document made. Never raises: this runs in the session start
        and in presence handlers (review21q Q1)."""
        try:
            text, left = identity.encode_within(proofs, self._lists.values())
        except identity.IdentityError as exc:  # our claims alone too large: our own certificates, not a peer's
            log.error("signal %s: identity element without claims or lists: %s", self.account, exc)
            text, left = identity.encode(identity.IdentityDocument()), tuple(self._lists.values())
        self.lists_left_out = tuple(sorted(rl.overlay for rl in left))
        if left:
            self.lists_left_out_total += len(left)
            log.warning("signal %s: revocation lists of %s left out of our presence (%d bytes at most): they spread "
                        "over the overlay and from the file beside the CA", self.account,
                        ", ".join(f"{rl.overlay} ({len(rl.revoked)} ids)" for rl in left),
                        identity.MAX_DOCUMENT_BYTES)  # fmt: skip
        return text

    def _watch_revocation_files(self) -> None:
        self._file_timer = None
        for ident in self._identities.values():
            for path, limit, receive in ((ident.revocation_file, identity.MAX_DOCUMENT_BYTES,
                                          self.receive_revocation_list),
                                         (ident.member_file, member_list.MAX_TEXT_BYTES,
                                          self.receive_member_list)):  # fmt: skip
                if path is None:
                    continue
                try:
                    st = path.stat()
                    seen = (st.st_mtime_ns, st.st_size)
                    if self._file_seen.get(path) == seen or st.st_size > limit:
                        continue
                    self._file_seen[path] = seen
                    text = path.read_text()
                except OSError:
                    continue  # not there (yet): the common case
                receive(text, str(path))  # refusals are counted and logged there
        self._file_timer = self.clock.call_later(REVOCATION_POLL, self._watch_revocation_files)

    def _announce_again(self) -> None:
        """Send our presence again (a newer revocation list to pass on); the transport does it."""

    def _load_initial_lists(self) -> None:
        """The lists known at start (a file beside the CA): adopted without announcing them, since nothing was
        announced yet (the subclass is still being made) and the first presence of each session carries them
        (review21q Q3: announcing here read the transport before it was set, and the node could not start).

        The newest this node adopted before, kept in its state directory, goes first: a file beside the CA older
        than it (a backup put back) is not taken, and is logged and counted (`stale_list`); an older member list
        file is written over with the kept one. Without this the node started from the older serial and took any
        list above it, a revoked member's readmission among them, until a newer one reached it (0063, amended)."""
        for overlay, ident in self._identities.items():
            kept = self._read_kept(ident, KEPT_REVOCATIONS, identity.load_list, identity.list_refusal)
            if kept is not None:
                self._adopt_list(kept, self._kept_source(ident, KEPT_REVOCATIONS), announce=False)
            started = ident.revocations
            if started is not None and not self._rolled_back(ident, "revocation", ident.revocation_file,
                                                             started.serial, kept):  # fmt: skip
                self._adopt_list(started, "config", announce=False)
            if overlay not in self._links_mode:
                continue  # the roster's membership: a member list kept from before does not change the mode
            kept_members = self._read_kept(ident, KEPT_MEMBERS, member_list.load, member_list.refusal)
            held = self._links_mode[overlay]
            if kept_members is not None and (held is None or kept_members.serial > held.serial):
                if held is not None:
                    self._rolled_back(ident, "member", ident.member_file, held.serial, kept_members)
                self._adopt_members(kept_members, self._kept_source(ident, KEPT_MEMBERS), flood=False)
            elif held is not None and (kept_members is None or held.serial > kept_members.serial):
                self._keep_copy(ident, KEPT_MEMBERS, self._member_text(held), "config")

    def _read_kept(self, ident: OverlayIdentity, name: str, load: Callable[[str], _Signed],
                   refusal: Callable[[identity.TrustAnchor, _Signed], str | None]) -> _Signed | None:  # fmt: skip
        """The list of kind `name` kept in `ident.kept_dir`, if there and the overlay CA's (a CA since replaced
        signed none of the new CA's lists: its kept ones are ignored, and logged)."""
        if ident.kept_dir is None:
            return None
        path = ident.kept_dir / name
        try:
            document = load(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, identity.IdentityError) as exc:
            log.warning("signal overlay=%s: %s not read (%s): the files beside the CA are used", ident.anchor.overlay,
                        path, exc)  # fmt: skip
            return None
        why = refusal(ident.anchor, document)
        if why is not None:
            log.warning("signal overlay=%s: %s ignored: %s", ident.anchor.overlay, path, why)
            return None
        return document

    @staticmethod
    def _kept_source(ident: OverlayIdentity, name: str) -> str:
        return str(ident.kept_dir / name) if ident.kept_dir is not None else "kept"

    def _rolled_back(self, ident: OverlayIdentity, kind: str, path: Path | None, serial: int,
                     kept: identity.RevocationList | member_list.MemberList | None) -> bool:  # fmt: skip
        """Whether the `kind` list of `serial` in the file `path` beside the CA is older than the one this node kept:
        then logged and counted (`stale_list`), and not taken."""
        if kept is None or serial >= kept.serial:
            return False
        self.drops.record(DropReason.STALE_LIST, str(path), self.clock.now())
        if path is not None:
            try:
                st = path.stat()
                self._file_seen[path] = (st.st_mtime_ns, st.st_size)  # counted here: not again by the file watcher
            except OSError:
                pass
        log.warning("signal %s list overlay=%s: %s has serial %d, older than serial %d this node adopted before "
                    "(kept in %s): the newer one is kept; was a backup put back?", kind, ident.anchor.overlay, path,
                    serial, kept.serial, ident.kept_dir)  # fmt: skip
        return True

    def _keep_copy(self, ident: OverlayIdentity, name: str, text: str, source: str) -> None:
        """The list just adopted (`text`), kept in the state directory for the next start (see `_load_initial_lists`)."""
        if ident.kept_dir is None or source == self._kept_source(ident, name):
            return
        try:
            # Every directory made here private, the state directory too when this makes it first (`mkdir`'s
            # parents would take the umask's mode, and the control socket's `mkdir` leaves an existing one as it is)
            for directory in reversed([d for d in (ident.kept_dir, *ident.kept_dir.parents) if not d.exists()]):
                directory.mkdir(mode=0o700, exist_ok=True)
            _write_whole(ident.kept_dir / name, text)
        except OSError as exc:
            log.warning("signal overlay=%s: %s not kept: %s", ident.anchor.overlay, ident.kept_dir / name, exc)

    def _adopt_list(self, rl: identity.RevocationList, source: str, announce: bool = True) -> bool:
        ident = self._identities.get(rl.overlay)
        if ident is None:
            return False  # not an overlay we hold in trust mode: not ours to judge
        current = self._lists.get(rl.overlay)
        if current is not None and rl.serial <= current.serial:
            self._stale(rl.overlay, "revocation", rl.serial, rl.signature, current.serial, current.signature, source)
            return False  # what we have already (the common case: every presence repeats it)
        if rl.signature in self._refused_lists:  # a bad list repeated in every presence: checked once
            self._drop(DropReason.BAD_REVOCATION, source, f"revocation list for {rl.overlay}: refused before")
            return False
        refusal = identity.list_refusal(ident.anchor, rl)
        if refusal is not None:
            self._refused_lists[rl.signature] = None
            while len(self._refused_lists) > MAX_PROOF_CACHE:
                self._refused_lists.popitem(last=False)
            self._drop(DropReason.BAD_REVOCATION, source, f"revocation list for {rl.overlay}: {refusal}")
            return False
        self._lists[rl.overlay] = rl
        self._keep_copy(ident, KEPT_REVOCATIONS, self._text("revocations", rl.overlay, rl.serial,
                                                            lambda: identity.list_to_text(rl)), source)  # fmt: skip
        revoked = rl.node_ids(time.time())
        log.warning("signal revocation list overlay=%s serial=%d: %d node ids revoked (from %s)",
                    rl.overlay, rl.serial, len(revoked), source)  # fmt: skip
        self._apply(self._table.set_revoked(rl.overlay, revoked))
        # Revoked ids held by nobody present: their tunnels close too (the table only knows the present).
        for key in [k for k in self._known if k[0] == rl.overlay and k[1] in revoked]:
            if key in self._known:  # not reported yet under another account that held the id
                self._forget_known(key[0], key[1])
                self._events.publish(PeerRemoved(key[0], key[1], key[2], RemovalCause.MEMBERSHIP_REVOKED))
        # Passed on in our presence, unless the server host sent it: it sent it to every member online, and a
        # re-announcement to every link of every member is O(members x links) stanzas (decision 0065).
        from_server_host = source == self.account.split("@", 1)[-1]
        if announce and not from_server_host:
            self._announce_again()
        self._events.publish(RevocationAdopted(rl.overlay, rl.serial, source, from_server_host))
        return True

    def _adopt_members(self, ml: member_list.MemberList, source: str, flood: bool = True) -> bool:
        if ml.overlay not in self._links_mode:
            return False  # an overlay whose membership is the roster's (or not ours): not ours to judge
        current = self._links_mode[ml.overlay]
        if current is not None and ml.serial <= current.serial:
            self._stale(ml.overlay, "member", ml.serial, ml.signature, current.serial, current.signature, source)
            return False
        refusal = member_list.refusal(self._identities[ml.overlay].anchor, ml)
        if refusal is not None:
            self._drop(DropReason.BAD_REVOCATION, source, f"member list for {ml.overlay}: {refusal}")
            return False
        self._links_mode[ml.overlay] = ml
        self._silent.pop(ml.overlay, None)
        self._retold.pop(ml.overlay, None)
        log.info("signal member list overlay=%s serial=%d: %d members (from %s)", ml.overlay, ml.serial,
                 len(ml.members), source)  # fmt: skip
        self._keep_member_file(ml, source)
        self._keep_copy(self._identities[ml.overlay], KEPT_MEMBERS, self._member_text(ml), source)
        self._listed_changed(ml.overlay, ml)
        # Contacts told under the older list may have refused us (their older list) or been refused: told
        # again, with the newer serial, which makes them answer again.
        self._reached.clear()
        self._reach_contacts()
        self._events.publish(MemberListAdopted(ml.overlay, ml.serial, source, flood))
        return True

    def _stale(self, overlay: str, kind: str, serial: int, signature: bytes, held: int, held_signature: bytes,
               source: str) -> None:  # fmt: skip
        """A signed list not adopted as it is not newer: counted (`stale_list`) when its serial is lower than ours,
        or equal with another signature (other contents). The same list again, what every presence repeats, is not.
        A server host whose serial went back (review21q Q4) shows here, not as silence."""
        if serial < held or signature != held_signature:
            self._drop(DropReason.STALE_LIST, source, f"{kind} list for {overlay}: serial {serial}, ours {held}")

    def _keep_member_file(self, ml: member_list.MemberList, source: str) -> None:
        """A list adopted from elsewhere than its file (the overlay, the server host) replaces the file beside the
        CA, so that a restart starts from it (decision 0063). Written whole, then renamed: never half a list."""
        path = self._identities[ml.overlay].member_file
        if path is None or source == str(path):
            return
        try:
            _write_whole(path, self._member_text(ml))
            st = path.stat()
            self._file_seen[path] = (st.st_mtime_ns, st.st_size)  # ours: not read back as news
        except OSError as exc:
            log.warning("signal member list overlay=%s serial=%d: not written to %s: %s", ml.overlay, ml.serial,
                        path, exc)  # fmt: skip

    def _identity_message(self, sender: str, text: str) -> None:
        """An identity element in a message: the server host (from our server's domain) or a member hands on a
        revocation list. Anyone else is dropped before any signature is checked."""
        domain = self.account.split("@", 1)[-1]
        if sender != domain and not any(self._table.is_member(ov, sender) for ov in self._identities):
            self._drop(DropReason.NOT_MEMBER, sender, "identity message from a stranger")
            return
        try:
            doc = identity.decode(text)
        except identity.IdentityError as exc:
            self._drop(DropReason.MALFORMED, sender, f"bad identity document: {exc}")
            return
        for rl in doc.revocations:
            self._adopt_list(rl, sender)

    def _members_message(self, sender: str, text: str) -> None:
        """A member list message (decision 0063): an ask for our list, or a list. A list is taken from the server
        host (our server's domain), which sends one when it adds a member, or from a member we asked; from
        anyone else it is dropped before any signature is checked."""
        if len(text) <= MAX_MEMBERS_HINT_BYTES:  # an ask is small; a list never has the key "ask"
            try:
                ask = json.loads(text)
            except RecursionError:  # no ValueError, and never a list (review21i I8)
                self._drop(DropReason.MALFORMED, sender, "member list message nested too deeply")
                return
            except ValueError:
                ask = None
            if isinstance(ask, dict) and "ask" in ask:
                if set(ask) != {"ask"} or not isinstance(ask["ask"], str):
                    self._drop(DropReason.MALFORMED, sender, "bad member list ask")
                    return
                self._answer_members(sender, ask["ask"])
                return
            if isinstance(ask, dict) and "base" in ask:
                self._members_change(sender, text)
                return
        asked = self._members_asked.get(sender)
        if sender != self.account.split("@", 1)[-1] and (asked is None or self.clock.now() - asked > MEMBERS_ASK_WAIT):
            self._drop(DropReason.NOT_MEMBER, sender, "member list from neither the server host nor whom we asked")
            return
        self._members_asked.pop(sender, None)  # one list per ask
        self._take_list(text, sender)

    def _take_list(self, text: str, sender: str) -> None:
        """A list from the server host or whom we asked: not parsed when its head says it is not newer; parsed
        within `MEMBERS_PARSE_RATE`, else held (one, the highest serial) until the budget allows."""
        head = _LIST_HEAD_RE.match(text, 0, 200)
        serial = int(head[2]) if head is not None else 1 << 53
        if head is not None:
            if head[1] not in self._links_mode:
                return  # as `_adopt_members`: not ours to judge
            ml = self._links_mode[head[1]]
            if ml is not None and serial <= ml.serial:
                if serial < ml.serial:  # an equal one is most often ours again (from the overlay first)
                    self._stale(ml.overlay, "member", serial, b"", ml.serial, b"", sender)
                return  # not newer: nothing to parse
        now = self.clock.now()
        budget = self._members_parse_budget(now)
        if self._list_held is None and budget.take(now):
            self.receive_member_list(text, sender)  # refusals are counted and logged there
            return
        held = self._list_held
        if held is not None and held[0] > serial:
            self._drop(DropReason.PEER_OVERLOADED, sender, "member list: over the parse budget")
            return
        if held is not None:
            self._drop(DropReason.PEER_OVERLOADED, held[2], "member list: over the parse budget, replaced")
        self._list_held = (serial, text, sender)
        self._arm_held_timer(budget, now)

    def _members_parse_budget(self, now: float) -> TokenBucket:
        if self._parse_budget is None:
            self._parse_budget = TokenBucket(MEMBERS_PARSE_RATE, now)
        return self._parse_budget

    def _arm_held_timer(self, budget: TokenBucket, now: float) -> None:
        if self._list_timer is None:
            self._list_timer = self.clock.call_later(budget.next_token(now) - now, self._take_held_list)

    def _take_held_list(self) -> None:
        """The budget allows one more: the held list first, then the held change (each takes its token)."""
        self._list_timer = None
        held, self._list_held = self._list_held, None
        change, self._change_held = self._change_held, None
        if held is not None:
            self._take_list(held[1], held[2])
        if change is not None:
            self._take_change(*change)

    def _members_change(self, sender: str, text: str) -> None:
        """A change to the member list (decision 0065), from the server host only: applied to the list we hold if
        it is the change's base, and adopted if the CA signed the list that makes. Not flooded: the server host
        sent every member online the change, and the whole list to a few, which flood it for the rest."""
        if sender != self.account.split("@", 1)[-1]:
            self._drop(DropReason.NOT_MEMBER, sender, "member list change from other than the server host")
            return
        try:
            change = member_list.load_change(text)
        except identity.IdentityError as exc:
            self._drop(DropReason.MALFORMED, sender, f"member list change: {exc}")
            return
        self._take_change(change, sender)

    def _take_change(self, change: member_list.MemberChange, sender: str) -> None:
        """A change of the server host's, parsed: applied within `MEMBERS_PARSE_RATE`, the whole lists' budget,
        since checking it costs as much as a whole list (`apply_change` copies the held list, `refusal` serialises
        the new one to check the CA's signature): forged changes of the held base, ~200 bytes each, bought the
        server O(members) of the loop apiece (review21i I1). Over the budget, one (the highest serial) is held
        until the budget allows; any other is dropped (`peer_overloaded`) and, should it have been the real one,
        made up as a missed change is: the whole list over the overlay, or from a contact asked after a moment."""
        if change.overlay not in self._links_mode:
            return  # an overlay whose membership is the roster's (or not ours)
        held = self._links_mode[change.overlay]
        if held is not None and change.serial <= held.serial:
            if change.serial < held.serial:  # an equal one is most often ours again (from the overlay first)
                self._stale(change.overlay, "member", change.serial, b"", held.serial, b"", sender)
            return  # we have it already (from the overlay, or a member we asked)
        now = self.clock.now()
        budget = self._members_parse_budget(now)
        if held is not None and change.base == held.serial and (self._change_held is not None or not budget.take(now)):
            kept = self._change_held
            if kept is None or kept[0].serial < change.serial:
                self._change_held = (change, sender)
                self._arm_held_timer(budget, now)
                if kept is None:
                    return
                change, sender = kept  # the one dropped: the lower serial
            self._drop(DropReason.PEER_OVERLOADED, sender, f"member list change {change.serial}: over the parse budget")
            self._ask_after_gap(change.overlay, change.serial)
            return
        try:
            if held is None:
                raise identity.IdentityError("no list held to change")
            ml = member_list.apply_change(held, change)  # a base not ours fails here, before any copy
        except identity.IdentityError as exc:
            # A change we missed (offline then): the whole list comes over the overlay's flood, or from a member
            # we ask, after a moment in which the change reaches it too.
            self._drop(DropReason.MEMBER_LIST_GAP, sender, f"member list change {change.serial}: {exc}")
            self._ask_after_gap(change.overlay, change.serial)
            return
        self._adopt_members(ml, sender, flood=False)

    def _ask_after_gap(self, overlay: str, serial: int) -> None:
        if overlay in self._members_reask:
            return
        delay = MEMBERS_GAP_WAIT * (0.5 + self._rng.random())
        self._members_reask[overlay] = self.clock.call_later(delay, functools.partial(self._ask_a_contact, overlay,
                                                                                      serial))  # fmt: skip

    def _ask_a_contact(self, overlay: str, serial: int) -> None:
        """Still without list `serial`: one present contact is asked for its list (at most one per interval)."""
        self._members_reask.pop(overlay, None)
        ml = self._links_mode.get(overlay)
        present = self._table.peers(overlay)
        if (ml is not None and ml.serial >= serial) or not present or not self._connected:
            return
        jid = present[self._rng.choice(sorted(present))]
        self._ask_members(jid, {overlay: serial})

    def _ask_members(self, sender: str, hint: Mapping[str, int]) -> None:
        """`sender`'s presence says it holds a newer member list than ours: ask it for the list."""
        now = self.clock.now()
        for overlay, serial in hint.items():
            if overlay not in self._links_mode:
                continue
            ml = self._links_mode[overlay]
            held = ml.serial if ml is not None else 0
            if serial <= held:
                continue
            asked_serial, asked_at = self._members_asked_at.get(overlay, (0, float("-inf")))
            # Held back only for the very serial asked for: a contact claiming a huge serial (and never
            # answering) must not keep us from asking others for the real newer list (review21f F4).
            if serial == asked_serial and now - asked_at < MEMBERS_ASK_INTERVAL:
                # Asked for that one already: its answer is on its way, unless whom we asked never answers
                # (a hostile contact saying the same serial again and again): then, once the interval is out,
                # another contact that said it is asked (review21f F4).
                if overlay not in self._members_reask:
                    self._members_reask[overlay] = self.clock.call_later(
                        asked_at + MEMBERS_ASK_INTERVAL - now, functools.partial(self._ask_members_again, overlay))
                continue
            self._members_asked_at[overlay] = (serial, now)
            self._members_asked.pop(sender, None)
            self._members_asked[sender] = now
            while len(self._members_asked) > MAX_PROOF_CACHE:
                self._members_asked.popitem(last=False)
            log.info("signal member list overlay=%s: %s holds serial %d, we %d: asked", overlay, sender, serial, held)
            self._send_members(sender, json.dumps({"ask": overlay}))

    def _ask_members_again(self, overlay: str) -> None:
        """An ask held back still has no list: the contact whose presence said a newer serial and that we
        asked longest ago (or never) is asked."""
        self._members_reask.pop(overlay, None)
        ml = self._links_mode.get(overlay)
        held = ml.serial if ml is not None else 0
        waiting = [(jid, hint[overlay]) for jid, hint in self._hints.items() if hint.get(overlay, 0) > held]
        if not waiting or not self._connected:
            return
        order = {asked: i for i, asked in enumerate(self._members_asked)}  # oldest ask first
        jid, serial = min(waiting, key=lambda w: order.get(w[0], -1))
        self._members_asked_at.pop(overlay, None)
        self._ask_members(jid, {overlay: serial})

    def _answer_members(self, sender: str, overlay: str) -> None:
        """A member asks for our list: sent if it is on it, at most once per `MEMBERS_ANSWER_INTERVAL`."""
        ml = self._links_mode.get(overlay)
        bare = bare_jid(sender)
        if ml is None or bare not in ml.members.values():
            self._drop(DropReason.NOT_MEMBER, sender, f"asks for the member list of {overlay}: not on ours")
            return
        now = self.clock.now()
        if now - self._members_answered.get(bare, float("-inf")) < MEMBERS_ANSWER_INTERVAL:
            self._drop(DropReason.PEER_OVERLOADED, sender, f"asks for the member list of {overlay} again")
            return
        if self._answer_budgets is None:
            self._answer_budgets = (TokenBucket(MEMBERS_ANSWER_RATE, now), TokenBucket(MEMBERS_ANSWER_UNPROVEN_RATE, now))
        every, unproven = self._answer_budgets
        proven = self._table.node_of(overlay, sender) is not None  # in this mode a claim stands only proven
        if (not proven and unproven.next_token(now) > now) or not every.take(now):
            self._drop(DropReason.OVERLOADED, sender, f"asks for the member list of {overlay}: answers over budget")
            return
        if not proven:
            unproven.take(now)
        self._members_answered.pop(bare, None)
        self._members_answered[bare] = now
        while len(self._members_answered) > MAX_PROOF_CACHE:
            self._members_answered.popitem(last=False)
        self._send_members(sender, self._member_text(ml))

    def _member_text(self, ml: member_list.MemberList) -> str:
        return self._text("members", ml.overlay, ml.serial, lambda: member_list.to_text(ml))

    def _text(self, document: str, overlay: str, serial: int, make: Callable[[], str]) -> str:
        """The text of `overlay`'s list `document` of `serial`, made once per serial (O(entries) to make; H9)."""
        cached = self._texts.get((document, overlay))
        if cached is None or cached[0] != serial:
            cached = self._texts[document, overlay] = (serial, make())
        return cached[1]

    def _read_hint(self, sender: str, members_json: str | None) -> dict[str, int]:
        """The member list serials a presence says its sender holds: {} when none or malformed (counted)."""
        if members_json is None:
            return {}
        try:
            hint = json.loads(members_json) if len(members_json) <= MAX_MEMBERS_HINT_BYTES else None
        except (ValueError, RecursionError):  # deep nesting is no ValueError (review21i I8)
            hint = None
        if not isinstance(hint, dict) or not all(isinstance(k, str) and type(v) is int for k, v in hint.items()):
            self._drop(DropReason.MALFORMED, sender, "bad member list serials in presence")
            return {}
        return hint

    def _verified_claims(self, sender: str, doc: identity.IdentityDocument) -> set[str]:
        """The overlays whose claim proof in `doc` holds for `sender`."""
        proven: set[str] = set()
        now = datetime.datetime.now(datetime.UTC)
        for proof in doc.claims:
            ident = self._identities.get(proof.overlay)
            if ident is None:
                continue
            key = (sender, proof.overlay, proof.cert_der, proof.signature)
            ok = self._proof_cache.get(key)
            if ok is None:
                now_s = self.clock.now()
                if not (self._proof_checks.allow(bare_jid(sender), now_s)
                        and (self._table.is_member(proof.overlay, sender) or self._stranger_proof_checks.allow(None, now_s))
                        and self._all_proof_checks.allow(None, now_s)):  # fmt: skip
                    self._drop(DropReason.PROOF_RATE, sender, f"claim of {proof.node_id:032x} in {proof.overlay}: "
                               "over the account's proof checks")  # fmt: skip
                    continue
                refusal = identity.proof_refusal(ident.anchor, proof, sender, now)
                ok = refusal is None
                if not ok:
                    self._drop(DropReason.UNPROVEN, sender, f"claim of {proof.node_id:032x} in {proof.overlay}: "
                               f"{refusal}")  # fmt: skip
                self._proof_cache[key] = ok
                while len(self._proof_cache) > MAX_PROOF_CACHE:
                    self._proof_cache.popitem(last=False)
            if ok:
                proven.add(f"{proof.overlay}\x00{proof.node_id:032x}")
                self._keep_claimed_key(proof)
        return proven

    def _table_memberships(self) -> dict[str, int]:
        return {ov: self.node_id(ov) for ov in self._table.overlays}

    def _session_up(self, own_jid: str) -> None:
        """Logged in, membership known and our announcement sent."""
        self._table.set_own_jid(own_jid)
        self._account_failure = None
        self.failures_in_row = 0
        self._connected = True
        self.connected_since = time.time()
        self.sessions += 1
        self._ready.set()
        if self._file_timer is None and any(i.revocation_file or i.member_file for i in self._identities.values()):
            self._watch_revocation_files()
        log.info("signal %s: logged in as %s", self.account, own_jid)
        self._events.publish(Connected(own_jid))
        self._reach_contacts()
        self._probe_later(0)

    def _login_failed(self, failure: LoginFailure, logged_elsewhere: bool = False) -> None:
        """A login attempt failed (or a session ended) for `failure`: logged when it changes, not at every retry."""
        previous = self._account_failure
        self.failures_in_row += not logged_elsewhere  # a session that ended is not a failed attempt
        key = (failure.step.value, failure.message)
        now = self.clock.now()
        if previous is not None and failure.same_as(previous):
            self._account_failure = LoginFailure(failure.step, failure.message, previous.since)
            if self._failure_log.should_log(key, now):
                log.warning("signal %s: login still failing (%s, %d attempts): %s", self.account, failure.step.value,
                            self.failures_in_row, failure.message)
            return
        self._account_failure = failure
        self._failure_log.should_log(key, now)  # the next repeat waits FAILURE_RELOG_INTERVAL
        if not logged_elsewhere:
            log.warning("signal %s: login failed (%s): %s", self.account, failure.step.value, failure.message)

    def _membership_checked(self, missing: Mapping[str, LoginFailure]) -> None:
        """Overlays whose roster group is missing, as read from the roster now (each logged when it changes)."""
        for overlay in self._membership_failures.keys() - missing.keys():
            log.info("signal %s: now a member of overlay %s", self.account, overlay)
        current: dict[str, LoginFailure] = {}
        for overlay, failure in missing.items():
            previous = self._membership_failures.get(overlay)
            if previous is not None and failure.same_as(previous):
                failure = previous
            else:
                log.warning("signal %s: %s", self.account, failure.message)
            current[overlay] = failure
        self._membership_failures = current

    def _session_down(self, reason: str) -> None:
        was_connected = self._connected
        self._connected = False
        self.connected_since = None
        self._ready.clear()
        for pending in self._transactions.close_all():
            _fail(pending.waiter, RequestError(ErrorReason.NOT_CONNECTED, reason))
        self._cancel_timer()
        if was_connected:
            level = logging.INFO if reason == "stopped" else logging.WARNING
            log.log(level, "signal %s: session ended (%s)", self.account, reason)
            self._events.publish(Disconnected(reason))
        self._membership.clear()
        self._roster_membership.clear()
        self._told.clear()
        self._answered.clear()
        self._owed.clear()
        if self._owed_timer is not None:
            self._owed_timer.cancel()
            self._owed_timer = None
        self._hints.clear()
        self._reached.clear()
        if self._recontact_timer is not None:
            self._recontact_timer.cancel()
            self._recontact_timer = None
        if self._probe_timer is not None:
            self._probe_timer.cancel()
            self._probe_timer = None
        self._probed.clear()
        self._probe_answers.clear()
        for timer in self._members_reask.values():
            timer.cancel()
        self._members_reask.clear()
        if self._list_timer is not None:  # a held list is asked for again at the next login
            self._list_timer.cancel()
            self._list_timer = None
        self._list_held = self._change_held = None
        self._apply(self._table.clear())

    def _membership_changed(self, current: Mapping[str, frozenset[str]]) -> None:
        """The server's view of who is in which overlay: bare JID -> overlay ids (its roster groups).

        For overlays with presence to linked peers only, the server's view counts for nothing: the CA's
        member list says who is a member (`_apply_membership` merges both)."""
        self._roster_membership = dict(current)
        self._apply_membership()

    def _roster_changed(self, changes: Mapping[str, frozenset[str]]) -> None:
        """A roster push: the overlays of the accounts it names (empty: none); the others are as they were. Costs
        O(its accounts), not O(roster) as `_membership_changed` (review21h H6)."""
        links = self._links_mode
        for bare, overlays in changes.items():
            if overlays:
                self._roster_membership[bare] = overlays
            else:
                self._roster_membership.pop(bare, None)
        self._membership_from({bare: overlays - links.keys() for bare, overlays in changes.items()}, set(changes))

    def _apply_membership(self) -> None:
        links = self._links_mode
        current: dict[str, frozenset[str]] = {}
        for bare, overlays in self._roster_membership.items():
            kept = overlays - links.keys()
            if kept:
                current[bare] = kept
        self._membership_from(current)

    def _listed_changed(self, overlay: str, ml: member_list.MemberList | None) -> None:
        """The CA's member list of `overlay` is `ml` now: the peer table's membership there, and node ids
        remembered for accounts it no longer pairs with them revoked, present or not (as `_membership_from`)."""
        accounts = frozenset(ml.members.values()) - {self.account} if ml is not None else frozenset()
        for key in list(self._known):
            ov, node_id, bare = key
            if key not in self._known or ov != overlay or (ml is not None and ml.members.get(node_id) == bare):
                continue
            self._unknow(key)
            holder = self._table.jid_of(ov, node_id)
            if holder is not None and bare_jid(holder) == bare and bare not in accounts:
                continue  # present: the table reports it, below
            log.info("signal peer revoked overlay=%s node=%032x peer=%s (not on the member list)", ov, node_id, bare)
            self._forget_known(ov, node_id)
            self._events.publish(PeerRemoved(ov, node_id, bare, RemovalCause.MEMBERSHIP_REVOKED))
        self._apply(self._table.set_listed(overlay, accounts))

    def _membership_from(self, current: Mapping[str, frozenset[str]], only: set[str] | None = None) -> None:
        """`current`: the whole membership, or with `only`, that of the accounts in it (the rest unchanged)."""
        # Node ids remembered for accounts that lose the overlay: revoked, present or not. Decided before the
        # table hands any of them on (a freed id may go to a waiting claimant at once, and would then be
        # remembered as its): the removed member's tunnels must close whoever holds the id next.
        for key in list(self._known):
            overlay, node_id, bare = key
            if key not in self._known or overlay in current.get(bare, frozenset()) or overlay in self._links_mode:
                continue
            if only is not None and bare not in only:
                continue
            self._unknow(key)
            holder = self._table.jid_of(overlay, node_id)
            if holder is not None and bare_jid(holder) == bare:
                continue  # present: the table reports it, below
            log.info("signal peer revoked overlay=%s node=%032x peer=%s (no longer a member)", overlay, node_id, bare)
            self._forget_known(overlay, node_id)
            self._events.publish(PeerRemoved(overlay, node_id, bare, RemovalCause.MEMBERSHIP_REVOKED))
            if holder is not None and overlay in (current if only is None or bare_jid(holder) in only
                                                  else self._membership).get(bare_jid(holder), frozenset()):
                # The id passed on to a member after the removed account held it, and the removed account's
                # tunnel may be the one still up: it closes, and the holder is linked again.
                self._remember(overlay, node_id, bare_jid(holder))
                self._events.publish(PeerAdded(overlay, node_id, holder))
        for bare in self._membership.keys() | current.keys() if only is None else only:
            new = current.get(bare, frozenset())
            if self._membership.get(bare, frozenset()) != new:
                self._apply(self._table.set_membership(bare, new))
        if only is None:
            self._membership = {b: o for b, o in current.items() if o}
        else:
            for bare in only:
                if current.get(bare):
                    self._membership[bare] = current[bare]
                else:
                    self._membership.pop(bare, None)
        self._table.retain_bindings(self._membership, only)  # node ids of accounts no longer listed are free again

    def _presence_available(self, sender: str, announcement_json: str | None, identity_json: str | None = None,
                            answer: bool = False, members_json: str | None = None) -> None:  # fmt: skip
        """`answer`: the sender's presence answers ours (presence to linked peers only): not answered again.
        `members_json`: the serials of the member lists the sender holds (decision 0063)."""
        announcement = Announcement(())
        if announcement_json is not None:
            try:
                announcement = protocol.decode_announcement(announcement_json, self.limits.max_payload_bytes)
            except ProtocolError as exc:
                self._drop(_drop_reason(exc), sender, f"bad announcement: {exc}")
            self._count_ignored(sender, announcement.ignored, "announcement")
        proven: set[str] = set()
        if identity_json is not None and self._identities:
            try:
                doc = identity.decode(identity_json)
            except identity.IdentityError as exc:
                self._drop(DropReason.MALFORMED, sender, f"bad identity document: {exc}")
            else:
                # Lists first: a revoked id's claim in the same presence is then refused.
                for rl in doc.revocations:
                    if self._table.is_member(rl.overlay, sender):
                        self._adopt_list(rl, sender)
                proven = self._verified_claims(sender, doc)
        overlays = {m.overlay for m in announcement.members if f"{m.overlay}\x00{m.node_id:032x}" in proven}
        hint: dict[str, int] = {}
        if self._links_mode:
            announcement = self._listed_claims(sender, announcement, overlays)
            hint = self._read_hint(sender, members_json)
        self._apply(self._table.on_available(sender, announcement, overlays))
        if self._probed and bare_jid(sender) in self._probed:
            self._probed.discard(bare_jid(sender))
            self._probe_answers.append(bare_jid(sender))
            self.presences_recovered += 1
        if self._links_mode:
            self._hints[sender] = hint
            if len(self._hints) > MAX_PROOF_CACHE:  # senders come and go; their unavailable may never come
                del self._hints[next(iter(self._hints))]
        if (self._links_mode and not answer and self._connected
                and any(m.overlay in self._links_mode for m in announcement.members)):  # fmt: skip
            self._answer_presence(sender, hint)
        if hint and self._connected:
            self._ask_members(sender, hint)

    def _answer_presence(self, sender: str, hint: dict[str, int]) -> None:
        """Presence to linked peers only: a listed member's presence is answered with ours once per session, and
        again when its member list serials changed (it took a newer list: it may have refused our presence under
        the older one). Either at most once per `HINT_ANSWER_INTERVAL` per account: a member alternating its
        serials (review21q Q2), or ending and starting its session (review21s finding 2), had every presence
        answered, ours up to 15 times its bytes. One held back is owed, not lost: answered when the interval
        ends, if that session is still there and says the same (`_answer_owed`), so an honest member that
        restarted waits for it at most the interval. A serial that rose to the one we hold, above any answered
        for that session, is answered at once: the member just took our list and may have refused our presence
        under its older one (a newcomer's first links waited for the next round without it); each such rise is
        answered once, so a member alternating its serials still gets nothing more."""
        now = self.clock.now()
        account = bare_jid(sender).lower()
        told = self._told.get(sender)
        peak: dict[str, int] = {}
        caught_up = False
        if told is not None:
            said, _, peak = told
            if said == hint:
                self._owed.pop(sender, None)  # what it said when answered: nothing owed any more
                return
            caught_up = any(
                serial > peak.get(ov, 0) and (ml := self._links_mode.get(ov)) is not None and serial == ml.serial
                for ov, serial in hint.items()
            )
        last = self._answered.get(account)
        if not caught_up and last is not None and now - last < HINT_ANSWER_INTERVAL:
            what = "member list serials changed again" if told is not None else "a new session"
            self._drop(DropReason.HINT_ANSWER_RATE, sender, f"{what}: {account} answered {now - last:.1f} s ago, "
                       f"answered again {HINT_ANSWER_INTERVAL:g} s after that")  # fmt: skip
            self._owe(sender, hint, last + HINT_ANSWER_INTERVAL)
            return
        self._owed.pop(sender, None)
        peak = {ov: max(serial, peak.get(ov, 0)) for ov, serial in {**peak, **hint}.items()}
        self._told[sender] = (hint, now, peak)
        self._answered[account] = now
        self._answered.move_to_end(account)
        while self._answered:  # oldest first: those past the interval hold nothing back any more
            first, at = next(iter(self._answered.items()))
            if now - at < HINT_ANSWER_INTERVAL and len(self._answered) <= MAX_PROOF_CACHE:
                break
            del self._answered[first]
        self._send_directed(sender, answer=True)

    def _owe(self, sender: str, hint: dict[str, int], due: float) -> None:
        self._owed.pop(sender, None)
        self._owed[sender] = (hint, due)  # last: the latest due
        if len(self._owed) > MAX_PROOF_CACHE:  # sessions come and go; their unavailable may never come
            del self._owed[next(iter(self._owed))]
        self._arm_owed()

    def _arm_owed(self) -> None:
        if not self._owed:
            return
        due = min(d for _, d in self._owed.values())
        if self._owed_timer is not None and self._owed_due <= due:
            return
        if self._owed_timer is not None:
            self._owed_timer.cancel()
        self._owed_timer, self._owed_due = self.clock.call_at(due, self._answer_owed), due

    def _answer_owed(self) -> None:
        """The presences held back whose interval ended are answered now (`_answer_presence` again: one of the
        account answered meanwhile holds it back once more)."""
        self._owed_timer = None
        now = self.clock.now()
        due = [sender for sender, (_, at) in self._owed.items() if at <= now]
        for sender in due:
            hint, _ = self._owed.pop(sender)
            if self._connected and sender in self._hints:  # the session is still there
                self._answer_presence(sender, hint)
        self._arm_owed()

    def _listed_claims(self, sender: str, announcement: Announcement, proven: set[str]) -> Announcement:
        """Presence to linked peers only: a claim stands only proven and as the CA's member list pairs them."""
        kept = []
        for m in announcement.members:
            if m.overlay in self._links_mode:
                ml = self._links_mode[m.overlay]
                listed = None if ml is None else ml.members.get(m.node_id)
                if listed != bare_jid(sender):
                    self._drop(DropReason.NOT_MEMBER, sender, f"{m.node_id:032x} in {m.overlay}: not so listed")
                    continue
                if m.overlay not in proven:
                    self._drop(DropReason.UNPROVEN, sender, f"claim of {m.node_id:032x} in {m.overlay}: no proof")
                    continue
            kept.append(m)
        if len(kept) == len(announcement.members):
            return announcement
        return replace(announcement, members=tuple(kept))

    def _reach_contacts(self) -> None:
        """Presence to linked peers only: tell the contacts not present that we are online (their bare JIDs)."""
        if not self._links_mode or not self._connected:
            return
        for overlay, ml in self._links_mode.items():
            if ml is None:
                continue
            present = self._table.peers(overlay)
            for node_id in sorted(self.contacts(overlay)):
                account = ml.members[node_id]
                if node_id not in present and account not in self._reached:
                    self._reached.add(account)
                    self._send_directed(account, answer=False)
        if self._recontact_timer is None:
            interval = max(RECONTACT_INTERVAL, RECONTACT_LOGINS * self._last_login_time())
            delay = interval * (0.75 + 0.5 * self._rng.random())
            self._recontact_timer = self.clock.call_later(delay, self._recontact)

    def _recontact(self) -> None:
        """A round: contacts still silent are told again (they may be back), and skipped once told twice."""
        self._recontact_timer = None
        for overlay, ml in self._links_mode.items():
            if ml is None:
                continue
            present = self._table.peers(overlay)
            silent = {n for n in self.contacts(overlay) if n not in present and ml.members[n] in self._reached}
            told = self._retold.setdefault(overlay, set())
            skipped = self._silent.setdefault(overlay, set())
            skipped -= present.keys()  # back: its place in the window is its own again
            skipped |= silent & told
            told -= present.keys()
            told |= silent
            self._reached -= {ml.members[n] for n in silent}
        self._reach_contacts()

    def _last_login_time(self) -> float:
        """Seconds our last login took (the transport's measure; 0 where logins take no time)."""
        return 0.0

    def _probe_later(self, round_: int) -> None:
        """Round `round_` (from 0) of presence probes after a login (decision 0067): overlays of the roster only."""
        if self._probe_timer is not None:
            self._probe_timer.cancel()
            self._probe_timer = None
        if round_ == 0:
            self._probed.clear()
            self._probe_answers.clear()
        if all(ov in self._links_mode for ov in self._table.overlays):
            return  # the CA's member list: contacts are told again every round (`_recontact`)
        after = max(PROBE_AFTER, PROBE_LOGINS * self._last_login_time()) * PROBE_GROWTH**round_
        self._probe_timer = self.clock.call_later(after * (0.75 + 0.5 * self._rng.random()),
                                                  functools.partial(self._probe_absent, round_))  # fmt: skip

    def _probe_absent(self, round_: int) -> None:
        """Probe the roster members we hold no presence of; a round after the first only if the last brought one."""
        self._probe_timer = None
        answers, self._probe_answers = self._probe_answers, []
        if answers:
            log.info("signal %s: presence of %d member(s) came only on our probe (the server had not passed it on): "
                     "%s", self.account, len(answers), ", ".join(sorted(answers)[:8]))  # fmt: skip
        if not self._connected or round_ >= PROBE_ROUNDS or (round_ > 0 and not answers):
            self._probed.clear()
            return
        present = {bare_jid(j) for ov in self._table.overlays if ov not in self._links_mode
                   for j in self._table.peers(ov).values()}  # fmt: skip
        absent = sorted(b for b, ovs in self._membership.items() if b not in present and b != self.account
                        and any(ov not in self._links_mode for ov in ovs))  # fmt: skip
        self._probed = set(absent)
        for bare in absent:
            self._send_probe(bare)
        self.presence_probes += len(absent)
        if absent:
            log.debug("signal %s: round %d: %d member(s) with no presence probed", self.account, round_ + 1, len(absent))
            self._probe_later(round_ + 1)

    def _tell_links_again(self) -> None:
        """Our presence changed (a newer revocation list to pass on): the peers we told get it again."""
        for overlay in self._links_mode:
            for jid in self._table.peers(overlay).values():
                self._send_directed(jid, answer=True)

    async def _reach(self, overlay: str, peer: int, limit: float) -> str | None:
        """Presence to linked peers only: a listed member we have no presence of is told ours, and we wait
        for its answer up to `limit`; its full JID, or None (not listed, or silent)."""
        ml = self._links_mode.get(overlay)
        if ml is None or peer not in ml.members or peer in self._table.revoked(overlay):
            return None
        appeared: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def added(event: PeerAdded) -> None:
            if event.overlay == overlay and event.node_id == peer and not appeared.done():
                appeared.set_result(event.jid)

        subscription = self.subscribe(PeerAdded, added)
        try:
            self._reached.add(ml.members[peer])
            self._send_directed(ml.members[peer], answer=False)
            return await self.clock.wait_for(appeared, limit)
        except TimeoutError:
            return None
        finally:
            subscription.cancel()

    def _presence_unavailable(self, sender: str, returning: bool = False) -> None:
        """`returning`: the session said it ends only to log in again at once (a membership check)."""
        self._told.pop(sender, None)
        self._owed.pop(sender, None)  # its last answer's time stays with its account (_answered)
        self._hints.pop(sender, None)
        if "/" in sender:
            self._apply(self._table.on_unavailable(sender, returning))
            return
        # From a bare JID: no session of that account is online.
        for overlay in self._table.overlays:
            for jid in list(self._table.peers(overlay).values()):
                if bare_jid(jid) == sender:
                    self._apply(self._table.on_unavailable(jid))

    def _payload_received(self, sender: str, text: str) -> None:
        try:
            envelope = protocol.decode(text, self.limits.max_payload_bytes)
        except ProtocolError as exc:
            self._drop(_drop_reason(exc), sender, str(exc))
            return
        self._count_ignored(sender, envelope.ignored, "message")
        overlay = envelope.overlay
        own = self._table.own_node_id(overlay)
        if own is None:
            self._drop(DropReason.FOREIGN_OVERLAY, sender, f"overlay {overlay}")
            return
        if not self._table.is_member(overlay, sender):
            self._drop(DropReason.NOT_MEMBER, sender, f"not in the group of overlay {overlay}")
            return
        src = self._table.node_of(overlay, sender)
        if src is None:
            self._drop(DropReason.UNKNOWN_PEER, sender, f"no announced node id in {overlay}")
            return
        if envelope.src != src or envelope.dst != own:
            self._drop(DropReason.WRONG_NODE, sender, f"src {envelope.src:032x} dst {envelope.dst:032x}")
            return
        if isinstance(envelope, Request):
            self._start_handler(envelope, sender)
            return
        pending = self._transactions.resolve(envelope.txid, overlay, src)
        if pending is None:
            self._drop(DropReason.UNEXPECTED_RESPONSE, sender, f"txid {envelope.txid}")
            return
        self._arm_timer()
        if isinstance(envelope, Response):
            if not pending.waiter.done():
                pending.waiter.set_result(envelope.body)
        else:
            _fail(pending.waiter, RequestError(envelope.reason, envelope.text))

    def _bounced(self, msg_id: str, sender: str, condition: str) -> None:
        """The server could not deliver our message `msg_id`: fail that request now."""
        pending = self._transactions.get(msg_id)
        if pending is None:
            return
        expected = self._table.jid_of(pending.overlay, pending.peer)
        if expected is not None and bare_jid(expected) != bare_jid(sender):
            return  # not from where the request went: let it run to its deadline
        self._transactions.cancel(pending.txid)
        _fail(pending.waiter, RequestError(ErrorReason.UNREACHABLE, condition))
        self._arm_timer()

    async def _stop_endpoint(self) -> None:
        if self._file_timer is not None:
            self._file_timer.cancel()
            self._file_timer = None
        for pending in self._transactions.close_all():
            _fail(pending.waiter, RequestError(ErrorReason.CLOSED))
        for task in list(self._handler_tasks):
            task.cancel()
        if self._handler_tasks:
            await asyncio.gather(*self._handler_tasks, return_exceptions=True)
        self._cancel_timer()

    # ------------------------------------------------------------------ internals

    def _apply(self, update: Update) -> None:
        for refusal in update.refused:
            self._drop(refusal.reason, refusal.jid, f"claim of {refusal.node_id:032x} in {refusal.overlay}")
        for event in update.events:
            if isinstance(event, PeerAdded):
                log.info("signal peer added overlay=%s node=%032x peer=%s", event.overlay, event.node_id, event.jid)
                self._remember(event.overlay, event.node_id, bare_jid(event.jid))
            else:
                log.info(
                    "signal peer removed overlay=%s node=%032x peer=%s (%s)",
                    event.overlay, event.node_id, event.jid, event.cause.value,
                )
                for pending in self._transactions.fail_peer(event.overlay, event.node_id):
                    _fail(pending.waiter, RequestError(ErrorReason.UNREACHABLE, "peer left"))
                if event.cause is RemovalCause.MEMBERSHIP_REVOKED:
                    self._forget_known(event.overlay, event.node_id)  # its tunnels close: once is enough
            self._events.publish(event)

    def _remember(self, overlay: str, node_id: int, bare: str) -> None:
        key = (overlay, node_id, bare)
        self._known.pop(key, None)
        self._known[key] = None
        self._known_of.setdefault((overlay, node_id), set()).add(bare)
        while len(self._known) > self.limits.max_known_peers:
            self._unknow(next(iter(self._known)))

    def _unknow(self, key: tuple[str, int, str]) -> None:
        del self._known[key]
        accounts = self._known_of[key[:2]]
        accounts.discard(key[2])
        if not accounts:
            del self._known_of[key[:2]]

    def _forget_known(self, overlay: str, node_id: int) -> None:
        """`node_id`'s tunnels close: none of the accounts it passed through is remembered for it any more."""
        for bare in list(self._known_of.get((overlay, node_id), ())):
            self._unknow((overlay, node_id, bare))

    def _start_handler(self, request: Request, sender: str) -> None:
        # by action only for ours: a member names actions at will, and a Counter keyed by them grows forever (G4)
        self.requests_in[request.action if request.action in self._handlers else "unknown"] += 1
        mine = self._inflight_by_peer.get(sender, 0)
        if mine >= self.limits.max_inflight_per_peer:
            self._drop(DropReason.PEER_OVERLOADED, sender, f"{mine} of its requests in progress")
            return
        if len(self._handler_tasks) >= self.limits.max_inflight_handlers:
            self._drop(DropReason.OVERLOADED, sender, f"{len(self._handler_tasks)} requests in progress")
            return
        task = asyncio.create_task(self._serve(request, sender), name=f"signal handler {request.action}")
        self._handler_tasks.add(task)
        self._inflight_by_peer[sender] = mine + 1
        task.add_done_callback(lambda t: self._handler_done(t, sender))

    def _handler_done(self, task: asyncio.Task[None], sender: str) -> None:
        self._handler_tasks.discard(task)
        left = self._inflight_by_peer.get(sender, 1) - 1
        if left > 0:
            self._inflight_by_peer[sender] = left
        else:
            self._inflight_by_peer.pop(sender, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("signal request task failed", exc_info=task.exception())

    async def _serve(self, request: Request, sender: str) -> None:
        reply: Response | ErrorReply
        handler = self._handlers.get(request.action)
        if handler is None:
            reply = _error(request, ErrorReason.UNKNOWN_ACTION, request.action)
        else:
            try:
                body = await self.clock.wait_for(
                    handler(request.overlay, request.src, request.body), self.limits.handler_timeout
                )
                reply = Response(request.overlay, request.dst, request.src, request.txid, body)
            except HandlerRejected as exc:
                reply = _error(request, ErrorReason.REJECTED, str(exc))
            except HandlerBadRequest as exc:
                reply = _error(request, ErrorReason.BAD_REQUEST, str(exc))
            except TimeoutError:
                reply = _error(request, ErrorReason.TIMEOUT, f"handler took over {self.limits.handler_timeout} s")
            except Exception:
                log.exception(
                    "signal handler %s failed overlay=%s peer=%032x", request.action, request.overlay, request.src
                )
                reply = _error(request, ErrorReason.INTERNAL, "")
        try:
            text = protocol.encode(reply, self.limits.max_payload_bytes)
        except ProtocolError as exc:
            log.error("signal handler %s returned an unsendable body: %s", request.action, exc)
            text = protocol.encode(_error(request, ErrorReason.INTERNAL, "unsendable response"))
        if self._connected:
            self._transmit(sender, text, None)
            self.messages_out["response"] += 1

    def _drop(self, reason: DropReason, peer: str, detail: str) -> None:
        if self.drops.record(reason, peer, self.clock.now()):
            log.warning("signal drop %s peer=%s: %s", reason.value, peer, detail)

    def _count_ignored(self, peer: str, fields: tuple[str, ...], what: str) -> None:
        """Fields a newer peer added: read past, counted, and mentioned once per peer per interval."""
        if not fields:
            return
        self.ignored_fields += 1
        if self._ignored_logged.should_log(peer, self.clock.now()):
            log.info("signal %s from peer=%s has fields this release does not read (a newer one's): %s",
                     what, peer, ", ".join(fields))

    def _arm_timer(self) -> None:
        self._cancel_timer()
        deadline = self._transactions.next_deadline()
        if deadline is not None:
            self._timer = self.clock.call_at(deadline, self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        now = self.clock.now() + 1e-3  # a timer may fire up to a clock tick early
        for pending in self._transactions.expire(now):
            _fail(pending.waiter, RequestError(ErrorReason.NO_RESPONSE, f"{pending.action} to {pending.peer:032x}"))
        self._arm_timer()


def _error(request: Request, reason: ErrorReason, text: str) -> ErrorReply:
    return ErrorReply(request.overlay, request.dst, request.src, request.txid, reason, text)


def _fail(waiter: asyncio.Future[Body], error: BaseException) -> None:
    if not waiter.done():
        waiter.set_exception(error)


_DROP_REASONS = {
    Malformed.TOO_LARGE: DropReason.OVERSIZED,
    Malformed.UNKNOWN_KIND: DropReason.UNKNOWN_KIND,
    Malformed.BAD_VERSION: DropReason.UNSUPPORTED_VERSION,
}


def _write_whole(path: Path, text: str) -> None:
    """`text` to `path`, written whole to a temporary file and renamed (mode 0644): never half a list."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    os.replace(tmp, path)


def _drop_reason(exc: ProtocolError) -> DropReason:
    """Counted apart from malformed input: what a newer or incompatible release may send (protocol.py)."""
    return _DROP_REASONS.get(exc.reason, DropReason.MALFORMED)
