"""iperf3 over a lab's overlay: a one-off server on one node, a TCP run from another, its report read.

The benchmarks measure TCP between nodes one way: a server bound to the
target's overlay address that serves one client and exits (`-1`), waited for
until it listens (a client started before would be refused), one client run
with a JSON report (`-J`), the receiver's figures taken from it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from evio.lab.lab import Lab

IPERF_PORT = 5201
LISTEN_TIMEOUT = 10.0
"""Seconds a server may take to listen; a loaded lab host starts iperf3 in well under one."""


@dataclass(frozen=True)
class TcpRun:
    """What the receiver of one iperf3 TCP run counted, and the sender's retransmissions."""

    mbit: float
    gigabytes: float
    retransmits: int


def listening(lab: Lab, node: int, port: int = IPERF_PORT) -> bool:
    """Whether something on `node` listens on TCP `port`."""
    return bool(lab.exec(node, ["ss", "-Htln", f"sport = :{port}"], check=False).stdout.strip())


def wait_listening(lab: Lab, node: int, port: int = IPERF_PORT, timeout: float = LISTEN_TIMEOUT) -> bool:
    """Whether `node` listens on `port` within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not listening(lab, node, port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def server_argv(lab: Lab, node: int, port: int = IPERF_PORT) -> list[str]:
    """A one-client iperf3 server bound to `node`'s overlay address."""
    return ["iperf3", "-s", "-1", "-B", str(lab.node(node).overlay_address.ip), "-p", str(port)]


def parse_tcp_report(text: str) -> TcpRun | None:
    """The figures of an `iperf3 -J` TCP client report; None if the run failed (no or a partial report)."""
    try:
        report: dict[str, Any] = json.loads(text)
        received = report["end"]["sum_received"]
        retransmits = int(report["end"]["sum_sent"].get("retransmits", 0))
        return TcpRun(float(received["bits_per_second"]) / 1e6, float(received["bytes"]) / 1e9, retransmits)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def tcp_run(lab: Lab, client: int, server: int, seconds: float, *, role: str, port: int = IPERF_PORT) -> TcpRun | None:
    """One iperf3 TCP run of `seconds` from node `client` to node `server`'s overlay address; None if it failed."""
    record = lab.spawn(server, server_argv(lab, server, port), role=role)
    try:
        if not wait_listening(lab, server, port):
            return None
        address = str(lab.node(server).overlay_address.ip)
        done = lab.exec(client, ["iperf3", "-c", address, "-p", str(port), "-t", f"{seconds:g}", "-J"],
                        check=False, timeout=seconds + 30)  # fmt: skip
        return parse_tcp_report(done.stdout)
    finally:
        lab.stop(record)
