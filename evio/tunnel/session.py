"""One tunnel to one peer: offer/answer, ICE, DTLS, keys, TAP, data path, liveness, teardown.

A ``Tunnel`` is driven by one task that owns every resource it creates and
releases them all on the way out, whatever the reason: setup failure, dead
peer, peer closing, local close, cancellation.

It is the adapter of the tunnel's lifecycle machine (lifecycle.py): what
happens next, the tunnel's state and why it went down are the machine's; the
``Tunnel`` tells it each event (``_handle``) and performs the actions it
returns (ICE, DTLS, the TAP, the data path, liveness, reports, teardown).

Setup::

    initiator                                   responder
    gather (direct + relay connections)
    offer -------- signaling --------------->   gather, set remote, answer
    set remote  <------------------------------
    ICE: controlling = higher node id (direct and relay at once; see ice.py)
    DTLS: the controlling side is the client; fingerprints pinned from the offer/answer
    keys exported from DTLS; TAP created; data path takes the selected socket
    HELLO records until an authenticated record arrives from the peer: link UP
    relay taken first and direct connects later: the data path moves there (``_move_to_direct``)

Only that authenticated record proves the peer holds the keys of *this*
handshake with the certificate we pinned, so the tunnel is reported up then
and never earlier.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import secrets as pysecrets
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from cryptography import x509

from evio.config.model import Cipher
from evio.ratelimit import TokenBucket
from evio.tunnel import lifecycle
from evio.tunnel.config import TunnelSettings
from evio.tunnel.datapath.fd_datapath import FdDatapath
from evio.tunnel.datapath.interface import Datapath, DatapathStats, DropReason, ProbesPath
from evio.tunnel.datapath.keys import EXPORTER_LABEL, EXPORTER_LEN, SessionSecrets, split_exporter
from evio.tunnel.datapath.native import NativeFdDatapath, pick_implementation
from evio.tunnel.datapath.record import (
    HELLO_RELAYS_SIGNAL,
    KIND_CONTROL,
    KIND_FRAME,
    ControlMessage,
    ControlOpcode,
)
from evio.tunnel.datapath.tap import LinuxTap, TapDevice
from evio.tunnel.datapath.transit_table import TransitPort, TransitTable
from evio.tunnel.errors import (
    DtlsFailed,
    FingerprintMismatch,
    NotAuthenticated,
    OfferError,
    SetupError,
    SignalingFailed,
    TunnelError,
    UntrustedCertificate,
)
from evio.tunnel.lifecycle import Action, Connect, Event, TunnelInfo, TunnelLifecycle, TunnelState
from evio.tunnel.liveness import Action as LivenessAction
from evio.tunnel.liveness import DownReason, EchoAnswered, Liveness, PeerAlive, PeerDead, RttStats, SendControl
from evio.tunnel.liveness_ticks import tick_grid
from evio.tunnel.path.deadlines import MAX_PATIENCE, Lateness, LoopBudget
from evio.tunnel.path.dtls import (
    AFTER_HANDSHAKE,
    FINGERPRINT_MISMATCH,
    UNTRUSTED,
    DtlsHandshake,
    DtlsRole,
    DtlsState,
    Fingerprint,
    PeerCheck,
    TunnelCertificate,
)
from evio.tunnel.path.ice import IceAgent, SelectedPath
from evio.tunnel.path.offer_answer import TunnelAnswer, TunnelOffer, TunnelSignaling, choose_cipher
from evio.tunnel.path.path_kind import PathKind
from evio.tunnel.pmtu import PathMtu, PmtuSource

logger = logging.getLogger(__name__)

TapFactory = Callable[[str, int], Coroutine[Any, Any, TapDevice]]
DatapathFactory = Callable[[TunnelSettings], Datapath]
Clock = Callable[[], float]

_STATS_LOG_INTERVAL = 10.0
_MAX_EARLY_RECORDS = 16
_MOVE_NUDGES = (0.0, 0.05, 0.15, 0.3)  # pauses before each keepalive on a new path (0.5 s in all)
SUSPECT_AFTER = 0.3
"""With a standby relay ready: seconds records may go unanswered before the peer is probed (a TURN server lost
over UDP shows only as silence); a probe unanswered in its deadline moves the data path to the standby (0057)."""


@dataclass(frozen=True)
class TunnelUp:
    info: TunnelInfo


@dataclass(frozen=True)
class TunnelDown:
    info: TunnelInfo


TunnelEvent = TunnelUp | TunnelDown

__all__ = [
    "DatapathFactory", "TapFactory", "Tunnel", "TunnelDown", "TunnelEvent", "TunnelInfo", "TunnelState", "TunnelUp",
    "default_datapath_factory", "default_tap_factory", "new_tunnel_id",
]
EventHandler = Callable[[TunnelEvent], None]


async def default_tap_factory(name: str, mtu: int, offload: bool = True, tso: bool = False) -> TapDevice:
    return await LinuxTap.create(name, mtu, offload=offload, tso=tso)


def default_datapath_factory(config: TunnelSettings) -> Datapath:
    # With tunnel.tso the native TAP pass cuts the TAP's super-frames itself (docs/decisions/0053).
    if pick_implementation(config.datapath) == "native":
        return NativeFdDatapath(config.tap_mtu, rekey=config.rekey, replay_window=config.replay_window,
                                gro=config.offload, tso=config.tso)
    return FdDatapath(config.tap_mtu, rekey=config.rekey, replay_window=config.replay_window, gro=config.offload)


def new_tunnel_id() -> str:
    return pysecrets.token_urlsafe(12)


class Tunnel:
    def __init__(
        self,
        *,
        node_id: int,
        peer: int,
        config: TunnelSettings,
        certificate: TunnelCertificate,
        on_event: EventHandler,
        initiator: bool,
        tunnel_id: str | None = None,
        tap_factory: TapFactory = default_tap_factory,
        datapath_factory: DatapathFactory = default_datapath_factory,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        patience: Callable[[], float] | None = None,
        lateness: Lateness | None = None,
        transit: TransitTable | None = None,
    ) -> None:
        """``transit``: the overlay's fast-path table (tunnel.transit); the data path joins it while it runs.
        ``lateness``: told how late the loop woke while a setup deadline was waited out (`LoopLag.record`)."""
        if node_id == peer:
            raise ValueError("a tunnel needs two different nodes")
        self.node_id = node_id
        self.peer = peer
        self.config = config
        self._certificate = certificate
        self._on_event = on_event
        if tap_factory is default_tap_factory:
            tap_factory = partial(default_tap_factory, offload=config.offload, tso=config.tso)
        self._tap_factory = tap_factory
        self._datapath = datapath_factory(config)
        self._transit = transit
        self._clock = clock
        self._wall_clock = wall_clock
        self._patience = patience  # how far liveness limits stretch now (the host's loop lag)
        self._lateness = lateness
        self._life = TunnelLifecycle(peer, tunnel_id or new_tunnel_id(), initiator, node_id > peer, clock())
        self._ice: IceAgent | None = None
        self._path: SelectedPath | None = None
        self._dtls: DtlsHandshake | None = None
        self._dtls_progress = asyncio.Event()
        # DTLS datagrams OpenSSL reads once the handshake is done, and those dropped past them (``_pump``).
        self._dtls_budget = TokenBucket(AFTER_HANDSHAKE, clock())
        self._dtls_dropped = 0
        self._tap: TapDevice | None = None
        self._tap_task: asyncio.Task[TapDevice] | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._move_task: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._datapath_running = False
        self._liveness: Liveness | None = None
        self._stop = asyncio.Event()
        self._wake_pending = False  # the supervisor's tick is due now (a stop, or a doubt to act on)
        self._tick_waiter: asyncio.Future[None] | None = None  # what the supervisor awaits between ticks
        self._up: asyncio.Future[TunnelInfo] = asyncio.get_running_loop().create_future()
        self._early_records: list[bytes] = []
        self._connect: Connect | None = None  # what the responder runs once its answer is sent
        self._probes: dict[int, asyncio.Future[float]] = {}  # echo token -> `probe` waiting for it
        self._pmtu: PathMtu | None = None  # the path MTU search of the current path (evio.tunnel.pmtu)
        self._pmtu_moves = 0  # the data path's path moves when it began
        self._standby: SelectedPath | None = None  # a relayed path on another TURN server, read beside ours (0057)
        self._standby_underlay: Any = None
        self._rx_mark = self._tx_mark = 0  # the counts at the last tick (``_suspect``)
        self._heard_at = clock()  # the tick that saw the last record arrive
        # Signaling routed along the ring (decision 0064): set by the manager; our HELLOs then say we read it.
        self.on_overlay_signal: Callable[[int, bytes], None] | None = None
        self.peer_relays_signal = False  # the peer's HELLO said it reads OVERLAY_SIGNAL
        # The key of the peer's certificate once the overlay CA's check passed: what messages along the ring to
        # it are sealed to, also after this tunnel is gone (review21f F8).
        self.peer_key: object | None = None

    # -- public ------------------------------------------------------------------------

    @property
    def info(self) -> TunnelInfo:
        return self._life.info

    @property
    def state(self) -> TunnelState:
        return self._life.state

    @property
    def active(self) -> bool:
        return self.state not in (TunnelState.CLOSED, TunnelState.FAILED)

    def stats(self) -> DatapathStats:
        """The data path's counters, with the DTLS datagrams this tunnel dropped among its drops."""
        stats = self._datapath.stats()
        if not self._dtls_dropped:
            return stats
        return replace(stats, drops={**stats.drops, DropReason.DTLS_RATE: self._dtls_dropped})

    @property
    def rtt(self) -> RttStats:
        """Round-trip times from the echo requests that keep the link alive."""
        return self._liveness.rtt if self._liveness is not None else RttStats()

    @property
    def mtu(self) -> int:
        """The TAP's MTU (the largest frame the tunnel carries, less the Ethernet header)."""
        return self.config.tap_mtu

    @property
    def path_mtu(self) -> tuple[int | None, PmtuSource]:
        """The path's MTU in use (IP datagram bytes; None: the configured underlay's) and how it was found."""
        if self._pmtu is None:
            return None, PmtuSource.ASSUMED
        return self._pmtu.mtu, self._pmtu.source

    @property
    def up_since(self) -> float | None:
        """When the link came up (this tunnel's clock), None before."""
        return self._life.up_since

    async def probe(self, timeout: float) -> float:
        """One echo request through the tunnel; the round-trip time in seconds.

        Raises TunnelError when the link is not up, asyncio.TimeoutError without an answer.
        """
        if self._liveness is None or self.state is not TunnelState.UP:
            raise TunnelError(f"tunnel is {self.state.value}, not up")
        token, actions = self._liveness.probe(self._clock())
        waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._probes[token] = waiter
        try:
            self._execute(actions)
            return await asyncio.wait_for(waiter, timeout)
        finally:
            self._probes.pop(token, None)

    def inbound_rejects(self) -> dict[str, int]:
        """Datagrams ICE's receive gates turned away (not from the peer, or failed), by reason."""
        if self._ice is None:
            return {}
        return {reason.value: n for reason, n in self._ice.rejected().items()}

    async def wait_up(self) -> TunnelInfo:
        """Wait until the link is up; raises SetupError if it never comes up."""
        return await asyncio.shield(self._up)

    async def close(self, reason: str = "closed locally") -> None:
        """Tear down and wait until every resource is released."""
        self._perform(self._handle(lifecycle.Close(reason)))
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        else:
            await self._teardown()

    def start_initiator(self, signaling: TunnelSignaling) -> None:
        self._task = asyncio.create_task(self._guard(self._run_initiator(signaling)), name=f"tunnel-{self.info.tunnel_id}")

    async def prepare_answer(self, offer: TunnelOffer) -> TunnelAnswer:
        """Responder: gather and build the answer; ``start_responder`` then runs the tunnel."""
        try:
            cipher = choose_cipher(offer.ciphers, self.config.ciphers)
            self._ice = IceAgent(self.config.ice, self.info.controlling, f"{self.node_id:032x}", self._wall_clock(), self._lateness,
                                 peer=self.peer)
            # An answer later than the peer waits for it is wasted: stretch no further than most of that.
            direct, relay = await self._ice.gather(self._patience_now(), 0.8 * self.config.signaling_timeout)
            if direct is None and relay is None:
                raise SetupError("no local ICE candidates")
            await self._ice.set_remote(offer.direct, offer.relay)
        except BaseException:
            await self._teardown()
            raise
        (connect,) = self._handle(lifecycle.Offered(offer.fingerprint, cipher))
        assert isinstance(connect, Connect)
        self._connect = connect
        return TunnelAnswer(self.info.tunnel_id, self.node_id, self._certificate.fingerprint, direct, relay, cipher)

    def start_responder(self) -> None:
        assert self._connect is not None
        self._task = asyncio.create_task(self._guard(self._connect_and_run(self._connect)), name=f"tunnel-{self.info.tunnel_id}")

    # -- lifecycle ---------------------------------------------------------------------

    async def _guard(self, coro: Awaitable[None]) -> None:
        """The task body: run, and whatever happens, release everything and report."""
        try:
            await coro
        except asyncio.CancelledError:
            self._handle(lifecycle.Failed("cancelled"))
        except TunnelError as exc:
            self._handle(lifecycle.Failed(str(exc) or type(exc).__name__))
            logger.info("tunnel %s peer %032x failed: %s", self.info.tunnel_id, self.peer, self._life.down_reason)
        except Exception:
            self._handle(lifecycle.Failed("internal error"))
            logger.exception("tunnel %s peer %032x crashed", self.info.tunnel_id, self.peer)
        finally:
            await self._teardown()

    async def _run_initiator(self, signaling: TunnelSignaling) -> None:
        self._ice = IceAgent(self.config.ice, self.info.controlling, f"{self.node_id:032x}", self._wall_clock(), self._lateness,
                             peer=self.peer)
        direct, relay = await self._ice.gather(self._patience_now())
        if direct is None and relay is None:
            raise SetupError("no local ICE candidates")
        offer = TunnelOffer(self.info.tunnel_id, self.node_id, self._certificate.fingerprint, direct, relay, self.config.ciphers)
        body = await signaling.request(self.peer, offer.to_body(), self.config.signaling_timeout)
        try:
            answer = TunnelAnswer.from_body(body)
        except OfferError as exc:
            raise SignalingFailed(f"bad answer: {exc}") from exc
        (action,) = self._handle(lifecycle.Answered(answer.node_id, answer.tunnel_id, answer.fingerprint, answer.cipher, self.config.ciphers))
        if isinstance(action, lifecycle.Fail):
            raise SignalingFailed(action.reason)
        assert isinstance(action, Connect)
        await self._ice.set_remote(answer.direct, answer.relay)
        await self._connect_and_run(action)

    async def _connect_and_run(self, connect: Connect) -> None:
        """Perform ``Connect``, then what the lifecycle asks for as each step completes."""
        assert self._ice is not None
        self._handle(lifecycle.Connecting(connect.cipher))
        # The TAP is made while ICE runs; it takes a netlink round trip or two.
        self._tap_task = asyncio.create_task(self._tap_factory(self.config.tap_name(self.peer), self.config.tap_mtu))
        first: bytes | None = None
        if self.info.controlling:
            path = await self._ice.select_controlling()
        else:
            path, first = await self._ice.select_controlled()
        self._path = path
        actions = self._handle(lifecycle.PathChosen(path.kind, path.local_type, path.remote_type, path.remote_addr, path.transport))
        assert actions == [lifecycle.Handshake()], actions
        secrets = await self._handshake(path, connect.fingerprint, connect.cipher, first)
        self._tap = await self._tap_task
        for action in self._handle(lifecycle.HandshakeDone(self._tap.name)):
            if isinstance(action, lifecycle.StartDatapath):
                self._start_datapath(self._tap, path, secrets)
            elif isinstance(action, lifecycle.WatchForDirect):
                self._move_task = asyncio.create_task(self._move_to_direct(), name=f"tunnel-move-{self.info.tunnel_id}")
                self._move_task.add_done_callback(self._move_done)
            elif isinstance(action, lifecycle.Supervise):
                await self._supervise()

    def _start_datapath(self, tap: TapDevice, path: SelectedPath, secrets: SessionSecrets) -> None:
        """The data path takes the path's socket and the TAP; records that came before it are opened now."""
        self._datapath.start(tap.fd, path.take_underlay(), secrets, self._on_control, vnet_hdr=tap.vnet_hdr)
        self._datapath_running = True
        path.on_relay_lost(partial(self._relay_lost, path))
        if self._transit is not None and isinstance(self._datapath, TransitPort):
            self._datapath.set_transit(self._transit.attach(tap.name, self._datapath), self._transit.flush,
                                       self._transit.destinations(tap.name))  # fmt: skip
        for record in self._early_records:
            self._datapath.inject(record)
        self._early_records.clear()

    async def _move_to_direct(self) -> None:
        """Relay first: when the direct path connects after all, carry the running session over to it
        (docs/design.md, "Relay first, then direct"). The controlling side moves and says so with a
        record on the new path; the controlled side follows that record. The relay is still read for
        ``move_grace`` (records in flight, the peer until it follows), then released."""
        assert self._ice is not None and self._dtls is not None
        relay, relay_pump = self._path, self._pump_task
        assert relay is not None
        direct = await self._ice.later()
        if direct is None or not self._datapath_running:
            if self._datapath_running and relay.kind is PathKind.RELAY:
                self._ice.arm_standby(relay, self._standby_ready)  # staying on the relay: keep a second server ready
            return
        grace = self.config.ice.move_grace
        # DTLS (alerts, the close), and records aioice took before the data path reads the socket.
        direct_pump = asyncio.create_task(self._pump(direct, self._dtls), name=f"tunnel-pump-{self.info.tunnel_id}")
        underlay = direct.take_underlay()
        if self.info.controlling:
            self._datapath.move_underlay(underlay)
        else:
            moved = asyncio.Event()
            self._datapath.add_underlay(underlay, moved.set)
            try:
                await asyncio.wait_for(moved.wait(), grace)
            except BaseException as exc:
                if isinstance(exc, TimeoutError):
                    logger.info("tunnel %s peer %032x: nothing came by the direct path; staying on the relay",
                                self.info.tunnel_id, self.peer)
                self._datapath.release_side()
                direct_pump.cancel()
                await asyncio.gather(direct_pump, return_exceptions=True)
                self._ice.release(direct)
                if not isinstance(exc, TimeoutError):
                    raise
                return
        self._path, self._pump_task = direct, direct_pump
        self._handle(lifecycle.Moved(direct.kind, direct.local_type, direct.remote_type, direct.remote_addr, direct.transport))
        logger.info("tunnel %s peer %032x moved to the direct path %s -> %s %s at %.3f s", self.info.tunnel_id, self.peer,
                    direct.local_type, direct.remote_type, direct.remote_addr, self._clock() - self._life.started)
        try:
            if self.info.controlling:
                # The peer follows the first record its data path reads on the new path; one that
                # reaches it before its data path took the socket is opened but moves nothing, so
                # say it a few times while the path is new, whatever traffic there is.
                waited = 0.0
                for pause in _MOVE_NUDGES:
                    await asyncio.sleep(pause)
                    waited += pause
                    self._datapath.send_control(ControlMessage(ControlOpcode.KEEPALIVE, 0))
                grace -= waited
            await asyncio.sleep(max(grace, 0.0))
        finally:
            self._datapath.release_side()
            if relay_pump is not None:
                relay_pump.cancel()
                await asyncio.gather(relay_pump, return_exceptions=True)
            self._ice.release(relay)

    def _move_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("tunnel %s peer %032x: move to the direct path failed", self.info.tunnel_id, self.peer, exc_info=task.exception())

    async def _handshake(self, path: SelectedPath, peer_fingerprint: Fingerprint, cipher: Cipher, first: bytes | None) -> SessionSecrets:
        role = DtlsRole.CLIENT if self.info.controlling else DtlsRole.SERVER
        dtls = self._dtls = DtlsHandshake(self._certificate, role, peer_fingerprint, self._peer_check())
        await self._send_all(dtls.start())
        if first is not None:
            await self._send_all(dtls.receive(first))
        self._pump_task = asyncio.create_task(self._pump(path, dtls), name=f"tunnel-pump-{self.info.tunnel_id}")
        # Counted in loop time (the deadline grows by each late wake-up), up to MAX_PATIENCE times the base.
        base = self.config.dtls_timeout / max(self.config.ice.patience, 1.0)
        budget = LoopBudget(self.config.dtls_timeout, base * MAX_PATIENCE, lateness=self._lateness, clock=self._clock)
        while dtls.state is DtlsState.HANDSHAKING:
            remaining = budget.remaining()
            if remaining <= 0:
                raise DtlsFailed("DTLS handshake timed out")
            timer = dtls.timeout()
            wait = max(remaining if timer is None else min(timer, remaining), 0.001)
            self._dtls_progress.clear()
            asked = self._clock()
            try:
                await asyncio.wait_for(self._dtls_progress.wait(), wait)
            except TimeoutError:
                budget.overslept(asked, wait)
                await self._send_all(dtls.handle_timeout())
            if self._pump_task.done():
                raise DtlsFailed("ICE connection closed during DTLS")
        if dtls.state is not DtlsState.CONNECTED:
            if dtls.failure == FINGERPRINT_MISMATCH:
                raise FingerprintMismatch("peer certificate does not match its signalled fingerprint")
            if dtls.failure is not None and dtls.failure.startswith(UNTRUSTED):
                logger.warning("tunnel %s peer %032x refused: %s", self.info.tunnel_id, self.peer, dtls.failure)
                raise UntrustedCertificate(dtls.failure)
            raise DtlsFailed(f"DTLS handshake failed: {dtls.failure}")
        material = dtls.export(EXPORTER_LABEL, EXPORTER_LEN)
        logger.debug("tunnel %s dtls connected (%s)", self.info.tunnel_id, dtls.cipher_name())
        return split_exporter(material, cipher, role is DtlsRole.CLIENT)

    def _peer_check(self) -> PeerCheck | None:
        """With an overlay trust anchor: the peer's certificate must be issued for the node id it claims."""
        anchor = self.config.trust
        if anchor is None:
            return None

        def refusal(cert: x509.Certificate) -> str | None:
            now = datetime.datetime.fromtimestamp(self._wall_clock(), datetime.UTC)
            refused = anchor.refusal(cert, self.peer, now)
            if refused is None:
                self.peer_key = cert.public_key()
            return refused

        return refusal

    async def _pump(self, path: SelectedPath, dtls: DtlsHandshake) -> None:
        """Datagrams the ICE connection still receives: DTLS, and records that bypassed the data path."""
        try:
            while True:
                data = await path.recv()
                if not data:
                    continue
                first = data[0]
                if 20 <= first <= 63:
                    if dtls.state is DtlsState.CONNECTED and not self._dtls_budget.take(self._clock()):
                        # The peer (or whoever sends from its address) may send these as fast as it likes, and
                        # OpenSSL reads each: past AFTER_HANDSHAKE, not at all (review21v3).
                        self._dtls_dropped += 1
                        continue
                    await self._send_all(dtls.receive(data))
                    self._dtls_progress.set()
                    if dtls.state is DtlsState.CLOSED and self._datapath_running:
                        self._link_down("peer closed DTLS")
                elif first in (KIND_FRAME, KIND_CONTROL):
                    if self._datapath_running:
                        self._datapath.inject(data)
                    elif len(self._early_records) < _MAX_EARLY_RECORDS:
                        # The peer finished DTLS first and already says hello: keep it for start.
                        self._early_records.append(data)
        except ConnectionError:
            self._dtls_progress.set()
            if self._failed_over_from(path):  # the relay's other TURN server carries on: read on there
                assert self._path is not None
                self._pump_task = asyncio.create_task(self._pump(self._path, dtls), name=f"tunnel-pump-{self.info.tunnel_id}")
            elif path is self._path:  # not a path the tunnel has moved away from
                self._link_down("ICE connection closed")
        except Exception:
            logger.exception("tunnel %s peer %032x: receive pump failed", self.info.tunnel_id, self.peer)
            self._dtls_progress.set()
            self._link_down("internal error")

    async def _supervise(self) -> None:
        assert self._liveness is None
        # The ICE-controlling end leads the echo exchange; the other answers (evio.tunnel.liveness).
        liveness = self._liveness = Liveness(self.config.liveness, self._clock(), leads=self.info.controlling)
        self._execute(liveness.start(self._clock()))
        last_rekey = self._clock()
        tx_epoch = 0
        last_log = self._clock()
        logged_drops: dict[DropReason, int] = {}
        while not self._stop.is_set():
            if not self._wake_pending:
                # On the loop's tick grid, shared with the node's other tunnels (evio.tunnel.liveness_ticks).
                self._tick_waiter = tick_grid().wait(liveness.tick_interval())
                try:
                    await self._tick_waiter
                finally:
                    self._tick_waiter = None
            self._wake_pending = False
            if self._stop.is_set():
                break
            now = self._clock()
            try:
                self._datapath.maintain()
            except OSError as exc:  # the socket failed under the data path: this tunnel ends, the loop goes on
                logger.warning("tunnel %s peer %032x: the underlay socket failed: %s", self.info.tunnel_id, self.peer, exc)
                self._link_down("underlay failed")
                break
            stats = self.stats()
            patience = self._patience_now()
            self._execute(liveness.tick(now, stats.rx_records, stats.tx_records, patience))
            self._suspect(now, stats)
            self._probe_path(now, stats)
            if stats.tx_epoch != tx_epoch:
                tx_epoch, last_rekey = stats.tx_epoch, now
            elif now - last_rekey >= self.config.rekey.max_seconds:
                self._datapath.rekey()
                tx_epoch, last_rekey = tx_epoch + 1, now
            if now - last_log >= _STATS_LOG_INTERVAL and dict(stats.drops) != logged_drops:
                logged_drops = dict(stats.drops)
                last_log = now
                logger.info("tunnel %s peer %032x drops %s", self.info.tunnel_id, self.peer, {r.value: n for r, n in stats.drops.items()})
        if self.state is not TunnelState.UP and self._life.down_reason == DownReason.NOT_AUTHENTICATED.value:
            raise NotAuthenticated("no authenticated record from the peer")

    def _patience_now(self) -> float:
        """How far setup and liveness limits stretch now (the host's loop lag); 1 without a gauge."""
        return self._patience() if self._patience is not None else 1.0

    def _wake(self) -> None:
        """Run the supervisor's next tick now."""
        self._wake_pending = True
        waiter = self._tick_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def doubt(self) -> None:
        """Doubt the peer (its signaling presence went): an up tunnel it does not answer goes down within
        the probe deadline (a few RTTs, 0.25-1 s) instead of after the dead-peer time."""
        if self._liveness is not None and self._datapath_running:
            rtt = self._ice.standby_rtt() if self._ice is not None else None
            actions = self._liveness.doubt(self._clock(), self._datapath.stats().rx_records, rtt)
            if actions:
                logger.info("tunnel %s peer %032x probed (deadline %.3f s)", self.info.tunnel_id, self.peer,
                            self._liveness.probe_deadline())
            self._execute(actions)
            self._wake()  # the supervisor's next tick comes at the probe's pace, not the idle one

    def _probe_path(self, now: float, stats: DatapathStats) -> None:
        """One step of the path MTU search (evio.tunnel.pmtu); a new path starts a new one."""
        datapath = self._datapath
        if not self.config.probe_path_mtu or not isinstance(datapath, ProbesPath):
            return
        if self._pmtu is None or stats.path_moves != self._pmtu_moves:
            datapath.set_path_mtu(None)
            self._pmtu = PathMtu(datapath.largest_datagram(), now)
            self._pmtu_moves = stats.path_moves
        before = self._pmtu.mtu
        for probe in self._pmtu.tick(now):
            datapath.send_probe(probe.token, probe.size)
        if self._pmtu.mtu != before:
            logger.info("tunnel %s peer %032x path MTU %s (%s)", self.info.tunnel_id, self.peer, self._pmtu.mtu,
                        self._pmtu.source.value)  # fmt: skip
            datapath.set_path_mtu(self._pmtu.mtu)

    def send_overlay_signal(self, payload: bytes) -> bool:
        """One OVERLAY_SIGNAL to the peer (decision 0064); False if the tunnel cannot carry it now."""
        if not (self.peer_relays_signal and self._datapath_running and self.state is TunnelState.UP):
            return False
        self._datapath.send_control(ControlMessage(ControlOpcode.OVERLAY_SIGNAL, 0, 0, payload))
        return True

    def _on_control(self, message: ControlMessage) -> None:
        if message.opcode is ControlOpcode.HELLO and message.flags & HELLO_RELAYS_SIGNAL:
            self.peer_relays_signal = True
        elif message.opcode is ControlOpcode.OVERLAY_SIGNAL and self.on_overlay_signal is not None:
            self.on_overlay_signal(self.peer, message.payload)
        if message.opcode is ControlOpcode.PMTU_ACK and self._pmtu is not None:
            self._pmtu.on_ack(self._clock(), message.token)
        if self._liveness is not None:
            self._execute(self._liveness.on_control(self._clock(), message))

    def _execute(self, actions: list[LivenessAction]) -> None:
        for action in actions:
            if isinstance(action, SendControl):
                flags = action.flags
                if action.opcode is ControlOpcode.HELLO and self.on_overlay_signal is not None:
                    flags |= HELLO_RELAYS_SIGNAL
                self._datapath.send_control(ControlMessage(action.opcode, flags, action.token))
            elif isinstance(action, EchoAnswered):
                waiter = self._probes.get(action.token)
                if waiter is not None and not waiter.done():
                    waiter.set_result(action.rtt)
            elif isinstance(action, PeerAlive):
                self._perform(self._handle(lifecycle.LinkAlive(self._clock())))
            elif isinstance(action, PeerDead):
                if action.reason is DownReason.PEER_SILENT and self._silence_fails_over():
                    continue
                # Logged when decided: the teardown that follows (ICE, TURN, the TAP) takes a while.
                logger.info("tunnel %s peer %032x dead: %s", self.info.tunnel_id, self.peer, action.reason.value)
                self._link_down(action.reason.value)

    def _relay_lost(self, path: SelectedPath) -> None:
        """The stream to the TURN server under the data path closed: the path is gone, at once (decision 0049);
        the standby on another server takes over if there is one (0057)."""
        if self._datapath_running and path is self._path and path.kind is PathKind.RELAY:
            logger.info("tunnel %s peer %032x: the TURN server's connection closed", self.info.tunnel_id, self.peer)
            if not self._failed_over_from(path):
                self._link_down("TURN server connection lost")

    # -- failover to the standby relayed path (evio.tunnel.path.relay_standby, decision 0057) --------

    @property
    def relay_status(self) -> dict[str, Any] | None:
        """The relay's TURN allocations, its standby ("ready", "checking" or None) and failovers; None without a relay."""
        return self._ice.relay_status() if self._ice is not None else None

    def _suspect(self, now: float, stats: DatapathStats) -> None:
        """With a standby ready: records sent since the last heard, which is ``SUSPECT_AFTER`` old: probe the peer now."""
        if stats.rx_records != self._rx_mark:
            self._rx_mark, self._heard_at = stats.rx_records, now
        sent, self._tx_mark = stats.tx_records != self._tx_mark, stats.tx_records
        if self._standby is not None and sent and now - self._heard_at >= SUSPECT_AFTER and self._liveness is not None:
            # Quietly: a one-way flow's sender asks this once an echo interval, and is answered in a round trip.
            rtt = self._ice.standby_rtt() if self._ice is not None else None  # before echoes measured the path's
            self._execute(self._liveness.doubt(now, stats.rx_records, rtt))

    def _silence_fails_over(self) -> bool:
        """The peer went silent on a relayed path with a standby ready: move there instead of going down, and
        probe the peer on it (that record is also what the peer follows); silent there too, the link goes down."""
        path, liveness = self._path, self._liveness
        if path is None or liveness is None or self._standby is None:
            return False
        if not self._failed_over_from(path, "silent on its relayed path"):
            return False
        liveness.revive(self._clock())
        self.doubt()
        return True

    def _standby_ready(self, standby: SelectedPath) -> None:
        """The standby answered: the data path reads it beside the path, and follows the peer there."""
        if not self._datapath_running or self._path is None or self._path.kind is not PathKind.RELAY or self._standby is not None:
            return
        try:
            underlay = standby.take_underlay()
        except SetupError as exc:
            logger.info("tunnel %s peer %032x: no standby: %s", self.info.tunnel_id, self.peer, exc)
            return
        self._standby, self._standby_underlay = standby, underlay
        self._datapath.add_underlay(underlay, self._peer_failed_over)

    def _failed_over_from(self, path: SelectedPath, why: str = "lost its TURN server") -> bool:
        """``path`` is lost: True when the tunnel runs (or now moved) on the standby of the same relay connection."""
        current = self._path
        if current is not None and current is not path and current.connection is path.connection and path.kind is PathKind.RELAY:
            return True  # moved already (the other detector was first)
        standby = self._standby
        if standby is None or path is not current or not self._datapath_running:
            return False
        self._datapath.move_underlay(self._standby_underlay)
        self._switched(path, standby, why)
        self._after_switch(path, nudge=True)
        return True

    def _peer_failed_over(self) -> None:
        """The data path followed the peer's first record on the standby (the peer lost a TURN server)."""
        old, standby = self._path, self._standby
        if old is None or standby is None:
            return
        self._switched(old, standby, "followed the peer")
        self._after_switch(old, nudge=False)

    def _switched(self, old: SelectedPath, standby: SelectedPath, why: str) -> None:
        assert self._ice is not None
        self._standby = self._standby_underlay = None
        self._path = standby
        self._ice.switch_to_standby(standby)
        standby.on_relay_lost(partial(self._relay_lost, standby))
        self._handle(lifecycle.Moved(standby.kind, standby.local_type, standby.remote_type, standby.remote_addr, standby.transport))
        logger.info("tunnel %s peer %032x %s: on the standby relayed path %s over %s at %.3f s", self.info.tunnel_id, self.peer,
                    why, standby.remote_addr, standby.transport, self._clock() - self._life.started)  # fmt: skip

    def _after_switch(self, old: SelectedPath, nudge: bool) -> None:
        # In the move task's place (its work is over once a standby was armed): the teardown cancels it.
        self._move_task = asyncio.create_task(self._after_failover(old, nudge), name=f"tunnel-failover-{self.info.tunnel_id}")
        self._move_task.add_done_callback(self._move_done)

    async def _after_failover(self, old: SelectedPath, nudge: bool) -> None:
        """The side that moved says so on the new path a few times (the peer follows a record); the path left
        is still read for ``move_grace`` (records in flight), then released with its allocation."""
        waited = 0.0
        if nudge:
            for pause in _MOVE_NUDGES:
                await asyncio.sleep(pause)
                waited += pause
                self._datapath.send_control(ControlMessage(ControlOpcode.KEEPALIVE, 0))
        await asyncio.sleep(max(self.config.ice.move_grace - waited, 0.0))
        if self._datapath_running:
            self._datapath.release_side()
        if self._ice is not None:
            self._ice.release_relayed(old)

    def _link_down(self, reason: str) -> None:
        self._perform(self._handle(lifecycle.LinkDead(reason)))

    async def _teardown(self) -> None:
        """Release everything this tunnel holds; safe to call at any point and more than once."""
        actions = self._handle(lifecycle.TearDown())
        if not actions:
            return
        for action in actions:
            if isinstance(action, lifecycle.CancelMove):
                if self._move_task is not None:
                    self._move_task.cancel()
                    await asyncio.gather(self._move_task, return_exceptions=True)
            elif isinstance(action, lifecycle.StopDatapath):
                self._stop_datapath(action.say_close)
            elif isinstance(action, lifecycle.CloseDtls):
                if self._dtls is not None and self._path is not None:
                    try:
                        await asyncio.wait_for(self._send_all(self._dtls.close()), 0.5)
                    except (TimeoutError, ConnectionError, OSError):
                        pass
            elif isinstance(action, lifecycle.StopPump):
                if self._pump_task is not None:
                    self._pump_task.cancel()
                    await asyncio.gather(self._pump_task, return_exceptions=True)
            elif isinstance(action, lifecycle.CloseIce):
                if self._ice is not None:
                    try:
                        await asyncio.wait_for(self._ice.close(), self.config.teardown_timeout)
                    except TimeoutError:
                        logger.warning("tunnel %s: ICE close timed out", self.info.tunnel_id)
            elif isinstance(action, lifecycle.CloseTap):
                await self._close_tap()
        self._perform(self._handle(lifecycle.TornDown()))

    def _stop_datapath(self, say_close: bool) -> None:
        if not self._datapath_running:
            return
        if say_close:
            self._datapath.send_control(ControlMessage(ControlOpcode.CLOSE, 0))
        if self._transit is not None and self._tap is not None and isinstance(self._datapath, TransitPort):
            self._transit.detach(self._tap.name, self._datapath)
            self._datapath.set_transit(None)
        self._datapath.stop()
        self._datapath_running = False

    async def _close_tap(self) -> None:
        """The TAP, made or still being made, goes."""
        if self._tap_task is not None and self._tap is None:
            self._tap_task.cancel()
            (made,) = await asyncio.gather(self._tap_task, return_exceptions=True)
            if not isinstance(made, BaseException):
                self._tap = made
        if self._tap is not None:
            await self._tap.close()

    # -- the lifecycle's adapter -------------------------------------------------------

    def _handle(self, event: Event) -> list[Action]:
        """Tell the lifecycle machine ``event``; the actions it returns are the caller's to perform."""
        old = self._life.state
        actions = self._life.handle(event)
        if self._life.state is not old:
            logger.debug("tunnel %s peer %032x %s -> %s", self.info.tunnel_id, self.peer, old.value, self._life.state.value)
        return actions

    def _perform(self, actions: list[Action]) -> None:
        """Perform the actions that take no waiting: stop, cancel the setup, report up or down."""
        for action in actions:
            if isinstance(action, lifecycle.Stop):
                self._stop.set()
                self._wake()
            elif isinstance(action, lifecycle.CancelSetup):
                if self._task is not None and not self._task.done():
                    self._task.cancel()
            elif isinstance(action, lifecycle.ReportUp):
                info = action.info
                logger.info("tunnel %s peer %032x up: %s path %s -> %s in %.3f s", info.tunnel_id, self.peer,
                            info.path.value if info.path else "?", info.local_candidate, info.remote_candidate,
                            info.setup_seconds)  # fmt: skip
                if not self._up.done():
                    self._up.set_result(info)
                self._on_event(TunnelUp(info))
            elif isinstance(action, lifecycle.ReportDown):
                info = action.info
                reason = info.reason or "closed"
                logger.info("tunnel %s peer %032x %s: %s", info.tunnel_id, self.peer, info.state.value, reason)
                if not self._up.done():
                    self._up.set_exception(SetupError(reason))
                    self._up.exception()  # retrieved here: nobody may be waiting
                self._on_event(TunnelDown(info))
            else:
                raise AssertionError(f"{action!r} is performed where it is returned")

    async def _send_all(self, datagrams: list[bytes]) -> None:
        assert self._path is not None
        for d in datagrams:
            await self._path.send(d)
