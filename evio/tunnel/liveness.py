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
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from evio.config.model import TunnelConfig
from evio.tunnel.record import HELLO_PEER_SEEN, ControlMessage, ControlOpcode


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

    def __post_init__(self) -> None:
        if self.keepalive_interval <= 0 or self.keepalive_interval > 25.0:
            raise ValueError("keepalive_interval must be positive and under NAT timeouts (25 s)")
        # A live but idle peer's keepalives are up to a tick late; two of them must fit the limit.
        if 2 * (self.keepalive_interval + self.tick_interval(LivenessState.UP)) > self.dead_after:
            raise ValueError("dead_after must allow two keepalive intervals (plus a tick each)")

    def tick_interval(self, state: LivenessState) -> float:
        """How often the owner should call ``tick`` in this state."""
        if state is LivenessState.ESTABLISHING:
            return self.hello_interval
        return self.keepalive_interval / 4

    @property
    def silence_limit(self) -> float:
        """Silence after which the peer is dead (see the module docstring)."""
        return self.dead_after - 2 * self.tick_interval(LivenessState.UP)


@dataclass(frozen=True)
class SendControl:
    opcode: ControlOpcode
    flags: int = 0


@dataclass(frozen=True)
class PeerAlive:
    pass


@dataclass(frozen=True)
class PeerDead:
    reason: DownReason


Action = SendControl | PeerAlive | PeerDead


class Liveness:
    def __init__(self, config: LivenessConfig, now: float) -> None:
        self.config = config
        self.state = LivenessState.ESTABLISHING
        self._started = now
        self._last_hello = float("-inf")
        self._rx_seen = 0
        self._rx_changed = now
        self._tx_seen = 0
        self._tx_changed = now

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
        return actions

    def tick(self, now: float, rx_records: int, tx_records: int) -> list[Action]:
        """Periodic check with the data path's authenticated-received and sent record counts."""
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
            if now - self._started >= self.config.establish_timeout:
                self.state = LivenessState.DOWN
                return [PeerDead(DownReason.NOT_AUTHENTICATED)]
            if now - self._last_hello >= self.config.hello_interval:
                self._last_hello = now
                actions.append(SendControl(ControlOpcode.HELLO))
            return actions
        if now - self._rx_changed >= self.config.silence_limit:
            self.state = LivenessState.DOWN
            return [PeerDead(DownReason.PEER_SILENT)]
        if now - self._tx_changed >= self.config.keepalive_interval:
            self._tx_changed = now
            actions.append(SendControl(ControlOpcode.KEEPALIVE))
        return actions

    def _heard(self, now: float) -> list[Action]:
        self._rx_changed = now
        if self.state is LivenessState.ESTABLISHING:
            self.state = LivenessState.UP
            return [PeerAlive()]
        return []
