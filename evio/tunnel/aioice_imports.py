"""Load aioice's mDNS module (and dnspython with it) only if an mDNS name is ever resolved.

aioice imports `aioice.mdns` whatever the candidates, and with it most of
dnspython: about 2 MB of every daemon's memory. The module is needed only to
resolve a remote candidate named `<uuid>.local`, and evio refuses any
candidate that is not an IP address before it reaches aioice
(evio.tunnel.signaling), so a daemon never resolves one.

At import, aioice uses two names of the module: `MDnsProtocol` (in a
signature, evaluated then) and, per remote candidate, `is_mdns_hostname`.
`defer_mdns()`, called before aioice is first imported, makes the module at
first a stand-in holding just these two (the test for a name is the same
pattern as aioice's); the first lookup of any other name runs the real
module's code in its place, so resolving a `.local` name would still work.
Called after aioice is loaded, it changes nothing.

Figures: docs/design.md, "What a daemon imports".
"""

from __future__ import annotations

import asyncio
import importlib.abc
import importlib.machinery
import re
import sys
import types
from collections.abc import Sequence

MDNS_MODULE = "aioice.mdns"

# draft-ietf-mmusic-mdns-ice-candidates section 3.1.1: a UUID label under .local, as aioice tests it.
_MDNS_NAME = re.compile(r"^[a-zA-Z0-9-]{1,63}\.local$")


def is_mdns_hostname(name: str) -> bool:
    return _MDNS_NAME.match(name) is not None


class MDnsProtocol(asyncio.DatagramProtocol):
    """Stands for aioice's class until its module is loaded (aioice names it in a signature)."""


class _MdnsStandIn(types.ModuleType):
    """`aioice.mdns` before its code ran: the first lookup of another name runs it, then answers."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # the import system's probes are no reason to load
        spec = self.__spec__
        assert spec is not None and isinstance(spec.loader, _StandInFirst)
        real = spec.loader.real
        self.__class__ = types.ModuleType  # type: ignore[assignment]  # a plain module from now on
        spec.loader = self.__loader__ = real
        real.exec_module(self)  # replaces the stand-ins with aioice's own
        return getattr(self, name)


class _StandInFirst(importlib.abc.Loader):
    def __init__(self, real: importlib.abc.Loader) -> None:
        self.real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__class__ = _MdnsStandIn
        module.is_mdns_hostname = is_mdns_hostname  # type: ignore[attr-defined]
        module.MDnsProtocol = MDnsProtocol  # type: ignore[attr-defined]


class _DeferMdns(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != MDNS_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _StandInFirst(spec.loader)
        return spec


_finder = _DeferMdns()


def defer_mdns() -> None:
    if MDNS_MODULE in sys.modules:
        return  # aioice is loaded in full already
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
