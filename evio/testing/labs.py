"""Helpers for tests that bring up real labs (see tests/integration/conftest.py)."""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable

from evio.lab.lab import Lab
from evio.lab.netns import LinuxHost
from evio.lab.topology import lab_prefix

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
