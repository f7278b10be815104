"""Signed announcements of the MACs a node hosts, and who holds each MAC (issue 21, review21b; decision 0055).

Pure: bytes and `now` in, verdicts out. No frame proves who sent it, so a member could place any MAC
under its own root with one forged flood; a host that only *receives* (a one-way stream) sends nothing its
place could vouch with. So each node says which MACs it hosts (its bridge's and its leaf ports' own, and
the hosts learned on its leaf ports), signed with the key of its overlay-CA certificate, and the others
place such a MAC only under that node's root (evio.sdn.switch, `_may_speak_for`).

Announcement (after the Ethernet header; ethertype `evio.node.host_claims.ETHERTYPE`)::

    magic "EVHC" | version (1) | node id (16) | issued, ms since the epoch (8) | overlay length (1) | overlay
    | certificate length (2) | certificate (DER) | MAC count (1) | MACs (6 each)
    [version 2: | address count (1) | per address: length (1: 4 or 16) | address | index of its MAC in MACs (1)]
    [version 3: | address count (1, may be 0) | addresses as in version 2 | page (1) | pages (1)]
    | signature (rest, ECDSA P-256)

Version 2 adds the node's own overlay addresses, each with the MAC of the interface holding it (decision 0062): a
receiver takes them only if the node's certificate names them (`trust.certified_addresses`: the CA's word, not
the member's), and its switch then answers ARP and neighbour solicitations for them at once. A node sends
version 1 while it has no certified address to name, so nodes of the previous release still read it.

Version 3 is one *page* of a node's list (review21e E1): a node hosting more than `MAX_MACS` (a site gateway
bridging a LAN) names them all in up to `MAX_PAGES` pages, each signed on its own and held by (node, page); a
page says how many the list has, and pages past that count issued before it are dropped, and refused when they
come again (review21o O1: a member replaying another's dropped page within `LIFETIME`; decision 0078). A MAC stays
on the page it was put on while the node hosts it (`Pager`), so a change re-signs only its page and no MAC is, even
for a moment, named by none. A one-page list goes as version 1 or 2, as before.

The signature covers `_CONTEXT` and everything before it. An announcement is the node's whole list (or one
page of it): a later one replaces it (and withdraws what it no longer names). One frame, at most `MAX_MACS`
MACs; a node hosting more than `MAX_PAGES` pages' worth announces the first ones and counts the rest.

`HostClaims` keeps each member's latest list (by `issued`, so an old announcement replayed changes
nothing) for `LIFETIME` after it was issued, and names a MAC's owner: its one claimant, or of several
(a *disputed* MAC) the one that claimed it first here, until that one stops: a member announcing
another's MAC neither takes it nor takes away its protection, and is seen doing it (review21c).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import struct
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from evio.signal.identity import TrustAnchor, load_certificate
from evio.signal.overlay_addresses import certified_addresses

MAGIC = b"EVHC"
VERSION = 1
VERSION_ADDRESSES = 2  # with the node's own overlay addresses (decision 0062)
VERSION_PAGED = 3  # one page of a list of more than MAX_MACS (review21e E1)
MAX_ADDRESSES = 8  # a node's own addresses on the overlay (its bridge interface's), not its hosts'
MAX_MACS = 64  # per page: its bridge's own MACs and its hosts; ~400 bytes, one frame with the certificate
# Pages of one node's list: 1024 MACs. What a receiver holds of one member is bounded by it (16 frames, ~15 kB),
# and a full refresh, paced (evio.node.host_claims.PAGE_GAP), stays within a member's check share at every node.
MAX_PAGES = 16
MAX_CERT_BYTES = 2048
MAX_SIG_BYTES = 80  # an ECDSA P-256 signature in DER is at most 72
MAX_FRAME_BYTES = 1350  # within a tunnel TAP's frame less the FRB that carries it (evio.sdn.switch)
# Seconds an announcement holds after it was issued; nodes announce again every third of it: 0.1 broadcast per
# node a minute in an idle overlay (issue 23 allows 1 for all of an idle node's multicast). A member that left
# keeps its claims that long; revoked, it loses them as the list is adopted.
LIFETIME = 1800.0
# A MAC none of its holders here names (its first claimant, or a member that came to hold it) is nobody's until
# one member has been its only claimant this long; that member then holds it (review21e E4, `HostClaims.owners`).
# A host that moved is held by 0034's rules that long (its own frames place it), after its old node stopped
# naming it; a member naming a host in advance comes to hold it only once the host has been gone from every
# holder that long, and shares it with nobody when its node names it again. As long as HOSTED_GRACE, the time
# a node keeps naming a silent host of its own (evio.sdn.switch), and a third of LIFETIME.
ALONE_HOLD = 600.0
# The holders of MACs nobody names any more kept per first holder: a host's node names it again after a reboot,
# or its own absence past LIFETIME, and holds it at once (an announcement's worth, four times).
RECORDS_PER_FOUNDER = 4 * MAX_MACS
MAX_HOLDERS = 4  # a MAC's holders remembered: its first claimant, and the latest of those that came to hold it
CLOCK_SKEW = 300.0  # an announcement issued this far in the future is still taken (nodes' clocks differ)
MAX_OVERLAY = 32
_CONTEXT = b"evio-host-claims/1\x00"
_HEAD = struct.Struct("!4sB16sQB")


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
AddressClaim = tuple[IPAddress, str]  # (the node's own overlay address, the MAC of its interface holding it)


class ClaimError(ValueError):
    """An announcement that is malformed or does not verify; the message says why (a few words: it is a counter)."""


@dataclass(frozen=True)
class Announcement:
    overlay: str
    node_id: int
    issued_ms: int
    macs: tuple[str, ...]
    addresses: tuple[AddressClaim, ...] = ()  # certified by the node's certificate (checked)
    page: int = 0
    pages: int = 1


def pack(key: ec.EllipticCurvePrivateKey, cert: x509.Certificate, overlay: str, node_id: int, issued_ms: int,
         macs: Iterable[str], addresses: Iterable[AddressClaim] = (), page: int = 0, pages: int = 1) -> bytes:  # fmt: skip
    """A signed announcement of `macs` (at most `MAX_MACS`; the caller cuts and counts) and of the node's own
    `addresses` (each with a MAC of `macs`; version 2, only when there are any), as page `page` of `pages`
    (version 3, only when there are several)."""
    name = overlay.encode()
    der = cert.public_bytes(serialization.Encoding.DER)
    macs = list(macs)
    raw = [bytes.fromhex(mac.replace(":", "")) for mac in macs]
    own = list(addresses)
    if len(raw) > MAX_MACS or len(name) > MAX_OVERLAY or len(der) > MAX_CERT_BYTES or len(own) > MAX_ADDRESSES:
        raise ValueError("announcement too large")
    if not 0 <= page < pages <= MAX_PAGES:
        raise ValueError("bad page")
    version = VERSION_PAGED if pages > 1 else VERSION_ADDRESSES if own else VERSION
    body = (_HEAD.pack(MAGIC, version, node_id.to_bytes(16, "big"), issued_ms, len(name))
            + name + struct.pack("!H", len(der)) + der + bytes([len(raw)]) + b"".join(raw))  # fmt: skip
    if own or version == VERSION_PAGED:
        body += bytes([len(own)]) + b"".join(bytes([len(ip.packed)]) + ip.packed + bytes([macs.index(mac)])
                                             for ip, mac in own)  # fmt: skip
    if version == VERSION_PAGED:
        body += bytes([page, pages])
    return body + key.sign(_CONTEXT + body, ec.ECDSA(hashes.SHA256()))


@dataclass(frozen=True)
class Parsed:
    """An announcement read but not checked: what a receiver can refuse for free before a signature check."""

    node_id: int
    issued_ms: int
    der: bytes
    macs: tuple[str, ...]
    signature: bytes
    signed: bytes  # what the signature covers, less `_CONTEXT`
    addresses: tuple[AddressClaim, ...] = ()  # not yet checked against the certificate
    page: int = 0
    pages: int = 1


def parse(overlay: str, data: bytes, now: float) -> Parsed:
    """The fields of the announcement in `data`, if well formed, of `overlay`, fresh, and naming only unicast
    MACs: all a receiver checks without cryptography (review21c: junk took the signature budget)."""
    if len(data) > MAX_FRAME_BYTES:
        raise ClaimError("too long")
    if len(data) < _HEAD.size:
        raise ClaimError("short")
    magic, version, node, issued_ms, name_len = _HEAD.unpack_from(data)
    if magic != MAGIC or version not in (VERSION, VERSION_ADDRESSES, VERSION_PAGED):
        raise ClaimError("not an announcement")
    at = _HEAD.size
    name = data[at : at + name_len]
    at += name_len
    if len(name) != name_len or name.decode(errors="replace") != overlay:
        raise ClaimError("another overlay")
    if len(data) < at + 2:
        raise ClaimError("short")
    (cert_len,) = struct.unpack_from("!H", data, at)
    at += 2
    if cert_len > MAX_CERT_BYTES or len(data) < at + cert_len + 1:
        raise ClaimError("bad certificate length")
    der = data[at : at + cert_len]
    at += cert_len
    count = data[at]
    at += 1
    if count > MAX_MACS or len(data) < at + 6 * count:
        raise ClaimError("bad MAC count")
    raw = data[at : at + 6 * count]
    at += 6 * count
    macs = tuple(raw[i : i + 6].hex(":") for i in range(0, len(raw), 6))
    addresses: list[AddressClaim] = []
    if version in (VERSION_ADDRESSES, VERSION_PAGED):
        least = 1 if version == VERSION_ADDRESSES else 0  # a page may name no address
        if len(data) < at + 1 or not least <= data[at] <= MAX_ADDRESSES:
            raise ClaimError("bad address count")
        at, wanted = at + 1, data[at]
        for _ in range(wanted):
            size = data[at] if len(data) > at else 0
            if size not in (4, 16) or len(data) < at + 2 + size or data[at + 1 + size] >= len(macs):
                raise ClaimError("bad address")
            ip = ipaddress.ip_address(data[at + 1 : at + 1 + size])
            if ip.is_multicast or ip.is_unspecified:
                raise ClaimError("bad address")
            addresses.append((ip, macs[data[at + 1 + size]]))
            at += 2 + size
    page, pages = 0, 1
    if version == VERSION_PAGED:
        if len(data) < at + 2 or not data[at] < data[at + 1] <= MAX_PAGES or data[at + 1] < 2:
            raise ClaimError("bad page")
        page, pages = data[at], data[at + 1]
        at += 2
    signature = data[at:]
    if not signature or len(signature) > MAX_SIG_BYTES:
        raise ClaimError("bad signature length")
    if issued_ms / 1000 < now - LIFETIME or issued_ms / 1000 > now + CLOCK_SKEW:
        raise ClaimError("stale")
    if any(int(mac[:2], 16) & 1 or mac == "00:00:00:00:00:00" for mac in macs):
        raise ClaimError("group or zero MAC")
    return Parsed(int.from_bytes(node, "big"), issued_ms, der, macs, signature, data[:at], tuple(addresses), page,
                  pages)


class Certificates:
    """Node certificates already found to be the overlay CA's for their node id, by SHA-256 of their DER: a
    known member's refresh then costs one signature check, not a chain (review21c). Only certificates the
    CA signed get in, so a member fills it with no more than its own; bounded anyway, oldest out first."""

    MAX = 4096
    HOLD = 3600.0  # seconds a certificate is taken on trust here before its chain is checked again

    def __init__(self) -> None:
        self._known: dict[bytes, tuple[int, ec.EllipticCurvePublicKey, float]] = {}
        self._addresses: dict[bytes, frozenset[IPAddress]] = {}  # the overlay addresses each names (decision 0062)
        self._nodes: Counter[int] = Counter()  # node id -> certificates of it held
        self._latest: dict[int, bytes] = {}  # node id -> fingerprint of its certificate added last (key_of)
        # (fingerprint, node id) refused lately: a member's genuine certificate sent again and again under
        # others' ids (each announcement's bytes new) costs one chain check per id, not one per frame.
        self._refused: dict[tuple[bytes, int], float] = {}

    def key_for(self, der: bytes, node_id: int, now: float) -> ec.EllipticCurvePublicKey | None:
        """The key of `der` if it was checked for `node_id` and holds at `now`; None: check the chain.
        ClaimError if it was refused for `node_id` within `HOLD`."""
        fingerprint = hashlib.sha256(der).digest()
        refused = self._refused.get((fingerprint, node_id))
        if refused is not None and now < refused:
            raise ClaimError("certificate refused")
        known = self._known.get(fingerprint)
        if known is None or known[0] != node_id or now >= known[2]:
            return None
        return known[1]

    def checked_key(self, anchor: TrustAnchor, der: bytes, node_id: int, now: float) -> ec.EllipticCurvePublicKey:
        """The key of the certificate `der` if the overlay CA issued it for `node_id` and it holds at `now` (Unix
        seconds): one checked here before costs nothing, another is checked by its chain and kept (with the
        addresses it names), or refused for a while. ClaimError says why not, the same words for every caller."""
        public = self.key_for(der, node_id, now)
        if public is not None:
            return public
        try:
            cert = load_certificate(der)
        except ValueError:
            raise ClaimError("certificate unreadable") from None
        if anchor.refusal(cert, node_id, datetime.datetime.fromtimestamp(now, datetime.UTC)) is not None:
            self.refuse(der, node_id, now)
            raise ClaimError("certificate refused")
        key = cert.public_key()
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise ClaimError("certificate key is not ECDSA")
        self.add(der, node_id, key, cert, now, certified_addresses(cert, anchor.overlay))
        return key

    def refuse(self, der: bytes, node_id: int, now: float) -> None:
        if len(self._refused) >= self.MAX:
            del self._refused[next(iter(self._refused))]
        self._refused[(hashlib.sha256(der).digest(), node_id)] = now + self.HOLD

    def addresses(self, der: bytes) -> frozenset[IPAddress]:
        """The overlay addresses the certificate `der` names, as found when it was added."""
        return self._addresses.get(hashlib.sha256(der).digest(), frozenset())

    def add(self, der: bytes, node_id: int, key: ec.EllipticCurvePublicKey, cert: x509.Certificate,
            now: float, addresses: frozenset[IPAddress] = frozenset()) -> None:  # fmt: skip
        fingerprint = hashlib.sha256(der).digest()
        if fingerprint in self._known:
            self._drop(fingerprint)  # checked again (its hold ran out): it goes to the back
        elif len(self._known) >= self.MAX:
            self._drop(next(iter(self._known)))
        until = min(now + self.HOLD, cert.not_valid_after_utc.timestamp())
        self._known[fingerprint] = (node_id, key, until)
        self._addresses[fingerprint] = addresses
        self._nodes[node_id] += 1
        self._latest[node_id] = fingerprint

    def _drop(self, fingerprint: bytes) -> None:
        node_id = self._known.pop(fingerprint)[0]
        self._addresses.pop(fingerprint, None)
        self._nodes[node_id] -= 1
        if not self._nodes[node_id]:
            del self._nodes[node_id]
        if self._latest.get(node_id) == fingerprint:
            del self._latest[node_id]

    def key_of(self, node_id: int, now: float) -> ec.EllipticCurvePublicKey | None:
        """The key of the certificate of `node_id` checked here last, while it holds; None if none does. What a
        message along the ring to `node_id` is sealed to (decision 0064, review21f F8)."""
        fingerprint = self._latest.get(node_id)
        known = self._known.get(fingerprint) if fingerprint is not None else None
        return known[1] if known is not None and now < known[2] else None

    def found(self, der: bytes, node_id: int) -> bool:
        """Whether `der` was found the CA's for `node_id` here, its hold perhaps run out: its check is then one
        signature, or once an hour a chain as well (passed, it holds anew; refused, it is refused free for `HOLD`)."""
        known = self._known.get(hashlib.sha256(der).digest())
        return known is not None and known[0] == node_id

    def knows(self, node_id: int) -> bool:
        """Whether a certificate of `node_id` was found the CA's here (a member, though perhaps no longer present)."""
        return node_id in self._nodes

    def __len__(self) -> int:
        return len(self._known)


