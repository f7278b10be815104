"""Neutral descriptions of what the Bounded Flood logic wants done to the switch.

The pure switch logic (`evio.sdn.switch`) returns lists of these; the os-ken
adapter (`evio.sdn.ofapp`) turns each into OpenFlow 1.3 messages, which the
fake flow table (`evio.testing.fake_flow_table`) decodes and applies as a
switch would. Keeping them free of os-ken types keeps the logic pure.
"""

from __future__ import annotations

from dataclasses import dataclass

# Priorities of the flows evio installs; the adapter installs the first two at
# switch features time, the logic only ever adds UNICAST_PRIORITY flows.
TABLE_MISS_PRIORITY = 0
UNICAST_PRIORITY = 10
FRB_TO_CONTROLLER_PRIORITY = 100


@dataclass(frozen=True)
class FlowMatch:
    """The match of an evio unicast flow: `(in_port, eth_src, eth_dst)`; MACs as "aa:bb:..:ff"."""

    in_port: int
    eth_src: str
    eth_dst: str


@dataclass(frozen=True)
class PacketOut:
    """Send `data` out of `port` (never back out of the port it arrived on)."""

    port: int
    data: bytes


@dataclass(frozen=True)
class AddFlow:
    """Install `match -> output:out_port`, removed by the switch after `idle_timeout` s idle, and
    `hard_timeout` s after it was installed however busy (0: never)."""

    match: FlowMatch
    out_port: int
    idle_timeout: int
    priority: int = UNICAST_PRIORITY
    hard_timeout: int = 0
    # Whether the on-demand policy counts its bytes (a local host and a remote one whose root node is
    # known): only such flows are polled, so a poll's cost does not grow with the rest.
    counted: bool = False


@dataclass(frozen=True)
class DeleteFlow:
    """Delete the one evio flow with this match (its port had too many)."""

    match: FlowMatch


@dataclass(frozen=True)
class DeleteFlowsOfPort:
    """Delete every evio flow that enters by or leaves through `port`."""

    port: int


@dataclass(frozen=True)
class DeleteFlowsToMac:
    """Delete every evio flow whose `eth_dst` is `mac` (the MAC moved or expired)."""

    mac: str


@dataclass(frozen=True)
class DeleteFlowsFromMac:
    """Delete every evio flow whose `eth_src` is `mac` (the MAC was evicted or expired)."""

    mac: str


FlowAction = PacketOut | AddFlow | DeleteFlow | DeleteFlowsOfPort | DeleteFlowsToMac | DeleteFlowsFromMac
