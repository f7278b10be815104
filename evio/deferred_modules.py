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

Callers: evio.sdn.osken_imports, evio.tunnel.path.aioice_mdns.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import types
from collections.abc import Mapping, Sequence


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


class _OnFirstUse(importlib.abc.Loader):
    """Makes the module as usual but leaves running its code to `DeferredModule`."""

    def __init__(self, real: importlib.abc.Loader, preset: Mapping[str, object]) -> None:
        self.real = real
        self.preset = preset

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        module.__class__ = DeferredModule
        for name, value in self.preset.items():
            setattr(module, name, value)


class _Finder(importlib.abc.MetaPathFinder):
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
