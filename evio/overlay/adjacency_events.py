"""What the overlay controller tells others about its links (the SDN side subscribes).

`LinkUp` when a tunnel that is part of the adjacency is carrying traffic,
`LinkDown` when it stops; exactly one of each per tunnel, in that order.
`LinkInfo` is one entry of the controller's adjacency, for those that ask.
"""

from __future__ import annotations

from dataclasses import dataclass

from evio.overlay.adjacency import LinkState, LinkType


@dataclass(frozen=True)
class LinkInfo:
    peer: int
    link_type: LinkType  # this node's hold if it holds the link, else the peer's
    state: LinkState
    tap: str | None  # the tunnel's TAP once it is up
    since: float  # when the link entered its current state (controller clock)


@dataclass(frozen=True)
class LinkUp:
    peer: int
    link_type: LinkType
    tap: str


@dataclass(frozen=True)
class LinkDown:
    peer: int
    tap: str
    reason: str


AdjacencyEvent = LinkUp | LinkDown
