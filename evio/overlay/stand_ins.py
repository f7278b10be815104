"""Stand-ins for a doubted successor: the peers linked beside it while its tunnel is probed.

A successor that leaves signaling while its tunnel is up is *doubted* for `standby_window` (the
orchestrator evaluates at once, and the tunnel probes it). Meanwhile the successors we would have
without it are wanted too, as stand-ins, but only peers we have no tunnel with: so a crashed
successor's place is taken by a link already up or on its way when its tunnel is found dead; a
live one keeps its link (presence alone never takes a link away), and the stand-in goes when the
doubt expires, as any surplus link does.

Pure: `now` comes in; `choose` returns the stand-ins to add to the selection. Owned by
`evio.overlay.orchestrator`, used by `evio.overlay.evaluation`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from evio.overlay.symphony import Ring, Selection


class StandIns:
    def __init__(self) -> None:
        self._doubted: dict[int, float] = {}  # up successor gone from signaling -> until when it has a stand-in
        self._stand_in: dict[int, float] = {}  # peer linked as a stand-in -> until when it is wanted as one

    def doubt(self, peer: int, until: float) -> None:
        self._doubted[peer] = until

    def believe(self, peer: int) -> bool:
        """The peer is back in signaling: True if it was doubted (its stand-in is not needed any more)."""
        return self._doubted.pop(peer, None) is not None

    def choose(
        self,
        node_id: int,
        successors: int,
        ring: Ring,
        selection: Selection,
        has_tunnel: Callable[[int], bool],
        now: float,
    ) -> tuple[int, ...]:
        """The successors we would have without our doubted successors, where they are not successors now.

        `successors`: how many the topology wants (s); `has_tunnel(peer)`: we have or are making a tunnel."""
        doubts = {p: until for p, until in self._doubted.items() if until > now and p in selection.successors}
        if not doubts:
            self._stand_in.clear()  # back in signaling, or dead and out of the ring: no stand-in is kept as one
            return ()
        without = Ring(set(ring) - doubts.keys())
        count = min(successors, len(without) - 1)
        nearest = [without.peer_at(node_id, d) for d in range(1, count + 1)]
        chosen = []
        for peer in nearest:
            if peer in selection.successors:
                continue
            # A peer we have a tunnel with (a long-distance link, say) needs none: the flood uses it already,
            # and should the doubted one die it becomes a successor by a retype, no new tunnel.
            if peer in self._stand_in or not has_tunnel(peer):
                self._stand_in[peer] = max(doubts.values())
                chosen.append(peer)
        return tuple(chosen)

    def expire(self, now: float) -> bool:
        """Forget doubts and stand-ins whose time passed: True if any did (an evaluation is wanted)."""
        expired = False
        for table in (self._doubted, self._stand_in):
            for peer in [p for p, until in table.items() if until <= now]:
                del table[peer]  # it lived (or is gone for good): its stand-in goes as any surplus link
                expired = True
        return expired

    def wakeups(self) -> Iterable[float]:
        return self._doubted.values()

    def clear(self) -> None:
        self._doubted.clear()
        self._stand_in.clear()
