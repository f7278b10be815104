"""Typed, immutable daemon configuration with every default applied.

The loader (evio/config/loader.py) builds these from a checked JSON document;
tests and the lab may also build them directly. Defaults here must equal the
`default` values in schema.json (a unit test holds them together). Durations
are seconds, paths are absolute once loaded.
"""

from __future__ import annotations

import enum
import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from evio.config.address_pool import derive_address

LogLevel = Literal["debug", "info", "warning", "error", "critical"]
LogDestination = Literal["stderr", "journald", "file"]
TlsMode = Literal["starttls", "direct"]
Datapath = Literal["auto", "system", "netdev"]
Switching = Literal["bounded-flood", "stp"]
TunnelDatapath = Literal["auto", "native", "python"]
TurnTransport = Literal["auto", "udp", "tcp", "tls"]
UnderlayFamily = Literal["ipv4", "ipv6"]
SWITCHING_MODES: tuple[Switching, ...] = ("bounded-flood", "stp")
InterfaceAddress = ipaddress.IPv4Interface | ipaddress.IPv6Interface
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_STATE_DIR = Path("/var/lib/evio")
BRIDGE_NAME_PREFIX = "evbr-"
MAX_INTERFACE_NAME = 15  # Linux IFNAMSIZ - 1
UNDERLAY_MTU = 1500
"""The underlay MTU the tunnels are sized for (no config key sets another)."""
TUNNEL_MTU = 1428
"""The tunnels' MTU on that underlay (IPv4, relayed or not): evio.tunnel.datapath.mtu.tap_mtu(UNDERLAY_MTU), which
this package cannot import; tests/unit/config/test_config_build.py holds the two equal. The bridge's default MTU,
and its largest: the bridge and the TAPs are one Ethernet segment, and a frame bigger than a tunnel carries
would be dropped silently at the TAP."""
IPV6_MIN_MTU = 1280  # RFC 8200, 5

_HOST_PORT = re.compile(r"\[(?P<v6>[^\]]+)\]:(?P<port>\d+)|(?P<host>[^:\[\]]+):(?P<port2>\d+)")


class LogForm(enum.StrEnum):
    """Which logarithm Symphony's eq. (1) and eq. (2) use (docs/design.md, "Symphony link selection")."""

    LN = "ln"  # as the paper writes it
    LOG10 = "log10"  # as the original EdgeVPN code computes it

    def log(self, n: float) -> float:
        return math.log(n) if self is LogForm.LN else math.log10(n)


class Cipher(enum.StrEnum):
    """AEAD ciphers a tunnel can seal frames with."""

    AES_256_GCM = "aes-256-gcm"
    CHACHA20_POLY1305 = "chacha20-poly1305"


def default_long_distance(n: int) -> int:
    """k = floor(log2 n) long-distance links in an overlay of n nodes; 0 for a ring of one (docs/design.md, "Symphony link selection")."""
    return max(n, 1).bit_length() - 1  # floor(log2 n) without floats


def split_host_port(text: str) -> tuple[str, int]:
    """Split "host:port" or "[v6]:port" (the schema's hostPort) into its parts."""
    match = _HOST_PORT.fullmatch(text)
    if match is None:
        raise ValueError(f"not host:port: {text!r}")
    host = match["v6"] or match["host"]
    port = int(match["port"] or match["port2"])
    if not 1 <= port <= 65535:
        raise ValueError(f"port out of range in {text!r}")
    return host, port


def reserved_tap_name(name: str) -> bool:
    """Whether `name` looks like one of evio's tunnel TAPs ("evt..." in the first overlay, "ev1...", "ev2..." in
    the next: evio.node.plan.tap_prefix), which a starting daemon takes off its bridges as stale."""
    return name.startswith("evt") or (name.startswith("ev") and name[2:3].isdigit())


