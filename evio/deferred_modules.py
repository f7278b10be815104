"""Modules whose code runs only when a name they lack is first looked up.

A daemon imports libraries that import, whatever we use of them, modules we
never run (os-ken's BGP and zebra codecs, aioice's mDNS and dnspython with
it): megabytes of every daemon's memory. `defer(fullname, preset)`, called
before the module is first imported, makes importing it create the module
as usual but not run its code; the module holds `preset` meanwhile (the
names its importers use at import time). The first lookup of any other name
runs the real code in the same module object, which then answers as usual,
so the library still works if it ever needs the module. importlib's own
`LazyLoader` does not do here: it loads on any attribute, and the import
system reads `__spec__` of a module each time it is imported again.

Callers: evio.sdn.osken_imports, evio.tunnel.path.aioice_mdns, evio.cli.run_cmd, evio.cli (`run`).

Below, the presets of the version lookups some libraries run when imported: slixmpp and os-ken
(through pbr) ask importlib.metadata for their own version, which brings zipfile, csv, email's
parser and tempfile into the daemon for good (1.6 MB traced). `installed_version` reads it from
the `<name>-<version>.dist-info` directory's name (PEP 427, 491; the name normalized to underscores,
an older installer may have kept dots or dashes); an egg, or no dist-info, is asked of
importlib.metadata as before.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import re
import sys
import threading
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.abc import Loader, MetaPathFinder
else:
    # The import system only calls their methods; importlib.abc would bring importlib.resources, tempfile
    # and shutil's archivers into every daemon (0.13 MB resident) for two base classes.
    Loader = MetaPathFinder = object


class DeferredModule(types.ModuleType):
    """A module whose code has not run yet: the first lookup of a name it lacks runs it, then answers."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") and name.endswith("__"):
            # The import system and tools probe dunders (`__path__`, `__all__`): not a reason to load.
            raise AttributeError(name)
        with _running_lock:
            # A thread that waited here while another ran the code finds a plain module: it only answers.
            if type(self) is DeferredModule:
                if self in _running:
                    # Its own code, or a module it imports, looked up a name it has not defined yet:
                    # what a partly run module answers in a circular import.
                    raise AttributeError(name)
                spec = self.__spec__
                assert spec is not None and isinstance(spec.loader, _OnFirstUse)
                real = spec.loader.real
                _running.add(self)
                try:
                    real.exec_module(self)  # replaces the preset names with the module's own
                finally:
                    _running.discard(self)
                # Only now a plain module: until its code has run, other threads wait on the lock above
                # instead of seeing it half made.
                self.__class__ = types.ModuleType  # type: ignore[assignment]
                spec.loader = self.__loader__ = real
        return getattr(self, name)


# One lock for every deferred module: a module's code may import another deferred one (re-entrant), and
# a module runs once however many threads look it up first.
_running_lock = threading.RLock()
_running: set[types.ModuleType] = set()


class _OnFirstUse(Loader):
    """Makes the module as usual but leaves running its code to `DeferredModule`."""

    def __init__(self, real: Loader, preset: Mapping[str, object]) -> None:
        self.real = real
        self.preset = preset

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        module.__class__ = DeferredModule
        for name, value in self.preset.items():
            setattr(module, name, value)


class _Finder(MetaPathFinder):
    """Finds the deferred modules as usual, with a loader that runs them on first use."""

    def __init__(self) -> None:
        self.deferred: dict[str, Mapping[str, object]] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        preset = self.deferred.get(fullname)
        if preset is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _OnFirstUse(spec.loader, preset)
        return spec


finder = _Finder()


def defer(fullname: str, preset: Mapping[str, object] | None = None) -> None:
    """Run `fullname`'s code only when a name it lacks is first looked up; until then it holds `preset`.
    A module already imported is left as it is."""
    if fullname in sys.modules:
        return
    finder.deferred[fullname] = dict(preset or {})
    if finder not in sys.meta_path:
        sys.meta_path.insert(0, finder)


# --- versions, without importlib.metadata ------------------------------------------------------


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


# --- email.utils, for cryptography's x509 --------------------------------------------------------


def parseaddr(*args: object, **kwargs: object) -> object:
    """`email.utils.parseaddr`, the one name cryptography.x509 takes from email.utils at import. It calls it
    only to check an `RFC822Name` made from a string, which a daemon never makes; email.utils itself
    brings calendar, quopri and email's charsets and encoders (0.26 MB traced). The first call runs
    the deferred module and answers with its own function."""
    utils = importlib.import_module("email.utils")
    utils.getaddresses  # noqa: B018  (a name the preset lacks: runs the deferred module's code)
    return utils.parseaddr(*args, **kwargs)


# --- slixmpp's GPG wrapper ----------------------------------------------------------------------


def gpg(*args: object, **kwargs: object) -> object:
    """`slixmpp.thirdparty.GPG`, which slixmpp binds at import and only its XEP-0027 plugin calls (evio
    does not register it). The first call runs the deferred module and makes its own GPG."""
    gnupg = importlib.import_module("slixmpp.thirdparty.gnupg")
    gnupg.GenKey  # noqa: B018  (a name the preset lacks: runs the deferred module's code)
    return gnupg.GPG(*args, **kwargs)


# --- dis and ast, for inspect -------------------------------------------------------------------
#
# asyncio and dataclasses import inspect, and inspect imports dis and ast, of which a daemon runs nothing:
# they serve inspect's source and bytecode tools (getsource, getclosurevars, a builtin's signature read from
# its text). When inspect is imported it reads two names of theirs, the compiler flags' names (for its
# CO_* constants) and ast's `NodeVisitor` (the base of its class finder): 0.6 MB traced for those.

# dis.COMPILER_FLAG_NAMES of Python 3.11 (tests/unit/cli/test_daemon_imports.py checks it against this
# Python's dis); inspect makes its CO_* flags from it, which iscoroutinefunction and the like test.
COMPILER_FLAG_NAMES_VERSION = (3, 11)
COMPILER_FLAG_NAMES = {1: "OPTIMIZED", 2: "NEWLOCALS", 4: "VARARGS", 8: "VARKEYWORDS", 16: "NESTED", 32: "GENERATOR",
                       64: "NOFREE", 128: "COROUTINE", 256: "ITERABLE_COROUTINE", 512: "ASYNC_GENERATOR"}


class NodeVisitor:
    """ast.NodeVisitor's walk, on the tree's own node type (`_ast.AST`, built in): inspect subclasses it
    when imported, for the class finder `getsource` uses. ast itself runs when anything else of it is
    looked up, and its `NodeVisitor` is then its own."""

    def visit(self, node: object) -> object:
        return getattr(self, "visit_" + type(node).__name__, self.generic_visit)(node)

    def generic_visit(self, node: object) -> None:
        import _ast

        for name in getattr(node, "_fields", ()):
            value = getattr(node, name, None)
            for item in value if isinstance(value, list) else (value,):
                if isinstance(item, _ast.AST):
                    self.visit(item)


def defer_inspect_tools() -> None:
    """dis and ast run on their first use beyond what inspect reads of them when imported; before inspect is.
    On another Python than the one whose flags are preset, dis loads as usual."""
    if sys.version_info[:2] == COMPILER_FLAG_NAMES_VERSION:
        defer("dis", {"COMPILER_FLAG_NAMES": COMPILER_FLAG_NAMES})
    defer("ast", {"NodeVisitor": NodeVisitor})
