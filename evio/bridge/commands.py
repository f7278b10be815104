"""The one narrow interface the bridge code uses to reach the OS: run a command, get its output."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

log = logging.getLogger(__name__)


class BridgeError(Exception):
    """Base of the bridge package's errors."""


class CommandError(BridgeError):
    """A command exited non-zero (or could not be started)."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"{' '.join(argv)} exited {returncode}: {stderr.strip()}")


class CommandRunner(Protocol):
    async def run(self, argv: Sequence[str]) -> str:
        """Run `argv`; return its stdout, raise CommandError if it fails."""
        ...


class SubprocessRunner:
    """Runs commands as subprocesses, optionally behind a prefix such as `ip netns exec NS`."""

    def __init__(self, prefix: Sequence[str] = (), timeout: float = 30.0) -> None:
        self.prefix = list(prefix)
        self.timeout = timeout

    async def run(self, argv: Sequence[str]) -> str:
        full = self.prefix + list(argv)
        log.debug("run %s", full)
        try:
            proc = await asyncio.create_subprocess_exec(
                *full, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
        except OSError as err:
            raise CommandError(full, -1, str(err)) from err
        try:
            out, err_out = await asyncio.wait_for(proc.communicate(), self.timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise CommandError(full, -1, f"timed out after {self.timeout} s") from None
        if proc.returncode != 0:
            raise CommandError(full, proc.returncode or -1, err_out.decode(errors="replace"))
        return out.decode(errors="replace")
