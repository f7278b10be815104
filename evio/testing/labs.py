"""Helpers for tests that bring up real labs (see tests/integration/conftest.py)."""

from __future__ import annotations

import secrets
import string
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from evio.lab.lab import Lab
from evio.lab.netns import LinuxHost
from evio.lab.state import DEFAULT_ROOT, lab_dir
from evio.lab.topology import lab_prefix
from evio.testing.host_snapshot import HostSnapshot, take_snapshot

LabFactory = Callable[..., Lab]  # lab_factory(nodes=..., nat=..., **Lab.up keywords) -> Lab

_ALPHABET = string.ascii_lowercase + string.digits


def unique_lab_name() -> str:
    """"t" + 4 random characters, not used by any lab on this machine right now.

    Parallel test runs and a user's own lab (default name "lab") never collide.
    """
    taken = LinuxHost().netns_list()
    while True:
        name = "t" + "".join(secrets.choice(_ALPHABET) for _ in range(4))
        prefix = lab_prefix(name)
        if not any(ns.startswith(prefix) for ns in taken) and name not in Lab.names():
            return name


def lab_cli(*args: str, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`evio lab ARGS...` as a user types it, in a process of its own: its output and exit status."""
    return subprocess.run([sys.executable, "-m", "evio", "lab", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def lab_leftovers(name: str, before: HostSnapshot, inodes: frozenset[int] = frozenset()) -> set[str]:
    """What lab `name` left on this machine that was not there at `before`."""
    after = take_snapshot()
    mine = after.owned(lab_prefix(name), lab_dir(DEFAULT_ROOT, name), inodes)
    return mine - before.owned(lab_prefix(name), lab_dir(DEFAULT_ROOT, name), inodes)
