"""A problem found in a configuration document, and the JSON path that says where.

Shared by the loader (parsing, schema) and the semantic checks, so neither imports the other for it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    path: str  # JSON path of the offending value, like $.overlays.ov1.bridge.mtu
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def json_path(parts: Iterable[str | int]) -> str:
    """$.a.b[0] style path; keys that are not plain words are quoted: $["a b"]."""
    path = "$"
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            path += "." + part
        else:
            path += "[" + json.dumps(part) + "]"
    return path
