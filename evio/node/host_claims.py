"""Which member hosts which MAC, said by each node signed and spread over the overlay (decision 0055).

In trust mode each node announces the MACs it hosts (its bridge's and leaf ports' own, and the hosts its
switch learned on leaf ports: `HostedMacs` from the SDN side), signed with its overlay certificate's key
(`evio.signal.host_claims`), and the others' switches place such a MAC only under its announcer's root:
a member can no longer take a host's MAC with one forged flood while the host only receives.

As the revocation lists do (`revocation_flood.py`), announcements travel as Ethernet broadcasts of an
ethertype of their own on the overlay bridge's own interface, and Bounded Flood carries them to every
linked node; each node reads the others' off the same interface. A node announces:

1. when what it hosts changed (at most once per `MIN_INTERVAL`),
2. every `host_claims.LIFETIME / 3`, 10 minutes (an announcement holds `LIFETIME` after it was issued),
3. when one of its links came up (folded with the others of `MIN_INTERVAL`), so a node that joins hears it.

What comes in is bounded before it costs a signature check: a sender MAC gets `SENDER_RATE`, all senders
together `VERIFY_RATE`; what is refused is counted by reason (`counts`). A revoked node's announcements
are refused, and its claims dropped when the list comes. The owners (MACs that exactly one member
announced) go to the switch when they change (`SetMacOwners`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from evio.clock import REAL_CLOCK, Clock, Timer
from evio.node.ethertype_socket import read_broadcasts
from evio.ratelimit import LogLimiter, PeerRateLimiter, Rate, TokenBucket
from evio.signal import host_claims
from evio.signal.events import RevocationAdopted, Subscription
from evio.signal.interface import Signaling
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.trust import TrustAnchor

log = logging.getLogger(__name__)

ETHERTYPE = 0x88B6  # IEEE 802 "local experimental ethertype 2" (the revocation lists have the first)
BROADCAST = b"\xff" * 6
MIN_INTERVAL = 1.0  # seconds between two announcements of this node
SENDER_RATE = Rate(1.0, 5)  # announcements a second per sender MAC checked (each node sends one a minute)
VERIFY_RATE = Rate(50.0, 200)  # signature checks a second for all senders (each about 0.2 ms)


class HostClaimsFlood:
    """One overlay's host announcements on its bridge's interface `ifname` (trust mode only)."""

    def __init__(
        self, overlay: str, ifname: str, node_id: int, certificate: TunnelCertificate, anchor: TrustAnchor,
        signaling: Signaling, tell_switch: Callable[[Mapping[str, int]], None], clock: Clock = REAL_CLOCK,
        wall: Callable[[], float] = time.time,
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
        self.claims = host_claims.HostClaims()
        self.hosted: tuple[str, ...] = ()
        self._owners: Mapping[str, int] = {}
        self._sock: socket.socket | None = None
        self._last_sent = float("-inf")
        self._send_timer: Timer | None = None
        self._refresh_timer: Timer | None = None
        self._per_sender = PeerRateLimiter[bytes](SENDER_RATE)
        self._verify_budget = TokenBucket(VERIFY_RATE, clock.now())
        self._refused_logged = LogLimiter[bytes]()
        self._subscription: Subscription[RevocationAdopted] | None = None

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
        self.begin()

    def begin(self) -> None:
        """Announce now and then, and drop a member's claims when a list revoking it is adopted."""
        self._subscription = self._signaling.subscribe(RevocationAdopted, self._revocations_changed)
        self._refresh()

    def stop(self) -> None:
        if self._subscription is not None:
            self._subscription.cancel()
            self._subscription = None
        for timer in (self._send_timer, self._refresh_timer):
            if timer is not None:
                timer.cancel()
        self._send_timer = self._refresh_timer = None
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None

    def status(self) -> dict[str, Any]:
        return {"interface": self.ifname, "hosted": len(self.hosted), "members": len(self.claims),
                "owned": len(self._owners), "disputed": sorted(self.claims.disputed),
                "counts": dict(sorted(self.counts.items()))}  # fmt: skip

    # -- what the node tells it ---------------------------------------------------------------

    def set_hosted(self, macs: tuple[str, ...]) -> None:
        """The switch's list of what this node hosts changed."""
        if macs != self.hosted:
            self.hosted = macs
            self.announce()

    def announce(self) -> None:
        """Announce soon: now, or once `MIN_INTERVAL` passed since the last one (link-ups fold into one)."""
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
        if self.claims.expire(now) | self.claims.forget(self._revoked(now)):
            self._owners_changed()
        if self.hosted or self.counts["sent"]:  # nothing to say until the switch reported what we host
            self.announce()

    def _revocations_changed(self, event: RevocationAdopted) -> None:
        if event.overlay == self.overlay and self.claims.forget(self._revoked(self._wall())):
            self._owners_changed()

    # -- sending ------------------------------------------------------------------------------

    def _send(self) -> None:
        self._send_timer = None
        self._last_sent = self._clock.now()
        macs = self.hosted
        if len(macs) > host_claims.MAX_MACS:
            self.counts["macs_over_cap"] += len(macs) - host_claims.MAX_MACS
            macs = macs[: host_claims.MAX_MACS]
        cert = self._certificate
        frame = host_claims.pack(cert.key, cert.cert, self.overlay, self.node_id, int(self._wall() * 1000), macs)
        if self._sock is None:
            return
        try:
            self._sock.sendto(frame, (self.ifname, ETHERTYPE, 0, 0, BROADCAST))
        except OSError as exc:  # a full queue or the interface gone: the next refresh makes up for it
            self.counts["send_failed"] += 1
            log.debug("host announcement send on %s failed: %s", self.ifname, exc)
            return
        self.counts["sent"] += 1

    # -- receiving ----------------------------------------------------------------------------

    def _readable(self) -> None:
        if self._sock is not None:
            read_broadcasts(self._sock, self.counts, log, f"host announcement on {self.ifname}", self.receive)

    def receive(self, data: bytes, sender: bytes) -> None:
        """One announcement's bytes from MAC `sender`."""
        self.counts["received"] += 1
        now = self._clock.now()
        if not self._per_sender.allow(sender, now):
            self.counts["refused_sender_rate"] += 1
            return
        if not self._verify_budget.take(now):
            self.counts["refused_verify_rate"] += 1
            return
        wall = self._wall()
        try:
            ann = host_claims.verify(self._anchor, data, wall)
        except host_claims.ClaimError as exc:
            self.counts[f"refused_{str(exc).replace(' ', '_')}"] += 1
            if self._refused_logged.should_log(sender, now):
                log.warning("host announcement refused overlay=%s from=%s: %s", self.overlay, sender.hex(":"), exc)
            return
        if ann.node_id == self.node_id:
            self.counts["own"] += 1  # ours, come round (or replayed): we know what we host
            return
        if ann.node_id in self._revoked(wall):
            self.counts["refused_revoked"] += 1
            return
        if self.claims.take(ann):
            self.counts["taken"] += 1
            self._owners_changed()
        else:
            self.counts["unchanged"] += 1

    def _revoked(self, now: float) -> frozenset[int]:
        rl = self._signaling.revocation_list(self.overlay)
        return rl.node_ids(now) if rl is not None else frozenset()

    def _owners_changed(self) -> None:
        owners = self.claims.owners()
        if owners != self._owners:
            self._owners = owners
            self._tell_switch(owners)
            if self.claims.disputed:
                log.warning("overlay %s: MACs announced by more than one member (their claims ignored): %s",
                            self.overlay, ", ".join(sorted(self.claims.disputed)[:8]))
