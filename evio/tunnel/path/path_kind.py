"""Which of a tunnel's two ICE connections carries it: direct (host, server-reflexive) or relayed (TURN).

Its own module, free of aioice, so that the pure lifecycle machine and the
status reports can name a path without importing ICE.
"""

from __future__ import annotations

import enum


class PathKind(enum.Enum):
    DIRECT = "direct"
    RELAY = "relay"
