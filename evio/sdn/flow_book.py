"""The unicast flows one switch installed, by the port they enter by, at most `max_per_port` each.

Pure bookkeeping beside `BoundedFloodSwitch` (docs/design.md, "A switch bounded per port"). A flow
`(in_port, eth_src, eth_dst) -> out_port` is installed on behalf of `in_port`: a peer sending from
invented sources, or to every MAC it knows, makes one per pair, and once installed the switch
refreshes it without asking the controller. So the book caps each port's flows: adding one more
to a full port hands back that port's oldest flow to delete; no other port's flows are touched.

The book mirrors the deletes the switch is sent (by match, to a MAC, from a MAC, of a port) and
the switch's own removals (idle and hard timeouts), so its counts are the table's.
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
        self._by_in_port: dict[int, dict[FlowMatch, int]] = {}  # in_port -> {match: out_port}, oldest first
        self._by_out_port: dict[int, set[FlowMatch]] = {}
        self._by_src: dict[str, set[FlowMatch]] = {}
        self._by_dst: dict[str, set[FlowMatch]] = {}

    def __len__(self) -> int:
        return sum(len(flows) for flows in self._by_in_port.values())

    def count(self, in_port: int) -> int:
        return len(self._by_in_port.get(in_port, ()))

    def add(self, match: FlowMatch, out_port: int) -> list[FlowMatch]:
        """Book a flow being installed; the flows to delete to keep its port within the cap (oldest first)."""
        flows = self._by_in_port.setdefault(match.in_port, {})
        old_out = flows.get(match)
        if old_out == out_port:
            del flows[match]  # installed again the same way: now the newest
            flows[match] = out_port
            return []
        if old_out is not None:
            self.discard(match)  # installed again leading elsewhere
            flows = self._by_in_port.setdefault(match.in_port, {})
        evicted: list[FlowMatch] = []
        while len(flows) >= self.max_per_port:
            oldest = next(iter(flows))
            self.discard(oldest)
            evicted.append(oldest)
        flows[match] = out_port
        self._by_out_port.setdefault(out_port, set()).add(match)
        self._by_src.setdefault(match.eth_src, set()).add(match)
        self._by_dst.setdefault(match.eth_dst, set()).add(match)
        return evicted

    def discard(self, match: FlowMatch) -> None:
        """The flow went (deleted, or removed by the switch)."""
        flows = self._by_in_port.get(match.in_port)
        if flows is None or match not in flows:
            return
        out_port = flows.pop(match)
        if not flows:
            del self._by_in_port[match.in_port]
        _discard(self._by_out_port, out_port, match)
        _discard(self._by_src, match.eth_src, match)
        _discard(self._by_dst, match.eth_dst, match)

    def sends_from(self, mac: str, port: int) -> bool:
        """Whether a flow from `mac` entering by `port` is installed (the switch removes it once idle)."""
        return any(match.in_port == port for match in self._by_src.get(mac, ()))

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

