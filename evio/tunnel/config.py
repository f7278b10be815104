"""Tunnel settings, and their derivation from the daemon's overlay config."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from evio.config.model import Cipher, LimitsConfig, TunnelConfig, TunnelDatapath
from evio.tunnel.datapath.keys import RekeyPolicy
from evio.tunnel.datapath.mtu import tap_mtu
from evio.tunnel.liveness import LivenessConfig, keepalive_for
from evio.tunnel.path.ice import IceConfig
from evio.tunnel.path.trust import TrustAnchor
from evio.tunnel.path.turn_credentials import TurnRelay

if TYPE_CHECKING:
    from evio.config.model import OverlayConfig

IFNAME_MAX = 15
"""Linux interface names have at most 15 characters."""
MIN_TAP_HASH = 8
"""Hex digits of the peer id's hash a TAP name keeps at least (32 bits)."""


def tap_name(prefix: str, peer: int) -> str:
    """The TAP of the tunnel to `peer`: `prefix` and a hash of the whole peer id, 15 characters at most.

    A hash and not the id's leading digits: ids that share them (hand-written
    ones such as 00..01 and 00..02) still get different names. The same peer
    always gets the same name, and every name starts with `prefix`, which is
    how a daemon finds the TAP ports an earlier run left on its bridge.
    """
    room = IFNAME_MAX - len(prefix)
    if room < MIN_TAP_HASH:
        raise ValueError(f"TAP prefix {prefix!r} is too long: at most {IFNAME_MAX - MIN_TAP_HASH} characters")
    digest = hashlib.blake2b(peer.to_bytes(16, "big"), digest_size=8, person=b"evio-tap").hexdigest()
    return prefix + digest[:room]


@dataclass(frozen=True)
class TunnelSettings:
    ice: IceConfig = field(default_factory=IceConfig)
    ciphers: tuple[Cipher, ...] = (Cipher.AES_256_GCM, Cipher.CHACHA20_POLY1305)
    """Accepted ciphers, preferred first (AES-GCM: this kind of CPU has AES-NI)."""
    underlay_mtu: int = 1500
    probe_path_mtu: bool = TunnelConfig.path_mtu
    """Probe each tunnel's path MTU and answer frames over it with ICMP (evio.tunnel.pmtu); False: assume
    ``underlay_mtu`` end to end."""
    liveness: LivenessConfig = field(default_factory=LivenessConfig)
    rekey: RekeyPolicy = field(default_factory=RekeyPolicy)
    replay_window: int = 2048
    signaling_timeout: float = 10.0
    """For the offer's answer: the peer gathers (a TURN allocation included) before it answers, which
    took over 5 s for thousands of offers in a 64-node lab on two cores; a late answer is wasted work."""
    dtls_timeout: float = 3.0
    teardown_timeout: float = 2.0
    tap_prefix: str = "evt"
    """TAP names are this prefix and a hash of the peer's node id (see `tap_name`)."""
    # The limits' defaults live in the config model (LimitsConfig), as every default does.
    max_tunnels: int = LimitsConfig.max_tunnels
    """Tunnels at once; an offer for one more is refused before any resource is allocated."""
    max_pending_offers: int = LimitsConfig.max_pending_offers
    """Offers being answered at once (each gathers sockets and may allocate on TURN)."""
    offers_per_s: float = LimitsConfig.offers_per_s
    """Offers one peer may send, sustained, after a burst of `offer_burst`."""
    offer_burst: int = LimitsConfig.offer_burst
    trust: TrustAnchor | None = None
    """The overlay's trust anchor; None: the fingerprint from signaling is the only check (labs)."""
    offload: bool = TunnelConfig.offload
    """TAP offloads and UDP GRO where the kernel has them (tunnel.offload); False: one frame per read/write."""
    tso: bool = TunnelConfig.tso
    """With offload, TSO on the TAP too: the daemon segments super-frames (tunnel.tso)."""
    datapath: TunnelDatapath = TunnelConfig.datapath
    """Which data path code runs (tunnel.datapath): native, python, or auto (native where installed)."""
    transit: bool = TunnelConfig.transit
    """Transit fast path, tunnel to tunnel past the bridge, where the SDN controller's flows say (tunnel.transit)."""

    def __post_init__(self) -> None:
        if len(self.tap_prefix) > IFNAME_MAX - MIN_TAP_HASH:
            raise ValueError(f"tap_prefix {self.tap_prefix!r}: at most {IFNAME_MAX - MIN_TAP_HASH} characters")

    def stretched(self, patience: float) -> TunnelSettings:
        """These settings for one setup on a loaded host: its ICE and DTLS deadlines times `patience`."""
        if patience <= 1.0:
            return self
        return replace(self, ice=replace(self.ice, patience=patience), dtls_timeout=self.dtls_timeout * patience)

    @property
    def tap_mtu(self) -> int:
        """Sized for the larger header of the families in use: a node with IPv6 paths leaves room for
        the IPv6 header on all of them (20 bytes more than IPv4), so no frame is too big for its v6 paths."""
        return tap_mtu(self.underlay_mtu, ipv6_underlay=self.ice.use_ipv6)

    def tap_name(self, peer: int) -> str:
        return tap_name(self.tap_prefix, peer)


def from_overlay_config(overlay: OverlayConfig, host_ipv6: bool = False) -> TunnelSettings:
    """The tunnel settings of one overlay of the daemon's config file.

    ``host_ipv6``: the host has an IPv6 address a tunnel could use (evio.node.plan asks the host); IPv6
    is used where the overlay's ``nat_traversal.underlay_families`` allows it and the host has it."""
    from evio.config.model import split_host_port

    nat = overlay.nat_traversal
    turn = []
    for server in nat.turn:
        host, port = server.host_port
        turn.append(TurnRelay(host, port, server.username, server.password, server.rest_secret, float(server.ttl),
                              server.transport, server.tls_port, str(server.ca_file) if server.ca_file else None))
    ice = IceConfig(
        stun=tuple(split_host_port(s) for s in nat.stun),
        turn=tuple(turn),
        direct_timeout=nat.direct_timeout,
        use_ipv4="ipv4" in nat.underlay_families,
        use_ipv6="ipv6" in nat.underlay_families and host_ipv6,
        deny_candidates=nat.deny_candidates,
        exclude_networks=(
            (str(overlay.bridge.address.network),) if overlay.bridge.address
            else (str(overlay.bridge.address_pool),) if overlay.bridge.address_pool else ()
        ),
    )
    preferred = Cipher(overlay.tunnel.cipher)
    dead_after = overlay.tunnel.dead_after
    keepalive = keepalive_for(dead_after, overlay.tunnel.keepalive)
    limits = overlay.limits
    return TunnelSettings(
        ice=ice,
        ciphers=(preferred, *(c for c in Cipher if c is not preferred)),
        liveness=LivenessConfig(keepalive_interval=keepalive, dead_after=dead_after),
        max_tunnels=limits.max_tunnels,
        max_pending_offers=limits.max_pending_offers,
        offers_per_s=limits.offers_per_s,
        offer_burst=limits.offer_burst,
        offload=overlay.tunnel.offload,
        tso=overlay.tunnel.tso,
        datapath=overlay.tunnel.datapath,
        transit=overlay.tunnel.transit,
        probe_path_mtu=overlay.tunnel.path_mtu,
    )
