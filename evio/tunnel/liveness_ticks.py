"""One grid of liveness ticks per event loop: the tunnels of a node wake together.

An up tunnel checks its liveness every `keepalive / 4` seconds (0.375 s by
default). Each tunnel waiting on a timer of its own costs the loop one wake-up
per tunnel and tick: with 16 tunnels a daemon woke some 43 times a second for
them alone, and in a lab of 64 daemons on two cores those wake-ups are a large
part of the idle load. Here a wait ends at the next multiple of its interval on
the loop's clock, so every tunnel ticking at the same interval is woken by the
same timer, in one pass of the loop.

A wait never lasts longer than the interval asked for (it ends at the next
multiple of it), so silence and dead-peer detection are as prompt as with a
timer per tunnel; only the first wait after a change of pace is shorter.
"""

from __future__ import annotations

import asyncio
import math
import weakref

_GridKey = tuple[float, int]  # (interval, multiple of it)


class TickGrid:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._due: dict[_GridKey, list[asyncio.Future[None]]] = {}
        self.timers = 0  # timers armed (for tests and accounting)

    def wait(self, interval: float) -> asyncio.Future[None]:
        """A future that is done at the next multiple of `interval` on the loop's clock, strictly after now.

        The caller may resolve or cancel it earlier (to wake at once); the grid then skips it.
        """
        if not interval > 0:
            raise ValueError("interval must be positive")
        slot = math.floor(self._loop.time() / interval) + 1
        key = (interval, slot)
        future: asyncio.Future[None] = self._loop.create_future()
        waiters = self._due.get(key)
        if waiters is None:
            waiters = self._due[key] = []
            self._loop.call_at(slot * interval, self._fire, key)
            self.timers += 1
        waiters.append(future)
        return future

    @property
    def pending(self) -> int:
        """Grid points with a timer armed."""
        return len(self._due)

    def _fire(self, key: _GridKey) -> None:
        for future in self._due.pop(key, ()):
            if not future.done():
                future.set_result(None)


_grids: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TickGrid] = weakref.WeakKeyDictionary()


def tick_grid(loop: asyncio.AbstractEventLoop | None = None) -> TickGrid:
    """The grid of `loop` (default: the running loop), made on first use."""
    loop = loop or asyncio.get_running_loop()
    grid = _grids.get(loop)
    if grid is None:
        grid = _grids[loop] = TickGrid(loop)
    return grid