def bridge_mtu_problem(mtu: int, ipv6: bool) -> str | None:
    """Why a bridge cannot have `mtu` (`ipv6`: it has an IPv6 address or pool), or None: the one MTU rule."""
    if mtu > TUNNEL_MTU:
        return (f"{mtu} is above the tunnels' MTU {TUNNEL_MTU} (underlay MTU {UNDERLAY_MTU} less encapsulation); "
                f"leave it out or set at most {TUNNEL_MTU}")
    if ipv6 and mtu < IPV6_MIN_MTU:
        return f"{mtu} is below {IPV6_MIN_MTU}, the minimum MTU of IPv6 (bridge has an IPv6 address)"
    return None


def default_bridge_name(overlay_id: str) -> str:
    """The bridge name used when the config gives none (may be too long; the loader checks)."""
    return BRIDGE_NAME_PREFIX + overlay_id


@dataclass(frozen=True)
class NodeConfig:
    id: int | None = None  # None: generated once and kept in state_dir (see state_dir.resolve_node_id)
    state_dir: Path = DEFAULT_STATE_DIR


@dataclass(frozen=True)
class LoggingConfig:
    level: LogLevel = "info"
    destination: LogDestination = "stderr"
    file: Path | None = None


@dataclass(frozen=True)
class MetricsConfig:
    enabled: bool = False
    listen: str = "127.0.0.1:9470"  # IP:port or [IPv6]:port

    @property
    def host_port(self) -> tuple[str, int]:
        return split_host_port(self.listen)


@dataclass(frozen=True)
class SignalConfig:
    jid: str
    server: str = ""  # empty: the domain of jid
    port: int = 5222
    password: str | None = field(default=None, repr=False)
    password_file: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    ca_file: Path | None = None  # None: the system trust store
    tls: TlsMode = "starttls"
    insecure_plaintext: bool = False
    servers: tuple[str, ...] = ()  # host:port each, in the order tried (instead of server and port; decision 0051)

    def __post_init__(self) -> None:
        if self.servers:  # what reads one server (status, netcheck) sees the first
            host, port = split_host_port(self.servers[0])
            object.__setattr__(self, "server", host)
            object.__setattr__(self, "port", port)
        if not self.server:
            object.__setattr__(self, "server", self.domain)

    @property
    def domain(self) -> str:
        return self.jid.partition("@")[2]

    @property
    def endpoints(self) -> tuple[tuple[str, int], ...]:
        """The servers to sign in to, in order: `servers`, else the one `server` and `port`."""
        if self.servers:
            return tuple(split_host_port(server) for server in self.servers)
        return ((self.server, self.port),)


@dataclass(frozen=True)
class TurnServer:
    server: str  # host:port
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    password_file: Path | None = None  # first line: the password (instead of `password`)
    rest_secret: str | None = field(default=None, repr=False)
    ttl: int = 86400  # lifetime of REST credentials, seconds
    # auto: UDP, and where UDP gets no answer TCP on the same port, then TLS on tls_port (decision 0049)
    transport: TurnTransport = "auto"
    tls_port: int = 5349
    ca_file: Path | None = None  # verifies the server's TLS certificate; None: the system trust store

    @property
    def host_port(self) -> tuple[str, int]:
        return split_host_port(self.server)


DEFAULT_DENY_CANDIDATES: tuple[str, ...] = (
    "169.254.0.0/16",  # link-local, the cloud metadata services' 169.254.169.254 and 169.254.170.2 among them
    "fe80::/10",
    "100.100.100.200/32",  # Alibaba Cloud's metadata service
    "fd00:ec2::254/128",  # AWS's metadata service over IPv6
)
"""nat_traversal.deny_candidates when not set (issue 21, M3)."""


@dataclass(frozen=True)
class NatTraversalConfig:
    stun: tuple[str, ...] = ()  # host:port each
    turn: tuple[TurnServer, ...] = ()
    direct_timeout: float = 1.0
    deny_candidates: tuple[str, ...] = DEFAULT_DENY_CANDIDATES
    """Networks a peer's ICE candidates may not point at, besides those never tried (loopback,
    unspecified, link-local, multicast, broadcast, this node's own addresses, the overlay's subnet)."""
    underlay_families: tuple[UnderlayFamily, ...] = ("ipv4", "ipv6")
    """The address families tunnels may use underneath (candidates gathered, signalled and tried); each
    only where the host has an address of it (docs/decisions/0048-ipv6-underlays.md)."""


