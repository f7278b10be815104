"""Link liveness: when a tunnel is up, when to say hello or keep alive, when the peer is dead.

A pure state machine. The session feeds it the time, the data path's packet
counters and the control messages received, and executes the actions it
returns. It never reads the clock itself.

- ESTABLISHING: keys are in place. Send HELLO every ``hello_interval`` until
  any authenticated record arrives; then the link is UP. This is the only
  proof that the peer completed DTLS with the fingerprint we pinned (a DTLS
  side whose check failed never sends an authenticated record).
- UP: send KEEPALIVE when nothing was sent for ``keepalive_interval`` (well
  under NAT binding timeouts); declare the peer dead after ``silence_limit``
  without a record. Records and silence are only seen at ticks, each up to
  one tick late, so the limit is ``dead_after`` minus two ticks: the report
  comes at most ``dead_after`` after the last record.
- A HELLO without PEER_SEEN is answered at once with HELLO + PEER_SEEN, so
  the later side comes up one round trip after the earlier one.
- Round-trip time: while UP, an ECHO_REQUEST goes out every
  ``keepalive_interval`` (it counts as sent, so it stands in for the idle
  keepalive) and the peer answers each at once with ECHO_REPLY. ``probe``
  sends one on demand (`evio ping`). Tokens are sequence numbers; a reply
  whose token we did not send, or sent too long ago, is ignored.
- One exchange per interval, not two: each datagram received is a wake-up
  of the receiving node's event loop, and with both ends asking, an idle
  tunnel cost each end two of them per interval. So one end leads (the
  owner says which: the tunnel's ICE-controlling side) and asks every
  ``keepalive_interval`` as above; the other, while the leader's requests keep
  coming (one within an interval and two ticks), only answers them, sends no
  keepalive of its own (its replies are its traffic, at the leader's pace),
  and asks once every ``rtt_refresh`` (four intervals) to keep its RTT fresh
  (and every interval until it has one).
  Each end still hears the other every interval. If the leader's requests
  stop (lost, or the peer is gone), the follower asks again at its next tick;
  and either end that heard nothing for an interval and a tick asks at every
  tick until it hears something, so losses do not add up to the silence limit.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from evio.config.model import TunnelConfig
from evio.tunnel.datapath.record import HELLO_PEER_SEEN, ControlMessage, ControlOpcode

MAX_PENDING_ECHOES = 32  # unanswered echo requests remembered; older ones are forgotten
RTT_GAIN = 0.125  # smoothing of the RTT estimate (RFC 6298's alpha)


class LivenessState(enum.Enum):
    ESTABLISHING = "establishing"
    UP = "up"
    DOWN = "down"


class DownReason(enum.Enum):
    NOT_AUTHENTICATED = "not-authenticated"
    PEER_SILENT = "peer-silent"
    PEER_CLOSED = "peer-closed"


def keepalive_for(dead_after: float, wanted: float = TunnelConfig.keepalive) -> float:
    """The keepalive interval to use: detecting a dead peer within `dead_after` needs them a few times faster."""
    return min(wanted, dead_after / 3)


@dataclass(frozen=True)
class LivenessConfig:
    hello_interval: float = 0.05
    # The daemon's values come from the config (evio.tunnel.config.from_overlay_config); these
    # defaults are the config model's, so a component built without a config behaves the same.
    keepalive_interval: float = keepalive_for(TunnelConfig.dead_after)
    dead_after: float = TunnelConfig.dead_after
    establish_timeout: float = 5.0
    probe_interval: float = 0.05  # echo requests while doubting: several fit in the shortest deadline
    probe_floor: float = 0.25  # a doubted peer gets at least this long to answer ...
    probe_rtt_factor: float = 4.0  # ... or this many RTTs if longer ...
    probe_timeout: float = 1.0  # ... but never more than this (nor, without an RTT, less)

    def __post_init__(self) -> None:
        if self.keepalive_interval <= 0 or self.keepalive_interval > 25.0:
            raise ValueError("keepalive_interval must be positive and under NAT timeouts (25 s)")
        # A live but idle peer's keepalives are up to a tick late; two of them must fit the limit.
        if 2 * (self.keepalive_interval + self.tick_interval(LivenessState.UP)) > self.dead_after:
            raise ValueError("dead_after must allow two keepalive intervals (plus a tick each)")
        if not 0 < self.probe_interval < self.probe_floor <= self.probe_timeout:
            raise ValueError("probe_interval must be positive and shorter than probe_floor, at most probe_timeout")
        if self.probe_rtt_factor < 1:
            raise ValueError("probe_rtt_factor must be at least 1 (a live peer answers in one RTT)")

    def tick_interval(self, state: LivenessState) -> float:
        """How often the owner should call ``tick`` in this state."""
        if state is LivenessState.ESTABLISHING:
            return self.hello_interval
        return self.keepalive_interval / 4

    @property
    def rtt_refresh(self) -> float:
        """While the peer's echo requests keep the link heard, ours go out this often (for the RTT)."""
        return 4 * self.keepalive_interval

    @property
    def silence_limit(self) -> float:
        """Silence after which the peer is dead (see the module docstring)."""
        return self.dead_after - 2 * self.tick_interval(LivenessState.UP)


