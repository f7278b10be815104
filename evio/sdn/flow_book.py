"""The unicast flows one switch installed, by the port they enter by, at most `max_per_port` each.

Pure bookkeeping beside `BoundedFloodSwitch` (docs/design.md, "A switch bounded per port"). A flow
`(in_port, eth_src, eth_dst) -> out_port` is installed on behalf of `in_port` (and its way back,
installed with it, on behalf of the same port): a peer sending from
invented sources, or to every MAC it knows, makes one per pair, and once installed the switch
refreshes it without asking the controller. So the book caps each port's flows: adding one more
to a full port hands back that port's oldest flow to delete; no other port's flows are touched.

The book mirrors the deletes the switch is sent (by match, to a MAC, from a MAC, of a port) and
the switch's own removals (idle and hard timeouts), so its counts are the table's.

A live flow from a MAC on its port says the MAC's place speaks (`sends_from`, which vouches for it
against a claim that it moved; docs/decisions/0034). A flow installed by its source's own frame says so
from its install; a way back, installed for the answer before the answer came, only once it has
outlived its idle timeout (`proves_from`): still there, it was used since.
"""

from __future__ import annotations

from typing import TypeVar

from evio.sdn.flow_actions import FlowMatch

_K = TypeVar("_K", int, str)


class FlowBook:
    def __init__(self, max_per_port: int) -> None:
        if max_per_port < 1:
            raise ValueError(f"max_per_port must be at least 1, got {max_per_port}")
        self.max_per_port = max_per_port
        self._by_port: dict[int, dict[FlowMatch, int]] = {}  # port charged -> {match: out_port}, oldest first
        self._charged: dict[FlowMatch, int] = {}  # match -> the port it was installed on behalf of
        self._by_in_port: dict[int, set[FlowMatch]] = {}
        self._by_out_port: dict[int, set[FlowMatch]] = {}
        self._by_src: dict[str, set[FlowMatch]] = {}
        self._by_dst: dict[str, set[FlowMatch]] = {}
        self._proves_from: dict[FlowMatch, float] = {}  # a way back -> when its being live says its source speaks
        self.changes = 0  # flows booked or gone so far: a reader that saw the same count sees the same book

    def __len__(self) -> int:
        return len(self._charged)

    def __contains__(self, match: object) -> bool:
        return match in self._charged

    def count(self, port: int) -> int:
        """The flows installed on behalf of `port`."""
        return len(self._by_port.get(port, ()))

    def add(
        self, match: FlowMatch, out_port: int, charged_to: int | None = None, proves_from: float | None = None
    ) -> list[FlowMatch]:
        """Book a flow being installed, on behalf of `charged_to` (its own in_port unless given: the reverse
        of a flow is installed on behalf of the port whose frame caused both); the flows to delete to keep
        that port within the cap (oldest first). A way back gives `proves_from`, when its idle timeout
        (restarted by each install) has run once."""
        self.changes += 1
        port = match.in_port if charged_to is None else charged_to
        current = self._charged.get(match)
        if current is not None and self._by_port[current].get(match) == out_port:
            flows = self._by_port[current]
            del flows[match]  # installed again the same way: now the newest
            flows[match] = out_port
            if proves_from is not None and match in self._proves_from:
                self._proves_from[match] = proves_from
            return []
        if current is not None:
            self.discard(match)  # installed again leading elsewhere
        flows = self._by_port.setdefault(port, {})
        evicted: list[FlowMatch] = []
        while len(flows) >= self.max_per_port:
            oldest = next(iter(flows))
            self.discard(oldest)
            evicted.append(oldest)
        flows = self._by_port.setdefault(port, {})
        flows[match] = out_port
        self._charged[match] = port
        self._by_in_port.setdefault(match.in_port, set()).add(match)
        self._by_out_port.setdefault(out_port, set()).add(match)
        self._by_src.setdefault(match.eth_src, set()).add(match)
        self._by_dst.setdefault(match.eth_dst, set()).add(match)
        if proves_from is not None:
            self._proves_from[match] = proves_from
        return evicted

    def discard(self, match: FlowMatch) -> None:
        """The flow went (deleted, or removed by the switch)."""
        port = self._charged.pop(match, None)
        if port is None:
            return
        self.changes += 1
        self._proves_from.pop(match, None)
        flows = self._by_port[port]
        out_port = flows.pop(match)
        if not flows:
            del self._by_port[port]
        _discard(self._by_in_port, match.in_port, match)
        _discard(self._by_out_port, out_port, match)
        _discard(self._by_src, match.eth_src, match)
        _discard(self._by_dst, match.eth_dst, match)

    def sends_from(self, mac: str, port: int, now: float) -> bool:
        """Whether a flow from `mac` entering by `port` is installed (the switch removes it once idle) and says
        `mac` spoke: installed by its frame, or a way back that outlived its idle timeout (used since)."""
        return any(match.in_port == port and self._proves_from.get(match, now) <= now
                   for match in self._by_src.get(mac, ()))

    def forget_to(self, mac: str) -> None:
        for match in list(self._by_dst.get(mac, ())):
            self.discard(match)

    def forget_from(self, mac: str) -> None:
        for match in list(self._by_src.get(mac, ())):
            self.discard(match)

    def forget_port(self, port: int) -> None:
        """Every flow entering by `port` or leaving through it."""
        for match in list(self._by_in_port.get(port, ())) + list(self._by_out_port.get(port, ())):
            self.discard(match)


def _discard(index: dict[_K, set[FlowMatch]], key: _K, match: FlowMatch) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(match)
        if not members:
            del index[key]