@dataclass(frozen=True)
class OnDemandConfig:
    enabled: bool = True
    max_links: int = 4
    threshold_bytes_per_s: float = 1_000_000.0
    idle_timeout: float = 60.0


@dataclass(frozen=True)
class TopologyConfig:
    successors: int = 2
    long_distance: int | None = None  # None: floor(log2(n))
    log_form: LogForm = LogForm.LN
    max_incoming_long_distance: int | None = None  # None: twice the long-distance links created (Symphony's 2k)
    max_incoming_successors: int | None = None  # None: 2 * successors + 2
    max_incoming_on_demand: int = 8
    on_demand: OnDemandConfig = field(default_factory=OnDemandConfig)

    def long_distance_for(self, overlay_size: int) -> int:
        """k for an overlay of `overlay_size` nodes (self included)."""
        if self.long_distance is not None:
            return self.long_distance
        return default_long_distance(overlay_size)

    def incoming_long_distance_cap(self, overlay_size: int) -> int:
        """Most links a node accepts as peers' long-distance links: 2k unless configured.

        At k, when every node wants k, demand equals supply: the last free
        slots are found only by chance and the overlay keeps asking (the
        simulator at n = 10^4: 121 links still unplaced and 86 809 refusals
        after 100 rounds). Symphony's own bound is 2k: the same n settles in 3
        rounds with 11 refusals; the mean degree is unchanged, since each node
        still creates k (docs/design.md, "Link negotiation").
        """
        if self.max_incoming_long_distance is not None:
            return self.max_incoming_long_distance
        return 2 * self.long_distance_for(overlay_size)

    def incoming_successor_cap(self) -> int:
        """Predecessors that may hold us as a successor: s of them in a stable ring, a few more while it moves."""
        if self.max_incoming_successors is not None:
            return self.max_incoming_successors
        return 2 * self.successors + 2


@dataclass(frozen=True)
class LimitsConfig:
    """Caps that keep one member (or a few) from exhausting this node: every peer is untrusted."""

    max_tunnels: int = 64  # tunnels of any type in this overlay; link requests beyond it are refused
    max_pending_offers: int = 8  # tunnel offers being answered at once; more are refused before any socket
    link_requests_per_s: float = 1.0  # overlay.link requests from one peer, sustained ...
    link_request_burst: int = 10  # ... after a burst of this many
    offers_per_s: float = 1.0  # tunnel offers from one peer, sustained ...
    offer_burst: int = 5  # ... after a burst of this many


@dataclass(frozen=True)
class BridgeConfig:
    name: str
    address: InterfaceAddress | None = None
    address_pool: IPNetwork | None = None  # instead of address: derived from the node id (config/address_pool.py)
    mtu: int | None = None  # None: the tunnels' MTU (TUNNEL_MTU); never above it (bridge_mtu_problem)
    datapath: Datapath = "auto"
    flow_idle_timeout: int = 30
    # bounded-flood: the SDN controller's flows (the paper's design); stp: Open vSwitch's own RSTP and
    # MAC learning over the same tunnels, no controller (the paper's comparison point, E9).
    switching: Switching = "bounded-flood"

    def __post_init__(self) -> None:
        # The loader reports the same rule with the field's JSON path; this holds configs built in code.
        ipv6 = any(net is not None and net.version == 6 for net in (self.address, self.address_pool))
        if self.mtu is not None and (why := bridge_mtu_problem(self.mtu, ipv6)) is not None:
            raise ValueError(f"bridge {self.name} mtu: {why}")

    @property
    def effective_mtu(self) -> int:
        """The MTU the bridge gets: the configured one, else the tunnels'."""
        return TUNNEL_MTU if self.mtu is None else self.mtu

    def address_for(self, node_id: int) -> InterfaceAddress | None:
        """The bridge's address on node `node_id`: the configured one, or the one derived from the pool."""
        if self.address is not None or self.address_pool is None:
            return self.address
        return derive_address(self.address_pool, node_id)


