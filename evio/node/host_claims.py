"""Which member hosts which MAC, said by each node signed and spread over the overlay (decision 0055).

In trust mode each node announces the MACs it hosts (its bridge's and leaf ports' own, and the hosts its
switch learned on leaf ports: `HostedMacs` from the SDN side), signed with its overlay certificate's key
(`evio.signal.host_claims`), and the others' switches place such a MAC only under its announcer's root:
a member can no longer take a host's MAC with one forged flood while the host only receives.

As the revocation lists do (`revocation_flood.py`), announcements travel as Ethernet broadcasts of an
ethertype of their own on the overlay bridge's own interface, and Bounded Flood carries them to every
linked node; each node reads the others' off the same interface. A node announces:

1. when what it hosts changed (at most once per `MIN_INTERVAL`),
2. every `host_claims.LIFETIME / 3`, 10 minutes (an announcement holds `LIFETIME` after it was issued), and the page
   naming the bridge interface's own MAC whenever it has not gone for `WAY_KEEPALIVE` (4 minutes; the refresh
   leaves that page to it): each switch then hears this node's interface by its floods' ways within a MAC's max
   age, so neither its ways nor its MAC lapse there for a member to take (review21j J2, decision 0033),
3. when one of its links came up (folded with the others of `MIN_INTERVAL`), so a node that joins hears it.

A node hosting more than `host_claims.MAX_MACS` (a site gateway bridging a LAN) names them all, up to
`host_claims.MAX_PAGES` pages, each signed and held by (node, page) (review21e E1: a host left out of the list
was any member's to claim). Each MAC stays on its page while hosted (`host_claims.Pager`): a change re-sends only
the pages it changed, a refresh or link-up every page; pages go one each `PAGE_GAP`, under the check share a
member has at every node, and a catch-up passes a member's pages on as slowly.

What comes in costs a signature check only when it could change something (review21c: junk from invented
sender MACs took a budget shared by all and no honest announcement was checked):

1. free refusals first: what does not parse, another overlay's, stale or from the future, naming a group MAC,
   this node's own, a revoked member's, one not newer than the list held for its node, a page its member's list
   dropped (`HostClaims.dropped`: a later page said the list ended before it; review21o O1), the exact bytes of one
   refused lately, a certificate refused lately for the id it names;
2. then a budget per port the announcement came in by, shared fairly among the node ids named
   (`evio.sdn.flood_shares`, max-min, no queue): each member the node knows (signaling's peers, or a certificate
   already checked) is a key of its own, and every id nobody knows shares one key, so invented ids cannot crowd
   out a member's refresh; a port's total is one port's flood budget (`VERIFY_RATE`), the most one hostile
   neighbour can pass to this node. The port is the tunnel a flood came in by, which the switch tells
   (`flooded`, review21d): forgeries under a member's id (its certificate is public) then spend only the checks
   of the port they came by, and the member's own announcements, coming by another, are checked. A flood must
   be rooted at the id it names (a member floods its own), so a neighbour's forgeries cannot ride the floods
   of members behind it. What the bridge's interface reads itself (unicast to this node: a neighbour passing
   lists on) is one more port; its broadcasts are the floods' copies and are left to the switch's word;
3. a certificate already checked (by fingerprint, `host_claims.Certificates`) costs no chain check again:
   a known member's refresh is one signature check, budgeted apart (`KNOWN_VERIFY_RATE`, `KNOWN_MEMBER_RATE`) at
   twice what a switch passes on for one root by one port (review21f F9): junk a hostile member roots at a member
   behind it, passed on by the node past it, then never outruns that member's own pages at nodes further on.

A member whose announcements were refused unchecked keeps its list here past `LIFETIME` until 10 minutes
after the last such refusal: forgeries under its id (its certificate is public) spend its share, and its
claims must not expire for it (a member that named its hosts too would then hold them). What is refused is
counted by reason (`counts`).

A node that joins (or restarts) hears only the announcements made after it linked, so for up to 10 minutes it
would lack the others' lists (j21). Announcements are self-authenticating, so a neighbour passes on what it
holds: when a linked peer's link came up here (`peer_linked`) and a newer announcement of that peer's id then
passes its check, this node sends that peer's sender MAC, by unicast over the bridge, every other list it holds
as it received it (unchanged signed bytes), `CATCHUP_BATCH` frames a `CATCHUP_TICK`, at most once per peer in
`CATCHUP_PEER_INTERVAL`. Only the newcomer's neighbours act: a join costs (neighbours x members) unicast frames,
each checked once at the newcomer (copies from other neighbours are free refusals, "unchanged"). A revoked node's claims are dropped when the list comes.
The owners (each MAC's one claimant, or the first of several: `host_claims.HostClaims`) go to the switch
when they change (`SetMacOwners`), worked out at most every `OWNERS_INTERVAL` (review21i I2: a member may change
its own list at its flood share, and each working-out walks every MAC of the overlay). So do the members' own overlay addresses their certificates name, each with
the MAC of the interface holding it (`SetCertifiedAddresses`, decision 0062): the switch answers a local host's
ARP or neighbour solicitation for them at once. This node names its own such address (the bridge interface's,
if its certificate names it) in its announcements. This node's own list is a claim too (a member announcing our host after
us does not hold it here), left out of what the switch is told.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Collection, Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from evio.clock import REAL_CLOCK, Clock, Timer
from evio.ids import format_node_id
from evio.node.ethertype_socket import open_ethertype_socket, read_frames
from evio.ratelimit import LogLimiter, PeerRateLimiter, Rate
from evio.sdn.flood_shares import FloodShares
from evio.sdn.switch import FLOOD_BURST, FLOOD_RATE, PORT_FLOOD_BURST, PORT_FLOOD_RATE
from evio.sdn.switch_terms import ETH_HEADER_LEN, HOST_CLAIMS_ETHERTYPE
from evio.signal import host_claims
from evio.signal.events import RevocationAdopted, Subscription
from evio.signal.interface import Signaling
from evio.signal.overlay_addresses import IPAddress, certified_addresses
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.trust import TrustAnchor

log = logging.getLogger(__name__)

ETHERTYPE = HOST_CLAIMS_ETHERTYPE  # IEEE 802 "local experimental ethertype 2" (the revocation lists have the first)
UNICAST = -1  # the budget "port" of what the bridge's interface reads as sent to this node (a peer id is >= 0)
BROADCAST = b"\xff" * 6
MIN_INTERVAL = 1.0  # seconds between two announcements of this node
# Seconds between two sendings of the page naming the interface's own MAC: below a switch's MAC max age (300 s,
# evio.sdn.boundary), with room for a lost one's page gap and jitter, so its MAC and its floods' ways are heard at
# every node within it (review21j J2). One frame each time, counted from that page's last sending for any reason,
# and the refresh leaves that page to it: an idle node starts 0.25 a minute (0.1 before: the refresh; issue 23
# allows an idle node 1 for all its multicast), each reaching the n - 1 others once.
WAY_KEEPALIVE = 240.0
# Seconds between two pages of this node's list (and two pages of one member passed on in a catch-up): 4 a
# second, under the checks a member's announcements get at each node (MEMBER_RATE, 5/s, while its certificate is
# new there; KNOWN_MEMBER_RATE after), so no page of a refresh is refused unchecked; 16 pages take 4 s.
PAGE_GAP = 0.25
# Checks a second, for all node ids, of announcements whose certificate is not known here for the id named (a chain
# as well, 0.4 ms): half one port's flood budget (evio.sdn.switch.PORT_FLOOD_RATE), its whole burst (a newcomer's
# catch-up, 160 lists a second from each neighbour, a chain for each member's first). With the known certificates'
# budget below a port costs at most 200 chains and 800 signatures a second, 138 ms measured (0.37 and 0.08 ms each,
# load 3), against 148 ms before those had a budget of their own (400 chains: review21f F9). Beyond it only the keys
# that flood more than their share are thinned (a member sends one announcement in 10 minutes).
VERIFY_RATE = Rate(200.0, 800)
MEMBER_RATE = Rate(5.0, 20)  # checks a second for one node id (or all unknown ones together) on one port, if contested
# Checks of announcements whose certificate is known here for the id they name (one signature check, 0.08-0.13 ms),
# a budget of their own: per (port, id) twice what a switch passes on for one root by one port, per port twice its
# floods in all. Junk rooted at a member behind a hostile member, passed on by the node past it at that root's share
# of the port, then never outruns the member's own pages at nodes further on (review21f F9): the port's share of
# each id the junk names is twice what the junk can bring. 800 checks a second: 6 % to 10 % of a core.
KNOWN_VERIFY_RATE = Rate(2 * PORT_FLOOD_RATE, 2 * PORT_FLOOD_BURST)
KNOWN_MEMBER_RATE = Rate(2 * FLOOD_RATE, 2 * FLOOD_BURST)
REFUSED_KEPT = 1024  # digests of refused announcements remembered, so a replayed one costs no check
# Passing the lists held on to a peer whose link came up (a newcomer or a restarted node): frames a tick, under
# the newcomer's check budget (VERIFY_RATE) with a few neighbours doing it at once.
CATCHUP_BATCH = 16
CATCHUP_TICK = 0.1  # seconds
CATCHUP_OWED = 120.0  # seconds after a link-up that the peer's first newer announcement earns it the lists
CATCHUP_PEER_INTERVAL = 60.0  # at most one catch-up per peer in this many seconds (a flapping link)
CATCHUP_QUEUED = 8192  # frames waiting to go, for all peers together; beyond, counted and dropped
# Seconds between two workings-out of who holds what (`HostClaims.owners`, `addresses`) and pushes of the whole map to
# the switch, each walking every MAC of the overlay (4.4 ms at 4,000): a member's own announcements are checked and
# taken at its flood share (100/s a port), each changing its list, and recomputing for each cost every node 0.7 s of
# its loop a second (review21i I2). The first change after a quiet spell is applied at once, later ones fold into one
# at most this long after: an honest change (a host, its protection, the flows installed ahead of 0066) is late by
# 0.5 s at worst, and only while some member changes its list more often than that.
OWNERS_INTERVAL = 0.5
# Changes of one member's list a node takes before counting it as churning (`churn_over_rate`, logged once a
# minute): an honest node sends a changed page at most each PAGE_GAP, a refresh's or link-up's 16 at once. Counted,
# not refused: the check budgets bound the work, a taken change costs only its member's MACs (owners are coalesced
# above), and refusing a member's latest list would leave nodes holding different old ones.
CHURN_RATE = Rate(1 / PAGE_GAP, 2 * host_claims.MAX_PAGES)


class HostClaimsFlood:
    """One overlay's host announcements on its bridge's interface `ifname` (trust mode only)."""

    def __init__(
        self, overlay: str, ifname: str, node_id: int, certificate: TunnelCertificate, anchor: TrustAnchor,
        signaling: Signaling, tell_switch: Callable[[Mapping[str, int]], None], clock: Clock = REAL_CLOCK,
        wall: Callable[[], float] = time.time, own_addresses: Collection[IPAddress] = (),
        tell_addresses: Callable[[Mapping[IPAddress, str]], None] | None = None,
    ) -> None:  # fmt: skip
        self.overlay = overlay
        self.ifname = ifname
        self.node_id = node_id
        self._certificate = certificate
        self._anchor = anchor
        self._signaling = signaling
        self._tell_switch = tell_switch
        self._clock = clock
        self._wall = wall
        self.counts: Counter[str] = Counter()  # sent, received, taken; refused by reason
        self.claims = host_claims.HostClaims(self_id=node_id, clock=clock.now)
        self.hosted: tuple[str, ...] = ()
        self._owners: Mapping[str, int] = {}
        # This node's address(es) on the overlay that its certificate names: announced with the interface's MAC.
        certified = certified_addresses(certificate.cert, overlay)
        self.own_addresses = tuple(sorted((a for a in own_addresses if a in certified), key=lambda a: (a.version, a)))
        uncertified = [str(a) for a in own_addresses if a not in certified]
        if uncertified:
            log.info("overlay %s: address %s not named by this node's certificate: ARP for it is answered elsewhere "
                     "only after it answered a flooded request (decisions 0056, 0062)", overlay, ", ".join(uncertified))
        self.interface_mac: str | None = None  # read at each announcement (OVS may change a bridge's MAC)
        self._tell_addresses = tell_addresses
        self._addresses: Mapping[IPAddress, str] = {}
        self._sock: socket.socket | None = None
        self._last_sent = float("-inf")
        self._send_timer: Timer | None = None
        self._refresh_timer: Timer | None = None
        # (ingress peer, or UNICAST) -> checks shared among the node ids named (None: the ids nobody knows)
        self._verify_budget = FloodShares[int | None](VERIFY_RATE, MEMBER_RATE)
        # (ingress peer, or UNICAST) -> checks of announcements whose certificate is known here, shared among the ids
        self._known_budget = FloodShares[int](KNOWN_VERIFY_RATE, KNOWN_MEMBER_RATE)
        self._certificates = host_claims.Certificates()
        self._refused: OrderedDict[bytes, None] = OrderedDict()
        # Members whose list is held here and whose announcements were refused unchecked (over budget), and when
        # last: their refresh may have been among them, so their list does not expire meanwhile (review21c).
        self._unchecked: dict[int, float] = {}
        self._refused_logged = LogLimiter[str]()  # by reason: a sender MAC may be invented for each frame
        self._subscription: Subscription[RevocationAdopted] | None = None
        # node id -> (issued ms, the announcement its held list came in), to pass on
        self._frames: dict[tuple[int, int], tuple[int, bytes]] = {}  # (node id, page) -> ...
        self._pager = host_claims.Pager()
        self._sent_pages: dict[int, tuple[object, ...]] = {}  # page -> what it named when last sent
        self._due: set[int] = set()  # pages to send again though unchanged (a refresh, a link-up)
        self._due_all = False
        self._due_refresh = False  # every page again but the keep-alive's (`WAY_KEEPALIVE` sends that one)
        self._due_own = False  # the page naming the interface's own MAC is to go again (WAY_KEEPALIVE)
        self._keepalive_timer: Timer | None = None
        self._owed: dict[int, float] = {}  # linked peer -> when its link came up here (its lists not sent yet)
        self._served: dict[int, float] = {}  # peer -> when its last catch-up began
        self._catchup: deque[tuple[bytes, tuple[int, int], int]] = deque()  # (destination, (node, page), issued ms)
        self._catchup_page_at: dict[int, float] = {}  # node id -> when a page of its list was last passed on
        self._catchup_timer: Timer | None = None
        self._alone_timer: Timer | None = None  # a lone claimant's ALONE_HOLD ends: owners change (review21e E4)
        self._owners_at = float("-inf")  # when who holds what was last worked out (OWNERS_INTERVAL)
        self._owners_timer: Timer | None = None  # changes taken since: worked out when it fires
        self._disputed_logged = LogLimiter[str]()  # by disputed MAC: each change of a claimant's list would log it
        self._churn = PeerRateLimiter[int](CHURN_RATE)  # by member: its list changes taken here
        self._churn_logged = LogLimiter[int]()

    def start(self) -> None:
        sock = self._sock = open_ethertype_socket(self.ifname, ETHERTYPE)
        asyncio.get_running_loop().add_reader(sock.fileno(), self._readable)
        self.begin()

    def begin(self) -> None:
        """Announce now and then, and drop a member's claims when a list revoking it is adopted."""
        self._subscription = self._signaling.subscribe(RevocationAdopted, self._revocations_changed)
        self._refresh()
        self._keepalive_timer = self._clock.call_later(WAY_KEEPALIVE, self._keepalive)

    def stop(self) -> None:
        if self._subscription is not None:
            self._subscription.cancel()
            self._subscription = None
        for timer in (self._send_timer, self._refresh_timer, self._catchup_timer, self._alone_timer,
                      self._owners_timer, self._keepalive_timer):  # fmt: skip
            if timer is not None:
                timer.cancel()
        self._send_timer = self._refresh_timer = self._catchup_timer = self._alone_timer = self._owners_timer = None
        self._keepalive_timer = None
        self._catchup.clear()
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None

    def owner_of(self, mac: bytes) -> int | None:
        """The member holding `mac` (six bytes) as last worked out here, or None (nobody's, disputed, or ours)."""
        return self._owners.get(mac.hex(":"))

    def certificate_key(self, node_id: int) -> ec.EllipticCurvePublicKey | None:
        """The key of a certificate of `node_id` found the overlay CA's here (in its announcements), or None: what
        a link request or offer along the ring to it is sealed to (decision 0064, review21f F8). Not revoked."""
        wall = self._wall()
        return None if node_id in self._revoked(wall) else self._certificates.key_of(node_id, wall)

    def status(self) -> dict[str, Any]:
        return {"interface": self.ifname, "hosted": len(self.hosted), "pages": len(self._sent_pages), "members": len(self.claims) - self.claims.holds(self.node_id),
                "owned": len(self._owners), "disputed": sorted(self.claims.disputed),
                "own_addresses": [str(a) for a in self.own_addresses], "certified_addresses": len(self._addresses),
                "counts": dict(sorted(self.counts.items()))}  # fmt: skip

    # -- what the node tells it ---------------------------------------------------------------

    def set_hosted(self, macs: tuple[str, ...]) -> None:
        """The switch's list of what this node hosts changed."""
        if macs != self.hosted:
            self.hosted = macs
            self.announce(every_page=False)

    def peer_linked(self, peer: int) -> None:
        """A link to member `peer` came up: when its next announcement passes, it gets the lists held here."""
        self._owed[peer] = self._clock.now()

    def announce(self, every_page: bool = True) -> None:
        """Announce soon: now, or once `MIN_INTERVAL` passed since the last one (link-ups fold into one); every page,
        or (`every_page` False: what the node hosts changed) the pages that changed."""
        self._due_all |= every_page
        if self._send_timer is not None or self._sock is None:
            return
        wait = self._last_sent + MIN_INTERVAL - self._clock.now()
        if wait <= 0:
            self._send()
        else:
            self._send_timer = self._clock.call_later(wait, self._send)

    def _refresh(self) -> None:
        """Announce again before ours expire elsewhere; let others' expire here; drop revoked members'."""
        self._refresh_timer = self._clock.call_later(host_claims.LIFETIME / 3, self._refresh)
        now = self._wall()
        mono = self._clock.now()
        for node in [n for n, at in self._unchecked.items() if mono - at >= host_claims.LIFETIME / 3]:
            del self._unchecked[node]
        if self.claims.expire(now, keep=self._unchecked.keys()) | self.claims.forget(self._revoked(now)):
            self._owners_changed()
        for key in [k for k in self._frames if self.claims.issued_ms(*k) is None]:
            del self._frames[key]
        for table, hold in ((self._owed, CATCHUP_OWED), (self._served, CATCHUP_PEER_INTERVAL)):
            for node in [n for n, at in table.items() if mono - at >= hold]:
                del table[node]
        if self.hosted or self.counts["sent"]:  # nothing to say until the switch reported what we host
            self._due_refresh = True
            self.announce(every_page=False)

    def _keepalive(self) -> None:
        """Send the page naming the interface's own MAC again, unchanged (`WAY_KEEPALIVE`)."""
        self._keepalive_timer = self._clock.call_later(WAY_KEEPALIVE, self._keepalive)
        if self._sent_pages:  # (none yet: the first announcement is still to come; a failed sending counts here)
            self._due_own = True
            self.announce(every_page=False)

    def _revocations_changed(self, event: RevocationAdopted) -> None:
        if event.overlay == self.overlay and self.claims.forget(self._revoked(self._wall())):
            self._owners_changed(at_once=True)  # the CA's word, not a member's: no waiting

    # -- sending ------------------------------------------------------------------------------

    def _send(self) -> None:
        self._send_timer = None
        self._last_sent = self._clock.now()
        macs = self.hosted
        if self._sock is not None and self.own_addresses:
            try:
                self.interface_mac = self._sock.getsockname()[4].hex(":")
            except OSError:  # the interface went: the next refresh makes up for it
                self.interface_mac = None
        own = self.interface_mac if self.own_addresses else None
        if own is not None and own not in macs:
            macs = (own, *macs)  # the interface's own MAC, whose addresses we name, first (placed before new hosts)
        pages = self._pager.pages(macs)  # the interface's MAC first: on page 0 unless it changed since
        if self._pager.over:
            self.counts["macs_over_cap"] += self._pager.over
        total = len(pages)
        # The keep-alive's page: the one naming the interface's MAC, or the first (each goes from the interface).
        kept = next((p for p in range(total) if own is not None and own in pages[p]), 0)
        if self._due_all:
            self._due, self._due_all = set(range(total)), False
        if self._due_refresh:  # that page went within WAY_KEEPALIVE (not yet sent at all: due below as changed)
            self._due |= set(range(total)) - {kept}
            self._due_refresh = False
        if self._due_own:
            self._due |= {kept} if total else set()
            self._due_own = False
        addresses = tuple((ip, own) for ip in self.own_addresses[: host_claims.MAX_ADDRESSES]) if own else ()
        content = [(page, addresses if own in page else (), total) for page in pages]
        due = [p for p in range(total) if p in self._due or self._sent_pages.get(p) != content[p]]
        for page in [p for p in self._sent_pages if p >= total]:
            del self._sent_pages[page]
            self._frames.pop((self.node_id, page), None)
        if not due:
            return
        number = due[0]
        self._due.discard(number)
        self._sent_pages[number] = content[number]
        if len(due) > 1:
            self._send_timer = self._clock.call_later(PAGE_GAP, self._send)
        macs, page_addresses = pages[number], content[number][1]
        cert = self._certificate
        issued_ms = int(self._wall() * 1000)
        frame = host_claims.pack(cert.key, cert.cert, self.overlay, self.node_id, issued_ms, macs, page_addresses,
                                 number, total)  # fmt: skip
        self._frames[(self.node_id, number)] = (issued_ms, frame)
        own_page = host_claims.Announcement(self.overlay, self.node_id, issued_ms, macs, page_addresses, number, total)
        if self.claims.take(own_page):
            self._owners_changed()  # ours is a claim too: a member naming our host after us holds nothing here
        if self._sock is None:
            return
        try:
            self._sock.sendto(frame, (self.ifname, ETHERTYPE, 0, 0, BROADCAST))
        except OSError as exc:  # a full queue or the interface gone: the next refresh makes up for it
            self.counts["send_failed"] += 1
            log.debug("host announcement send on %s failed: %s", self.ifname, exc)
            return
        self.counts["sent"] += 1
        if number == kept and self._keepalive_timer is not None:  # it just went: the keep-alive counts from now
            self._keepalive_timer.cancel()
            self._keepalive_timer = self._clock.call_later(WAY_KEEPALIVE, self._keepalive)

    # -- receiving ----------------------------------------------------------------------------

    def _readable(self) -> None:
        if self._sock is not None:
            read_frames(self._sock, self.counts, log, f"host announcement on {self.ifname}", self._frame)

    def _frame(self, data: bytes, sender: bytes, broadcast: bool) -> None:
        if broadcast:
            # A flood's copy: the switch hands it over too, with the port it came by (`flooded`), and a local
            # port's broadcast is no member's (a member's own goes out by its bridge's interface as a flood).
            return
        self.counts["received_unicast"] += 1  # passed on by a neighbour (a catch-up), or a member's to us alone
        self.receive(data, sender)

    def flooded(self, frame: bytes, peer: int, root: int) -> None:
        """An announcement's Ethernet frame that a flood rooted at `root` brought from the tunnel to `peer`."""
        if len(frame) > ETH_HEADER_LEN:
            self.receive(frame[ETH_HEADER_LEN:], frame[6:12], ingress=peer, root=root)

    def receive(self, data: bytes, sender: bytes, ingress: int | None = None, root: int | None = None) -> None:
        """One announcement's bytes from MAC `sender` (any MAC: a sender may invent it, so nothing is keyed by it),
        brought by a flood rooted at `root` from the tunnel to peer `ingress`, or (None) sent to this node."""
        self.counts["received"] += 1
        now = self._clock.now()
        wall = self._wall()
        try:
            parsed = host_claims.parse(self.overlay, data, wall)
        except host_claims.ClaimError as exc:
            self._refuse(exc, sender, now)
            return
        if parsed.node_id == self.node_id:
            self.counts["own"] += 1  # ours, come round (or replayed): we know what we host
            return
        if ingress is not None and root != parsed.node_id:
            self.counts["refused_not_its_flood"] += 1  # a member floods its own: another root's is a forgery
            return
        if parsed.node_id in self._revoked(wall):
            self.counts["refused_revoked"] += 1
            return
        held = self.claims.issued_ms(parsed.node_id, parsed.page)
        if held is not None and parsed.issued_ms <= held:
            self.counts["unchanged"] += 1  # a copy by another way, or a replay: nothing to check
            return
        if self.claims.dropped(parsed.node_id, parsed.page, parsed.issued_ms):
            self.counts["refused_dropped_page"] += 1  # a page its member's later one said is gone: a replay (O1)
            return
        digest = hashlib.blake2b(data, digest_size=16).digest()
        if digest in self._refused:
            self.counts["refused_again"] += 1
            return
        try:
            self._certificates.key_for(parsed.der, parsed.node_id, wall)  # a certificate refused for this id lately
        except host_claims.ClaimError as exc:
            self._refuse(exc, sender, now)
            return
        port = UNICAST if ingress is None else ingress
        # A certificate found the CA's for this id before (its hold run out too: junk under a member's id with
        # spoiled certificates would starve the chain's share once it did) costs one signature check: its own
        # budget, above what the switches pass on (review21f F9). Other certificates need a chain as well.
        if self._certificates.found(parsed.der, parsed.node_id):
            allowed = self._known_budget.allow(port, parsed.node_id, now)
        else:
            allowed = self._verify_budget.allow(port, parsed.node_id if self._known(parsed.node_id) else None, now)
        if not allowed:
            self.counts["refused_verify_rate"] += 1
            if self.claims.holds(parsed.node_id):
                self._unchecked[parsed.node_id] = now  # its refresh may be among these: keep its list meanwhile
            return
        try:
            ann = host_claims.check(self._anchor, parsed, wall, self._certificates)
        except host_claims.ClaimError as exc:
            self._refused[digest] = None
            if len(self._refused) > REFUSED_KEPT:
                self._refused.popitem(last=False)
            self._refuse(exc, sender, now)
            return
        self._frames[(ann.node_id, ann.page)] = (ann.issued_ms, data)
        if self.claims.take(ann):
            self.counts["taken"] += 1
            if not self._churn.allow(ann.node_id, now):
                self.counts["churn_over_rate"] += 1
                if self._churn_logged.should_log(ann.node_id, now):
                    log.warning("overlay %s: member %s changes its hosts more often than a node may (%s a second; "
                                "counted as churn_over_rate)", self.overlay, format_node_id(ann.node_id),
                                CHURN_RATE.per_second)  # fmt: skip
            self._owners_changed()
        else:
            self.counts["unchanged"] += 1
        self._serve(ann.node_id, sender, now)

    # -- passing the lists held on to a peer that joined ------------------------------------------

    def _serve(self, peer: int, mac: bytes, now: float) -> None:
        """`peer`'s checked announcement came from `mac`: if its link came up here lately, send it our lists.
        The MAC is the frame's sender, which a neighbour relaying the announcement first could have replaced:
        the lists are public (every node floods its own), and a peer is served once per link-up."""
        owed = self._owed.pop(peer, None)
        if owed is None or now - owed >= CATCHUP_OWED:
            return
        if now - self._served.get(peer, float("-inf")) < CATCHUP_PEER_INTERVAL:
            self.counts["catchup_too_soon"] += 1
            return
        if mac == BROADCAST or mac[0] & 1:
            return
        self._served[peer] = now
        self.counts["catchups"] += 1
        for key, (issued_ms, _) in sorted(self._frames.items(), key=lambda item: item[0][1]):  # page 0s first
            if key[0] == peer:
                continue
            if len(self._catchup) >= CATCHUP_QUEUED:
                self.counts["catchup_dropped"] += 1
                continue
            self._catchup.append((mac, key, issued_ms))
        if self._catchup_timer is None:
            self._pass_on()

    def _pass_on(self) -> None:
        """Send up to `CATCHUP_BATCH` queued lists (each as the list held now, if it is still that one), a page of one
        member's list at most each `PAGE_GAP` (its pages would otherwise exceed its check share at the peer)."""
        self._catchup_timer = None
        sent = 0
        now = self._clock.now()
        later: list[tuple[bytes, tuple[int, int], int]] = []
        while self._catchup and sent < CATCHUP_BATCH and self._sock is not None and len(later) < CATCHUP_BATCH:
            mac, key, issued_ms = self._catchup.popleft()
            held = self._frames.get(key)
            if held is None or held[0] != issued_ms or self.claims.issued_ms(*key) != issued_ms:
                continue  # gone, or replaced (the newer one was flooded to the peer too)
            if now - self._catchup_page_at.get(key[0], float("-inf")) < PAGE_GAP:
                later.append((mac, key, issued_ms))
                continue
            self._catchup_page_at[key[0]] = now
            data = held[1]
            sent += 1
            try:
                self._sock.sendto(data, (self.ifname, ETHERTYPE, 0, 0, mac))
            except OSError as exc:
                self.counts["catchup_send_failed"] += 1
                log.debug("host announcement pass-on on %s failed: %s", self.ifname, exc)
                continue
            self.counts["catchup_sent"] += 1
        self._catchup.extendleft(reversed(later))
        if self._catchup and self._sock is not None:
            self._catchup_timer = self._clock.call_later(CATCHUP_TICK, self._pass_on)
        else:
            self._catchup_page_at.clear()

    def _refuse(self, exc: host_claims.ClaimError, sender: bytes, now: float) -> None:
        self.counts[f"refused_{str(exc).replace(' ', '_')}"] += 1
        if self._refused_logged.should_log(str(exc), now):
            log.warning("host announcement refused overlay=%s from=%s: %s", self.overlay, sender.hex(":"), exc)

    def _known(self, node_id: int) -> bool:
        """Whether `node_id` is a member this node knows (its announcements get a budget key of their own): a list or
        certificate of it held, present in signaling, or named by the overlay CA's member list."""
        if self.claims.holds(node_id) or self._certificates.knows(node_id):
            return True
        # The CA's member list names every member (0059): there signaling's peers are a member's ~20 contacts, and
        # a newcomer's catch-up would otherwise share the one key of ids nobody knows (review21e E5).
        return node_id in self._signaling.peers(self.overlay) or self._signaling.is_listed(self.overlay, node_id)

    def _alone_due(self) -> None:
        self._alone_timer = None
        self._owners_changed()

    def _revoked(self, now: float) -> frozenset[int]:
        rl = self._signaling.revocation_list(self.overlay)
        return rl.node_ids(now) if rl is not None else frozenset()

    def _owners_changed(self, at_once: bool = False) -> None:
        """What the claims say may have changed: work out who holds what and tell the switch, now if that was last
        done `OWNERS_INTERVAL` ago (or `at_once`), else when it is (the changes meanwhile fold into one, the latest
        state wins: review21i I2)."""
        if not at_once:
            if self._owners_timer is not None:
                self.counts["owners_coalesced"] += 1
                return
            wait = self._owners_at + OWNERS_INTERVAL - self._clock.now()
            if wait > 0:
                self.counts["owners_coalesced"] += 1
                self._owners_timer = self._clock.call_later(wait, self._work_out_owners)
                return
        self._work_out_owners()

    def _work_out_owners(self) -> None:
        if self._owners_timer is not None:
            self._owners_timer.cancel()
            self._owners_timer = None
        now = self._owners_at = self._clock.now()
        owners = self.claims.owners()
        if self._alone_timer is not None:
            self._alone_timer.cancel()
            self._alone_timer = None
        due = self.claims.next_change()
        if due is not None:
            self._alone_timer = self._clock.call_later(max(0.0, due - now), self._alone_due)
        addresses = self.claims.addresses(owners)
        if addresses != self._addresses:
            self._addresses = addresses
            if self._tell_addresses is not None:
                self._tell_addresses(addresses)
        if owners != self._owners:
            self._owners = owners
            self._tell_switch(owners)
            if self.claims.disputed:
                self._log_disputed(now)

    def _log_disputed(self, now: float) -> None:
        """Log the disputed MACs not logged in the last minute (review21i I5: a claimant changing the rest of its
        list each time logged every one of its announcements at every node); the others are counted."""
        fresh = [mac for mac in sorted(self.claims.disputed) if self._disputed_logged.should_log(mac, now)]
        if not fresh:
            self.counts["disputed_log_suppressed"] += 1
            return
        shown = ", ".join(f"{mac} ({'/'.join(map(format_node_id, self.claims.claimants(mac)))})" for mac in fresh[:8])
        more = f" and {len(fresh) - 8} more" if len(fresh) > 8 else ""
        log.warning("overlay %s: MACs announced by more than one member (each held by its first): %s%s",
                    self.overlay, shown, more)  # fmt: skip
