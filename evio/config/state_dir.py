"""The node's state directory, and the node id kept in it.

A node without `node.id` in its config gets a random id on first start and
keeps it across restarts, so its place on the ring does not move. The I/O is
behind `StateDir` so the rule is unit-tested against a fake
(evio.testing.state_dir.MemoryStateDir).
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import tempfile
from pathlib import Path
from typing import Protocol

from evio.config.loader import ConfigError
from evio.config.model import Config
from evio.config.problems import Problem
from evio.ids import NODE_ID_BITS, NodeIdError, format_node_id, parse_node_id

log = logging.getLogger(__name__)

NODE_ID_FILE = "node_id"


class StateDir(Protocol):
    """Small named text files that persist across restarts."""

    def read(self, name: str) -> str | None:
        """The file's text, or None when it does not exist."""
        ...

    def write(self, name: str, text: str) -> None:
        """Replace the file atomically."""
        ...


class FileStateDir:
    """StateDir on disk; the directory is created (mode 0700) on first write."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self, name: str) -> str | None:
        try:
            return (self.path / name).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def write(self, name: str, text: str) -> None:
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Write then rename so a crash never leaves a half-written file.
        fd, temporary = tempfile.mkstemp(dir=self.path, prefix=f".{name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path / name)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def resolve_node_id(config: Config, state_dir: StateDir, rng: random.Random | None = None) -> int:
    """The node id: from the config, else the one persisted in the state directory, else a new one (persisted).

    A persisted id that is not 32 hex digits is an error rather than silently
    replaced, since a new id moves the node on the ring of every overlay.
    """
    if config.node.id is not None:
        return config.node.id
    stored = state_dir.read(NODE_ID_FILE)
    if stored is not None:
        try:
            return parse_node_id(stored.strip())
        except NodeIdError:
            raise ConfigError(
                [Problem("$.node.id", f"absent, and state file {NODE_ID_FILE!r} holds no valid node id: {stored.strip()[:40]!r}")]
            ) from None
    node_id = (rng or secrets.SystemRandom()).getrandbits(NODE_ID_BITS)
    state_dir.write(NODE_ID_FILE, format_node_id(node_id) + "\n")
    log.info("generated node id %s", format_node_id(node_id))
    return node_id
