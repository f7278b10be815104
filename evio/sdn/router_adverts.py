"""A named router's advertisements vouched for by its node's signature (decision 0081).

FRBs are not signed: a member relaying router R's floods could write an RA with R's root, R's MAC and R's source,
and the RA guard (0068) and the address binding (`router_addresses`) took it, whatever it said: router lifetime 0
(every node behind the relay drops its default route) or a bogus on-link prefix (the kernels resolve global
destinations by neighbour discovery on the overlay). Only R's node sees R's RAs first-hand (on a leaf port: its
bridge's interface or an attached host), so in trust mode:

1. R's node, before it floods an RA from one of its leaf ports, floods a *statement* signed with its certificate's
   key (`statement`): R's node id, the RA's Ethernet source, its IPv6 source, a digest of its ICMPv6 message (every
   field and option the kernel acts on), the wall-clock time it was issued. It goes first on the same tunnels, so
   it comes first wherever the RA comes.
2. A node takes a statement (`take`) only flooded rooted at the node it names, that node named in `ipv6_routers`,
   issued within `FRESH` before this node's wall clock (`CLOCK_SKEW` after it), newer than the newest one held for
   the same (router, MAC, source), and signed by the key of that node's certificate (found the CA's by the host
   claims, 0055): one signature check, within `VERIFY_RATE` per (tunnel port, router) and none for a copy (the same
   bytes by another way). It holds the newest per (router, MAC, source), at most `MAX_SOURCES` per router.
   Its flood's fields (root, bound, hop count) are not signed, so the switch passes on the statement held here for
   a copy too (`to_pass`): the first as far as its bound, and the first wider than that once more, as far as its
   root; a member's narrow copy sent ahead of the flood's own no longer keeps it from the nodes behind (review21v1 1).
3. An RA in a named router's name from a tunnel port is delivered (`vouched`) only if a statement held for its
   (router, MAC, source), taken here within `FRESH`, names its digest. A replayed older statement is refused by 2,
   so a genuine RA that R no longer sends (lifetime 1800 before R said 0) cannot come back either.
4. An RA whose statement has not come yet is held (`hold`), one per router, for `HOLD` seconds, and goes on when it
   does (the switch runs it again); else it is dropped and counted (`Drop.ROUTER_ADVERT_UNVOUCHED`).

A statement does not bind R's address over what another member's MAC said of it first: a member using a
stable-privacy address of its own and a squatter of R's look alike (review21t 1); a router address neither named nor
made from R's interface MAC is protected once named. Without trust no statements are signed or asked for (the
daemon warns in that mode).

Pure: frames, `now` (monotonic) and the wall clock's reading in; crypto is `cryptography`'s ECDSA P-256 / SHA-256.
"""

from __future__ import annotations

import hashlib
import ipaddress
import struct
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from evio.ratelimit import PeerRateLimiter, Rate
from evio.sdn.frb import BROADCAST_MAC, format_mac, parse_mac
from evio.sdn.neighbor_answers import icmpv6_at
from evio.sdn.switch_terms import SIGNED_DOCUMENTS_ETHERTYPE

MAGIC = b"EVRA"  # one ethertype with the signed documents' flood (0x88B5), told apart by magic; never delivered
VERSION = 1
_HEAD = struct.Struct("!4sB16sQ6s16s16s")  # magic, version, router node id, issued ms, MAC, source, digest
_CONTEXT = b"evio router advert statement v1\0"
MAX_SIG_BYTES = 80  # an ECDSA P-256 signature in DER is at most 72
FRESH = 10.0  # seconds: a statement is issued this long before it is taken at most, and vouches this long after
CLOCK_SKEW = 300.0  # a statement issued this far in the future is still taken (as host claims, 0055)
HOLD = 1.5  # seconds an RA waits for its statement (it normally comes first, on the same tunnels)
MAX_SOURCES = 8  # (MAC, source) pairs a router's statements are held for (its interfaces and hosts that route)
SEEN_KEPT = 256  # statements' digests taken lately: a copy by another way costs no check
# Checks per (tunnel port, router): a router sends an unsolicited RA every 4-1800 s, solicited ones at most one per
# 3 s multicast (RFC 4861 10), more unicast; a relay forging statements spends its own port's share only.
VERIFY_RATE = Rate(10.0, 20)
ROUTER_ADVERTISEMENT = 134


@dataclass(frozen=True, slots=True)
class Advert:
    """What a statement vouches for: an RA's Ethernet source, IPv6 source and its ICMPv6 message's digest."""

    mac: str
    source: ipaddress.IPv6Address
    digest: bytes


@dataclass(frozen=True, slots=True)
class Statement:
    router: int
    issued_ms: int
    advert: Advert


@dataclass(slots=True)
class _Held:
    issued_ms: int
    digest: bytes
    taken: float  # when taken here (monotonic)
    frame: bytes  # the statement as taken (its signature checked): what any copy of it passes on
    reach: int = -1  # how far round the ring from this node its passes went (-1: none yet)
    widened: bool = False  # passed on once more, as far as its root, for a copy that came wider (review21v1 1)


