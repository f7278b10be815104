"""Link requests and tunnel offers over the overlay's own tunnels, not through the server (decision 0064).

``RingSignaling`` is one overlay's ``Signaling`` with a detour: a request of a routed action (a link
request, a tunnel offer) to a node we are not linked to goes, while we have links that read
OVERLAY_SIGNAL, along the ring (evio.overlay.ring_signal), signed with this node's certificate; the
answer comes back the same way. Everything else, and a request that finds no route or no answer within
RING_TIMEOUT, goes through the server as before (the wrapped view). What arrives over the tunnels is
relayed on, or, for us, checked (CA, signature, freshness, replay) and served by the handler the
controller or tunnel manager registered, as a request through the server would be.

    request(action in ROUTED) --next hop?--> seal, chunks --> tunnel.send_overlay_signal
                 |  no route, UNREACHABLE, no answer in RING_TIMEOUT
                 +--> the wrapped view (XMPP)
    tunnel --OVERLAY_SIGNAL--> _on_record --not ours--> next hop (hops-1) | UNREACHABLE to the origin
                                   +--ours--> Reassembly --> open_sealed --> Replay --> handler / waiter

The message is sealed to the target's certificate key, which the origin has from the claim proven in the
target's presence (every member's, in trust mode: evio.signal.endpoint.certificate_key), its signed host
claims (evio.node.host_claims), a tunnel to it (the DTLS certificate), or a message of it that came along
the ring; a request to a node whose certificate is not known here goes through the server
(counted as the fallback ``no_key``). The answer is sealed to the key of the certificate the request carried. Relays read only the chunk header (review21f F8).
Trust mode only: without the overlay CA any member could answer for any node id along the way, while
through the server an account answers only for itself; there, offers stay on the server.
Duplicates: a request that found no answer along the ring within RING_TIMEOUT goes through the server again, so
its target may get both copies, in either order. A routed request the same as one of the same sender seen in the
last DUPLICATE_WINDOW is answered with that one's answer (awaited if it is still being served) instead of being
served again: a ring copy signed before the server copy came (it was late), or any copy while the other is being
served. Served twice, a late ring copy could agree to a link its origin had meanwhile been refused or let go
(decision 0064, amended).
Bounds: a chunk per peer at most CHUNK_RATE a second (burst CHUNK_BURST); relayed, at most RELAY_RATE per
(incoming, next hop) or, signed by an origin whose key is known here, ORIGIN_RATE per (origin, next hop)
(review21h H1); MAX_HOPS hops, MAX_CHUNKS
chunks, REASSEMBLY_SLOTS messages assembled at once (the oldest gives way), MAX_INFLIGHT requests served at once
(MAX_INFLIGHT_PER_SENDER from one sender); what is
dropped is counted by reason (``drops``) and logged at most once per peer a minute.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import random
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from evio.clock import REAL_CLOCK, Clock
from evio.overlay import ring_signal
from evio.overlay.negotiation import ACTION_LINK
from evio.overlay.ring_signal import DropReason, RingMessage, RingSignalError
from evio.ratelimit import LogLimiter, PeerRateLimiter, Rate
from evio.signal.errors import ErrorReason, HandlerBadRequest, HandlerRejected, LoginFailure, RequestError
from evio.signal.events import E, Subscription
from evio.signal.identity import RevocationList, TrustAnchor
from evio.signal.interface import Handler, Signaling
from evio.signal.member_list import MemberList
from evio.signal.protocol import Body
from evio.tunnel.path.offer_answer import ACTION as ACTION_OFFER

if TYPE_CHECKING:
    from evio.node.plan import OverlayPlan

log = logging.getLogger(__name__)

ROUTED = frozenset({ACTION_LINK, ACTION_OFFER})
"""Actions that may go along the ring: setting a link up. (A release goes to a linked peer, over its own
tunnel's end of life; it stays on the server.)"""
RING_TIMEOUT = 6.0  # an offer's answer waits for the responder's candidates (1-3 s under load)
CHUNK_RATE, CHUNK_BURST = 20.0, 40  # per neighbour: an offer and its answer are 2-4 chunks
# What one neighbour's chunks may take of our budget at the next hop, which counts all we pass on in ours: a
# member sending junk through us at its full rate pushed every other member's offers to the server (review21g G1)
RELAY_RATE, RELAY_BURST = CHUNK_RATE / 4, CHUNK_BURST // 4
# ...but at a relay two hops on, that neighbour's share holds everything the first relay passes on, junk and
# honest chunks alike (review21h H1). A chunk its origin signed, checked here against the key of the certificate
# the overlay CA issued for its src, counts against that origin's own budget to the next hop instead: what a
# member sends, under any src it writes, can take only its own (and the unsigned share of the link it came by).
ORIGIN_RATE, ORIGIN_BURST = RELAY_RATE, RELAY_BURST
RELAYED_SEEN = 4096  # signed chunks relayed lately, by (src, message id, index): a copy is not relayed again;
# full, the origin holding the most forgets its oldest: a member signing chunks of its own at its full rate turns
# over its own entries, not another origin's, whose captured chunks it could then replay (review21j J1)
# Requests served per requester: our signed answers are charged to OUR origin budget at every relay on the way
# back, so a member asking at its full rate would spend all of it (review21j J3); a link costs a request and an
# offer, a restart a few more
SERVE_RATE, SERVE_BURST = ORIGIN_RATE / 4, ORIGIN_BURST // 2  # half of our burst at most, whoever asks
MAX_INFLIGHT = 32
MAX_KEYS = 1024  # certificate keys of senders learned from their messages along the ring
MAX_INFLIGHT_PER_SENDER = 4  # one member's slow requests do not take every slot (review21f F3)
HANDLER_TIMEOUT = 10.0
FIRST_LINK_WAIT = 6.0  # a link request held while our first link comes up through the server (1-3 s in the lab)
# a link request to a node not reachable along the ring yet: tried there again after (then through the server). Every
# member asks a newcomer the moment its presence comes, and a newcomer has no link to be reached by: 3 s here put a
# member added on ejabberd past the 5 s it has to be linked in (tests/integration/test_operations.py)
UNREACHABLE_WAIT = 1.0
RELAY_POLL = 0.25  # how often a held request looks for a new link
DUPLICATE_WINDOW = 60.0  # a ring message is fresh for 60 s (ring_signal): its copy comes within that of the other
MAX_SERVED = 4096  # routed requests remembered for their duplicates
LATE_COPY = RING_TIMEOUT / 2  # a ring copy signed this long before its server copy came preceded it (clock skew below)


class SignalTunnel(Protocol):
    def send_overlay_signal(self, payload: bytes) -> bool: ...


@runtime_checkable
class SignalRelays(Protocol):
    """What the tunnel manager offers for this (evio.tunnel.manager.TunnelManager)."""

    def relay_signal_to(self, sink: Callable[[int, bytes], None]) -> None: ...

    def signal_relays(self) -> Mapping[int, SignalTunnel]: ...


def for_overlay(plan: OverlayPlan, node_id: int, signaling: Signaling, clock: Clock = REAL_CLOCK) -> RingSignaling | None:
    """The overlay's signaling with the detour, in trust mode unless its config turned it off; else None."""
    trust, anchor, certificate = plan.config.trust, plan.tunnel.trust, plan.certificate
    if trust is None or not trust.offers_over_overlay or anchor is None or certificate is None:
        return None
    return RingSignaling(signaling, plan.id, node_id, certificate.cert, certificate.key, anchor, clock)


class RingSignaling:
    def __init__(
        self,
        inner: Signaling,
        overlay: str,
        node_id: int,
        cert: x509.Certificate,
        key: ec.EllipticCurvePrivateKey,
        anchor: TrustAnchor,
        clock: Clock = REAL_CLOCK,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self.inner = inner
        self.overlay = overlay
        self.own = node_id
        self._cert, self._key, self._anchor = cert, key, anchor
        self.clock = clock
        self._wall = wall_clock
        self._rng = rng or random.Random()
        self._relays: SignalRelays | None = None
        self._handlers: dict[str, Handler] = {}
        self._waiting: dict[str, asyncio.Future[RingMessage]] = {}  # txid -> our request's answer
        self._asked: dict[str, int] = {}  # txid -> the node our request went to: only it may answer (review21f F1)
        self._sent_ids: dict[int, str] = {}  # message id of our request -> its txid (for UNREACHABLE)
        self._reassembly = ring_signal.Reassembly()
        self._replay = ring_signal.Replay()
        self._rate = PeerRateLimiter[int](Rate(CHUNK_RATE, CHUNK_BURST))
        self._relay_rate = PeerRateLimiter[tuple[int, int]](Rate(RELAY_RATE, RELAY_BURST))  # (from, to)
        self._origin_rate = PeerRateLimiter[tuple[int, int]](Rate(ORIGIN_RATE, ORIGIN_BURST))  # (signed src, to)
        self._serve_rate = PeerRateLimiter[int](Rate(SERVE_RATE, SERVE_BURST))  # requests served, by requester
        self._relayed_seen: dict[int, OrderedDict[tuple[int, int], None]] = {}  # src -> (message id, index)
        self._relayed_count = 0
        self._serving: set[asyncio.Task[None]] = set()
        self._serving_from: Counter[int] = Counter()  # requests being served, by sender
        self._drop_log = LogLimiter[int](60.0)
        self._served: OrderedDict[tuple[int, str, bytes], _Served] = OrderedDict()  # routed requests, for duplicates
        self._late: OrderedDict[str, float] = OrderedDict()  # txid of our requests that fell back -> when
        self._key_lookups: list[Callable[[int], ec.EllipticCurvePublicKey | None]] = []
        self._keys: OrderedDict[int, ec.EllipticCurvePublicKey] = OrderedDict()  # learned from their messages
        # Observability (`evio status`, the benchmark): requests by the way they went, and what was dropped.
        self.sent: Counter[str] = Counter()  # "ring" answered over the overlay, "server" through the server
        self.fallbacks: Counter[str] = Counter()  # why a request tried on the ring went to the server
        self.served: Counter[str] = Counter()  # requests for us that came along the ring and were answered, by action
        self.duplicates: Counter[str] = Counter()  # copies of a request answered with its first copy's answer, by way
        self.late_answers = 0  # answers along the ring to our requests that had gone through the server meanwhile
        self.answers_back = 0  # answers sent back the way their request came, with no link closer to the requester
        self.relayed = 0  # chunks passed on for others
        self.relay_rate_limited = 0  # of those, held back: one neighbour's share of the next hop's budget spent
        self.relayed_signed = 0  # of the relayed, those counted against their signing origin's budget
        self.waited = 0  # link requests held for a link to come up before going along the ring again
        self._via_server = 0  # our requests now going through the server
        self.drops: Counter[DropReason] = Counter()

    def attach(self, relays: object) -> None:
        """Use ``relays``' tunnels (the tunnel manager of this overlay, once made; a fake's are ignored)."""
        if isinstance(relays, SignalRelays):
            self._relays = relays
            relays.relay_signal_to(self._on_record)

    def use_keys(self, lookup: Callable[[int], ec.EllipticCurvePublicKey | None]) -> None:
        """Also find members' certificate keys there, checked against the overlay CA and their node ids (the
        claims proven in their presence, the host claims' cache)."""
        self._key_lookups.append(lookup)

    def _key_of(self, node: int) -> ec.EllipticCurvePublicKey | None:
        for peer, tunnel in self._route_peers().items():  # linked peers' keys, as their tunnels' DTLS checked them
            key = getattr(tunnel, "peer_key", None)
            if isinstance(key, ec.EllipticCurvePublicKey):
                self._learn(peer, key)
        known = self._keys.get(node)
        for lookup in self._key_lookups:
            if known is not None:
                break
            known = lookup(node)
        return known

    def _learn(self, node: int, key: ec.EllipticCurvePublicKey) -> None:
        """``key``, of a certificate the overlay CA issued for ``node``: later messages to it are sealed to it."""
        self._keys[node] = key
        self._keys.move_to_end(node)
        if len(self._keys) > MAX_KEYS:
            self._keys.popitem(last=False)

    def counts(self) -> dict[str, object]:
        return {"sent": dict(self.sent), "fallbacks": dict(self.fallbacks), "served": dict(self.served),
                "duplicates": dict(self.duplicates), "late_answers": self.late_answers, "answers_back": self.answers_back,
                "relayed": self.relayed, "relay_rate_limited": self.relay_rate_limited,
                "relayed_signed": self.relayed_signed, "waited": self.waited,
                "drops": {r.value: n for r, n in self.drops.items()}}  # fmt: skip

    # -- Signaling: requests and handlers -------------------------------------------------------

    def register_handler(self, action: str, handler: Handler) -> None:
        self._handlers[action] = handler
        self.inner.register_handler(action, self._through_server(action, handler) if action in ROUTED else handler)

    def _through_server(self, action: str, handler: Handler) -> Handler:
        """``handler`` for requests through the server, answering a copy of one being served along the ring
        with that one's answer."""

        async def serve(overlay: str, peer: int, body: Body) -> Body:
            key = _request_key(peer, action, body)
            first = self._served_copy(key)
            if first is not None and not first.answer.done():
                self.duplicates["server"] += 1
                return _outcome(await asyncio.shield(first.answer))
            return _outcome(await self._answer(key, "server", handler(overlay, peer, body)))

        return serve

    def _served_copy(self, key: tuple[int, str, bytes]) -> _Served | None:
        now = self._wall()
        while self._served and next(iter(self._served.values())).at < now - DUPLICATE_WINDOW:
            self._served.popitem(last=False)
        return self._served.get(key)

    async def _answer(self, key: tuple[int, str, bytes], via: str, serving: Awaitable[Body]) -> Body | Exception:
        """The answer (or error) of a request served here, kept for its copies."""
        copy = self._served[key] = _Served(via, self._wall(), asyncio.get_running_loop().create_future())
        self._served.move_to_end(key)
        if len(self._served) > MAX_SERVED:
            self._served.popitem(last=False)
        result: Body | Exception
        try:
            result = await serving
        except Exception as exc:  # noqa: BLE001 - kept for its copies, raised to the caller by _outcome
            result = exc
        except BaseException:  # cancelled (the node stops): its copies hear a refusal
            copy.answer.set_result(HandlerRejected("not answered"))
            raise
        copy.answer.set_result(result)
        return result

    async def request(self, overlay: str, peer: int, action: str, body: Body, timeout: float | None = None) -> Body:
        if action in ROUTED and overlay == self.overlay and self._relays is not None:
            try:
                answer = await self._ring_first(peer, action, body, min(timeout or RING_TIMEOUT, RING_TIMEOUT))
            except _Fallback as why:
                self.fallbacks[why.reason] += 1
            else:
                self.sent["ring"] += 1
                return answer
        self.sent["server"] += 1
        self._via_server += 1
        try:
            return await self.inner.request(overlay, peer, action, body, timeout)
        finally:
            self._via_server -= 1

    async def _ring_first(self, peer: int, action: str, body: Body, timeout: float) -> Body:
        """Along the ring, waiting a little where that spares the server a link request (decision 0064):
        a node without links sends one link request at a time through the server and the others along the
        ring once its first link is up; a target not reachable yet (a newcomer without links) is tried again
        once. An offer never waits: its link was negotiated, and the peer waits for the tunnel."""
        try:
            return await self._ring_request(peer, action, body, timeout)
        except _Fallback as why:
            if action != ACTION_LINK:
                raise
            if why.reason == "no_links" and self._via_server > 0:
                wait = FIRST_LINK_WAIT  # our first link is being set up through the server: ride on it
            elif why.reason in ("no_route", "unreachable"):
                wait = UNREACHABLE_WAIT
            else:
                raise
        deadline = self.clock.now() + wait
        seen = frozenset(self._route_peers())
        while self.clock.now() < deadline and frozenset(self._route_peers()) == seen:
            await self.clock.sleep(RELAY_POLL)
        self.waited += 1
        return await self._ring_request(peer, action, body, timeout)

    async def _ring_request(self, peer: int, action: str, body: Body, timeout: float) -> Body:
        to = self._key_of(peer)
        if to is None:  # a relay would read what is not sealed (review21f F8)
            raise _Fallback("no_key")
        relays = self._route_peers()
        hop = ring_signal.next_hop(self.own, peer, frozenset(relays))
        if hop is None:
            raise _Fallback("no_route" if relays else "no_links")
        txid = f"r{self._rng.getrandbits(64):016x}"
        message = RingMessage("request", self.overlay, self.own, peer, txid, self._wall(), action, body)
        message_id = self._rng.getrandbits(32)
        try:
            pieces = ring_signal.chunks(ring_signal.seal(message, self._cert, self._key, to), message_id, self.own, peer,
                                         key=self._key)  # fmt: skip
        except ValueError:
            raise _Fallback("too_large") from None
        waiter: asyncio.Future[RingMessage] = asyncio.get_running_loop().create_future()
        self._waiting[txid] = waiter
        self._asked[txid] = peer
        self._sent_ids[message_id] = txid
        try:
            for piece in pieces:
                if not relays[hop].send_overlay_signal(piece):
                    raise _Fallback("send_failed")
            answer = await self.clock.wait_for(waiter, timeout)
        except TimeoutError:
            self._late[txid] = self.clock.now()  # its answer may still come: not a drop (decision 0064, amended)
            while len(self._late) > MAX_SERVED:
                self._late.popitem(last=False)
            raise _Fallback("no_answer") from None
        finally:
            self._waiting.pop(txid, None)
            self._asked.pop(txid, None)
            self._sent_ids.pop(message_id, None)
        if answer.kind == "error":
            reason = next((r for r in ErrorReason if r.value == answer.reason), ErrorReason.OTHER)
            raise RequestError(reason, answer.text)
        assert answer.body is not None
        return answer.body

    def _route_peers(self) -> Mapping[int, SignalTunnel]:
        return self._relays.signal_relays() if self._relays is not None else {}

    # -- what arrives over the tunnels -----------------------------------------------------------

    def _on_record(self, neighbour: int, payload: bytes) -> None:
        now = self.clock.now()
        if not self._rate.allow(neighbour, now):
            self._drop(DropReason.RATE_LIMITED, neighbour, "")
            return
        try:
            chunk = ring_signal.parse_chunk(payload)
        except RingSignalError as exc:
            self._drop(exc.reason, neighbour, str(exc))
            return
        if chunk.dst != self.own:
            self._forward(neighbour, payload, chunk)
        elif chunk.kind == ring_signal.UNREACHABLE:
            txid = self._sent_ids.get(chunk.message_id)
            waiter = self._waiting.get(txid) if txid is not None else None
            if waiter is not None and not waiter.done():
                waiter.set_exception(_Fallback("unreachable"))
        else:
            try:
                evicted = self._reassembly.evicted
                sealed = self._reassembly.add(chunk, now)
                if self._reassembly.evicted != evicted:  # an older partial message gave way to this one
                    self._drop(DropReason.REASSEMBLY_FULL, neighbour, f"{len(self._reassembly)} messages being assembled")
                if sealed is None:
                    return
                message = ring_signal.open_sealed(sealed, chunk.src, self._anchor, self._wall(), key=self._key,
                                                  header_dst=chunk.dst)  # fmt: skip
                self._take(message, neighbour)
            except RingSignalError as exc:
                self._drop(exc.reason, neighbour, str(exc))

    def _forward(self, neighbour: int, payload: bytes, chunk: ring_signal.Chunk) -> None:
        if chunk.hops == 0:
            self._drop(DropReason.HOP_LIMIT, neighbour, f"to {chunk.dst:032x}")
            return
        relays = self._route_peers()
        hop = ring_signal.next_hop(self.own, chunk.dst, frozenset(relays))
        signed = False
        if hop is not None:
            checked = self._signed_by_origin(neighbour, payload, chunk)
            if checked is None:
                return
            signed = checked
            budget, key = (self._origin_rate, (chunk.src, hop)) if signed else (self._relay_rate, (neighbour, hop))
            if not budget.allow(key, self.clock.now()):
                self.relay_rate_limited += 1
                self._drop(DropReason.RATE_LIMITED, neighbour, f"relayed to {hop:032x}{' signed' if signed else ''}")
                return
        if hop is not None and relays[hop].send_overlay_signal(ring_signal.forwarded(payload, chunk)):
            self.relayed += 1
            self.relayed_signed += signed
            return
        self._drop(DropReason.NO_ROUTE, neighbour, f"to {chunk.dst:032x}")
        if chunk.kind == ring_signal.DATA and chunk.index == 0:
            back = ring_signal.next_hop(self.own, chunk.src, frozenset(relays))
            if back is not None:
                relays[back].send_overlay_signal(ring_signal.unreachable(chunk))

    def _signed_by_origin(self, neighbour: int, payload: bytes, chunk: ring_signal.Chunk) -> bool | None:
        """True if ``chunk``'s origin (its src) signed it, as its certificate key known here says; False if it
        carries no signature or the key is not known here (it spends the share of the link it came by); None,
        dropped and counted, if the signature is not the origin's or the chunk was relayed here already."""
        if not chunk.signature:
            return False
        key = self._key_of(chunk.src)
        if key is None:
            return False
        held = self._relayed_seen.get(chunk.src)
        if held is not None and (chunk.message_id, chunk.index) in held:  # looked up first: a copy costs no check (J6)
            self._drop(DropReason.REPLAYED, neighbour, f"chunk of {chunk.src:032x}")  # it would spend the budget again
            return None
        if not ring_signal.chunk_signed_by(payload, chunk, key):
            self._drop(DropReason.BAD_SIGNATURE, neighbour, f"chunk of {chunk.src:032x}")
            return None
        self._relayed_seen.setdefault(chunk.src, OrderedDict())[(chunk.message_id, chunk.index)] = None
        self._relayed_count += 1
        if self._relayed_count > RELAYED_SEEN:
            src = max(self._relayed_seen, key=lambda s: len(self._relayed_seen[s]))
            most = self._relayed_seen[src]
            most.popitem(last=False)
            self._relayed_count -= 1
            if not most:
                del self._relayed_seen[src]
        return True

    def _take(self, message: RingMessage, neighbour: int) -> None:
        if message.overlay != self.overlay:
            raise RingSignalError(DropReason.MALFORMED, f"overlay {message.overlay}")
        # The header's dst is not signed: a relay may re-address a signed request to another node (review21f F1).
        if message.dst != self.own:
            raise RingSignalError(DropReason.MALFORMED, f"signed for {message.dst:032x}")
        if message.src in self.inner.revoked_nodes(self.overlay):
            raise RingSignalError(DropReason.REVOKED, f"{message.src:032x}")
        if not self._replay.fresh(message, self.clock.now()):
            raise RingSignalError(DropReason.REPLAYED, f"{message.kind} {message.txid} from {message.src:032x}")
        if message.sender_key is not None:
            self._learn(message.src, message.sender_key)
        if message.kind != "request":
            waiter = self._waiting.get(message.txid)
            # A relay reads the txid of what it carries: an answer counts only from the node we asked (review21f F1).
            if waiter is None and self._late.pop(message.txid, None) is not None:
                self.late_answers += 1  # the request went through the server since: that answer counts
                return
            if waiter is None or waiter.done() or self._asked.get(message.txid) != message.src:
                raise RingSignalError(DropReason.UNEXPECTED, f"{message.kind} {message.txid}")
            waiter.set_result(message)
            return
        if len(self._serving) >= MAX_INFLIGHT:
            raise RingSignalError(DropReason.RATE_LIMITED, f"{len(self._serving)} requests in progress")
        if self._serving_from[message.src] >= MAX_INFLIGHT_PER_SENDER:
            raise RingSignalError(DropReason.RATE_LIMITED, f"{MAX_INFLIGHT_PER_SENDER} requests of {message.src:032x} in progress")
        if not self._serve_rate.allow(message.src, self.clock.now()):
            raise RingSignalError(DropReason.RATE_LIMITED, f"requests of {message.src:032x} over {SERVE_RATE}/s")
        task = asyncio.create_task(self._serve(message, neighbour), name=f"ring signal {message.action}")
        self._serving.add(task)
        self._serving_from[message.src] += 1
        task.add_done_callback(functools.partial(self._served_one, message.src))

    def _served_one(self, src: int, task: asyncio.Task[None]) -> None:
        self._serving.discard(task)
        self._serving_from[src] -= 1
        if self._serving_from[src] <= 0:
            del self._serving_from[src]

    async def _serve(self, request: RingMessage, came_from: int) -> None:
        reply: RingMessage
        handler = self._handlers.get(request.action) if request.action in ROUTED else None
        ts = self._wall()
        if handler is None:
            reply = _error(request, ts, ErrorReason.UNKNOWN_ACTION, request.action)
        else:
            key = _request_key(request.src, request.action, request.body or {})
            first = self._served_copy(key)
            try:
                if first is not None and (not first.answer.done() or (first.via == "server" and request.ts < first.at - LATE_COPY)):
                    # A copy of a request being served, or a ring copy late after its server copy: the same answer.
                    self.duplicates["ring"] += 1
                    body = _outcome(await self.clock.wait_for(asyncio.shield(first.answer), HANDLER_TIMEOUT))
                else:
                    body = _outcome(await self._answer(key, "ring", self.clock.wait_for(
                        handler(self.overlay, request.src, request.body or {}), HANDLER_TIMEOUT)))
                reply = RingMessage("response", self.overlay, self.own, request.src, request.txid, self._wall(), body=body)
            except HandlerRejected as exc:
                reply = _error(request, ts, ErrorReason.REJECTED, str(exc))
            except HandlerBadRequest as exc:
                reply = _error(request, ts, ErrorReason.BAD_REQUEST, str(exc))
            except TimeoutError:
                reply = _error(request, ts, ErrorReason.TIMEOUT, f"handler took over {HANDLER_TIMEOUT} s")
            except Exception:
                log.exception("ring signal handler %s failed overlay=%s peer=%032x", request.action, self.overlay,
                              request.src)  # fmt: skip
                reply = _error(request, ts, ErrorReason.INTERNAL, "")
        self.served[request.action if handler is not None else "unknown"] += 1  # never keyed by a peer's name
        assert request.sender_key is not None  # open_sealed gave it
        self._send(reply, request.sender_key, came_from)

    def _send(self, message: RingMessage, to: ec.EllipticCurvePublicKey, came_from: int) -> None:
        """An answer, sealed to the key of the certificate its request carried: greedily, or else back to the
        neighbour its request came from. (A node next to the requester on the ring often has no link closer to
        it: in the churn lab a rejoining node's answers to its predecessor were all dropped, its tunnels failed
        while the offers went through the server again.) From there each hop is strictly closer: no loop."""
        relays = self._route_peers()
        hop = ring_signal.next_hop(self.own, message.dst, frozenset(relays))
        if hop is None and came_from in relays:
            hop = came_from
            self.answers_back += 1
        if hop is None:
            self.drops[DropReason.NO_ROUTE] += 1  # the requester falls back to the server on its timeout
            return
        try:
            pieces = ring_signal.chunks(ring_signal.seal(message, self._cert, self._key, to), self._rng.getrandbits(32),
                                        self.own, message.dst, key=self._key)  # fmt: skip
        except ValueError:
            self.drops[DropReason.MALFORMED] += 1
            log.warning("ring signal %s answer to %032x too large to send", message.kind, message.dst)
            return
        for piece in pieces:
            relays[hop].send_overlay_signal(piece)

    def _drop(self, reason: DropReason, neighbour: int, detail: str) -> None:
        self.drops[reason] += 1
        if self._drop_log.should_log(neighbour, self.clock.now()):
            log.warning("ring signal drop %s overlay=%s peer=%032x: %s (%d so far)", reason.value, self.overlay,
                        neighbour, detail, self.drops[reason])  # fmt: skip

    async def stop(self) -> None:
        """The node stops the shared client; the requests being served here end."""
        for task in list(self._serving):
            task.cancel()
        await asyncio.gather(*self._serving, return_exceptions=True)

    # -- Signaling: the rest, as the wrapped view has it ---------------------------------------

    @property
    def connected(self) -> bool:
        return self.inner.connected

    @property
    def overlays(self) -> frozenset[str]:
        return self.inner.overlays

    @property
    def connected_since(self) -> float | None:
        return self.inner.connected_since

    @property
    def sessions(self) -> int:
        return self.inner.sessions

    @property
    def server(self) -> str | None:
        return self.inner.server

    def use_servers(self, servers: tuple[tuple[str, int], ...]) -> None:
        self.inner.use_servers(servers)

    def last_error(self, overlay: str) -> LoginFailure | None:
        return self.inner.last_error(overlay)

    def node_id(self, overlay: str) -> int:
        return self.inner.node_id(overlay)

    def peers(self, overlay: str) -> dict[int, str]:
        return self.inner.peers(overlay)

    def is_listed(self, overlay: str, node_id: int) -> bool:
        return self.inner.is_listed(overlay, node_id)

    def listed_ids(self, overlay: str) -> frozenset[int]:
        return self.inner.listed_ids(overlay)

    def revoked_nodes(self, overlay: str) -> frozenset[int]:
        return self.inner.revoked_nodes(overlay)

    def revocation_list(self, overlay: str) -> RevocationList | None:
        return self.inner.revocation_list(overlay)

    def revocation_list_text(self, overlay: str) -> str | None:
        return self.inner.revocation_list_text(overlay)

    def receive_revocation_list(self, text: str, source: str = "local") -> bool:
        return self.inner.receive_revocation_list(text, source)

    def message_counts(self) -> dict[str, dict[str, int]]:
        return self.inner.message_counts()

    def listed_members(self, overlay: str) -> MemberList | None:
        return self.inner.listed_members(overlay)

    def member_list_text(self, overlay: str) -> str | None:
        return self.inner.member_list_text(overlay)

    def receive_member_list(self, text: str, source: str = "local") -> bool:
        return self.inner.receive_member_list(text, source)

    def drop_counts(self) -> dict[str, int]:
        return self.inner.drop_counts()

    def presence_lists_left_out(self) -> dict[str, list[str] | int]:
        return self.inner.presence_lists_left_out()

    def subscribe(self, event_type: type[E], callback: Callable[[E], None]) -> Subscription[E]:
        return self.inner.subscribe(event_type, callback)

    def check_membership(self) -> None:
        self.inner.check_membership()

    async def start(self) -> None:
        """The node starts the shared client."""

    async def wait_connected(self, timeout: float | None = None) -> None:
        await self.inner.wait_connected(timeout)


class _Served:
    """A routed request served here: the way it came, when (wall clock), and its answer or error once given."""

    __slots__ = ("via", "at", "answer")

    def __init__(self, via: str, at: float, answer: asyncio.Future[Body | Exception]) -> None:
        self.via, self.at, self.answer = via, at, answer


def _request_key(src: int, action: str, body: Body) -> tuple[int, str, bytes]:
    """The same request, whichever way it came: its sender, action and body (an offer's names its tunnel; a link
    request's its type and the sender's epoch)."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return src, action, hashlib.sha256(text.encode()).digest()


def _outcome(result: Body | Exception) -> Body:
    if isinstance(result, Exception):
        raise result
    return result


class _Fallback(Exception):
    """The ring did not carry this request: it goes through the server (reason counted)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _error(request: RingMessage, ts: float, reason: ErrorReason, text: str) -> RingMessage:
    return RingMessage("error", request.overlay, request.dst, request.src, request.txid, ts, reason=reason.value,
                       text=text[:256])  # fmt: skip
