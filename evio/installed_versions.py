"""A distribution's version from its `.dist-info` directory's name, without importlib.metadata.

slixmpp and os-ken (through pbr) look up their own version when imported, with importlib.metadata,
which brings zipfile, csv, email's parser and tempfile into the daemon for good (1.6 MB traced).
The version is the second part of `<name>-<version>.dist-info` (PEP 427, 491), the name normalized
to underscores (an older installer may have kept dots or dashes). Not found that way (an egg, a source tree), it asks importlib.metadata as before.

Callers: evio.cli.run_cmd (slixmpp), evio.sdn.osken_imports (os-ken).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterator


def installed_version(distribution: str) -> str:
    """The installed version of `distribution` (as importlib.metadata.version would answer)."""
    wanted = _normalized(distribution)
    for entry in _path_entries():
        for name in entry:
            if name.endswith(".dist-info"):
                found, _, version = name.removesuffix(".dist-info").partition("-")
                if _normalized(found) == wanted and version:
                    return version
            elif name.endswith(".egg-info") and _normalized(name.partition("-")[0].removesuffix(".egg-info")) == wanted:
                break  # an egg first on the path: its version is in a file
        else:
            continue
        break
    import importlib.metadata

    return importlib.metadata.version(distribution)


def _path_entries() -> Iterator[list[str]]:
    """The names in each directory of sys.path, in its order."""
    for entry in sys.path:
        try:
            yield os.listdir(entry or ".")
        except OSError:
            continue  # missing, or an archive


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "_", distribution).lower()


class InstalledVersionInfo:
    """What os-ken asks of pbr's `VersionInfo` at import: `VersionInfo(package).version_string()`.
    Anything else pbr's class offers is asked of pbr's own."""

    def __init__(self, package: str) -> None:
        self.package = package

    def version_string(self) -> str:
        return installed_version(self.package)

    def __str__(self) -> str:
        return self.version_string()

    def __getattr__(self, name: str) -> object:
        pbr_version = importlib.import_module("pbr.version")
        pbr_version.SemanticVersion  # noqa: B018  (a name the preset lacks: runs the deferred module's code)
        return getattr(pbr_version.VersionInfo(self.package), name)


def version_info(version: str) -> tuple[int, int, int]:
    """slixmpp's `__version_info__` of `version`: its first three parts as numbers, else (0, 0, 0)."""
    parts = version.split(".")[:3]
    if len(parts) == 3 and all(part.isdigit() for part in parts):
        return int(parts[0]), int(parts[1]), int(parts[2])
    return 0, 0, 0
