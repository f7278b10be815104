"""The floods a switch passes on for one ingress port, shared fairly among their roots (issue 21, review21b).

Pure: `now` comes in. One port's floods (copies of broadcasts that came in by it, and floods started for
its unicast this node could not place) may go on at most `port_rate` a second in all, one `TokenBucket`
per port: a member cannot make one node send more than that on its behalf, however many real members it
names as the roots of its floods. Within that total each root gets an even share, so the roots that flood
little (a host's ARP, DHCP, mDNS: a few a second) are never refused for the one that floods much:

- every root seen on the port within `ACTIVE_WINDOW` is *active*; while `A` roots are active, each earns
  `min(port_rate / A, root_rate)` credit a second (kept as one running sum per port, so a flood costs
  O(1) whatever `A` is), up to `root_burst`; a root new to the port (or back after a quiet window) starts
  with `NEW_ROOT_CREDIT`: a host's first broadcasts pass at once, and the roots a member names cannot
  bring more than that each (a credit handed out beyond the port's tokens is what the storm takes them with:
  starting each root with its share of the port's burst let 5 storm roots refuse 13 of 50 honest floods);
- a flood goes on when its root has a credit and the port's bucket a token, and spends one of each.

This is max-min fair without a queue: a root asking for less than its share always gets it, and the
roots asking for more split the rest. A member that names `k` roots gets at most the share of `k` roots,
never more than `port_rate` in all; an honest root is refused only when it floods more than
`port_rate / A` (with `A` the active roots, at most the overlay's members plus one for the roots nobody
knows: `frb_receive._flood_budget_key`). A plain per-port total (tried first) let the storm take the
tokens first and refused the honest root most of the time: 4 of 30 ARPs passed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from evio.ratelimit import Rate, TokenBucket

R = TypeVar("R", bound=Hashable | None)

ACTIVE_WINDOW = 2.0  # seconds a root stays active on a port after its last flood there
NEW_ROOT_CREDIT = 10.0  # floods a root new to a port may send at once (a host's ARP, ND, DHCP on boot)
MAX_ROOTS_PER_PORT = 4096  # roots are members (plus one key for the unknown ones); the table is bounded anyway
MAX_PORTS = 4096
# Credit a root's share on its held way keeps from the copies of a contested way (`FloodShares.allow`'s `held`): the
# held way's next burst (a host's first broadcasts) passes here, and at the next node, whose share the same copies
# spend as they spend this one, unthinned. Below what a share starts with (both here and at the next node, which
# starts when this one's first copy comes), so a tree that moved passes its first copies by its new way at once: with
# the whole of it as the reserve, a moved tree's lone broadcasts were refused there (the Symphony churn fleet).
HELD_WAY_RESERVE = NEW_ROOT_CREDIT / 2
ACTIVE_RECOUNT = 0.1  # seconds a count of the roots active on every port serves the merged shares


@dataclass(slots=True)
class _RootShare:
    credit: float
    earned_at: float  # the port's running share when `credit` was last brought up to date
    last: float  # when the root last asked


class _PortShares(Generic[R]):
    __slots__ = ("bucket", "earned", "at", "roots")

    def __init__(self, rate: Rate, now: float) -> None:
        self.bucket = TokenBucket(rate, now)
        self.earned = 0.0  # credit each root active all along would have earned so far
        self.at = now
        self.roots: OrderedDict[R, _RootShare] = OrderedDict()  # least recently asking first


class FloodShares(Generic[R]):
    """Per ingress port: a total of `port_rate` floods, shared evenly among the roots that flood by it."""

    def __init__(self, port_rate: Rate, root_rate: Rate, new_root_credit: float = NEW_ROOT_CREDIT) -> None:
        """`new_root_credit`: what a root new to a port starts with. Small where a member names the roots (a flood's
        root is the frame's word); up to `root_rate.burst` where the roots are who delivered the frame, as far as the
        switch vouches, and an honest one's first burst is large (the document floods' frames, decision 0043)."""
        self.port_rate = port_rate
        self.root_rate = root_rate
        self.new_root_credit = min(new_root_credit, float(root_rate.burst))
        self._ports: dict[int, _PortShares[R]] = {}
        self._merged: OrderedDict[R, _RootShare] = OrderedDict()  # roots a contested way brings (`allow`'s `held`)
        self._active, self._active_at = 0, float("-inf")  # roots active on any port, counted at (`_merged_share`)

    def allow(self, port: int, root: R, now: float, held: int | None = None) -> bool:
        """Whether one flood of `root` that came in by `port` may go on (and spend its share if so).

        `held`: the port `root`'s floods come by here when this copy came by another (a contested way,
        `frb_receive._contested`). Such a copy goes on only from what the held way's share leaves above
        `HELD_WAY_RESERVE`, within the share the next node gives the root (`_merged_share`), and spends its own
        port's total: what this node passes on under one root stays within one root's share whichever ports bring
        it, the held way's copies first (review21v1 finding 2). The node after this one gets both ways' copies by
        one port, under one share: a forger's copies passed on from their own port's share took it there, and the
        root's real floods stopped at that node. The held way's own copies spend their share as before, so a
        forger never thins them here nor there; a tree that moved (the held way silent) passes its new way's
        copies at the root's share, its burst less the reserve, until the old way lapses."""
        way = port if held is None else held  # whose share for `root` the copy spends
        share = self._share(self._port(way, now), root, now)
        merged = self._merged_share(root, now) if way != port or root in self._merged else None
        if way == port:
            if share.credit < 1.0 or not self._port(port, now).bucket.take(now):
                return False
            if merged is not None:  # the held way's copies first: what they spend, a contested way cannot
                merged.credit = max(merged.credit - 1.0, -float(self.root_rate.burst))
            share.credit -= 1.0
            return True
        assert merged is not None
        reserve = HELD_WAY_RESERVE + 1.0
        if share.credit < reserve or merged.credit < reserve or not self._port(port, now).bucket.take(now):
            return False
        share.credit -= 1.0
        merged.credit -= 1.0
        return True

    def _merged_share(self, root: R, now: float) -> _RootShare:
        """What a root whose floods come here by two ports may have passed on in all: the share the next node gives
        it by the port from here, where both ways' copies come by one port. That port carries the roots this node
        passes on and its own, so their number here (one more) is never below theirs there, and the share earned
        here never above it: a contested way's copies then leave the next node room for the held way's, however
        many roots are active there (with one share per ingress port alone, 5 roots more there let 24 of 30 pass).
        Kept only for roots a contested way brings, gone after a quiet window."""
        merged = self._merged
        while merged and now - next(iter(merged.values())).last >= ACTIVE_WINDOW:
            merged.popitem(last=False)
        share = merged.get(root)
        if share is None:
            share = merged[root] = _RootShare(self.new_root_credit, 0.0, now)
            if len(merged) > MAX_ROOTS_PER_PORT:
                merged.popitem(last=False)
            return share
        if not self._active_at <= now < self._active_at + ACTIVE_RECOUNT:  # a count over every port's roots: not per copy
            self._active = len({r for shares in self._ports.values() for r, s in shares.roots.items()
                                if now - s.last < ACTIVE_WINDOW})
            self._active_at = now
        rate = min(self.port_rate.per_second / (self._active + 1), self.root_rate.per_second)
        share.credit = min(float(self.root_rate.burst), share.credit + (now - share.last) * rate)
        share.last = now
        merged.move_to_end(root)
        return share

    def _port(self, port: int, now: float) -> _PortShares[R]:
        shares = self._ports.get(port)
        if shares is None:
            if len(self._ports) >= MAX_PORTS:
                del self._ports[next(iter(self._ports))]  # ports are forgotten as they go; this is a backstop
            shares = self._ports[port] = _PortShares[R](self.port_rate, now)
        return shares

    def _share(self, shares: _PortShares[R], root: R, now: float) -> _RootShare:
        """`root`'s share of one port's floods, brought up to `now` (made if new, marked as asking)."""
        roots = shares.roots
        while roots and now - next(iter(roots.values())).last >= ACTIVE_WINDOW:
            roots.popitem(last=False)  # quiet for a window: no longer shares (and starts anew)
        if now > shares.at:  # the running share, at the rate of the roots active until now
            share_rate = self.port_rate.per_second / (len(roots) or 1)
            shares.earned += (now - shares.at) * min(share_rate, self.root_rate.per_second)
            shares.at = now
        share = roots.get(root)
        if share is None:
            # None stands for every root not known here (one key, so no member multiplies it): a burst's worth.
            share = _RootShare(self.root_rate.burst if root is None else self.new_root_credit, shares.earned, now)
            roots[root] = share
            if len(roots) > MAX_ROOTS_PER_PORT:
                roots.popitem(last=False)
        else:
            share.credit = min(float(self.root_rate.burst), share.credit + shares.earned - share.earned_at)
            share.earned_at, share.last = shares.earned, now
            roots.move_to_end(root)
        return share

    def forget(self, port: int) -> None:
        self._ports.pop(port, None)

    def __len__(self) -> int:
        return len(self._ports)
