"""Run an asyncio task in a thread of its own, on a plain asyncio loop.

For parts that cannot run on the daemon's uvloop (pyroute2's AsyncIPRoute
opens netlink sockets as datagram endpoints, which uvloop refuses). The task
is cancelled and the thread joined by `stop()`; a crash is logged, and
reported to `on_exit`, in the thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


class PlainLoopThread:
    def __init__(self, name: str, make: Callable[[], Coroutine[Any, Any, None]],
                 on_exit: Callable[[BaseException | None], None] | None = None) -> None:
        self.name = name
        self._make = make
        self._on_exit = on_exit
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(5.0)

    def stop(self, timeout: float = 5.0) -> None:
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop closed meanwhile: nothing left to cancel
                pass
        if self._thread.is_alive():
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("%s did not stop within %.0f s", self.name, timeout)

    def _main(self) -> None:
        error: BaseException | None = None
        try:
            asyncio.run(self._run())
        except asyncio.CancelledError:
            pass
        except BaseException as exc:
            error = exc
            log.error("%s failed", self.name, exc_info=exc)
        finally:
            self._ready.set()
        if self._on_exit is not None:
            self._on_exit(error)

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._ready.set()
        await self._make()
