"""Every delay the overlay controller's decision parts use, in one frozen record (`Timings`).

The orchestrator (`evio.overlay.orchestrator`) hands it to its parts: `pacing` (backoff, retries, the overdue
warning), `presence` (login settling, membership checks), `stand_ins`, `evaluation` (debounce, periodic runs).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timings:
    """Every delay the controller uses, in seconds."""

    reevaluate_interval: float = 10.0  # periodic evaluation
    membership_debounce: float = 0.5  # quiet time after a membership change before evaluating ...
    membership_max_delay: float = 3.0  # ... but no longer than this after the first change
    settle_after_login: float = 2.0  # presence of the members arrives after login: wait for it, at most this long
    request_timeout: float = 10.0  # an overlay.link / overlay.release round trip
    connect_timeout: float = 90.0  # LinkProvider.connect (ICE may take about a minute to give up)
    await_tunnel: float = 100.0  # a link we accepted whose requester never connects is forgotten
    collision_wait: float = 10.0  # after losing a collision, how long the winner's request is awaited
    orphan_grace: float = 20.0  # a tunnel nobody holds is closed after this long
    refused_retry: float = 2.0  # after already_linked / link_closing / no_link: ask again after
    long_distance_refusal_ttl: float = 300.0  # a peer that refused a long-distance link is not asked again
    backoff_base: float = 1.0  # failing peers: first delay ...
    backoff_cap: float = 60.0  # ... doubling up to this
    successor_backoff_cap: float = 8.0  # ... or this, for a successor: the ring is retried until it closes
    change_rate: float = 4.0  # tunnels added or removed per second, sustained ...
    change_burst: int = 16  # ... after a burst of this many
    max_setups: int = 3  # new links of ours asked for or connecting at once, of each kind: successors, others
    stop_release_timeout: float = 1.0  # on stop, how long releases are given before tunnels close
    revalidate_after: float = 1.5  # a linked peer gone from signaling this long: ask whether it is still a member
    # A successor gone from signaling while its tunnel is up is probed by the tunnel (dead within 0.25-1 s if
    # it crashed); meanwhile the next peer is linked as a successor too, and released after this if it lives.
    standby_window: float = 2.0
    relogin_grace: float = 30.0  # ... or this long, when it said it was logging in again
    successor_overdue: float = 30.0  # a successor link not up after this long is logged as a warning, once a minute
