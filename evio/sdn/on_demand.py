"""When to ask for an on-demand link, from flow byte counters (paper section 3.2.1; docs/design.md, "On-demand links").

Pure: the adapter polls the switch's byte counters of evio's unicast flows and
passes them in with `now`; these classes turn them into decisions.

1. `FlowRates` turns the polls into bytes per second per flow over the last
   second (`RATE_WINDOW`); polls come every half second, so a busy flow is
   seen sooner than once a second while a short burst is judged as before.
2. `traffic_by_peer` sums those rates by the *root node* that hosts the remote
   end of each flow, as the learning table's root bridge view knows it. Both
   directions count: the node that sent an ARP request is known (from the
   FRB) to everyone it reached, but it learns the replier only from a unicast
   frame, without a root. "At least one BF controller in a communicating pair
   will know of its peer's root bridge" (the paper), so that one must act on
   the traffic it receives as well as on what it sends. Transit flows (peer
   port to peer port) are some other pair's business and never count.
3. `OnDemandPolicy` asks for a link to a non-adjacent root whose traffic
   reaches `threshold_bytes_per_s` (at most `max_links` at once, the busiest
   first), and releases one whose traffic stayed below the threshold for
   `idle_timeout`. The overlay controller decides what to do with either.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Set
from dataclasses import dataclass

from evio.config.model import OnDemandConfig
from evio.ids import format_node_id
from evio.sdn.flow_actions import FlowMatch
from evio.sdn.switch import BoundedFloodSwitch

log = logging.getLogger(__name__)


# The threshold is a rate over this long: polls come more often (ControllerConfig.stats_interval), so a
# busy flow is seen soon after it starts, but a burst shorter than the window must still carry
# threshold x window bytes to ask for a link, as with one poll a second.
RATE_WINDOW = 1.0


class FlowRates:
    """Bytes per second of each flow over the last `window` seconds or a little more, from polls of the
    switch's byte counters that may come more often than that."""

    def __init__(self, window: float = RATE_WINDOW) -> None:
        if window < 0:
            raise ValueError(f"bad rate window: {window}")
        self.window = window
        self._polls: deque[tuple[float, dict[FlowMatch, int]]] = deque()  # oldest first

    def update(self, byte_counts: Mapping[FlowMatch, int], now: float) -> dict[FlowMatch, float]:
        """Rates since the newest earlier poll at least `window` old (the oldest kept poll while none is);
        empty on the first poll (no interval to divide by)."""
        polls = self._polls
        while len(polls) >= 2 and polls[1][0] <= now - self.window:
            polls.popleft()
        rates: dict[FlowMatch, float] = {}
        if polls and now > polls[0][0]:
            then, counts = polls[0]
            interval = now - then
            for match, count in byte_counts.items():
                before = counts.get(match)
                # A flow new since that poll, or deleted and added again, counts from zero.
                sent = count if before is None or count < before else count - before
                rates[match] = sent / interval
        polls.append((now, dict(byte_counts)))
        return rates

    def reset(self) -> None:
        """The switch's flows were cleared (it reconnected): start over."""
        self._polls.clear()


def traffic_by_peer(switch: BoundedFloodSwitch, rates: Mapping[FlowMatch, float], now: float) -> dict[int, float]:
    """Bytes per second between this node's leaves and each remote root node (see the module doc)."""
    leaves = set(switch.leaf_ports())
    totals: dict[int, float] = {}
    for match, rate in rates.items():
        if rate <= 0:
            continue
        if match.in_port in leaves:
            remote = match.eth_dst  # sent by a local host
        else:
            local = switch.learning.lookup(match.eth_dst, now)
            if local is None or local.port not in leaves:
                continue  # transit
            remote = match.eth_src  # received by a local host
        entry = switch.learning.lookup(remote, now)
        if entry is None or entry.root is None or entry.root == switch.node_id:
            continue
        totals[entry.root] = totals.get(entry.root, 0.0) + rate
    return totals


def _check(config: OnDemandConfig) -> None:
    if config.max_links < 0 or config.threshold_bytes_per_s <= 0 or config.idle_timeout <= 0:
        raise ValueError(f"bad on-demand settings: {config}")


@dataclass(frozen=True, slots=True)
class WantOnDemand:
    peer: int
    bytes_per_s: float


@dataclass(frozen=True, slots=True)
class ReleaseOnDemand:
    peer: int


OnDemandDecision = WantOnDemand | ReleaseOnDemand


class OnDemandPolicy:
    """Which on-demand links this node wants, from traffic per peer; one instance per overlay."""

    def __init__(self, config: OnDemandConfig) -> None:
        _check(config)
        self.config = config
        self._wanted: dict[int, float] = {}  # peer -> last time its traffic reached the threshold

    def reconfigure(self, config: OnDemandConfig) -> None:
        """New settings (a config reload). Disabled, it forgets its wishes: the overlay controller
        drops its on-demand links itself, and no release would ever come for a wish kept here."""
        _check(config)
        self.config = config
        if not config.enabled:
            self._wanted.clear()

    @property
    def wanted(self) -> frozenset[int]:
        return frozenset(self._wanted)

    def update(self, now: float, traffic: Mapping[int, float], adjacent: Set[int]) -> list[OnDemandDecision]:
        """Decisions for one poll: `traffic` is bytes/s by peer, `adjacent` the peers we have tunnels to."""
        if not self.config.enabled:
            return []
        threshold = self.config.threshold_bytes_per_s
        decisions: list[OnDemandDecision] = []
        for peer, last_busy in sorted(self._wanted.items()):
            if traffic.get(peer, 0.0) >= threshold:
                self._wanted[peer] = now
            elif now - last_busy >= self.config.idle_timeout:
                del self._wanted[peer]
                decisions.append(ReleaseOnDemand(peer))
                log.info("on-demand link idle peer=%s", format_node_id(peer))
        busy = sorted(
            (
                (rate, peer)
                for peer, rate in traffic.items()
                if rate >= threshold and peer not in adjacent and peer not in self._wanted
            ),
            key=lambda item: (-item[0], item[1]),
        )
        for rate, peer in busy:
            if len(self._wanted) >= self.config.max_links:
                log.debug("on-demand limit reached max_links=%d peer=%s", self.config.max_links,
                          format_node_id(peer))
                break
            self._wanted[peer] = now
            decisions.append(WantOnDemand(peer, rate))
            log.info("on-demand link wanted peer=%s bytes_per_s=%.0f", format_node_id(peer), rate)
        return decisions