@dataclass(frozen=True)
class TunnelConfig:
    cipher: Cipher = Cipher.AES_256_GCM
    keepalive: float = 1.5  # the tunnel uses min(keepalive, dead_after / 3)
    dead_after: float = 5.0
    offload: bool = True  # TAP offloads (vnet header, GRO) where the kernel has them; false: one frame per read/write
    tso: bool = True  # with offload: the TAP hands over unsegmented TCP, cut into records by the daemon (0053)
    # native: the per-frame loops in Rust (evio_native, built by scripts/bootstrap with cargo); python:
    # FdDatapath's own; auto: native where it is installed.
    datapath: TunnelDatapath = "auto"
    transit: bool = True  # frames only passing through go tunnel to tunnel where the controller's flow says so
    path_mtu: bool = True  # probe each tunnel's path MTU; frames over it answered with ICMP (evio.tunnel.pmtu)


@dataclass(frozen=True)
class TrustConfig:
    """An overlay's trust anchor and this node's certificate issued under it (evio.tunnel.path.trust)."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    # Link requests and tunnel offers to a node we are not linked to go along the ring, over our tunnels,
    # signed, instead of through the server, once we have links (decision 0064; on by default since its amendment).
    offers_over_overlay: bool = True


ETH_TYPE_NAMES: Mapping[str, int] = MappingProxyType({"ipv4": 0x0800, "arp": 0x0806, "ipv6": 0x86DD})
IP_PROTO_NAMES: Mapping[str, int] = MappingProxyType({"icmp": 1, "tcp": 6, "udp": 17, "icmpv6": 58})
PolicyAction = Literal["allow", "drop"]


@dataclass(frozen=True)
class PolicyRule:
    """One L2 policy rule (evio.sdn.l2policy): frames entering the bridge by `in_port` that match
    every field given (None: any) are allowed or dropped; the first rule that matches decides, and a
    frame no rule matches is allowed. Names (eth_type "ipv4", ip_proto "udp") are numbers here."""

    action: PolicyAction
    name: str = ""  # "" : "rule-N" by its place in the list (PolicyRule.label)
    in_port: str = "any"  # "any", "members" (tunnel ports), "leaves" (every other port) or a port's name
    eth_src: str | None = None  # lower-case "aa:bb:cc:dd:ee:ff"
    eth_dst: str | None = None
    eth_type: int | None = None  # inside an 802.1Q tag, as OpenFlow matches it
    vlan: int | None = None  # the 802.1Q VLAN id
    ip_proto: int | None = None  # without eth_type: IPv4 and IPv6 both
    src_port: int | None = None  # TCP or UDP (ip_proto says which)
    dst_port: int | None = None

    def label(self, index: int) -> str:
        return self.name or f"rule-{index + 1}"


@dataclass(frozen=True)
class OverlayConfig:
    id: str
    signal: SignalConfig
    bridge: BridgeConfig
    nat_traversal: NatTraversalConfig = field(default_factory=NatTraversalConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    tunnel: TunnelConfig = field(default_factory=TunnelConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    trust: TrustConfig | None = None  # None: fingerprints from signaling only (XMPP-only trust, labs)
    attach: tuple[str, ...] = ()  # host interfaces put on the bridge as leaf ports (evio.bridge.host_ports)
    policy: tuple[PolicyRule, ...] = ()  # L2 policy, first match decides; none: everything allowed
    ipv6_routers: tuple[int, ...] = ()  # node ids of members whose router advertisements pass (decision 0068)
    # (router node id, link-local address) pairs bound to their router from the start (0068, review21p)
    ipv6_router_addresses: tuple[tuple[int, ipaddress.IPv6Address], ...] = ()


@dataclass(frozen=True)
class Config:
    overlays: Mapping[str, OverlayConfig]  # keyed by overlay id, in file order
    node: NodeConfig = field(default_factory=NodeConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    def __post_init__(self) -> None:
        # A read-only view so the frozen config cannot be changed through its dict.
        object.__setattr__(self, "overlays", MappingProxyType(dict(self.overlays)))