def check(anchor: TrustAnchor, parsed: Parsed, now: float, certificates: Certificates | None = None) -> Announcement:
    """The announcement `parsed`, if its certificate is the overlay CA's for its node id and signed it, and names
    every address it claims (decision 0062: a member cannot claim another's address, whatever it signs)."""
    if certificates is None:
        certificates = Certificates()  # `verify`: checked once, kept nowhere
    public = certificates.checked_key(anchor, parsed.der, parsed.node_id, now)
    certified = certificates.addresses(parsed.der)
    try:
        public.verify(parsed.signature, _CONTEXT + parsed.signed, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise ClaimError("bad signature") from None
    if any(ip not in certified for ip, _ in parsed.addresses):
        raise ClaimError("address not certified")
    return Announcement(anchor.overlay, parsed.node_id, parsed.issued_ms, parsed.macs, parsed.addresses, parsed.page,
                        parsed.pages)


def verify(anchor: TrustAnchor, data: bytes, now: float) -> Announcement:
    """The announcement in `data`, if its certificate is the overlay CA's for its node id and signed it."""
    return check(anchor, parse(anchor.overlay, data, now), now)


class HostClaims:
    """Each member's latest announced MACs, and who holds each: its first claimant (at this node).

    A MAC two members announce is *disputed* and stays with the member that claimed it first here (the
    order claims were taken in), until that member stops naming it (a later list without it, expiry,
    revocation): a member announcing another's host cannot take it so (review21c: falling back to
    0034's rules for it let one forged flood take a receiving host's stream). An honest move (a VM that
    migrated) is the same sequence; the new node's claim holds after `ALONE_HOLD` (review21e E4: see `owners`).
    `self_id` is this node: its own list counts as a claim like any other, but its MACs are left out of
    `owners` (its switch keeps its own hosts by their leaf ports). A member's list is the union of its
    pages (at most `MAX_PAGES`, each replaced by a newer one of the same number)."""

    def __init__(self, self_id: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.self_id = self_id
        self._lists: dict[int, dict[int, Announcement]] = {}  # member -> page -> its latest announcement
        # member -> page count its pages stated -> when the latest page stating it was issued (ms): what `dropped` asks,
        # kept after the pages it dropped went (review21o O1), at most MAX_PAGES a member, each for LIFETIME.
        self._ends: dict[int, dict[int, int]] = {}
        self.disputed: frozenset[str] = frozenset()
        self._since: dict[tuple[int, str], int] = {}  # (member, MAC) -> when (in takes) it first named it
        self._taken = 0
        # Who holds a MAC none of its holders names (review21e E4): see `owners`. `clock`: monotonic seconds.
        self._clock = clock
        self.unheld: frozenset[str] = frozenset()  # named, held by nobody (see `owners`)
        # MAC -> its holders here, first claimant first, each with the earlier ones it yields to (see `owners`)
        self._holders: dict[str, list[tuple[int, frozenset[int]]]] = {}
        self._alone: dict[str, tuple[int, float]] = {}  # MAC nobody holds -> (its only claimant, since when)
        self._unnamed = 0  # MACs with holders that nobody names, at the last `owners`

    @staticmethod
    def _named(pages: Mapping[int, Announcement]) -> dict[str, None]:
        return {mac: None for _, ann in sorted(pages.items()) for mac in ann.macs}

    def take(self, ann: Announcement) -> bool:
        """A verified announcement; True when it changed who holds what, or the addresses it names (an older or
        equal one never does, nor a page its member's list had dropped: `dropped`)."""
        if self.dropped(ann.node_id, ann.page, ann.issued_ms):
            return False
        ends = self._ends.setdefault(ann.node_id, {})
        if ends.get(ann.pages, -1) < ann.issued_ms:
            ends[ann.pages] = ann.issued_ms
        pages = self._lists.setdefault(ann.node_id, {})
        held = pages.get(ann.page)
        if held is not None and held.issued_ms >= ann.issued_ms:
            return False
        before = self._named(pages)
        addresses = [a.addresses for _, a in sorted(pages.items())]
        pages[ann.page] = ann
        for page in [p for p, a in pages.items() if p >= ann.pages and a.issued_ms < ann.issued_ms]:
            del pages[page]  # the list has fewer pages now
        after = self._named(pages)
        for mac in before.keys() - after.keys():
            self._since.pop((ann.node_id, mac), None)
        for mac in after:
            if mac not in before:
                self._taken += 1
                self._since[(ann.node_id, mac)] = self._taken
        return before.keys() != after.keys() or addresses != [a.addresses for _, a in sorted(pages.items())]

    def issued_ms(self, node_id: int, page: int = 0) -> int | None:
        """When page `page` of the list held for `node_id` was issued (None: none held): an announcement not newer
        changes nothing."""
        held = self._lists.get(node_id, {}).get(page)
        return held.issued_ms if held is not None else None

    def dropped(self, node_id: int, page: int, issued_ms: int) -> bool:
        """Whether page `page` of `node_id`'s list, issued at `issued_ms`, is one its list had dropped: a page of that
        member issued after it said the list had `page` pages or fewer (review21o O1). Each page is signed on its own
        and an unchanged one is not signed again, so a page older than another of its list may be current; but once
        a list said it ended before `page`, every page `page` issued earlier is gone for good: a list that grows
        again signs its pages anew (each names the count), after saying so. Held per count, not only the latest: a
        list that shrank and grew again still drops what it had before it shrank, where its new page `page` was
        lost. Whatever the order its pages come in, the same pages are held."""
        ends = self._ends.get(node_id)
        return ends is not None and any(at > issued_ms for count, at in ends.items() if count <= page)

    def holds(self, node_id: int) -> bool:
        return node_id in self._lists

    def forget(self, node_ids: Iterable[int]) -> bool:
        """Members that left or were revoked: their claims go. True when any did."""
        node_ids = list(node_ids)
        for node in node_ids:
            self._ends.pop(node, None)
        gone = [(n, self._lists.pop(n)) for n in node_ids if n in self._lists]
        for node, pages in gone:
            for mac in self._named(pages):
                self._since.pop((node, mac), None)
        return bool(gone)

    def expire(self, now: float, keep: Collection[int] = ()) -> bool:
        """Lists (pages) issued more than `LIFETIME` ago go, but those of `keep` (members whose refresh may have gone
        unchecked here). True when any went."""
        changed = False
        for node, ends in list(self._ends.items()):  # a page issued before one of these is stale anyway (`parse`)
            for count in [c for c, at in ends.items() if at / 1000 < now - LIFETIME]:
                del ends[count]
            if not ends:
                del self._ends[node]
        for node, pages in list(self._lists.items()):
            if node in keep:
                continue
            old = [p for p, ann in pages.items() if ann.issued_ms / 1000 < now - LIFETIME]
            if len(old) == len(pages):
                changed |= self.forget([node])
            elif old:
                before = self._named(pages)
                for page in old:
                    del pages[page]
                for mac in before.keys() - self._named(pages).keys():
                    self._since.pop((node, mac), None)
                changed = True
        return changed

    def owners(self) -> Mapping[str, int]:
        """MAC -> the member that holds it. MACs named by several are listed in `disputed`, those held by nobody in
        `unheld`; MACs this node holds are left out.

        Who holds a MAC (review21c, review21e E4): its *holders* here are its first claimant (the order claims were
        taken in) and after it each member that came to hold it as below. A holder that names it holds it if it
        is the one holder naming it (holders after it go: they stopped naming it); two holders naming it hold
        nothing, but that a holder yields to an earlier one whose list this node did not hold when it came to
        hold the MAC (a node away past LIFETIME). No holder naming it, it is nobody's (0034's rules), not its
        next claimant's, until one member has been its *only* claimant for `ALONE_HOLD`: that member is then its
        latest holder. So a member naming a host in advance takes nothing when the host's port flaps or its node
        is away: the node names it again and holds it at once; the host gone longer from a node that still
        announces, it is nobody's once both name it. A host that moved is its new node's once its old node has
        stopped naming it for `ALONE_HOLD`. Holders are remembered while anyone names the MAC and after
        (`RECORDS_PER_FOUNDER` per first holder), so a claimant cannot found it anew by leaving it off its list
        and naming it again."""
        now = self._clock()
        naming: dict[str, list[tuple[int, int]]] = {}  # MAC -> [(since, member)]
        for (node, mac), since in self._since.items():
            naming.setdefault(mac, []).append((since, node))
        held: dict[str, int] = {}
        for mac, claims in naming.items():
            holders = self._holders.get(mac)
            if len(claims) == 1 and holders is not None and len(holders) == 1 and holders[0][0] == claims[0][1]:
                self._alone.pop(mac, None)  # the common case: its one holder, naming it alone
                held[mac] = claims[0][1]
                continue
            holder = self._holder(mac, [node for _, node in sorted(claims)], now)
            if holder is not None:
                held[mac] = holder
        for mac in [m for m in self._alone if m not in naming]:
            del self._alone[mac]
        if len(self._holders) - len(naming) > self._unnamed:  # more MACs nobody names: bound them again
            self._keep_holders(naming.keys())
        self._unnamed = len(self._holders) - len(naming)
        self.disputed = frozenset(m for m, claims in naming.items() if len(claims) > 1)
        self.unheld = frozenset(naming.keys() - held.keys())
        return {mac: node for mac, node in sorted(held.items()) if node != self.self_id}

    def _holder(self, mac: str, claimants: list[int], now: float) -> int | None:
        """Who holds `mac`, named by `claimants` (first claimant first)."""
        holders = self._holders.setdefault(mac, [(claimants[0], frozenset())])
        naming = {h: away for h, away in holders if h in claimants}
        standing = [h for h, away in naming.items() if not away & naming.keys()]
        if naming or len(claimants) > 1:
            self._alone.pop(mac, None)
            if len(standing) != 1:
                return None
            del holders[[h for h, _ in holders].index(standing[0]) + 1 :]  # those after it stopped naming it
            return standing[0]
        alone = self._alone.get(mac)
        if alone is None or alone[0] != claimants[0]:
            alone = self._alone[mac] = (claimants[0], now)
        if now - alone[1] < ALONE_HOLD:
            return None
        del self._alone[mac]
        holders.append((claimants[0], frozenset(h for h, _ in holders if h not in self._lists)))
        if len(holders) > MAX_HOLDERS:
            del holders[1]  # the first claimant stays: members taking turns alone cannot push it out
        return claimants[0]

    def _keep_holders(self, named: Collection[str]) -> None:
        """The holders of MACs nobody names are kept, of each first holder its latest `RECORDS_PER_FOUNDER`: a
        member flooding MACs in and out of its list forgets only MACs it was first to name."""
        kept: Counter[int] = Counter()
        for mac, holders in reversed(list(self._holders.items())):
            if mac not in named:
                kept[holders[0][0]] += 1
                if kept[holders[0][0]] > RECORDS_PER_FOUNDER:
                    del self._holders[mac]

    def next_change(self) -> float | None:
        """When (by `clock`) `owners` would change with nothing taken: a lone claimant's `ALONE_HOLD` ending."""
        now = self._clock()
        due = [since + ALONE_HOLD for _, since in self._alone.values() if since + ALONE_HOLD > now]
        return min(due, default=None)

    def addresses(self, owners: Mapping[str, int]) -> dict[IPAddress, str]:
        """Address -> MAC, of the members' own overlay addresses their certificates name (decision 0062): only an
        address one member alone claims, and only while that member holds the MAC here (`owners`, from
        `owners()`). Two members whose certificates both name an address (an address the CA gave again before
        the first holder's certificate expired or was revoked) are answered for by neither. This node's own are
        left out (its bridge answers for itself)."""
        claimed: dict[IPAddress, list[tuple[int, str]]] = {}
        for node, pages in self._lists.items():
            for ip, mac in dict.fromkeys(a for ann in pages.values() for a in ann.addresses):
                claimed.setdefault(ip, []).append((node, mac))
        return {ip: mac for ip, [(node, mac), *others] in claimed.items()
                if not others and node != self.self_id and owners.get(mac) == node}  # fmt: skip

    def claimants(self, mac: str) -> list[int]:
        """The members naming `mac`, the first claimant first."""
        return [n for _, n in sorted((s, n) for (n, m), s in self._since.items() if m == mac)]

    def __len__(self) -> int:
        return len(self._lists)


class Pager:
    """A node's hosted MACs cut into pages, each MAC kept on the page it was first put on while the node hosts it:
    a change then re-signs only its pages, and no MAC leaves one page for another (a receiver between the two
    pages would hold it for nobody, and a member naming it would become its first claimant). MACs past
    `MAX_PAGES` full pages are left out (`over`) until others go."""

    def __init__(self) -> None:
        self._page_of: dict[str, int] = {}
        self._fill: Counter[int] = Counter()
        self.over = 0

    def pages(self, macs: Iterable[str]) -> list[tuple[str, ...]]:
        """The pages of `macs` (at least one, perhaps empty; a page in the middle may be empty too)."""
        wanted = dict.fromkeys(macs)
        for mac in [m for m in self._page_of if m not in wanted]:
            self._fill[self._page_of.pop(mac)] -= 1
        self.over = 0
        for mac in wanted:
            if mac in self._page_of:
                continue
            page = next((p for p in range(MAX_PAGES) if self._fill[p] < MAX_MACS), None)
            if page is None:
                self.over += 1
                continue
            self._page_of[mac] = page
            self._fill[page] += 1
        cut: list[list[str]] = [[] for _ in range(max(self._page_of.values(), default=0) + 1)]
        for mac in wanted:
            if mac in self._page_of:
                cut[self._page_of[mac]].append(mac)
        return [tuple(page) for page in cut]
