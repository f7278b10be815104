"""The daemon's status document (version 1): what `evio status --json` prints and the metrics read.

Pure: built from the overlay controller's adjacency, the tunnels' info and
counters, and the signaling peer table, with `now` passed in. The layout is
documented in docs/reference.md ("Status document") and stable: fields are only
ever added. Node ids are 32 hex digits; durations are seconds; RTTs are
milliseconds; byte and frame counts are totals since the tunnel came up.
"""

from __future__ import annotations

import bisect
import datetime
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from evio.ids import format_node_id
from evio.tunnel.datapath.interface import DatapathStats
from evio.tunnel.liveness import RttStats
from evio.tunnel.session import TunnelInfo

STATUS_VERSION = 1

# Tunnel setup time buckets (seconds): direct paths take tens to hundreds of ms, relays and retries seconds.
SETUP_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class TunnelView(Protocol):
    """What the status needs of one tunnel (evio.tunnel.session.Tunnel; the fake in evio.testing)."""

    @property
    def info(self) -> TunnelInfo: ...

    @property
    def rtt(self) -> RttStats: ...

    @property
    def up_since(self) -> float | None: ...

    @property
    def mtu(self) -> int: ...

    def stats(self) -> DatapathStats: ...


@dataclass
class SetupHistogram:
    """Tunnel setup times observed, as cumulative-ready bucket counts (Prometheus histogram layout)."""

    bounds: tuple[float, ...] = SETUP_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * (len(SETUP_BUCKETS) + 1))  # last: above every bound
    total: float = 0.0
    observations: int = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total += seconds
        self.observations += 1

    def as_dict(self) -> dict[str, Any]:
        return {"bounds": list(self.bounds), "counts": list(self.counts), "sum": round(self.total, 6),
                "count": self.observations}


def link_document(
    peer: int,
    adjacency: Any,
    tunnel: TunnelView | None,
    peer_names: Mapping[int, str],
    port: int | None,
    on_bridge: bool,
    now: float,
) -> dict[str, Any]:
    """One link: the controller's view (type, state, since) and the tunnel's (path, RTT, counters)."""
    tap = getattr(adjacency, "tap", None)
    since = getattr(adjacency, "since", None)
    document: dict[str, Any] = {
        "peer": format_node_id(peer),
        "peer_name": _bare(peer_names.get(peer)),
        "type": _value(getattr(adjacency, "link_type", None)),
        "state": _value(getattr(adjacency, "state", None)),
        "tap": tap,
        "port": port,
        "on_bridge": on_bridge,
        "age": round(now - since, 3) if isinstance(since, int | float) else None,
        "path": None,
        "local_candidate": None,
        "remote_candidate": None,
        "remote_address": None,
        "transport": None,
        "relay": None,
        "cipher": None,
        "mtu": None,
        "path_mtu": None,
        "mtu_source": None,
        "setup_seconds": None,
        "rtt_ms": None,
        "rtt_smoothed_ms": None,
        "rtt_min_ms": None,
        "tx": {"bytes": 0, "frames": 0},
        "rx": {"bytes": 0, "frames": 0},
        "drops": {},
    }
    if tunnel is None:
        return document
    info = tunnel.info
    stats = tunnel.stats()
    rtt = tunnel.rtt
    path_mtu = getattr(tunnel, "path_mtu", None)  # (mtu, source): evio.tunnel.session.Tunnel's; a view may lack it
    document.update({
        "tunnel_state": _value(info.state),
        "path": _value(info.path),
        "local_candidate": info.local_candidate,
        "remote_candidate": info.remote_candidate,
        "remote_address": f"{info.remote_addr[0]}:{info.remote_addr[1]}" if info.remote_addr else None,
        "transport": info.transport,  # udp, or tcp / tls to the TURN server (decision 0049)
        # A relayed tunnel's TURN allocations (at most 2 once up), its standby on a second server and failovers (0057).
        "relay": getattr(tunnel, "relay_status", None),
        "cipher": _value(info.cipher),
        "datapath": stats.implementation,  # tunnel.datapath as it runs: native or python
        "mtu": tunnel.mtu,
        # The path's MTU (IP datagram bytes) and how it was found: "probed", or "assumed" (the configured
        # underlay, while the first probes are out or for a peer that does not answer them).
        "path_mtu": path_mtu[0] if path_mtu else None,
        "mtu_source": _value(path_mtu[1]) if path_mtu else "assumed",
        "setup_seconds": round(info.setup_seconds, 3) if info.setup_seconds is not None else None,
        "rtt_ms": _ms(rtt.last),
        "rtt_smoothed_ms": _ms(rtt.smoothed),
        "rtt_min_ms": _ms(rtt.minimum),
        # TAP reads/writes against frames: how much the offloads join (a super-frame is one read or write).
        "tx": {"bytes": stats.tx_bytes, "frames": stats.tx_frames, "tap_reads": stats.tap_reads,
               "super_frames": stats.gso_reads},
        "rx": {"bytes": stats.rx_bytes, "frames": stats.rx_frames, "tap_writes": stats.tap_writes,
               "super_frames": stats.gro_writes, "transit_frames": stats.transit_frames},
        "drops": {reason.value: n for reason, n in sorted(stats.drops.items(), key=lambda i: i[0].value) if n},
    })  # fmt: skip
    # What the ICE gate turned away (strangers' STUN, datagrams from elsewhere than the peer), as drops too.
    inbound = getattr(tunnel, "inbound_rejects", None)
    if inbound is not None:
        document["drops"].update({reason: n for reason, n in sorted(inbound().items()) if n})
    if document["age"] is None and tunnel.up_since is not None:
        document["age"] = round(now - tunnel.up_since, 3)
    return document


def link_counts(links: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Links that are up, by type (successor, long-distance, on-demand)."""
    counts: dict[str, int] = {}
    for link in links:
        if link.get("state") == "up":
            kind = str(link.get("type"))
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def _bare(jid: str | None) -> str | None:
    return jid.partition("/")[0] if jid else None


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000, 3) if seconds is not None else None


def _value(item: object) -> Any:
    if isinstance(item, enum.Enum):
        return item.value
    return item


TRUST_RISK = "no trust anchor: the XMPP server can stand in for members (it carries the DTLS fingerprints)"


def trust_document(certificate: Any, now: datetime.datetime, revoked: int = 0) -> dict[str, Any]:
    """An overlay's trust mode: "ca" with this node's certificate (`evio.tunnel.path.dtls.TunnelCertificate`), or
    "fingerprint-only" when the overlay has no trust anchor (issue 21, H1)."""
    if certificate is None:
        return {"mode": "fingerprint-only", "risk": TRUST_RISK}
    cert = certificate.cert
    expires = cert.not_valid_after_utc
    return {
        "mode": "ca",
        "issuer": cert.issuer.rfc4514_string(),
        "cert_expires": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cert_days_left": max(0, (expires - now).days),
        "revoked_nodes": revoked,
    }
