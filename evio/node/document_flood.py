"""A signed document of the overlay CA spread over the overlay itself: the mechanism behind the revocation
list's flood (`revocation_flood.py`, decision 0043) and the member list's (`member_list_flood.py`, decision 0063).

Both documents are signed by the overlay CA and carry a serial, so any node may carry them and a node adopts
only a newer one that verifies (the signal endpoint's judgement). A subclass says which document: its magic,
its header (how many chunks it may take), its size bound, the event the endpoint publishes when it adopts
one, and how to read the one held and hand in one received. Both kinds share one ethertype: a frame of the
other kind's magic is skipped uncounted (each flood has its own socket, and both see every frame).

The rules, the frame and the bounds are the revocation flood's (see `revocation_flood.py`), rule 5's firm
answers included: a HAVE's index field carries the sender's ask level (capped at 255), whatever its width
(one byte in the revocation list's header, two in the member list's). So is the manifest (review21e E3): a
document goes out as a manifest signed with the sender's member certificate (`evio.signal.revocation_manifest`),
then, for a document of more than `PART_HASHES` chunks, the parts of its chunk hashes the manifest lists, then
the chunks; a chunk joins only the assemblies whose manifest (or a part of it) lists its hash, one assembly per
signer, so no frame from an invented MAC can evict a real document's assembly.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import logging
import random
import socket
import struct
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evio.clock import REAL_CLOCK, Clock, Timer
from evio.node.ethertype_socket import open_ethertype_socket, read_frames
from evio.ratelimit import LogLimiter, Rate, TokenBucket
from evio.sdn.flood_shares import FloodShares
from evio.sdn.switch_terms import ETH_HEADER_LEN
from evio.signal import revocation_manifest
from evio.signal.events import MemberListAdopted, RevocationAdopted, Subscription
from evio.signal.host_claims import Certificates
from evio.signal.identity import TrustAnchor
from evio.signal.interface import Signaling
from evio.tunnel.path.dtls import TunnelCertificate

log = logging.getLogger(__name__)

ETHERTYPE = 0x88B5  # IEEE 802 "local experimental ethertype 1": never another protocol's
BROADCAST = b"\xff" * 6
VERSION = 1
HAVE, LIST, MANIFEST, PARTS = 1, 2, 3, 4
MAGICS = (b"EVRL", b"EVML")  # the revocation list's and the member list's: one ethertype, told apart by these
CHUNK = 1200  # of the list's text per frame: within the smallest tunnel MTU evio sets
MAX_PENDING = 16  # signers' assemblies at once: a member holds one, whatever MACs it invents (review21e E3)
ASSEMBLY_TIMEOUT = 5.0
ANSWER_INTERVAL = 2.0  # a list broadcast in answer at most this often
# and only if no broadcast of it came by (ours or another's) for this long: an ask from an invented MAC every
# ANSWER_INTERVAL drew a broadcast each (review21g G5); in the quiet, an asker that asks again is answered
# firmly, by unicast (rule 5), and a real one does (its follow-up)
ANSWER_QUIET = 30.0
ANSWER_JITTER = 0.5  # the wait before answering, so that one node answers and the others hear it
HAVE_INTERVAL = 2.0  # HAVE broadcast at most this often; link-ups in between are folded into one
REPEATS = (1.0, 3.0)  # seconds after the first broadcast of a list adopted here that it goes out again
# A revocation list the server host sent every member online goes over the overlay once, for members it did not
# reach, by the node whose wait (up to this) ends first; the others hear it and keep theirs: about one flood
# where every member used to flood it three times (n floods of n frames each, per removal)
SERVER_COPY_JITTER = 5.0
# and keeps its own only once copies signed by this many other members came by: one member broadcasting the
# list with bounds that reach every node but one cannot hold back everyone's copy (review21i I9); two copies
# also make up for one lost datagram
SERVER_COPY_WITNESSES = 2
MAX_WITNESSES = 16  # signers of copies of the held list remembered (only the count up to the above matters)
HAVE_PERIOD = 30.0  # mean seconds between a node's own periodic HAVEs, in an overlay of up to 30 nodes
HAVE_PERIOD_MAX = 60.0  # and at most this, however many HAVE senders (some perhaps invented) were heard
# While every HAVE heard names our serial, each period is twice the last, up to this (Trickle, RFC 6206): an idle
# overlay of 16 sent 4 HAVEs per node a minute across the tunnels (issue 23's idle target: 1 multicast of any kind)
HAVE_PERIOD_IDLE = 600.0
FOLLOW_UP = 1.5  # a HAVE said again this long after, unless a newer list came (answers come within ANSWER_JITTER)
FIRM_WINDOW = 4.0  # an ask repeated by the same sender this soon is answered firmly (by the few chosen)
FIRM_FEW = 2  # holders that answer a repeated ask of level 0: one lost unicast is made up by the other
FIRM_WIDEN = 4  # and each further level of the asker's asks this many times as many
FIRM_LEVEL_MAX = 8  # levels beyond choose every holder (FIRM_FEW * FIRM_WIDEN ** 8 > MAX_HEARD)
FIRM_INTERVAL = 30.0  # one asker answered firmly by this node at most this often (as the asker's longest back-off)
FIRM_RATE = Rate(0.5, 4)  # firm answers by this node to all askers together
LEVEL_MEMORY = 2 * FIRM_INTERVAL  # an asker's honoured level remembered this long: its longest back-off, twice
MAX_ASKERS = 4096  # asks remembered for FIRM_WINDOW: more than one port's flood budget brings in that time
LEVEL_MAX = 255  # a HAVE's ask level, in its index field: fits the narrowest (one byte)
# An ask given up for another node's (rule 4) is made after all if the list has not come this long after: the
# answer to that ask, or to its follow-up, would have come by then (review21j J5's residual)
ASK_GRACE = ANSWER_JITTER + FOLLOW_UP
# ... but only for a serial this many distinct senders said HAVE of, by broadcast, or sent a signed manifest of: one
# sender (a forged HAVE of a serial nobody holds) costs the overlay still about one ask (review21c R3). A sender is
# a member only as far as the switch vouches: it delivers a broadcast of this flood only under the root of the member
# whose claims hold its source MAC (`frb_receive._document_not_its_owners`), and a unicast reaches the interface by
# flows no controller judges, so a HAVE sent to our MAC alone is nobody's word (review21l L4)
NEWER_SENDERS = 2
NEWER_MEMORY = 2 * HAVE_PERIOD_MAX  # a sender of a newer serial counts this long after its HAVE
# and at most this many asks made after all while we hold one serial: a member on another's flood way may still
# speak for it there (a copy under that member's root, which `_plausible` lets through), and two names made every
# node ask once per back-off, for as long as their HAVEs came (review21l L4); a real newer list comes with the first
# or the second (rule 5), and the periodic HAVE (rule 3) still asks after that
ASKS_AFTER_ALL = 3
HEARD_WINDOW = 300.0  # a HAVE sender counts toward the overlay's size this long after it was last heard
MAX_HEARD = 4096  # senders tracked for that count: forged MACs can slow the periodic HAVE to this, no more
# Signature checks of manifests (one ECDSA verification, 0.1-0.35 ms; a certificate new here a chain as well), budgeted
# before they are made, per way in and shared fairly among the senders within it (`evio.sdn.flood_shares`, as the host
# claims' checks are: review21f F9). A manifest is charged to whoever delivered it, never to the node id it names (a
# member naming another's, certificates being public, spent that member's share and the named member's own answers
# were dropped unchecked: review21r). A broadcast reaches us only under the root of the member whose claims hold its
# source MAC (`_ring_key`, one key for all MACs nobody holds), within the switches' flood budgets. A unicast's source
# MAC is its sender's word alone (flows ahead by destination carry it, 0072): forging the very MAC of the member it
# meant to silence spent that member's share, so the switch hands it over instead (`switched`), charged to the member
# it vouches sent it, else to the tunnel it came by (decision 0043, amended for review21r's residual). Unbudgeted,
# 1,000 manifests a second to one node's MAC, each
# signed badly, took 1.8 s of its loop each second (review21o O3). An honest sender sends a few manifests per change
# (the list and its `REPEATS`), from its interface's MAC, broadcasts an answer at most every `ANSWER_INTERVAL` and one
# asker a firm one every `FIRM_INTERVAL`; a copy of a document under way costs no check (`manifest_known`), nor one of
# the document held.
CHECK_RATE = Rate(50.0, 100)  # checks a second by one way in, for all senders: 100 a second in all, about 3 % of a core
SIGNER_CHECK_RATE = Rate(2.0, 10)  # and for one sender, if contested
BROADCAST_WAY, UNICAST_WAY = 0, 1  # the ways in of the check budget ("ports" of `FloodShares`)
# Every frame of the flood's kind, before it is read further, within a budget of the same shape: per way in, shared
# fairly among the senders it is charged to (`_ring_key`, as the checks). A HAVE or a chunk costs no signature check
# but still what Python takes to read it and act on it (an ask weighed for an answer, a chunk hashed and looked up),
# 45-55 us at load 5.8: unbudgeted, a member at full rate held a node's loop as long as its frames came (issue 21).
# An honest sender needs a whole document at once, the largest member list's 889 frames (`max_frames`), and its
# repeat or an answer: a sender new to the node starts with its burst, two such documents.
FRAME_RATE = Rate(1500.0, 3600)  # frames a second by one way in, for all senders
SENDER_FRAME_RATE = Rate(300.0, 1800)  # and for one sender, if contested


def max_frames(max_bytes: int) -> int:
    """The frames of a document of `max_bytes`: its manifest, the parts of its chunk hashes, its chunks."""
    chunks = -(-max_bytes // CHUNK)
    return 1 + (revocation_manifest.listed(chunks) if chunks > revocation_manifest.PART_HASHES else 0) + chunks


class _ByMac:
    """`receive`'s default charge: the member whose host claims hold the frame's source MAC (`_ring_key`)."""


_BY_MAC = _ByMac()


def _unvouched_key(peer: int | None) -> bytes:
    """The check share of unicast manifests that came by `peer`'s tunnel (None: by a leaf port) vouched for by no
    member: apart from every member's own (a node id, 16 bytes) and from MACs (6), so what a neighbour passes on in
    others' names spends its own tunnel's share, not theirs, nor that of its own answers."""
    return b"via" + (b"" if peer is None else peer.to_bytes(16, "big"))


@dataclass
class _Assembly:
    serial: int
    count: int
    listed: tuple[bytes, ...]  # the signed manifest's hashes: the chunks', or their parts' (`revocation_manifest`)
    started: float
    broadcast: bool  # the manifest came to the broadcast address
    signer: int  # the node id whose signed manifest began it (checked)
    hashes: dict[int, bytes] = field(default_factory=dict)  # chunk index -> its hash, as far as known
    chunks: dict[int, bytes] = field(default_factory=dict)


class SignedDocumentFlood:
    """One overlay's signed documents of one kind on its bridge's interface `ifname` (trust mode only)."""

    KIND = "signed document"  # for logs
    MAGIC = b"EVxx"
    HEADER = struct.Struct("!4sBBQBB")  # magic, version, kind, serial, index, count
    MAX_BYTES = 0  # of a document's text
    EVENT: type[RevocationAdopted] | type[MemberListAdopted] = RevocationAdopted

    @property
    def max_chunks(self) -> int:
        return -(-self.MAX_BYTES // CHUNK)

    def _serial(self) -> int:
        """The serial of the document held now (0: none), read off it: every frame asks (review21o O2)."""
        raise NotImplementedError

    def _held_text(self) -> str | None:
        """The text of the document held now, or None: the endpoint's, made once per serial (review21o O2: made
        for every frame, a whole member list's `json.dumps` took 4.9 ms a HAVE at 500 members)."""
        raise NotImplementedError

    def _hand_in(self, text: str, source: str) -> bool:
        """A document assembled from the overlay, to the endpoint: True if it adopted it."""
        raise NotImplementedError

    def __init__(self, overlay: str, ifname: str, signaling: Signaling, clock: Clock = REAL_CLOCK, *,
                 node_id: int, certificate: TunnelCertificate, anchor: TrustAnchor) -> None:  # fmt: skip
        self.overlay = overlay
        self.ifname = ifname
        self._signaling = signaling
        self._clock = clock
        self.counts: Counter[str] = Counter()  # sent and received by kind, dropped by reason
        self._sock: socket.socket | None = None
        self._subscription: Subscription[Any] | None = None
        self._node_id, self._certificate, self._anchor = node_id, certificate, anchor
        self._certificates = Certificates()  # members' certificates found the CA's: checked once
        # (way in) -> manifest checks, shared among their deliverers (`_ring_key`: see `CHECK_RATE`)
        self._check_budget = FloodShares[bytes | None](CHECK_RATE, SIGNER_CHECK_RATE)
        # (way in) -> frames read, shared among their senders (see `FRAME_RATE`)
        self._frame_budget = FloodShares[bytes | None](FRAME_RATE, SENDER_FRAME_RATE, SENDER_FRAME_RATE.burst)
        self._listing: tuple[int, tuple[bytes, ...]] | None = None  # (serial held, what its manifest lists)
        self._pending: dict[int, _Assembly] = {}  # the signer's node id -> its document's chunks so far
        self._log_refused: LogLimiter[bytes] = LogLimiter(60.0)
        self.mac = b""  # the bridge interface's, ours: its place on the ring of HAVE senders (rule 5)
        self._last_answer = float("-inf")
        self._answer_timer: Timer | None = None
        self._asked: OrderedDict[bytes, float] = OrderedDict()  # asker MAC -> its last ask (HAVE), oldest first
        # asker MAC -> (the ask level honoured for it, since when), last heard oldest first: a level is earned one
        # at a time, each after the asker's back-off for the one before (`_earned_after`)
        self._levels: OrderedDict[bytes, tuple[int, float, float]] = OrderedDict()
        self._firm_timers: dict[bytes, Timer] = {}  # asker MAC -> our firm answer to it, waiting its jitter
        self._firmly_answered: OrderedDict[bytes, float] = OrderedDict()  # asker MAC -> when, oldest first
        self._firm_budget = TokenBucket(FIRM_RATE, clock.now())
        self._asks = 0  # asks since we last adopted a list: our HAVEs' level (rule 5)
        self._heard_list_at = float("-inf")  # when a broadcast of the list we hold last came by
        self._witnesses: dict[int, float] = {}  # signer of a broadcast copy of the held list -> when it came by
        self._rng = random.Random()
        self._last_have = float("-inf")
        self._have_timer: Timer | None = None
        self._follow_timer: Timer | None = None
        self._repeat_timers: list[Timer] = []
        self._server_copy_timer: Timer | None = None
        self._periodic_timer: Timer | None = None
        self._quiet_periods = 0  # periodic HAVEs since a serial other than ours was last heard or adopted (rule 3)
        self._have_heard: dict[bytes, float] = {}  # sender MAC -> when its last HAVE came by (oldest first)
        self._places: list[int] = []  # the places of the senders in _have_heard, sorted
        self._ask_timer: Timer | None = None
        self._ask_not_before = float("-inf")
        self._ask_backoff = HAVE_INTERVAL
        self._ask_firm = False  # the ask waiting its jitter is made whoever asks meanwhile (rule 4, J5's residual)
        # Senders of serials above ours -> (the last such serial each named, when), least recent first. Per sender,
        # not per the highest serial named: one HAVE of 2**64 - 1 from a member left the real list's holders
        # uncounted for good (review21n N2).
        self._newer_senders: OrderedDict[bytes, tuple[int, float]] = OrderedDict()
        self._recheck_timer: Timer | None = None
        self._asked_after_all = 0  # asks made after all since we last adopted a list (at most ASKS_AFTER_ALL)
        self._member_of: Callable[[bytes], int | None] | None = None

    def use_members(self, member_of: Callable[[bytes], int | None]) -> None:
        """Know HAVE senders by the member whose signed host claims hold their MAC (`host_claims`): only members
        go on the ring of rules 3 and 5, each once whatever MACs it claims, and only a member's ask stands for ours
        (rule 4). HAVEs from MACs nobody certifies crowded the ring the firm answerers are chosen on, so a node the
        copies missed was answered by nobody for minutes (review21j J5's residual, invented MACs); and a member's
        claims hold many MACs (a site's hosts), its node id one place."""
        self._member_of = member_of

    def _ring_key(self, mac: bytes) -> bytes | None:
        """Who `mac` is on the ring: itself, or its member's id; None for a MAC no member holds."""
        if self._member_of is None:
            return mac
        owner = self._member_of(mac)
        return None if owner is None else owner.to_bytes(16, "big")

    def _signer_key(self, node_id: int, sender: bytes) -> bytes:
        """Who the signer of a manifest is, as `_ring_key` names HAVE senders: its node id, or (no host claims) the
        MAC it came from."""
        return sender if self._member_of is None else node_id.to_bytes(16, "big")

    def _own_key(self) -> bytes:
        return self.mac if self._member_of is None else self._node_id.to_bytes(16, "big")

    def start(self) -> None:
        sock = self._sock = open_ethertype_socket(self.ifname, ETHERTYPE)
        self.mac = bytes(sock.getsockname()[4][:6])
        asyncio.get_running_loop().add_reader(sock.fileno(), self._readable)
        self._subscription = self._signaling.subscribe(self.EVENT, self._adopted)
        self.arm_periodic_have()

    def stop(self) -> None:
        if self._subscription is not None:
            self._subscription.cancel()
            self._subscription = None
        for timer in (self._have_timer, self._answer_timer, self._periodic_timer, self._ask_timer,
                      self._follow_timer, self._server_copy_timer, self._recheck_timer, *self._repeat_timers,
                      *self._firm_timers.values()):  # fmt: skip
            if timer is not None:
                timer.cancel()
        self._have_timer = self._answer_timer = self._periodic_timer = self._ask_timer = self._follow_timer = None
        self._recheck_timer = None
        self._server_copy_timer = None
        self._repeat_timers.clear()
        self._firm_timers.clear()
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        self._pending.clear()

    def status(self) -> dict[str, Any]:
        return {"interface": self.ifname, "serial": self._serial(), "counts": dict(sorted(self.counts.items()))}

    # -- what the node tells it ---------------------------------------------------------------

    def link_up(self) -> None:
        """A link came up: say which list we hold (folded with the other link-ups of `HAVE_INTERVAL`)."""
        if self._have_timer is not None:
            return
        wait = self._last_have + HAVE_INTERVAL - self._clock.now()
        if wait <= 0:
            self._send_have()
        else:
            self._have_timer = self._clock.call_later(wait, self._send_have)

    def arm_periodic_have(self) -> None:
        """Broadcast HAVE after a random wait around the current period, and so on (rule 3)."""
        period = min(HAVE_PERIOD_MAX, max(HAVE_PERIOD, float(self._heard_senders())))
        period = max(period, min(HAVE_PERIOD_IDLE, period * 2.0**self._quiet_periods))
        self._periodic_timer = self._clock.call_later(self._rng.uniform(0.5, 1.5) * period, self._periodic_have)

    def _periodic_have(self) -> None:
        self._periodic_timer = None
        self.link_up()
        self._quiet_periods = min(self._quiet_periods + 1, 32)
        self.arm_periodic_have()

    def _unsettled(self) -> None:
        """A serial other than ours came by, or we adopted one: the periodic HAVE back to its short period, at
        once (rule 3). Only a long period is cut short: a sender of such serials every second holds us at the
        short period, as often as every node said HAVE before the back-off, and no more often."""
        if self._quiet_periods == 0:
            return
        self._quiet_periods = 0
        if self._periodic_timer is not None:
            self._periodic_timer.cancel()
            self.arm_periodic_have()

    def _heard_senders(self) -> int:
        cutoff = self._clock.now() - HEARD_WINDOW
        while self._have_heard:
            oldest = next(iter(self._have_heard))
            if self._have_heard[oldest] >= cutoff:
                break
            self._forget_heard(oldest)
        return len(self._have_heard)

    def _heard_have(self, sender: bytes) -> None:
        if self._have_heard.pop(sender, None) is None:  # re-inserted last: the dict stays ordered oldest first
            if len(self._have_heard) >= MAX_HEARD:
                self._forget_heard(next(iter(self._have_heard)))
            bisect.insort(self._places, _place(sender))
        self._have_heard[sender] = self._clock.now()

    def _forget_heard(self, sender: bytes) -> None:
        del self._have_heard[sender]
        place = _place(sender)
        i = bisect.bisect_left(self._places, place)
        if i < len(self._places) and self._places[i] == place:
            del self._places[i]

    def _chosen(self, asker: bytes, level: int) -> bool:
        """Are we among the `FIRM_FEW * FIRM_WIDEN ** level` HAVE senders heard (and us) whose places follow
        `asker`'s on the ring? Every node that heard the same senders chooses the same few (rule 5)."""
        self._heard_senders()  # the ring as it stands: senders unheard for HEARD_WINDOW leave it
        if level >= FIRM_LEVEL_MAX:
            return True
        ours, theirs, places = _place(self._own_key()), _place(self._ring_key(asker) or asker), self._places
        if theirs < ours:
            before = bisect.bisect_left(places, ours) - bisect.bisect_right(places, theirs)
        else:  # the way round passes the top of the ring
            before = len(places) - bisect.bisect_right(places, theirs) + bisect.bisect_left(places, ours)
        return before < FIRM_FEW * FIRM_WIDEN**level

    def _ask(self) -> None:
        """Someone says it holds a newer list: ask for it (rule 4)."""
        now = self._clock.now()
        if self._ask_timer is not None or now < self._ask_not_before:
            self.counts["ask_held"] += 1
            return
        self._ask_not_before = now + self._ask_backoff
        self._ask_backoff = min(2 * self._ask_backoff, HAVE_PERIOD)
        self._ask_timer = self._clock.call_later(self._rng.uniform(0, ANSWER_JITTER), self._ask_now)

    def _ask_now(self) -> None:
        self._ask_timer = None
        self._ask_firm = False
        self._asks += 1
        self.counts["sent_ask"] += 1
        self.link_up()
        self._arm_recheck(ASK_GRACE)

    def _heard_newer(self, sender: bytes, serial: int) -> None:
        self._newer_senders.pop(sender, None)
        if len(self._newer_senders) >= 2 * NEWER_SENDERS:  # the count only needs a few: bounded
            self._newer_senders.popitem(last=False)
        self._newer_senders[sender] = (serial, self._clock.now())

    def _newer_confirmed(self) -> bool:
        """Did `NEWER_SENDERS` distinct senders say HAVE of a serial newer than ours lately (any such serial)?"""
        cutoff, ours = self._clock.now() - NEWER_MEMORY, self._serial()
        return sum(1 for serial, at in self._newer_senders.values() if at >= cutoff and serial > ours) >= NEWER_SENDERS

    def _arm_recheck(self, delay: float) -> None:
        if self._recheck_timer is None:
            self._recheck_timer = self._clock.call_later(delay, self._recheck)

    def _recheck(self) -> None:
        """Still without the newer list that several senders hold: ask (again), and let no other asker's ask
        stand for ours. Another's ask stood for ours (rule 4) on the promise of a broadcast answer; in the holders'
        answer quiet (`ANSWER_QUIET`) they answer it by unicast to that asker, so a member saying HAVE of our serial
        every few milliseconds, its own MAC or invented ones, kept us from ever asking (review21j J5's residual).
        Each such ask still waits out the back-off of rule 4, and one sender alone never makes one: a forged HAVE
        of a serial nobody holds costs about one ask, as before (review21c R3). Nor do more than `ASKS_AFTER_ALL`
        while we hold one list: two members' word, where one speaks for the other, made every node ask once per
        back-off for ever (review21l L4)."""
        self._recheck_timer = None
        if not self._newer_confirmed():
            return
        if self._asked_after_all >= ASKS_AFTER_ALL:
            self.counts["ask_after_all_spent"] += 1  # our periodic HAVE (rule 3) and its follow-up still ask
            return
        wait = self._ask_not_before - self._clock.now()
        if self._ask_timer is not None or wait > 0:
            self._arm_recheck(max(wait, 0.0) + ANSWER_JITTER)
            return
        self._asked_after_all += 1
        self.counts["ask_made_after_all"] += 1
        self._ask()
        self._ask_firm = True

    def _adopted(self, event: RevocationAdopted | MemberListAdopted) -> None:
        if event.overlay != self.overlay:
            return
        if self._recheck_timer is not None and all(serial <= self._serial() for serial, _ in self._newer_senders.values()):
            self._recheck_timer.cancel()
            self._recheck_timer = None
        self._ask_backoff = HAVE_INTERVAL  # a newer list came: the next claim of one is asked for at once
        self._unsettled()  # nodes that missed it hear of it within a short period
        self._ask_not_before = float("-inf")
        self._asks = 0
        self._asked_after_all = 0
        self._witnesses.clear()  # copies of the list held before
        if isinstance(event, RevocationAdopted) and event.from_server_host:
            if self._server_copy_timer is not None:
                self._server_copy_timer.cancel()
            adopted, serial = self._clock.now(), event.serial
            self._server_copy_timer = self._clock.call_later(
                self._rng.uniform(0, SERVER_COPY_JITTER), lambda: self._send_server_copy(serial, adopted))
            return
        # Not a change from the server host: every member online had it; the few that had the whole list flood it.
        if not event.source.startswith("overlay") and not (isinstance(event, MemberListAdopted) and not event.flood):
            self._send_list()
            for timer in self._repeat_timers:
                timer.cancel()
            self._repeat_timers = [self._clock.call_later(delay, lambda: self._repeat(event.serial))
                                   for delay in REPEATS]

    def _send_server_copy(self, serial: int, adopted: float) -> None:
        self._server_copy_timer = None
        if self._serial() != serial:  # a newer list since
            return
        witnesses = sum(1 for at in self._witnesses.values() if at >= adopted)
        if witnesses >= SERVER_COPY_WITNESSES:  # others' copies came by: a node they missed asks (rules 3-5)
            self.counts["server_copy_heard_elsewhere"] += 1
            # But that node may hear of it from nobody: a member on its way passes every copy on bounded to miss
            # it and adds its own (review21j J5). One HAVE of ours, one frame, reaches it by our flood's way, which
            # no member on another's commands; it asks at once (rule 4) and is answered firmly (rule 5). It
            # stands for our next periodic HAVE (rule 3): the overlay sends no more HAVEs over time, only sooner.
            self._last_have = self._clock.now()
            if self._send(self.HEADER.pack(self.MAGIC, VERSION, HAVE, serial, 0, 0)):
                self.counts["sent_server_copy_have"] += 1
            if self._periodic_timer is not None:
                self._periodic_timer.cancel()
                self.arm_periodic_have()
            return
        self.counts["sent_server_copy"] += 1
        self._send_list()

    def _repeat(self, serial: int) -> None:
        if self._serial() == serial:  # a newer list since went out on its own
            self.counts["sent_repeat"] += 1
            self._send_list()

    # -- sending ------------------------------------------------------------------------------

    def _held(self) -> tuple[int, str] | None:
        """The serial and text of the document held now, or None."""
        text = self._held_text()
        return (self._serial(), text) if text is not None else None

    def _held_listing(self) -> tuple[bytes, ...] | None:
        """What a manifest of the document held lists (`revocation_manifest.listing`), worked out once per serial, or
        None: a broadcast copy of it is known by its manifest, and compared by its hashes, never by its text."""
        if self._listing is None or self._listing[0] != self._serial():
            held = self._held()
            if held is None:
                return None
            self._listing = (held[0], revocation_manifest.listing(_chunks(held[1].encode())))
        return self._listing[1]

    def _send_have(self) -> None:
        self._have_timer = None
        self._last_have = self._clock.now()
        serial, level = self._serial(), min(self._asks, LEVEL_MAX)
        if self._send(self.HEADER.pack(self.MAGIC, VERSION, HAVE, serial, level, 0)):
            self.counts["sent_have"] += 1
        if self._follow_timer is not None:
            self._follow_timer.cancel()
        self._follow_timer = self._clock.call_later(FOLLOW_UP, lambda: self._follow_up(serial, level))

    def _follow_up(self, serial: int, level: int) -> None:
        """Say the HAVE again if no newer list came since (rule 5): the few holders it chooses answer it firmly."""
        self._follow_timer = None
        if self._serial() == serial and self._send(self.HEADER.pack(self.MAGIC, VERSION, HAVE, serial, level, 0)):
            self.counts["sent_follow_up"] += 1

    def _send_list(self, to: bytes = BROADCAST) -> None:
        held = self._held()
        if held is None:
            return
        serial, text = held[0], held[1].encode()
        if len(text) > self.MAX_BYTES:  # no node would take it: the server host and the join token carry it
            self.counts["not_sent_oversize"] += 1
            return
        chunks = _chunks(text)
        cert = self._certificate
        header = self.HEADER.pack(self.MAGIC, VERSION, MANIFEST, serial, 0, len(chunks))
        try:
            manifest = revocation_manifest.pack(cert.key, cert.cert, self.overlay, header, self._node_id, chunks)
        except ValueError as exc:  # a certificate too large for a frame: the document still goes through the server
            self.counts["send_failed"] += 1
            log.warning("%s serial=%d not broadcast on overlay %s: %s", self.KIND, serial, self.overlay, exc)
            return
        if not self._send(manifest, to):
            return
        for index, part in enumerate(revocation_manifest.parts(chunks)):
            if not self._send(self.HEADER.pack(self.MAGIC, VERSION, PARTS, serial, index, len(chunks)) + part, to):
                return
        for index, chunk in enumerate(chunks):
            if not self._send(self.HEADER.pack(self.MAGIC, VERSION, LIST, serial, index, len(chunks)) + chunk, to):
                return
        self.counts["sent_list"] += 1
        log.info("%s serial=%d sent to %s on overlay %s (%d frames)", self.KIND, serial, to.hex(":"), self.overlay,
                 len(chunks))  # fmt: skip

    def _answer(self, asker: bytes | None = None, level: int = 0) -> None:
        """Someone holds an older list than ours: broadcast ours, at most once per `ANSWER_INTERVAL`, unless
        another node does it first; if `asker` (the sender of a HAVE of ask level `level`) asks again, send it
        ours by unicast if it chooses us, whatever copies come by (rule 5)."""
        now = self._clock.now()
        if asker is not None:
            level = self._honoured_level(asker, level, now)  # every ask: a level's time runs from the first
            if self._asked_again(asker, now):
                self._answer_firmly(asker, level, now)
                return
        if self._answer_timer is not None or now - self._last_answer < ANSWER_INTERVAL:
            self.counts["answer_held"] += 1
            return
        if now - max(self._last_answer, self._heard_list_at) < ANSWER_QUIET:
            self.counts["answer_quiet"] += 1
            return
        asked = now
        self._answer_timer = self._clock.call_later(self._rng.uniform(0, ANSWER_JITTER), lambda: self._answer_now(asked))

    def _asked_again(self, asker: bytes, now: float) -> bool:
        """Note `asker`'s ask; true if it asked within `FIRM_WINDOW` before."""
        while self._asked and next(iter(self._asked.values())) < now - FIRM_WINDOW:
            self._asked.popitem(last=False)
        before = self._asked.pop(asker, None)
        if len(self._asked) >= MAX_ASKERS:
            self._asked.popitem(last=False)
            self.counts["askers_forgotten"] += 1
        self._asked[asker] = now
        return before is not None

    def _answer_firmly(self, asker: bytes, level: int, now: float) -> None:
        """`asker` asked again: if we are among the few it chooses, send it our list by unicast after a random
        wait, at most once per `FIRM_INTERVAL` to it and as `FIRM_RATE` allows to all (rule 5). `level` is the
        honoured one."""
        if asker[0] & 1 or asker in self._firm_timers or not self._chosen(asker, level):
            return  # a group MAC (no unicast reaches it), our answer on its way, or others' to give
        while self._firmly_answered and next(iter(self._firmly_answered.values())) < now - FIRM_INTERVAL:
            self._firmly_answered.popitem(last=False)
        if asker in self._firmly_answered or not self._firm_budget.take(now):
            self.counts["firm_held"] += 1
            return
        if len(self._firmly_answered) >= MAX_ASKERS:
            self._firmly_answered.popitem(last=False)
        self._firmly_answered[asker] = now
        self._firm_timers[asker] = self._clock.call_later(self._rng.uniform(0, ANSWER_JITTER),
                                                          lambda: self._answer_firm_now(asker))  # fmt: skip

    def _honoured_level(self, asker: bytes, claimed: int, now: float) -> int:
        """The level `asker`'s ask is taken at: 0 for an asker not heard within `LEVEL_MEMORY`; one above the level
        honoured for it once it held that level `_earned_after` it; the claimed level if lower. The asker writes its
        level; a real one climbs one per back-off. One claiming the top at once drew a firm answer from every holder
        (review21h H8), and one climbing a level per HAVE, ten HAVEs 10 ms apart, too (review21i I6)."""
        while self._levels and next(iter(self._levels.values()))[2] < now - LEVEL_MEMORY:
            self._levels.popitem(last=False)
        entry = self._levels.pop(asker, None)
        if entry is None:
            level, since = 0, now
        else:
            level, since = entry[0], entry[1]
            if claimed < level:
                level, since = claimed, now  # it adopted a list and asks anew: it climbs again from there
            elif claimed > level and now - since >= _earned_after(level):
                level, since = level + 1, now
        if level < claimed:
            self.counts["ask_level_lowered"] += 1
        if len(self._levels) >= MAX_ASKERS:
            self._levels.popitem(last=False)
        self._levels[asker] = (level, since, now)
        return level

    def _answer_firm_now(self, asker: bytes) -> None:
        del self._firm_timers[asker]
        self.counts["sent_firm"] += 1
        self._send_list(asker)

    def _answer_now(self, asked: float) -> None:
        self._answer_timer = None
        if self._heard_list_at >= asked:
            self.counts["answer_heard_elsewhere"] += 1
            return
        self._last_answer = self._clock.now()
        self._send_list()

    def _send(self, frame: bytes, to: bytes = BROADCAST) -> bool:
        if self._sock is None:
            return False
        try:
            self._sock.sendto(frame, (self.ifname, ETHERTYPE, 0, 0, to))
        except OSError as exc:  # a full queue or the interface gone: the next HAVE or answer makes up for it
            self.counts["send_failed"] += 1
            log.debug("%s flood send on %s failed: %s", self.KIND, self.ifname, exc)
            return False
        return True

    # -- receiving ----------------------------------------------------------------------------

    def _readable(self) -> None:
        if self._sock is not None:
            read_frames(self._sock, self.counts, log, f"{self.KIND} flood on {self.ifname}", self.receive)

    def switched(self, frame: bytes, peer: int | None, sender: int | None) -> None:
        """A unicast Ethernet `frame` for our interface that the switch handed over instead of delivering it
        (`evio.sdn.switch.document_flows`), with what it could tell: the adjacent member `peer` whose tunnel it came
        by (None: a leaf port), and the member `sender` it counts it as sent by (the one holding its source MAC, if it
        came by that member's link or by the port learning places the MAC on under it), else None. A manifest's
        check is charged to `sender`'s share, else to the share of what came by `peer`'s tunnel vouched for by
        nobody (`_unvouched_key`), never to a member only its source MAC names (review21r's residual)."""
        if len(frame) < ETH_HEADER_LEN or frame[12:14] != ETHERTYPE.to_bytes(2, "big"):
            self.counts["dropped_short" if len(frame) < ETH_HEADER_LEN else "dropped_malformed"] += 1
            return
        self.counts["received_switched" if sender is not None else "received_switched_unvouched"] += 1
        source = frame[6:12]
        if sender is not None:
            key = source if self._member_of is None else sender.to_bytes(16, "big")
        else:
            key = _unvouched_key(peer)
        self.receive(frame[ETH_HEADER_LEN:], source, False, charge=key)

    def receive(self, data: bytes, sender: bytes, broadcast: bool = True,
                charge: bytes | None | _ByMac = _BY_MAC) -> None:  # fmt: skip
        """One frame's payload from MAC `sender`, sent to the broadcast address or (`broadcast` false) to ours;
        `charge`, whose share of the frames and of the checks it spends, where the switch told (`switched`): by
        default the member whose host claims hold `sender` (`_ring_key`)."""
        if data[:4] != self.MAGIC and data[:4] in MAGICS:
            return  # the other kind's, on the same ethertype: its own flood reads it
        # Charged where the switch told, else by the source MAC: a frame's budget and its check, alike.
        sender_key = self._ring_key(sender) if isinstance(charge, _ByMac) else charge
        if not self._frame_budget.allow(BROADCAST_WAY if broadcast else UNICAST_WAY, sender_key, self._clock.now()):
            self.counts["dropped_frame_rate"] += 1  # over its sender's share of its way in (see `FRAME_RATE`)
            return
        if len(data) < self.HEADER.size:
            self.counts["dropped_short"] += 1
            return
        magic, version, kind, serial, index, count = self.HEADER.unpack_from(data)
        if magic != self.MAGIC or version != VERSION or kind not in (HAVE, LIST, MANIFEST, PARTS):
            self.counts["dropped_malformed"] += 1
            return
        self.counts["received_have" if kind == HAVE else "received_frame"] += 1
        # A HAVE is a sender's word only by broadcast, which the switch delivers only under the root of its source
        # MAC's owner; a unicast from any MAC reaches us by flows installed ahead (review21l L4). Honest HAVEs are
        # all broadcast: one to our MAC alone still draws an answer, but it neither places a sender on the ring,
        # nor names a newer serial, nor stands for our ask.
        key = sender_key if kind == HAVE and broadcast else None
        if key is not None:
            self._heard_have(key)
        ours = self._serial()
        if serial != ours and broadcast:  # (a unicast from any MAC is no one's word: review21l L4)
            self._unsettled()
        if serial < ours:
            if kind == HAVE:  # only a HAVE is an ask (a list comes in chunks); its index is the ask's level
                self._answer(sender, index)
            else:
                self._answer()
            return
        if kind == HAVE:
            if serial > ours and not broadcast:
                self.counts["have_unicast_ignored"] += 1
            elif serial > ours:
                if key is not None:
                    self._heard_newer(key, serial)
                self._ask()  # they hold a newer one: our HAVE makes them send it
            elif self._ask_timer is not None and not self._ask_firm and key is not None:
                self._ask_timer.cancel()  # a node of our serial asked: the answer reaches us too...
                self._ask_timer = None
                self.counts["ask_heard_elsewhere"] += 1
                self._arm_recheck(ASK_GRACE)  # ...or, should it not come, we ask after all
            return
        if serial == ours and kind != MANIFEST and not any(a.serial == serial for a in self._pending.values()):
            return  # a broadcast of the list we hold, no signed manifest of it under way: nothing to learn
        body = len(data) - self.HEADER.size
        if not 0 <= index < count <= self.max_chunks or (kind != MANIFEST and body > CHUNK):
            self.counts["dropped_oversize" if count > self.max_chunks else "dropped_malformed"] += 1
            return
        if kind == MANIFEST:
            self._manifest(data, sender, serial, count, broadcast, sender_key)
        elif kind == PARTS:
            self._part(serial, index, count, data[self.HEADER.size :])
        else:
            self._collect(sender, serial, index, count, data[self.HEADER.size :], broadcast)

    def _expire(self, now: float) -> None:
        for key in [k for k, a in self._pending.items() if now - a.started > ASSEMBLY_TIMEOUT]:
            del self._pending[key]
            self.counts["dropped_incomplete"] += 1

    def _manifest(self, data: bytes, sender: bytes, serial: int, count: int, broadcast: bool,
                  charge: bytes | None) -> None:  # fmt: skip
        """A member's signed list of the chunks of `serial` it is about to send: an assembly of its own (E3)."""
        now = self._clock.now()
        self._expire(now)
        try:
            manifest = revocation_manifest.parse(data, self.HEADER.size, count)
        except revocation_manifest.ManifestError:
            self.counts["dropped_malformed"] += 1
            return
        # A copy of the document we hold tells us only that others heard it (`_complete`), and only if broadcast and
        # of the very chunks of ours: by unicast, or listing others, it is dropped here, before its check, and its
        # chunks join nothing (a whole member list broadcast cost each holder 0.27 s at 500 members: review21o O2).
        listing = self._held_listing() if serial == self._serial() else None
        if listing is not None and (not broadcast or manifest.hashes != listing):
            self.counts["manifest_held"] += 1
            return
        for assembly in self._pending.values():
            if assembly.serial == serial and assembly.count == count and assembly.listed == manifest.hashes:
                assembly.broadcast = assembly.broadcast or broadcast
                self.counts["manifest_known"] += 1  # another node sends the document under way: its chunks are listed
                return
        if not self._check_budget.allow(BROADCAST_WAY if broadcast else UNICAST_WAY, charge, now):
            self.counts["dropped_verify_rate"] += 1  # over its deliverer's share of its way in (review21o O3, 21r)
            return
        try:
            revocation_manifest.check(self._anchor, self.overlay, manifest, time.time(), self._certificates)
        except revocation_manifest.ManifestError as exc:
            self.counts["dropped_unsigned"] += 1
            if self._log_refused.should_log(sender, now):
                log.info("%s manifest from %s on overlay %s refused: %s", self.KIND, sender.hex(":"), self.overlay,
                         exc)  # fmt: skip
            return
        # One assembly per signer: a member starting another gives up its last, so one naming serial after serial,
        # from whatever MACs, evicts only itself (review21 N2, review21e E3), never a real document.
        if self._pending.pop(manifest.node_id, None) is not None:
            self.counts["dropped_replaced"] += 1
        if len(self._pending) >= MAX_PENDING:
            del self._pending[min(self._pending, key=lambda k: self._pending[k].started)]
            self.counts["dropped_incomplete"] += 1
        if serial > self._serial():
            self._heard_newer(self._signer_key(manifest.node_id, sender), serial)  # a member's signed word (L4)
        assembly = _Assembly(serial, count, manifest.hashes, now, broadcast, manifest.node_id)
        if count <= revocation_manifest.PART_HASHES:
            assembly.hashes = dict(enumerate(manifest.hashes))  # else the parts bring them
        self._pending[manifest.node_id] = assembly

    def _part(self, serial: int, index: int, count: int, part: bytes) -> None:
        """Part `index` of the chunk hashes of a document of `count` chunks: into every assembly listing it."""
        self._expire(self._clock.now())
        first = index * revocation_manifest.PART_HASHES
        size = min(revocation_manifest.PART_HASHES, count - first) * revocation_manifest.HASH_BYTES
        if count <= revocation_manifest.PART_HASHES or index >= revocation_manifest.listed(count) or len(part) != size:
            self.counts["dropped_malformed"] += 1
            return
        digest = revocation_manifest.chunk_hash(part)
        listing = [a for a in self._pending.values()
                   if a.serial == serial and a.count == count and a.listed[index] == digest]  # fmt: skip
        if not listing:
            self.counts["dropped_unlisted"] += 1  # no signed manifest lists it: a forgery, or its manifest lost
            return
        for assembly in listing:
            assembly.hashes.update(enumerate(revocation_manifest.split(part), first))

    def _collect(self, sender: bytes, serial: int, index: int, count: int, chunk: bytes, broadcast: bool) -> None:
        now = self._clock.now()
        self._expire(now)
        digest = revocation_manifest.chunk_hash(chunk)
        # Into every assembly listing it: a member's manifest listing some of a real document's chunks (they are
        # public once sent) must not take them from the real document's assembly.
        listing = [k for k, a in self._pending.items()
                   if a.serial == serial and a.count == count and a.hashes.get(index) == digest]  # fmt: skip
        if not listing:
            self.counts["dropped_unlisted"] += 1  # no signed manifest lists it: a forgery, or its manifest lost
            return
        for key in listing:
            assembly = self._pending[key]
            assembly.chunks[index] = chunk
            if len(assembly.chunks) == count:
                del self._pending[key]
                self._complete(assembly, sender, broadcast and assembly.broadcast, now)

    def _complete(self, assembly: _Assembly, sender: bytes, broadcast: bool, now: float) -> None:
        serial, count = assembly.serial, assembly.count
        listing = self._held_listing()
        if listing is not None and serial == self._serial():
            # Another node broadcast the list we hold: ours can wait. Only the whole list, the same as ours (its
            # chunks are those its signed manifest lists, and those ours), counts: a forged header of our serial
            # must not keep a node that missed it without it.
            if broadcast and assembly.listed == listing:
                self._heard_list_at = now
                self._witnesses.pop(assembly.signer, None)  # newest last: the oldest goes when full
                self._witnesses[assembly.signer] = now
                while len(self._witnesses) > MAX_WITNESSES:
                    del self._witnesses[next(iter(self._witnesses))]
            return
        try:
            text = b"".join(assembly.chunks[i] for i in range(count)).decode()
        except UnicodeDecodeError:
            self.counts["dropped_malformed"] += 1
            return
        mac = sender.hex(":")
        if self._hand_in(text, f"overlay {mac}"):
            self.counts["adopted"] += 1
        else:
            self.counts["not_adopted"] += 1  # the endpoint counted and logged why (bad_revocation)


