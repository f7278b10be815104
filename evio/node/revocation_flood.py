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
   sent again: it reached the others already. Nor is a list from the server host, which sent it to every
   member online, flooded by all: each node waits up to `SERVER_COPY_JITTER` at random and broadcasts it once
   unless copies signed by `SERVER_COPY_WITNESSES` other members came by meanwhile, for the members the server
   did not reach (two floods per removal, not three per member; one member's copy bounded to miss a node cannot
   hold the others' back, review21i I9). A node whose copy was held back broadcasts one HAVE of the new serial
   instead (its next periodic HAVE, sooner): a member on the way of some nodes' floods to a node both copies
   missed cannot narrow every node's HAVE away from it, and it asks (rules 4-5; review21j J5).
2. A node broadcasts HAVE (its serial, no list) when one of its links comes up, so a node that joins, or a
   part of the ring that was cut off, learns what it missed: a node holding a newer list answers HAVE, and
   any older list that comes by, with its own (at most once per `ANSWER_INTERVAL`), after a random wait of up
   to `ANSWER_JITTER`, and not at all if another node's broadcast of that list came meanwhile: one HAVE costs
   the overlay about one answer, not one per node. Only a frame sent to the broadcast address counts as
   another node's broadcast: a member replaying the signed list by unicast to every holder but the asker
   must not hold their answers back (review21c R1). Nor may a broadcast alone: a member is the root of its own
   broadcasts and chooses their bounds, so it can flood the genuine list to every holder but the asker
   (review21d R1'). Hence rule 5.
3. Every node also broadcasts HAVE now and then, at random, every `HAVE_PERIOD` on average or, once it hears
   more than `HAVE_PERIOD` nodes doing so, every (nodes heard) seconds up to `HAVE_PERIOD_MAX`: the overlay
   sends about one HAVE a second up to 60 nodes (RTCP's rule, RFC 3550 6.2), and a member inventing HAVE
   senders cannot stretch the period further (review21c R2). A node that missed every copy while no link of
   its came up (the XMPP server down: no new links) hears a newer serial within seconds and asks. While every
   HAVE and list heard names our serial, each period is twice the last, up to `HAVE_PERIOD_IDLE` (Trickle, RFC
   6206); a serial other than ours heard, or a list adopted, puts it back at the short period at once. So an
   overlay that agrees sends a HAVE per node every 10 minutes, and a change, or a node behind saying its older
   serial, brings the short period back everywhere the flood reaches (decision 0073). A member sending other
   serials holds the overlay at the short period, the rate of before, never above it.
4. A node hearing HAVE of a newer serial asks (its own HAVE) after a random wait of up to `ANSWER_JITTER`,
   not at all if another node of its serial asked meanwhile, and, while no such list arrives, at most once
   per back-off that doubles from `HAVE_INTERVAL` to `HAVE_PERIOD`: a forged HAVE of a serial nobody holds
   costs the overlay about one HAVE, and ever fewer, not one per node (review21c R3). An ask given up is made
   after all `ASK_GRACE` later if the list has not come and two members said HAVE of the newer serial (a member
   saying HAVE of our serial every few milliseconds kept us from asking: review21j J5's residual), at most
   `ASKS_AFTER_ALL` times while we hold one list. With host claims, HAVE senders count (here and in rules 3 and
   5) by the member whose claims hold their MAC, each once, and only HAVEs sent to the broadcast address, which
   the switch delivers only under that member's root; a member's signed manifest of the newer serial counts as its
   word too (a member speaking under two members' MACs made every node ask every 30 s: review21l L4).
5. Silence after a HAVE does not mean it was answered, so a node says each HAVE of its own again `FOLLOW_UP`
   later unless a newer list came meanwhile. A sender asking again within `FIRM_WINDOW` still lacks the list
   (or is forged): whatever copies came by, none reached it (review21d R1'). Such a repeated ask is answered
   "firmly", by unicast to the asker's MAC, which no copy holds back and no member off the path sees, and
   only by a few: the holders whose place on a ring of hashed MACs (`_place`) is among the first
   `FIRM_FEW * FIRM_WIDEN ** level` after the asker's, counting every HAVE sender heard (rule 3), where
   `level` is the HAVE's index byte, the number of asks the asker made since it last adopted a list (a
   HAVE's index was always 0 and never read). One lost answer costs `FIRM_FEW` unicast lists, whatever the
   overlay's size, not one broadcast from every holder (review21e); an asker still without the list asks
   again, wider, and at the widest every holder answers. A node answers one asker firmly at most once per
   `FIRM_INTERVAL`, and any firmly at most as `FIRM_RATE` allows: a forged asker costs each node at most
   one unicast list per `FIRM_INTERVAL`, and all forged askers together `FIRM_RATE`.

Frame after the Ethernet header (to ff:ff:ff:ff:ff:ff, or the asker's MAC for a firm answer; ethertype
`ETHERTYPE`):

    magic "EVRL" | version (1) | kind (1) | serial (8) | index (1) | count (1) | chunk of the list's text

(a HAVE has no chunk; its index is the sender's ask level, its count 0).

A list goes out as a manifest (kind MANIFEST, `evio.signal.revocation_manifest`: each chunk's hash, signed with
the sender's overlay-CA certificate) and then its chunks. A chunk is taken only into an assembly whose manifest
lists its hash, and there is one assembly per signer: a frame's sender MAC is what the frame says, and keyed by
it, one-chunk forgeries from invented MACs evicted a real list's assembly between two of its chunks (review21e
E3); now a forged chunk joins nothing and a member's manifests replace only its own.

Everything that comes in is bounded before it costs anything: only lists newer than ours are assembled, at
most `MAX_PENDING` signers' at once (the oldest given up), each of at most `MAX_CHUNKS` chunks and
`identity.MAX_DOCUMENT_BYTES`, and given up after `ASSEMBLY_TIMEOUT`; a manifest costs one signature check (a
certificate is checked once, `host_claims.Certificates`), within a budget per way in (broadcast, unicast) shared
fairly among the members that deliver them, never charged to the one a manifest names (`CHECK_RATE`,
`SIGNER_CHECK_RATE`; past it `dropped_verify_rate`), and one listing the
hashes of an assembly under way none, nor one of the list held but by broadcast and listing its very chunks
(`manifest_held`); a frame's serial is read off the list held, never by serializing it (decision 0078). Checking
the list's signature is the signal endpoint's (`bad_revocation`; a refused signature is not checked twice); what
this module refuses is counted by reason in `counts`. A member that floods such frames is held by the switch's
flood budget per port, and what it sends to this node's MAC alone, which no switch budgets (0072), by the check
budget.

The mechanism is `document_flood.SignedDocumentFlood`, which the member list's flood shares (decision 0063).
"""

from __future__ import annotations

from evio.node.document_flood import (  # noqa: F401 - the flood's constants, as tests and docs name them here
    ANSWER_INTERVAL,
    ANSWER_JITTER,
    ASK_GRACE,
    ASKS_AFTER_ALL,
    ASSEMBLY_TIMEOUT,
    BROADCAST,
    CHECK_RATE,
    CHUNK,
    ETHERTYPE,
    FIRM_FEW,
    FIRM_INTERVAL,
    FIRM_LEVEL_MAX,
    FIRM_RATE,
    FIRM_WIDEN,
    FIRM_WINDOW,
    FOLLOW_UP,
    HAVE,
    HAVE_INTERVAL,
    HAVE_PERIOD,
    HAVE_PERIOD_IDLE,
    HAVE_PERIOD_MAX,
    HEARD_WINDOW,
    LIST,
    MANIFEST,
    MAX_ASKERS,
    MAX_HEARD,
    MAX_PENDING,
    REPEATS,
    SERVER_COPY_JITTER,
    SERVER_COPY_WITNESSES,
    SIGNER_CHECK_RATE,
    VERSION,
    SignedDocumentFlood,
)
from evio.signal.events import RevocationAdopted
from evio.signal.identity import MAX_DOCUMENT_BYTES

MAGIC = b"EVRL"
HEADER = SignedDocumentFlood.HEADER
MAX_CHUNKS = -(-MAX_DOCUMENT_BYTES // CHUNK)


class RevocationFlood(SignedDocumentFlood):
    """One overlay's revocation lists on its bridge's interface `ifname` (trust mode only)."""

    KIND = "revocation list"
    MAGIC = MAGIC
    MAX_BYTES = MAX_DOCUMENT_BYTES
    EVENT = RevocationAdopted

    def _serial(self) -> int:
        rl = self._signaling.revocation_list(self.overlay)
        return rl.serial if rl is not None else 0

    def _held_text(self) -> str | None:
        return self._signaling.revocation_list_text(self.overlay)

    def _hand_in(self, text: str, source: str) -> bool:
        return self._signaling.receive_revocation_list(text, source)
