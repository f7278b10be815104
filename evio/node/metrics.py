"""Prometheus metrics: a collector over the status document, served over HTTP on the daemon's loop.

Nothing is counted for the metrics' sake: at each scrape `StatusCollector`
asks the node for its status document (the counters the tunnels, the SDN
side and signaling keep anyway) and turns it into metric families. The HTTP
side is a few lines of asyncio on the daemon's own loop, so the collector
reads the daemon's state without crossing a thread.

Names follow Prometheus conventions (`_total` counters, base units: bytes,
seconds); labels are `overlay`, `peer` (32 hex digits) and a `reason` or
`type` where it applies.

Exposure (issue 21): the endpoint is off by default and listens on loopback
when on, with no authentication, so every local user can read it. It shows
what monitoring needs, peers by node id and account name (`peer_name`, the
JID) and each link's path and candidate *types* (host, srflx, relay), and
never an address: the peer's public address and tunnel port stay in the
root-only status socket (`evio status`). Each connection is bounded (one
request, `request_timeout` for all of it) and at most `max_connections` are
served at once; more are closed unanswered and counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger(__name__)

MAX_REQUEST_HEAD = 8192
REQUEST_TIMEOUT = 5.0  # the whole exchange: request head in, answer out
MAX_CONNECTIONS = 16  # Prometheus scrapes one at a time; a few curls beside it
BODY_LIFE = 1.0  # seconds an answer is served again before the status is read anew

StatusSource = Callable[[], Mapping[str, Any]]


class StatusCollector:
    """A prometheus_client collector: metric families from the status document, built at scrape time."""

    def __init__(self, status: StatusSource) -> None:
        self._status = status

    def describe(self) -> list[Metric]:
        return []  # no scrape at registration: families are only known from a live status

    def collect(self) -> Iterator[Metric]:
        yield from families(self._status())


def families(status: Mapping[str, Any]) -> Iterator[Metric]:
    """Every metric family of one status document (pure)."""
    info = GaugeMetricFamily("evio_node_info", "This node; the value is 1.", labels=["node_id"])
    info.add_metric([str(status.get("node_id"))], 1)
    yield info
    uptime = GaugeMetricFamily("evio_uptime_seconds", "Seconds since the daemon was up.")
    uptime.add_metric([], float(status.get("uptime") or 0))
    yield uptime

    stun = status.get("stun", {})
    rejected = CounterMetricFamily("evio_stun_rejected", "STUN-range datagrams dropped as malformed, by reason.",
                                   labels=["reason"])
    for reason, count in sorted(stun.get("rejected", {}).items()):
        rejected.add_metric([reason], count)
    yield rejected
    raised = CounterMetricFamily("evio_turn_lifetime_raised",
                                 "TURN answers granting under 30 s, read as 30 s (a server asking for a refresh loop).")
    raised.add_metric([], stun.get("turn_lifetime_raised", 0))
    yield raised

    f = _Families()
    for overlay, ov in status.get("overlays", {}).items():
        f.overlay(overlay, ov)
    yield from f.all()


class _Families:
    def __init__(self) -> None:
        o, op = ["overlay"], ["overlay", "peer"]
        self.overlay_info = GaugeMetricFamily(
            "evio_overlay_info", "Overlays this node is in; the value is 1.",
            labels=["overlay", "node_id", "bridge", "datapath", "address"])
        self.links = GaugeMetricFamily("evio_links", "Links up, by type.", labels=["overlay", "type"])
        self.link_info = GaugeMetricFamily(
            "evio_link_info", "Each link; the value is 1.",
            labels=["overlay", "peer", "peer_name", "type", "state", "path", "local_candidate", "remote_candidate"])
        self.tx_bytes = CounterMetricFamily("evio_tunnel_transmit_bytes", "Frame bytes sent into the tunnel.", labels=op)
        self.rx_bytes = CounterMetricFamily("evio_tunnel_receive_bytes", "Frame bytes received from the tunnel.",
                                            labels=op)
        self.tx_frames = CounterMetricFamily("evio_tunnel_transmit_frames", "Frames sent into the tunnel.", labels=op)
        self.rx_frames = CounterMetricFamily("evio_tunnel_receive_frames", "Frames received from the tunnel.", labels=op)
        self.tunnel_drops = CounterMetricFamily(
            "evio_tunnel_drops", "Datagrams or frames the tunnel dropped, by reason.", labels=[*op, "reason"])
        self.rtt = GaugeMetricFamily("evio_tunnel_rtt_seconds", "Smoothed round-trip time from the tunnel's echoes.",
                                     labels=op)
        self.datapath = GaugeMetricFamily(
            "evio_tunnel_datapath_info", "The data path code a tunnel runs (tunnel.datapath); the value is 1.",
            labels=[*op, "implementation"])
        self.mtu = GaugeMetricFamily("evio_tunnel_mtu_bytes", "The tunnel TAP's MTU.", labels=op)
        self.path_mtu = GaugeMetricFamily(
            "evio_tunnel_path_mtu_bytes", "The tunnel's path MTU (IP datagram bytes), once a probe confirmed it.", labels=op)
        self.setup = HistogramMetricFamily("evio_tunnel_setup_seconds", "Time from offer to a link up.", labels=o)
        self.tunnels_up = CounterMetricFamily("evio_tunnels_established", "Tunnels that came up.", labels=o)
        self.tunnels_down = CounterMetricFamily("evio_tunnels_closed", "Tunnels that went down after being up.",
                                                labels=o)
        self.packet_ins = CounterMetricFamily("evio_switch_packet_ins", "Frames the bridge sent to the controller.",
                                              labels=o)
        self.originated = CounterMetricFamily(
            "evio_frb_broadcasts_originated", "Broadcast or unknown-unicast frames from local ports flooded as FRBs.",
            labels=o)
        self.frb_sent = CounterMetricFamily("evio_frb_sent", "FRB copies sent to peers with this node as root.",
                                            labels=o)
        self.frb_forwarded = CounterMetricFamily("evio_frb_forwarded", "FRB copies passed on within their bounds.",
                                                 labels=o)
        self.frb_received = CounterMetricFamily("evio_frb_received", "FRB broadcasts received from peers.", labels=o)
        self.segmented = CounterMetricFamily(
            "evio_switch_segmented", "Frames too large for a tunnel that the controller split into TCP segments.",
            labels=o)
        self.checksums_completed = CounterMetricFamily(
            "evio_switch_checksums_completed", "TCP frames whose partial (offload) checksum the controller finished.",
            labels=o)
        self.neighbors_answered = CounterMetricFamily(
            "evio_switch_neighbors_answered", "ARP requests and neighbour solicitations the switch answered itself.",
            labels=o)
        self.transit_frames = CounterMetricFamily(
            "evio_transit_frames", "Frames sent on tunnel to tunnel by the transit fast path, past the bridge.",
            labels=o)
        self.transit_fallbacks = CounterMetricFamily(
            "evio_transit_fallbacks", "Frames with a fast-path entry that went through the bridge, by reason.",
            labels=["overlay", "reason"])
        self.transit_entries = GaugeMetricFamily("evio_transit_entries", "Transit fast-path entries.", labels=o)
        self.policy_packets = CounterMetricFamily(
            "evio_policy_packets", "Frames an L2 policy rule matched (a drop rule's: dropped), by rule.",
            labels=["overlay", "rule", "action"])
        self.switch_drops = CounterMetricFamily(
            "evio_switch_drops", "Frames and FRBs the controller dropped, by reason.", labels=["overlay", "reason"])
        self.candidates_dropped = CounterMetricFamily(
            "evio_tunnel_candidates_dropped", "Peers' ICE candidates not tried (loopback, link-local, deny list, ...), "
            "by reason.", labels=["overlay", "reason"])
        self.signal_connected = GaugeMetricFamily("evio_signal_connected", "1 while signaling is logged in.", labels=o)
        self.signal_reconnects = CounterMetricFamily("evio_signal_reconnects", "Signaling logins after the first.",
                                                     labels=o)
        self.members = GaugeMetricFamily("evio_signal_members_online", "Other members signaling sees online.",
                                         labels=o)
        # Attached host ports (issue 23): rx is what the hosts behind the port sent into the bridge.
        ap = ["overlay", "port"]
        self.attached = GaugeMetricFamily("evio_attached_port_up", "1 while the attached interface is on the bridge.",
                                          labels=ap)
        self.attached_rx_bytes = CounterMetricFamily("evio_attached_port_receive_bytes",
                                                     "Bytes the hosts behind the port sent into the bridge.", labels=ap)
        self.attached_tx_bytes = CounterMetricFamily("evio_attached_port_transmit_bytes",
                                                     "Bytes the bridge sent to the hosts behind the port.", labels=ap)
        self.attached_rx_frames = CounterMetricFamily("evio_attached_port_receive_frames",
                                                      "Frames the hosts behind the port sent into the bridge.", labels=ap)
        self.attached_tx_frames = CounterMetricFamily("evio_attached_port_transmit_frames",
                                                      "Frames the bridge sent to the hosts behind the port.", labels=ap)
        self.attached_dropped = CounterMetricFamily("evio_attached_port_dropped_frames",
                                                    "Frames the interface dropped, by direction.",
                                                    labels=[*ap, "direction"])

    def overlay(self, overlay: str, ov: Mapping[str, Any]) -> None:
        self.overlay_info.add_metric(
            [overlay, str(ov.get("node_id")), str(ov.get("bridge")), str(ov.get("datapath")), str(ov.get("address"))], 1)
        for kind in ("successor", "long_distance", "on_demand"):
            self.links.add_metric([overlay, kind], ov.get("link_counts", {}).get(kind, 0))
        for link in ov.get("links", []):
            self._link(overlay, link)
        tunnels = ov.get("tunnels", {})
        histogram = tunnels.get("setup_seconds")
        if histogram:
            cumulative, buckets = 0, []
            for bound, count in zip([*histogram["bounds"], float("inf")], histogram["counts"]):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
            self.setup.add_metric([overlay], buckets, histogram["sum"])
        self.tunnels_up.add_metric([overlay], tunnels.get("up", 0))
        self.tunnels_down.add_metric([overlay], tunnels.get("down", 0))
        switch = ov.get("switch", {})
        self.packet_ins.add_metric([overlay], switch.get("packet_ins", 0))
        self.originated.add_metric([overlay], switch.get("broadcasts_originated", 0))
        self.frb_sent.add_metric([overlay], switch.get("frb_sent", 0))
        self.frb_forwarded.add_metric([overlay], switch.get("frb_forwarded", 0))
        self.frb_received.add_metric([overlay], ov.get("broadcasts", {}).get("received", 0))
        self.segmented.add_metric([overlay], switch.get("segmented", 0))
        self.checksums_completed.add_metric([overlay], switch.get("checksums_completed", 0))
        self.neighbors_answered.add_metric([overlay], switch.get("neighbors_answered", 0))
        transit = ov.get("transit", {})
        if "forwarded" in transit:
            self.transit_frames.add_metric([overlay], transit.get("forwarded", 0))
            self.transit_entries.add_metric([overlay], transit.get("entries", 0))
            for reason in ("expired", "no_egress"):
                self.transit_fallbacks.add_metric([overlay, reason], transit.get(reason, 0))
        for rule in ov.get("policy", []):
            self.policy_packets.add_metric([overlay, str(rule["rule"]), str(rule["action"])], rule["packets"])
        for reason, count in sorted(ov.get("drops", {}).items()):
            self.switch_drops.add_metric([overlay, reason.lower()], count)
        for reason, count in sorted(ov.get("candidates_dropped", {}).items()):
            self.candidates_dropped.add_metric([overlay, reason], count)
        signal = ov.get("signal", {})
        self.signal_connected.add_metric([overlay], 1 if signal.get("connected") else 0)
        self.signal_reconnects.add_metric([overlay], signal.get("reconnects", 0))
        self.members.add_metric([overlay], len(ov.get("peers", {})))
        for port, doc in sorted(ov.get("attached_ports", {}).items()):
            self._attached(overlay, port, doc)

    def _attached(self, overlay: str, port: str, doc: Mapping[str, Any]) -> None:
        labels = [overlay, port]
        self.attached.add_metric(labels, 1 if doc.get("on_bridge") else 0)
        rx, tx = doc.get("rx"), doc.get("tx")
        if not isinstance(rx, dict) or not isinstance(tx, dict):
            return  # not on the bridge, or the interface is gone: no counters
        self.attached_rx_bytes.add_metric(labels, rx.get("bytes", 0))
        self.attached_tx_bytes.add_metric(labels, tx.get("bytes", 0))
        self.attached_rx_frames.add_metric(labels, rx.get("frames", 0))
        self.attached_tx_frames.add_metric(labels, tx.get("frames", 0))
        self.attached_dropped.add_metric([*labels, "receive"], rx.get("dropped", 0))
        self.attached_dropped.add_metric([*labels, "transmit"], tx.get("dropped", 0))

    def _link(self, overlay: str, link: Mapping[str, Any]) -> None:
        peer = str(link.get("peer"))
        labels = [overlay, peer]
        self.link_info.add_metric([
            overlay, peer, str(link.get("peer_name") or ""), str(link.get("type") or ""), str(link.get("state") or ""),
            str(link.get("path") or ""), str(link.get("local_candidate") or ""), str(link.get("remote_candidate") or ""),
        ], 1)  # fmt: skip
        if link.get("tunnel_state") is None:
            return  # no tunnel yet: no counters
        tx, rx = link.get("tx", {}), link.get("rx", {})
        self.tx_bytes.add_metric(labels, tx.get("bytes", 0))
        self.rx_bytes.add_metric(labels, rx.get("bytes", 0))
        self.tx_frames.add_metric(labels, tx.get("frames", 0))
        self.rx_frames.add_metric(labels, rx.get("frames", 0))
        for reason, count in sorted(link.get("drops", {}).items()):
            self.tunnel_drops.add_metric([*labels, reason], count)
        if link.get("rtt_smoothed_ms") is not None:
            self.rtt.add_metric(labels, link["rtt_smoothed_ms"] / 1000)
        if link.get("mtu") is not None:
            self.mtu.add_metric(labels, link["mtu"])
        if link.get("path_mtu") is not None:
            self.path_mtu.add_metric(labels, link["path_mtu"])
        if link.get("datapath") is not None:
            self.datapath.add_metric([*labels, str(link["datapath"])], 1)

    def all(self) -> list[Metric]:
        return [value for value in vars(self).values() if isinstance(value, Metric)]


class MetricsServer:
    """HTTP/1.x on the daemon's loop: GET /metrics answers the text exposition format; nothing else is served."""

    def __init__(
        self,
        host: str,
        port: int,
        status: StatusSource,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self.host = host
        self.port = port
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        self.connections = 0
        self.refused_connections = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StatusCollector(status))
        self._server: asyncio.Server | None = None
        # One status document a second at most, whoever asks how often (review21w3 finding 1: a local user in a loop
        # had the loop rebuild it for every request, ~2 ms each with 16 tunnels); any scraper's interval is longer.
        self.body_life = BODY_LIFE
        self._body: bytes | None = None
        self._built_at = 0.0

    @property
    def bound_port(self) -> int:
        """The port actually listened on (differs from `port` when that was 0)."""
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=MAX_REQUEST_HEAD)
        log.info("metrics on http://%s:%d/metrics", self.host if ":" not in self.host else f"[{self.host}]",
                 self.bound_port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.connections >= self.max_connections:
            self.refused_connections += 1
            if self.refused_connections == 1 or self.refused_connections % 1000 == 0:
                log.warning("metrics: %d connections open, more refused (refused so far: %d)",
                            self.connections, self.refused_connections)
            writer.close()  # nothing was read or written: a plain close, no waiting for the client
            return
        self.connections += 1
        try:
            async with asyncio.timeout(self.request_timeout):
                await self._exchange(reader, writer)
        except (TimeoutError, ConnectionError, OSError):
            pass  # too slow, or gone: closed without (the rest of) an answer
        finally:
            self.connections -= 1
            writer.transport.abort()  # a no-op after a clean close; else drops what a slow client did not take

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return  # not HTTP or too large: close without an answer
        status, content_type, body = self.answer(head)
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode() + body
        )
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    def answer(self, head: bytes) -> tuple[str, str, bytes]:
        """(status line, content type, body) for one request head."""
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return "400 Bad Request", "text/plain", b"bad request\n"
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method != "GET":
            return "405 Method Not Allowed", "text/plain", b"only GET\n"
        if target != "/metrics":
            return "404 Not Found", "text/plain", b"see /metrics\n"
        now = time.monotonic()
        if self._body is not None and now - self._built_at < self.body_life:
            return "200 OK", CONTENT_TYPE_LATEST, self._body
        try:
            self._body, self._built_at = generate_latest(self.registry), now
            return "200 OK", CONTENT_TYPE_LATEST, self._body
        except Exception:
            log.exception("metrics scrape failed")
            return "500 Internal Server Error", "text/plain", b"scrape failed; see the daemon's log\n"