def _chunks(text: bytes) -> list[bytes]:
    return [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]


def _earned_after(level: int) -> float:
    """How long an asker holds ask level `level` before a holder honours the next (review21i I6): no sooner than a
    real asker says it. A real one asks again only after its back-off (`_ask`: HAVE_INTERVAL after level 0 and 1,
    doubling from there to HAVE_PERIOD), and says each level in a HAVE of its own, no sooner than HAVE_INTERVAL
    after its last; that HAVE may be held up to HAVE_INTERVAL by the one before and its ask by up to ANSWER_JITTER.
    One more ANSWER_JITTER for the frames' way. An asker a holder lowers anyway says the level again in its
    follow-up (FOLLOW_UP later): a real climb is at most that late, once. 1.5 s up to level 2, then 5, 13, 27 s:
    the top level (8) about 100 s after the first ask, not 0.1 s."""
    backoff = min(HAVE_INTERVAL * 2.0 ** max(min(level, FIRM_LEVEL_MAX) - 1, 0), HAVE_PERIOD)
    return max(HAVE_INTERVAL, backoff - HAVE_INTERVAL - ANSWER_JITTER) - ANSWER_JITTER


def _place(mac: bytes) -> int:
    """A MAC's place on the ring the firm answerers are chosen on (rule 5): spread evenly, whatever the MACs."""
    return int.from_bytes(hashlib.blake2b(mac, digest_size=8).digest(), "big")