def advert_of(frame: bytes) -> Advert | None:
    """The vouched-for fields of an untagged RA frame (as `neighbor_guard.as_received` gives it), or None."""
    found = icmpv6_at(frame)
    if found is None or found[0] != ROUTER_ADVERTISEMENT or found[2]:
        return None
    end = 54 + int.from_bytes(frame[18:20], "big")  # the IPv6 payload's end: Ethernet padding is not the RA's
    message = frame[found[1]:end]
    if len(message) < 16 or end > len(frame):
        return None
    digest = hashlib.blake2b(message, digest_size=16).digest()
    return Advert(format_mac(frame[6:12]), ipaddress.IPv6Address(frame[22:38]), digest)


def pack(key: ec.EllipticCurvePrivateKey, overlay: str, statement: Statement) -> bytes:
    """A statement's Ethernet frame: broadcast from the RA's MAC, the signed documents' ethertype."""
    a = statement.advert
    body = _HEAD.pack(MAGIC, VERSION, statement.router.to_bytes(16, "big"), statement.issued_ms, parse_mac(a.mac),
                      a.source.packed, a.digest)
    signature = key.sign(_CONTEXT + overlay.encode() + b"\0" + body, ec.ECDSA(hashes.SHA256()))
    return BROADCAST_MAC + parse_mac(a.mac) + SIGNED_DOCUMENTS_ETHERTYPE.to_bytes(2, "big") + body + signature


def is_statement(inner: bytes) -> bool:
    """Whether a flooded frame is a statement (the signed documents' flood's frames have other magics)."""
    return (inner[:6] == BROADCAST_MAC and inner[12:14] == SIGNED_DOCUMENTS_ETHERTYPE.to_bytes(2, "big")
            and inner[14:18] == MAGIC)


def parse(inner: bytes) -> tuple[Statement, bytes, bytes] | None:
    """(statement, signed body, signature) of a statement frame, or None if it does not parse."""
    body = inner[14:14 + _HEAD.size]
    signature = inner[14 + _HEAD.size:]
    if len(body) < _HEAD.size or not 8 <= len(signature) <= MAX_SIG_BYTES:
        return None
    magic, version, router, issued_ms, mac, source, digest = _HEAD.unpack(body)
    if magic != MAGIC or version != VERSION or mac[0] & 1:
        return None
    advert = Advert(format_mac(mac), ipaddress.IPv6Address(source), digest)
    return Statement(int.from_bytes(router, "big"), issued_ms, advert), body, signature


