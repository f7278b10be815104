"""`evio config` (placeholder until its issue lands)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("config", help="(not yet implemented)")
    parser.set_defaults(handler=lambda args: _missing())


def _missing() -> int:
    raise SystemExit("evio config: not implemented yet")