@dataclass(frozen=True)
class SendControl:
    opcode: ControlOpcode
    flags: int = 0
    token: int = 0


@dataclass(frozen=True)
class PeerAlive:
    pass


@dataclass(frozen=True)
class PeerDead:
    reason: DownReason


@dataclass(frozen=True)
class EchoAnswered:
    """The peer answered the echo request `token` after `rtt` seconds."""

    token: int
    rtt: float


@dataclass(frozen=True)
class RttStats:
    last: float | None = None
    smoothed: float | None = None
    minimum: float | None = None
    samples: int = 0
    last_at: float | None = None  # when the last sample was taken (the owner's clock)


Action = SendControl | PeerAlive | PeerDead | EchoAnswered


class Liveness:
    def __init__(self, config: LivenessConfig, now: float, leads: bool = True) -> None:
        self.config = config
        self.leads = leads  # asks every keepalive interval; else follows the peer's requests (module docstring)
        self.state = LivenessState.ESTABLISHING
        self._started = now
        self._last_hello = float("-inf")
        self._rx_seen = 0
        self._rx_changed = now
        self._tx_seen = 0
        self._tx_changed = now
        self._next_token = 1
        self._pending_echoes: dict[int, float] = {}  # token -> when sent
        self._last_echo = now
        self._peer_echo = float("-inf")  # when the peer's last echo request arrived
        self.rtt = RttStats()
        self._probe_since: float | None = None  # when the running probe began (its echoes were sent since)
        self._probe_heard = now  # when its deadline counts from: its start, or the last tick that counted records
        self._probe_rx = 0  # the received-record count then
        self._probe_deadline = config.probe_timeout  # silence that ends the running probe
        self._last_probe = float("-inf")

    @property
    def probing(self) -> bool:
        return self._probe_since is not None

    def tick_interval(self) -> float:
        """How often the owner should call ``tick`` now (faster while a probe runs)."""
        if self._probe_since is not None:
            return min(self.config.probe_interval, self.config.tick_interval(self.state))
        return self.config.tick_interval(self.state)

    def probe_deadline(self) -> float:
        """How long a doubted peer has to answer: a few RTTs, within [probe_floor, probe_timeout]."""
        config = self.config
        if self.rtt.smoothed is None or self.rtt.last is None:
            return config.probe_timeout
        rtt = max(self.rtt.smoothed, self.rtt.last)
        return min(config.probe_timeout, max(config.probe_floor, config.probe_rtt_factor * rtt))

    def doubt(self, now: float, rx_records: int, rtt: float | None = None) -> list[Action]:
        """Doubt the peer: it must answer within `probe_deadline` (`rx_records`: the count so far); `rtt`: the
        path's round trip as measured otherwise, for the deadline while no echo has measured it yet.

        Only the reply to one of the doubt's echo requests answers it; other records counted meanwhile only
        restart the deadline (one may have been in flight as the peer vanished; decision 0012)."""
        if self.state is not LivenessState.UP or self._probe_since is not None:
            return []
        self._probe_since = self._probe_heard = self._last_probe = now
        self._probe_rx = rx_records
        self._probe_deadline = self.probe_deadline()
        if rtt is not None and (self.rtt.smoothed is None or self.rtt.last is None):
            config = self.config
            self._probe_deadline = min(config.probe_timeout, max(config.probe_floor, config.probe_rtt_factor * rtt))
        return [SendControl(ControlOpcode.ECHO_REQUEST, 0, self._echo_token(now))]

    def revive(self, now: float) -> None:
        """The data path moved to another path after this one went silent (a standby relay, decision 0057):
        UP again, the silence counted from ``now``; a doubt on the new path is the owner's to start."""
        if self.state is LivenessState.DOWN:
            self.state = LivenessState.UP
        self._rx_changed = now
        self._probe_since = None

    def start(self, now: float) -> list[Action]:
        """The first HELLO, sent as soon as keys are in place."""
        self._last_hello = now
        return [SendControl(ControlOpcode.HELLO)]

    def on_control(self, now: float, message: ControlMessage) -> list[Action]:
        """An authenticated control record arrived."""
        if self.state is LivenessState.DOWN:
            return []
        actions: list[Action] = self._heard(now)
        if message.opcode is ControlOpcode.HELLO and not message.flags & HELLO_PEER_SEEN:
            actions.append(SendControl(ControlOpcode.HELLO, HELLO_PEER_SEEN))
        elif message.opcode is ControlOpcode.CLOSE:
            self.state = LivenessState.DOWN
            actions.append(PeerDead(DownReason.PEER_CLOSED))
        elif message.opcode is ControlOpcode.ECHO_REQUEST:
            self._peer_echo = now
            actions.append(SendControl(ControlOpcode.ECHO_REPLY, 0, message.token))
        elif message.opcode is ControlOpcode.PMTU_PROBE:
            actions.append(SendControl(ControlOpcode.PMTU_ACK, 0, message.token))  # evio.tunnel.pmtu
        elif message.opcode is ControlOpcode.ECHO_REPLY:
            sent = self._pending_echoes.pop(message.token, None)
            if sent is not None:
                if self._probe_since is not None and sent >= self._probe_since:
                    self._probe_since = None  # the doubt's own question answered: the peer is there now
                rtt = max(now - sent, 0.0)
                self._sample(now, rtt)
                actions.append(EchoAnswered(message.token, rtt))
        return actions

    def probe(self, now: float) -> tuple[int, list[Action]]:
        """An echo request now (UP only); the reply comes back as EchoAnswered with the token returned."""
        if self.state is not LivenessState.UP:
            return 0, []
        token = self._echo_token(now)
        return token, [SendControl(ControlOpcode.ECHO_REQUEST, 0, token)]

    def _echo_token(self, now: float) -> int:
        token = self._next_token
        self._next_token = (self._next_token + 1) & 0xFFFF_FFFF_FFFF_FFFF or 1
        self._pending_echoes[token] = now
        while len(self._pending_echoes) > MAX_PENDING_ECHOES:
            del self._pending_echoes[next(iter(self._pending_echoes))]
        self._last_echo = now
        return token

    def _sample(self, now: float, rtt: float) -> None:
        old = self.rtt
        smoothed = rtt if old.smoothed is None else (1 - RTT_GAIN) * old.smoothed + RTT_GAIN * rtt
        minimum = rtt if old.minimum is None else min(old.minimum, rtt)
        self.rtt = RttStats(rtt, smoothed, minimum, old.samples + 1, now)

    def tick(self, now: float, rx_records: int, tx_records: int, patience: float = 1.0) -> list[Action]:
        """Periodic check with the data path's authenticated-received and sent record counts.

        `patience` (>= 1, `evio.tunnel.path.deadlines`) stretches the silence, doubt and establishment
        limits while this host's event loops run late: a starved peer's keepalives and echo replies
        are late too, and killing its working tunnel only adds a setup to the load.
        """
        patience = max(1.0, patience)
        if self.state is LivenessState.DOWN:
            return []
        actions: list[Action] = []
        if rx_records != self._rx_seen:
            self._rx_seen = rx_records
            actions += self._heard(now)
        if tx_records != self._tx_seen:
            self._tx_seen = tx_records
            self._tx_changed = now
        if self.state is LivenessState.ESTABLISHING:
            if now - self._started >= self.config.establish_timeout * patience:
                self.state = LivenessState.DOWN
                return [PeerDead(DownReason.NOT_AUTHENTICATED)]
            if now - self._last_hello >= self.config.hello_interval:
                self._last_hello = now
                actions.append(SendControl(ControlOpcode.HELLO))
            return actions
        if self._probe_since is not None:
            # Records counted since only say the peer was there when it sent them: one may have been in flight
            # as it vanished. They restart the deadline; only the answer to the probe ends it (on_control).
            if rx_records > self._probe_rx:
                self._probe_rx, self._probe_heard = rx_records, now
            elif now - self._probe_heard >= self._probe_deadline * patience:
                self.state = LivenessState.DOWN
                return [PeerDead(DownReason.PEER_SILENT)]
            if now - self._last_probe >= self.config.probe_interval:
                self._last_probe = now
                actions.append(SendControl(ControlOpcode.ECHO_REQUEST, 0, self._echo_token(now)))
        if now - self._rx_changed >= self.config.silence_limit * patience:
            self.state = LivenessState.DOWN
            return [PeerDead(DownReason.PEER_SILENT)]
        follows = self._follows(now)
        # A follower asks for its own RTT every rtt_refresh, and every interval until it has one (a
        # doubt's deadline is a few RTTs: without one it is the longest, probe_timeout).
        rtt_fresh = self.rtt.samples > 0 and now - self._last_echo < self.config.rtt_refresh
        # Due a little early counts: ticks run a few ms late, and an echo due on every fourth tick must
        # not slip to the fifth every other time (the follower would take the gap for silence).
        tick = self.config.tick_interval(LivenessState.UP)
        due = now - self._last_echo >= self.config.keepalive_interval - tick / 4
        # Nothing heard for an interval and a tick: an exchange was lost (or the peer is gone). Ask at
        # every tick until something arrives, so a lost datagram or two cannot add up to the silence
        # limit now that one exchange, not two, carries an idle tunnel's liveness. Stretched with the
        # loop's lag as the limit is: a starved host's peers should not be asked more often.
        silent = now - self._rx_changed >= (self.config.keepalive_interval + tick) * patience
        if silent or (due and not (follows and rtt_fresh)):
            # The echo is sent whatever the traffic (RTT stays fresh) and is itself a keepalive.
            self._tx_changed = now
            actions.append(SendControl(ControlOpcode.ECHO_REQUEST, 0, self._echo_token(now)))
        elif now - self._tx_changed >= self.config.keepalive_interval and not follows:
            self._tx_changed = now
            actions.append(SendControl(ControlOpcode.KEEPALIVE))
        return actions

    def _follows(self, now: float) -> bool:
        """Whether this end only answers now: it does not lead, and the leader's last echo request
        came within an interval and two ticks (its pace; a tick late at most, and this end's own
        tick a little late too)."""
        config = self.config
        return not self.leads and now - self._peer_echo < config.keepalive_interval + 2 * config.tick_interval(LivenessState.UP)

    def _heard(self, now: float) -> list[Action]:
        self._rx_changed = now
        if self.state is LivenessState.ESTABLISHING:
            self.state = LivenessState.UP
            self._last_echo = now
            return [PeerAlive()]
        return []
