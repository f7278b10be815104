"""Tunnel settings, and their derivation from the daemon's overlay config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evio.tunnel.ice import IceConfig, TurnServer
from evio.tunnel.keys import Cipher, RekeyPolicy
from evio.tunnel.liveness import LivenessConfig
from evio.tunnel.mtu import tap_mtu

if TYPE_CHECKING:
    from evio.config.model import OverlayConfig


@dataclass(frozen=True)
class TunnelConfig:
    ice: IceConfig = field(default_factory=IceConfig)
    ciphers: tuple[Cipher, ...] = (Cipher.AES_256_GCM, Cipher.CHACHA20_POLY1305)
    """Accepted ciphers, preferred first (AES-GCM: this kind of CPU has AES-NI)."""
    underlay_mtu: int = 1500
    liveness: LivenessConfig = field(default_factory=LivenessConfig)
    rekey: RekeyPolicy = field(default_factory=RekeyPolicy)
    replay_window: int = 2048
    signaling_timeout: float = 5.0
    dtls_timeout: float = 3.0
    teardown_timeout: float = 2.0
    tap_prefix: str = "evt"
    """TAP names are this prefix and the start of the peer's node id (15 characters at most)."""

    @property
    def tap_mtu(self) -> int:
        return tap_mtu(self.underlay_mtu, ipv6_underlay=self.ice.use_ipv6)

    def tap_name(self, peer: int) -> str:
        return (self.tap_prefix + f"{peer:032x}")[:15]


def from_overlay_config(overlay: OverlayConfig) -> TunnelConfig:
    """The tunnel settings of one overlay of the daemon's config file."""
    from evio.config.model import split_host_port

    nat = overlay.nat_traversal
    turn = []
    for server in nat.turn:
        host, port = server.host_port
        turn.append(TurnServer(host, port, server.username, server.password, server.rest_secret, float(server.ttl)))
    ice = IceConfig(
        stun=tuple(split_host_port(s) for s in nat.stun),
        turn=tuple(turn),
        direct_timeout=nat.direct_timeout,
        exclude_networks=(str(overlay.bridge.address.network),) if overlay.bridge.address else (),
    )
    preferred = Cipher(overlay.tunnel.cipher)
    dead_after = overlay.tunnel.dead_after
    # Detecting a dead peer within dead_after needs keepalives a few times faster.
    keepalive = min(overlay.tunnel.keepalive, dead_after / 3)
    return TunnelConfig(
        ice=ice,
        ciphers=(preferred, *(c for c in Cipher if c is not preferred)),
        liveness=LivenessConfig(keepalive_interval=keepalive, dead_after=dead_after),
    )
