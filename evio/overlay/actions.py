"""What the overlay controller's decision parts return for the adapter to do, and how our requests can fail.

The parts (`peer_links`, `answers`, `evaluation`, composed by `evio.overlay.orchestrator`) return lists of
these; the adapter (`evio.overlay.controller`) performs them and reports the results back as inputs, a
request of ours that got no answer as a `Failure`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from evio.overlay.adjacency_events import AdjacencyEvent
from evio.overlay.negotiation import LinkRequest, ReleaseRequest


@dataclass(frozen=True)
class SendLinkRequest:
    peer: int
    seq: int  # pass back with the answer
    request: LinkRequest


@dataclass(frozen=True)
class SendRelease:
    peer: int
    seq: int
    request: ReleaseRequest


@dataclass(frozen=True)
class Connect:
    peer: int
    seq: int


@dataclass(frozen=True)
class Disconnect:
    peer: int


@dataclass(frozen=True)
class Doubt:
    """Probe the tunnel to ``peer``: it must answer within a few RTTs or go down (the peer says it has no link)."""

    peer: int


@dataclass(frozen=True)
class Notify:
    event: AdjacencyEvent


@dataclass(frozen=True)
class CheckMembership:
    """Ask signaling whether peers that left are still members (a removal is then reported as revoked)."""


Action = SendLinkRequest | SendRelease | Connect | Disconnect | Doubt | Notify | CheckMembership


class Failure(enum.Enum):
    """How one of our requests ended without an answer from the peer."""

    SIGNAL_DOWN = "signal_down"  # our own signaling session is down: not the peer's fault
    PEER_ABSENT = "peer_absent"  # the peer is not present in signaling (left, or not yet known)
    NO_ANSWER = "no_answer"  # timed out or bounced
    ERROR = "error"  # an error answer, or one we could not read
