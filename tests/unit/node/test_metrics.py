"""The Prometheus endpoint of a node on fakes: scraped over HTTP on loopback, parsed with prometheus_client."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from evio.node.metrics import MetricsServer, families
from evio.node.node import Node
from evio.node.plan import plan_node
from evio.testing.node_fleet import Fleet, fleet_config, nid
from evio.testing.waiting import wait_until as until


async def http(port: int, request: bytes) -> tuple[str, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return lines[0], headers, body


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    fleet = Fleet(3)
    plan = plan_node(fleet_config(1), nid(1), controller_port=6653, kernel_module_loaded=False)
    plan = dataclasses.replace(plan, metrics_listen=("127.0.0.1", 0))
    fleet.nodes[1] = Node(plan, fleet.platforms[1])
    await fleet.start()
    stack = fleet.nodes[1].overlays["ov1"]
    await until(lambda: len([i for i in stack.controller.adjacency().values() if i.state.value == "up"]) == 2, 10)
    yield fleet
    await fleet.stop_all()


async def test_scrape_over_http_parses_with_links_tunnels_and_overlay_labels(fleet: Fleet) -> None:
    node = fleet.nodes[1]
    assert node.metrics is not None
    status, headers, body = await http(node.metrics.bound_port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == "HTTP/1.1 200 OK" and headers["Content-Type"].startswith("text/plain; version=")
    parsed = {family.name: family for family in text_string_to_metric_families(body.decode())}
    links = {s.labels["type"]: s.value for s in parsed["evio_links"].samples}
    assert links == {"successor": 2, "long_distance": 0, "on_demand": 0}
    peers = {s.labels["peer"] for s in parsed["evio_tunnel_transmit_bytes"].samples}
    assert peers == {f"{nid(2):032x}", f"{nid(3):032x}"}
    assert parsed["evio_tunnel_transmit_bytes"].type == "counter"
    setup = {s.name: s for s in parsed["evio_tunnel_setup_seconds"].samples if s.name.endswith(("_count", "_sum"))}
    assert setup["evio_tunnel_setup_seconds_count"].value == 2
    assert {s.labels["overlay"] for s in parsed["evio_signal_connected"].samples} == {"ov1"}
    for name in ("evio_frb_sent", "evio_frb_forwarded", "evio_switch_packet_ins", "evio_signal_reconnects",
                 "evio_switch_segmented", "evio_switch_checksums_completed", "evio_tunnel_mtu_bytes", "evio_overlay_info", "evio_node_info"):
        assert name in parsed, name


async def test_only_get_metrics_is_served_and_garbage_is_closed(fleet: Fleet) -> None:
    node = fleet.nodes[1]
    assert node.metrics is not None
    port = node.metrics.bound_port
    assert (await http(port, b"GET / HTTP/1.1\r\n\r\n"))[0] == "HTTP/1.1 404 Not Found"
    assert (await http(port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == "HTTP/1.1 405 Method Not Allowed"
    assert (await http(port, b"hello\r\n\r\n"))[0] == "HTTP/1.1 400 Bad Request"
    assert (await http(port, b"x" * 10000))[0] == ""  # no end of head within the limit: closed unanswered


async def test_the_endpoint_goes_with_the_node_and_a_taken_port_fails_the_start() -> None:
    blocker = MetricsServer("127.0.0.1", 0, lambda: {})
    await blocker.start()
    try:
        fleet = Fleet(1)
        plan = plan_node(fleet_config(1), nid(1), controller_port=6653, kernel_module_loaded=False)
        plan = dataclasses.replace(plan, metrics_listen=("127.0.0.1", blocker.bound_port))
        node = Node(plan, fleet.platforms[1])
        with pytest.raises(Exception, match="metrics endpoint 127.0.0.1"):
            await node.run()
        assert node.metrics is None
    finally:
        await blocker.stop()


def test_families_of_a_link_without_a_tunnel_carry_no_counters() -> None:
    status = {"node_id": "ab" * 16, "uptime": 1.0, "overlays": {"ov1": {
        "links": [{"peer": "cd" * 16, "type": "successor", "state": "pending"}],
        "tunnels": {"up": 0, "down": 0, "setup_seconds": {"bounds": [0.1, 1.0], "counts": [1, 0, 2], "sum": 7.0,
                                                          "count": 3}},
        "drops": {"HOP_LIMIT": 4},
    }}}
    by_name = {family.name: family for family in families(status)}
    assert by_name["evio_tunnel_transmit_bytes"].samples == []
    assert [s.labels["state"] for s in by_name["evio_link_info"].samples] == ["pending"]
    buckets = [(s.labels["le"], s.value) for s in by_name["evio_tunnel_setup_seconds"].samples if "le" in s.labels]
    assert buckets == [("0.1", 1), ("1.0", 1), ("+Inf", 3)]
    assert [(s.labels["reason"], s.value) for s in by_name["evio_switch_drops"].samples] == [("hop_limit", 4)]


def test_dropped_candidates_and_strangers_stun_are_counted_in_metrics() -> None:
    status = {"node_id": "ab" * 16, "uptime": 1.0, "overlays": {"ov1": {
        "links": [{"peer": "cd" * 16, "type": "successor", "state": "up", "tunnel_state": "up",
                   "drops": {"stun-unknown-user": 7}}],
        "tunnels": {"up": 1, "down": 0, "setup_seconds": {"bounds": [0.1], "counts": [0, 0], "sum": 0.0, "count": 0}},
        "candidates_dropped": {"link-local": 2, "loopback": 1},
    }}}
    by_name = {family.name: family for family in families(status)}
    assert [(s.labels["reason"], s.value) for s in by_name["evio_tunnel_candidates_dropped"].samples] == [
        ("link-local", 2), ("loopback", 1)]
    assert [(s.labels["reason"], s.value) for s in by_name["evio_tunnel_drops"].samples] == [("stun-unknown-user", 7)]


def test_process_wide_stun_drops_and_raised_turn_lifetimes_are_in_the_metrics() -> None:
    status = {"node_id": "ab" * 16, "uptime": 1.0, "overlays": {},
              "stun": {"rejected": {"stun-bad-length": 3}, "turn_lifetime_raised": 2}}
    by_name = {family.name: family for family in families(status)}
    assert [(s.labels["reason"], s.value) for s in by_name["evio_stun_rejected"].samples] == [("stun-bad-length", 3)]
    assert [s.value for s in by_name["evio_turn_lifetime_raised"].samples] == [2]
