"""Revocation lists spread through the overlay itself, not only through the XMPP server (issue 21, M2).

In trust mode a member is revoked by a list the overlay CA signs (`evio.signal.identity`). The list travels
in presence, but presence is the XMPP server's to pass on, and trust mode exists so that nothing depends on
that server: one that is down, broken into, or stripping the list must not keep a revoked member in. The
list is signed, so any node may carry it. Each node puts it on its overlay bridge's own interface as
Ethernet broadcasts of an ethertype of its own; Bounded Flood carries a broadcast to every node of the
overlay, and each node reads the others' off the same interface:

1. A node that adopts a newer list from anywhere but the overlay (the revocation file an operator dropped
   on it, the server host's message, a member's presence) broadcasts it, and again after each of `REPEATS`
   (a broadcast is a datagram: a loaded host or link drops one now and then, and one lost copy must not
   leave a node out); the flood reaches every node that is linked. A list adopted from the overlay is not
   sent again: it reached the others already.
2. A node broadcasts HAVE (its serial, no list) when one of its links comes up, so a node that joins, or a
   part of the ring that was cut off, learns what it missed: a node holding a newer list answers HAVE, and
   any older list that comes by, with its own (at most once per `ANSWER_INTERVAL`), after a random wait of up
   to `ANSWER_JITTER`, and not at all if another node's broadcast of that list came meanwhile: one HAVE costs
   the overlay about one answer, not one per node. Only a frame sent to the broadcast address counts as
   another node's broadcast: a member replaying the signed list by unicast to every holder but the asker
   must not hold their answers back (review21c R1).
3. Every node also broadcasts HAVE now and then, at random, every `HAVE_PERIOD` on average or, once it hears
   more than `HAVE_PERIOD` nodes doing so, every (nodes heard) seconds up to `HAVE_PERIOD_MAX`: the overlay
   sends about one HAVE a second up to 60 nodes (RTCP's rule, RFC 3550 6.2), and a member inventing HAVE
   senders cannot stretch the period further (review21c R2). A node that missed every copy while no link of
   its came up (the XMPP server down: no new links) hears a newer serial within seconds and asks.
4. A node hearing HAVE of a newer serial asks (its own HAVE) after a random wait of up to `ANSWER_JITTER`,
   not at all if another node of its serial asked meanwhile, and, while no such list arrives, at most once
   per back-off that doubles from `HAVE_INTERVAL` to `HAVE_PERIOD`: a forged HAVE of a serial nobody holds
   costs the overlay about one HAVE, and ever fewer, not one per node (review21c R3).

Frame after the Ethernet header (to ff:ff:ff:ff:ff:ff, ethertype `ETHERTYPE`):

    magic "EVRL" | version (1) | kind (1) | serial (8) | index (1) | count (1) | chunk of the list's text

A list goes out as a manifest (kind MANIFEST, `evio.signal.revocation_manifest`: each chunk's hash, signed with
the sender's overlay-CA certificate) and then its chunks. A chunk is taken only into an assembly whose manifest
lists its hash, and there is one assembly per signer: a frame's sender MAC is what the frame says, and keyed by
it, one-chunk forgeries from invented MACs evicted a real list's assembly between two of its chunks (review21e
E3); now a forged chunk joins nothing and a member's manifests replace only its own.

Everything that comes in is bounded before it costs anything: only lists newer than ours are assembled, at
most `MAX_PENDING` signers' at once (the oldest given up), each of at most `MAX_CHUNKS` chunks and
`identity.MAX_DOCUMENT_BYTES`, and given up after `ASSEMBLY_TIMEOUT`; a manifest costs one signature check (a
certificate is checked once, `host_claims.Certificates`), and one listing the hashes of an assembly under way
none. Checking the signature is the signal
endpoint's (`bad_revocation`; a refused signature is not checked twice); what this module refuses is counted
by reason in `counts`. A member that floods such frames is held by the switch's flood budget per port.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from evio.clock import REAL_CLOCK, Clock, Timer
from evio.node.ethertype_socket import read_frames
from evio.ratelimit import LogLimiter
from evio.signal import revocation_manifest
from evio.signal.events import RevocationAdopted, Subscription
from evio.signal.host_claims import Certificates
from evio.signal.identity import MAX_DOCUMENT_BYTES, TrustAnchor, list_to_text
from evio.signal.interface import Signaling
from evio.tunnel.path.dtls import TunnelCertificate

log = logging.getLogger(__name__)

ETHERTYPE = 0x88B5  # IEEE 802 "local experimental ethertype 1": never another protocol's
BROADCAST = b"\xff" * 6
MAGIC = b"EVRL"
VERSION = 1
HEADER = struct.Struct("!4sBBQBB")
HAVE, LIST, MANIFEST = 1, 2, 3
CHUNK = 1200  # of the list's text per frame: within the smallest tunnel MTU evio sets
MAX_CHUNKS = -(-MAX_DOCUMENT_BYTES // CHUNK)
MAX_PENDING = 16  # signers' assemblies at once: a member holds one, whatever MACs it invents (review21e E3)
ASSEMBLY_TIMEOUT = 5.0
ANSWER_INTERVAL = 2.0  # a list broadcast in answer at most this often
ANSWER_JITTER = 0.5  # the wait before answering, so that one node answers and the others hear it
HAVE_INTERVAL = 2.0  # HAVE broadcast at most this often; link-ups in between are folded into one
REPEATS = (1.0, 3.0)  # seconds after the first broadcast of a list adopted here that it goes out again
HAVE_PERIOD = 30.0  # mean seconds between a node's own periodic HAVEs, in an overlay of up to 30 nodes
HAVE_PERIOD_MAX = 60.0  # and at most this, however many HAVE senders (some perhaps invented) were heard
HEARD_WINDOW = 300.0  # a HAVE sender counts toward the overlay's size this long after it was last heard
MAX_HEARD = 4096  # senders tracked for that count: forged MACs can slow the periodic HAVE to this, no more


@dataclass
class _Assembly:
    serial: int
    hashes: tuple[bytes, ...]  # the signed manifest's, one per chunk
    started: float
    broadcast: bool  # the manifest came to the broadcast address
    chunks: dict[int, bytes] = field(default_factory=dict)


class RevocationFlood:
    """One overlay's revocation lists on its bridge's interface `ifname` (trust mode only)."""

    def __init__(self, overlay: str, ifname: str, signaling: Signaling, clock: Clock = REAL_CLOCK, *,
                 node_id: int, certificate: TunnelCertificate, anchor: TrustAnchor) -> None:  # fmt: skip
        self.overlay = overlay
        self.ifname = ifname
        self._signaling = signaling
        self._clock = clock
        self.counts: Counter[str] = Counter()  # sent and received by kind, dropped by reason
        self._sock: socket.socket | None = None
        self._subscription: Subscription[RevocationAdopted] | None = None
        self._node_id, self._certificate, self._anchor = node_id, certificate, anchor
        self._certificates = Certificates()  # members' certificates found the CA's: checked once
        self._pending: dict[int, _Assembly] = {}  # the signer's node id -> its list's chunks so far
        self._log_refused: LogLimiter[bytes] = LogLimiter(60.0)
        self._last_answer = float("-inf")
        self._answer_timer: Timer | None = None
        self._heard_list_at = float("-inf")  # when a broadcast of the list we hold last came by
        self._rng = random.Random()
        self._last_have = float("-inf")
        self._have_timer: Timer | None = None
        self._repeat_timers: list[Timer] = []
        self._periodic_timer: Timer | None = None
        self._have_heard: dict[bytes, float] = {}  # sender MAC -> when its last HAVE came by (oldest first)
        self._ask_timer: Timer | None = None
        self._ask_not_before = float("-inf")
        self._ask_backoff = HAVE_INTERVAL

    def start(self) -> None:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETHERTYPE))
        try:
            sock.bind((self.ifname, ETHERTYPE))
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._readable)
        self._subscription = self._signaling.subscribe(RevocationAdopted, self._adopted)
        self.arm_periodic_have()

    def stop(self) -> None:
        if self._subscription is not None:
            self._subscription.cancel()
            self._subscription = None
        for timer in (self._have_timer, self._answer_timer, self._periodic_timer, self._ask_timer,
                      *self._repeat_timers):
            if timer is not None:
                timer.cancel()
        self._have_timer = self._answer_timer = self._periodic_timer = self._ask_timer = None
        self._repeat_timers.clear()
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        self._pending.clear()

    def status(self) -> dict[str, Any]:
        rl = self._signaling.revocation_list(self.overlay)
        return {"interface": self.ifname, "serial": rl.serial if rl else 0, "counts": dict(sorted(self.counts.items()))}

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
        self._periodic_timer = self._clock.call_later(self._rng.uniform(0.5, 1.5) * period, self._periodic_have)

    def _periodic_have(self) -> None:
        self._periodic_timer = None
        self.link_up()
        self.arm_periodic_have()

    def _heard_senders(self) -> int:
        cutoff = self._clock.now() - HEARD_WINDOW
        while self._have_heard:
            oldest = next(iter(self._have_heard))
            if self._have_heard[oldest] >= cutoff:
                break
            del self._have_heard[oldest]
        return len(self._have_heard)

    def _heard_have(self, sender: bytes) -> None:
        self._have_heard.pop(sender, None)  # re-inserted last: the dict stays ordered oldest first
        if len(self._have_heard) >= MAX_HEARD:
            del self._have_heard[next(iter(self._have_heard))]
        self._have_heard[sender] = self._clock.now()

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
        self.counts["sent_ask"] += 1
        self.link_up()

    def _adopted(self, event: RevocationAdopted) -> None:
        if event.overlay != self.overlay:
            return
        self._ask_backoff = HAVE_INTERVAL  # a newer list came: the next claim of one is asked for at once
        self._ask_not_before = float("-inf")
        if not event.source.startswith("overlay"):
            self._send_list()
            for timer in self._repeat_timers:
                timer.cancel()
            self._repeat_timers = [self._clock.call_later(delay, lambda: self._repeat(event.serial))
                                   for delay in REPEATS]

    def _repeat(self, serial: int) -> None:
        if self._serial() == serial:  # a newer list since went out on its own
            self.counts["sent_repeat"] += 1
            self._send_list()

    # -- sending ------------------------------------------------------------------------------

    def _serial(self) -> int:
        rl = self._signaling.revocation_list(self.overlay)
        return rl.serial if rl is not None else 0

    def _send_have(self) -> None:
        self._have_timer = None
        self._last_have = self._clock.now()
        if self._send(HEADER.pack(MAGIC, VERSION, HAVE, self._serial(), 0, 0)):
            self.counts["sent_have"] += 1

    def _send_list(self) -> None:
        rl = self._signaling.revocation_list(self.overlay)
        if rl is None:
            return
        text = list_to_text(rl).encode()
        chunks = [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]
        cert = self._certificate
        header = HEADER.pack(MAGIC, VERSION, MANIFEST, rl.serial, 0, len(chunks))
        try:
            manifest = revocation_manifest.pack(cert.key, cert.cert, self.overlay, header, self._node_id, chunks)
        except ValueError as exc:  # a certificate too large for a frame: the list still goes through the server
            self.counts["send_failed"] += 1
            log.warning("revocation list serial=%d not broadcast on overlay %s: %s", rl.serial, self.overlay, exc)
            return
        if not self._send(manifest):
            return
        for index, chunk in enumerate(chunks):
            if not self._send(HEADER.pack(MAGIC, VERSION, LIST, rl.serial, index, len(chunks)) + chunk):
                return
        self.counts["sent_list"] += 1
        log.info("revocation list serial=%d broadcast on overlay %s (%d frames)", rl.serial, self.overlay, len(chunks))

    def _answer(self) -> None:
        """Someone holds an older list than ours: broadcast ours, at most once per `ANSWER_INTERVAL`, unless
        another node does it first."""
        now = self._clock.now()
        if self._answer_timer is not None or now - self._last_answer < ANSWER_INTERVAL:
            self.counts["answer_held"] += 1
            return
        asked = now
        self._answer_timer = self._clock.call_later(self._rng.uniform(0, ANSWER_JITTER), lambda: self._answer_now(asked))

    def _answer_now(self, asked: float) -> None:
        self._answer_timer = None
        if self._heard_list_at >= asked:
            self.counts["answer_heard_elsewhere"] += 1
            return
        self._last_answer = self._clock.now()
        self._send_list()

    def _send(self, frame: bytes) -> bool:
        if self._sock is None:
            return False
        try:
            self._sock.sendto(frame, (self.ifname, ETHERTYPE, 0, 0, BROADCAST))
        except OSError as exc:  # a full queue or the interface gone: the next HAVE or answer makes up for it
            self.counts["send_failed"] += 1
            log.debug("revocation flood send on %s failed: %s", self.ifname, exc)
            return False
        return True

    # -- receiving ----------------------------------------------------------------------------

    def _readable(self) -> None:
        if self._sock is not None:
            read_frames(self._sock, self.counts, log, f"revocation flood on {self.ifname}", self.receive)

    def receive(self, data: bytes, sender: bytes, broadcast: bool = True) -> None:
        """One frame's payload from MAC `sender`, sent to the broadcast address or (`broadcast` false) to ours."""
        if len(data) < HEADER.size:
            self.counts["dropped_short"] += 1
            return
        magic, version, kind, serial, index, count = HEADER.unpack_from(data)
        if magic != MAGIC or version != VERSION or kind not in (HAVE, LIST, MANIFEST):
            self.counts["dropped_malformed"] += 1
            return
        self.counts["received_have" if kind == HAVE else "received_frame"] += 1
        if kind == HAVE:
            self._heard_have(sender)
        ours = self._serial()
        if serial < ours:
            self._answer()
            return
        if kind == HAVE:
            if serial > ours:
                self._ask()  # they hold a newer one: our HAVE makes them send it
            elif self._ask_timer is not None:
                self._ask_timer.cancel()  # a node of our serial asked: the answer reaches us too
                self._ask_timer = None
                self.counts["ask_heard_elsewhere"] += 1
            return
        if serial == ours and self._answer_timer is None:
            return  # a broadcast of the list we hold, while we wait to answer nobody: nothing to learn
        if not 0 <= index < count <= MAX_CHUNKS or (kind == LIST and len(data) - HEADER.size > CHUNK):
            self.counts["dropped_malformed"] += 1
            return
        if kind == MANIFEST:
            self._manifest(data, sender, serial, count, broadcast)
        else:
            self._collect(sender, serial, index, count, data[HEADER.size :], broadcast)

    def _expire(self, now: float) -> None:
        for key in [k for k, a in self._pending.items() if now - a.started > ASSEMBLY_TIMEOUT]:
            del self._pending[key]
            self.counts["dropped_incomplete"] += 1

    def _manifest(self, data: bytes, sender: bytes, serial: int, count: int, broadcast: bool) -> None:
        """A member's signed list of the chunks of `serial` it is about to send: an assembly of its own (E3)."""
        now = self._clock.now()
        self._expire(now)
        try:
            manifest = revocation_manifest.parse(data, HEADER.size, count)
        except revocation_manifest.ManifestError:
            self.counts["dropped_malformed"] += 1
            return
        for assembly in self._pending.values():
            if assembly.serial == serial and assembly.hashes == manifest.hashes:
                assembly.broadcast = assembly.broadcast or broadcast
                self.counts["manifest_known"] += 1  # another node sends the list under way: its chunks are listed
                return
        try:
            revocation_manifest.check(self._anchor, self.overlay, manifest, time.time(), self._certificates)
        except revocation_manifest.ManifestError as exc:
            self.counts["dropped_unsigned"] += 1
            if self._log_refused.should_log(sender, now):
                log.info("revocation manifest from %s on overlay %s refused: %s", sender.hex(":"), self.overlay, exc)
            return
        # One assembly per signer: a member starting another gives up its last, so one naming serial after serial,
        # from whatever MACs, evicts only itself (review21 N2, review21e E3), never a real list.
        if self._pending.pop(manifest.node_id, None) is not None:
            self.counts["dropped_replaced"] += 1
        if len(self._pending) >= MAX_PENDING:
            del self._pending[min(self._pending, key=lambda k: self._pending[k].started)]
            self.counts["dropped_incomplete"] += 1
        self._pending[manifest.node_id] = _Assembly(serial, manifest.hashes, now, broadcast)

    def _collect(self, sender: bytes, serial: int, index: int, count: int, chunk: bytes, broadcast: bool) -> None:
        now = self._clock.now()
        self._expire(now)
        digest = revocation_manifest.chunk_hash(chunk)
        # Into every assembly listing it: a member's manifest listing some of a real list's chunks (they are public
        # once sent) must not take them from the real list's assembly.
        listing = [k for k, a in self._pending.items()
                   if a.serial == serial and len(a.hashes) == count and a.hashes[index] == digest]  # fmt: skip
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
        serial, count = assembly.serial, len(assembly.hashes)
        try:
            text = b"".join(assembly.chunks[i] for i in range(count)).decode()
        except UnicodeDecodeError:
            self.counts["dropped_malformed"] += 1
            return
        held = self._signaling.revocation_list(self.overlay)
        if held is not None and serial == held.serial:
            # Another node broadcast the list we hold: ours can wait. Only the whole list, the same as ours,
            # counts: a forged header of our serial must not keep a node that missed it without it.
            if broadcast and text == list_to_text(held):
                self._heard_list_at = now
            return
        mac = sender.hex(":")
        if self._signaling.receive_revocation_list(text, f"overlay {mac}"):
            self.counts["adopted"] += 1
        else:
            self.counts["not_adopted"] += 1  # the endpoint counted and logged why (bad_revocation)
