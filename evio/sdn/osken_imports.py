"""Load only the os-ken the daemon uses: OpenFlow 1.3, and the packet library without BGP and zebra.

os-ken imports, whatever an app speaks, the message parsers of OpenFlow 1.0,
1.2, 1.3, 1.4 and 1.5 (`ofproto_protocol` lists them all) and, through its
TCP decoder, its BGP and zebra codecs: about 10 MB of an idle daemon's
memory for code it never runs. Our app speaks 1.3 only (`OFP_VERSIONS`) and the
bridges are created with `protocols=OpenFlow13`, so no other version can be
negotiated; and nothing of ours decodes BGP or zebra.

`trim_os_ken()`, called before os-ken is first imported, makes the four other
versions' parser modules empty placeholders (os-ken then registers no
messages for them; using one raises an error that says why) and loads the
BGP and zebra codecs only when a name of theirs is first looked up (a TCP
segment to port 179 or 2600 would still decode). importlib's own
`LazyLoader` does not do here: it loads on any attribute, and the import
system reads `__spec__` of a module each time it is imported again. Called
after os-ken is loaded, it changes nothing.

Figures: docs/design.md, "What a daemon imports".
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence

OTHER_VERSION_PARSERS = tuple(f"os_ken.ofproto.ofproto_v1_{v}_parser" for v in ("0", "2", "4", "5"))
LOADED_ON_USE = ("os_ken.lib.packet.bgp", "os_ken.lib.packet.zebra")


class UnusedParser(types.ModuleType):
    """Stands for an OpenFlow parser module that evio does not load."""

    def __getattr__(self, name: str) -> object:
        raise AttributeError(f"{self.__name__}.{name}: evio loads only the OpenFlow 1.3 parser (evio.sdn.osken_imports)")


class _DeferredModule(types.ModuleType):
    """A module whose code has not run yet: the first lookup of a name it lacks runs it, then answers."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") and name.endswith("__"):
            # The import system and tools probe dunders (`__path__`, `__all__`): not a reason to load.
            raise AttributeError(name)
        spec = self.__spec__
        assert spec is not None and isinstance(spec.loader, _OnFirstUse)
        real = spec.loader.real
        self.__class__ = types.ModuleType  # type: ignore[assignment]  # a plain module from now on
        spec.loader = self.__loader__ = real
        real.exec_module(self)
        return getattr(self, name)


class _OnFirstUse(importlib.abc.Loader):
    """Makes the module as usual but leaves running its code to `_DeferredModule`."""

    def __init__(self, real: importlib.abc.Loader) -> None:
        self.real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        module.__class__ = _DeferredModule


class _LoadOnUse(importlib.abc.MetaPathFinder):
    """Finds the modules of LOADED_ON_USE as usual, with a loader that runs them on first use."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in LOADED_ON_USE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _OnFirstUse(spec.loader)
        return spec


_finder = _LoadOnUse()


def trim_os_ken() -> None:
    if "os_ken.ofproto.ofproto_protocol" in sys.modules:
        return  # already loaded in full
    for name in OTHER_VERSION_PARSERS:
        sys.modules.setdefault(name, UnusedParser(name))
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