class RouterAdverts:
    """One overlay's statements: signed for this node's routers' RAs (if `signing_key`), checked for the others'."""

    def __init__(
        self, overlay: str, signing_key: ec.EllipticCurvePrivateKey | None,
        key_of: Callable[[int], ec.EllipticCurvePublicKey | None], wall: Callable[[], float],
    ) -> None:  # fmt: skip
        self.overlay = overlay
        self._signing_key = signing_key
        self._key_of = key_of
        self._wall = wall
        self._held: dict[int, OrderedDict[tuple[str, ipaddress.IPv6Address], _Held]] = {}
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._budget = PeerRateLimiter[tuple[int, int]](VERIFY_RATE)
        self._last_issued = 0
        self.waiting: dict[int, tuple[float, int, bytes]] = {}  # router -> (until, in_port, the frame as it came)
        self.counts: Counter[str] = Counter()  # signed, taken, vouched; refused and unvouched by reason

    def use_keys(self, signing_key: ec.EllipticCurvePrivateKey | None,
                 key_of: Callable[[int], ec.EllipticCurvePublicKey | None]) -> None:
        self._signing_key = signing_key
        self._key_of = key_of

    def has_key(self, router: int) -> bool:
        """Whether `router`'s statements can be checked here (its certificate's key is known)."""
        return self._key_of(router) is not None

    # -- at the router's node -----------------------------------------------------------------

    def statement(self, router: int, frame: bytes) -> bytes | None:
        """The statement frame vouching for RA `frame` sent by `router` (this node) from a leaf port, or None (no
        key: trust off; not an RA the kernel reads)."""
        advert = advert_of(frame) if self._signing_key is not None else None
        if advert is None or self._signing_key is None:
            return None
        # Strictly increasing, so two RAs within one millisecond (a burst of solicited ones) are both the newest.
        issued = self._last_issued = max(int(self._wall() * 1000), self._last_issued + 1)
        self.counts["signed"] += 1
        return pack(self._signing_key, self.overlay, Statement(router, issued, advert))

    # -- at every other node ------------------------------------------------------------------

    def take(self, inner: bytes, root: int, port: int, routers: frozenset[int], mac_owners: Mapping[str, int],
             now: float) -> tuple[int | None, str | None]:
        """A flooded statement `inner` rooted at `root` from tunnel `port`: (the router it vouches for if taken, the
        switch then running an RA it held for it again; the reason it was refused, counted), both None for a copy
        of one taken (by another way), which `to_pass` may still pass on."""
        parsed = parse(inner)
        if parsed is None:
            return self._refused("malformed")
        statement, body, signature = parsed
        router, advert = statement.router, statement.advert
        if router != root:
            return self._refused("not_its_flood")  # a node floods its own: another root's is a relay's forgery
        if router not in routers:
            return self._refused("not_named")
        if mac_owners.get(advert.mac) != router:
            return self._refused("not_its_mac")  # its signed host claims hold the RA's MAC (0055)
        wall = self._wall()
        if not wall - FRESH <= statement.issued_ms / 1000 <= wall + CLOCK_SKEW:
            return self._refused("stale")
        pair = (advert.mac, advert.source)
        sources = self._held.get(router)
        held = None if sources is None else sources.get(pair)
        if held is not None and statement.issued_ms <= held.issued_ms:
            return self._refused("not_newer") if held.issued_ms != statement.issued_ms else self._copy()
        seen = hashlib.blake2b(body + signature, digest_size=16).digest()
        if seen in self._seen:
            return self._copy()
        key = self._key_of(router)
        if key is None:
            return self._refused("no_key")
        if not self._budget.allow((port, router), now):
            return self._refused("verify_rate")
        try:
            key.verify(signature, _CONTEXT + self.overlay.encode() + b"\0" + body, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return self._refused("signature")
        self._seen[seen] = None
        if len(self._seen) > SEEN_KEPT:
            self._seen.popitem(last=False)
        sources = self._held.setdefault(router, OrderedDict())
        sources.pop(pair, None)  # (the newest last)
        sources[pair] = _Held(statement.issued_ms, advert.digest, now, bytes(inner))
        while len(sources) > MAX_SOURCES:
            sources.popitem(last=False)  # its least lately stated pair
        self.counts["taken"] += 1
        return router, None

    def to_pass(self, inner: bytes, reach: int, farthest: int) -> tuple[_Held, int] | None:
        """What to pass on for a copy `inner` of a statement held here (taken now or before), that came with its bound
        `reach` round the ring from this node, its root `farthest`: (the statement held, whose `frame` is what to pass
        on, how far to pass it), or None when its passes already went that far, or it is no statement held here.

        Its flood (root, bound, hop count) is not signed: the first copy to come, a member's with a narrow bound
        say, must not decide alone where the router's word goes from here (review21v1 finding 1). So the first
        copy goes as far as its bound, and the first copy wider than that sends it once more, to its root: the
        farthest a flood rooted there goes, so no copy can be wider after. At most two passes per statement, however
        many copies come, none checked again."""
        held = self._held_as(inner)
        if held is None:
            return None  # not the statement held: these bytes were never checked here
        if held.reach < 0:
            return held, reach
        if reach <= held.reach or held.widened:
            return None
        return held, farthest

    def passed(self, held: _Held, reach: int) -> None:
        """Note that statement `held` (`to_pass`) went `reach` round the ring: the flood budget let it go. Noted only
        then, so a copy whose pass the budget stopped does not stand for the next."""
        if held.reach >= 0:
            held.widened = True
            self.counts["widened"] += 1
        held.reach = max(held.reach, reach)

    def _held_as(self, inner: bytes) -> _Held | None:
        """The statement held here that `inner` says the same as (router, MAC, source, issue time, digest: its whole
        signed body), or None."""
        parsed = parse(inner)
        if parsed is None:
            return None
        statement = parsed[0]
        advert = statement.advert
        sources = self._held.get(statement.router)
        held = None if sources is None else sources.get((advert.mac, advert.source))
        if held is None or held.issued_ms != statement.issued_ms or held.digest != advert.digest:
            return None
        return held

    def vouched(self, router: int, frame: bytes, now: float) -> bool:
        """Check 3: whether RA `frame` (untagged) in `router`'s name is the one its newest statement names."""
        advert = advert_of(frame)
        sources = self._held.get(router)
        held = None if advert is None or sources is None else sources.get((advert.mac, advert.source))
        if advert is None or held is None or now - held.taken > FRESH or held.digest != advert.digest:
            return False
        self.counts["vouched"] += 1
        return True

    def hold(self, router: int, in_port: int, wire: bytes, now: float) -> bool:
        """Keep one RA of `router`'s (the frame as it came, FRB or not) for its statement; True if a held one was
        replaced (the caller counts it unvouched)."""
        replaced = router in self.waiting
        self.waiting[router] = (now + HOLD, in_port, wire)
        return replaced

    def release(self, router: int) -> tuple[int, bytes] | None:
        """The RA held for `router`, if any, taken out of the hold: (in_port, frame)."""
        held = self.waiting.pop(router, None)
        return None if held is None else (held[1], held[2])

    def expire(self, now: float) -> int:
        """Drop the RAs whose hold ended; how many."""
        gone = [router for router, (until, _, _) in self.waiting.items() if until <= now]
        for router in gone:
            del self.waiting[router]
        return len(gone)

    def _refused(self, reason: str) -> tuple[None, str]:
        self.counts[f"refused_{reason}"] += 1
        return None, reason

    def _copy(self) -> tuple[None, None]:
        self.counts["copies"] += 1
        return None, None
