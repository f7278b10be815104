"""Load only the os-ken the daemon uses: OpenFlow 1.3, and its packet library only on first use.

os-ken imports, whatever an app speaks, the message parsers of OpenFlow 1.0,
1.2, 1.3, 1.4 and 1.5 (`ofproto_protocol` lists them all) and, through its
TCP decoder, its BGP and zebra codecs: about 10 MB of an idle daemon's
memory for code it never runs. Our app speaks 1.3 only (`OFP_VERSIONS`) and the
bridges are created with `protocols=OpenFlow13`, so no other version can be
negotiated; and nothing of ours decodes BGP or zebra. Nor does the daemon
use os-ken's packet library at all (the controller reads and packs frames
itself), yet the 1.3 parser imports it for a method that makes a `Packet`
from JSON, and the package loads its 30-odd protocol codecs (3 MB).

`trim_os_ken()`, called before os-ken is first imported, makes the four other
versions' parser modules empty placeholders (os-ken then registers no
messages for them; using one raises an error that says why) and loads the
BGP and zebra codecs only when a name of theirs is first looked up (a TCP
segment to port 179 or 2600 would still decode; evio.deferred_modules), and
the packet library (the package and its `packet` module) the same way: the
first lookup of a codec or of `packet.Packet` loads it as before.
Called after os-ken is loaded, it changes nothing.

Figures: docs/design.md, "What a daemon imports".
"""

from __future__ import annotations

import importlib
import sys
import types

from evio.deferred_modules import InstalledVersionInfo, defer

OTHER_VERSION_PARSERS = tuple(f"os_ken.ofproto.ofproto_v1_{v}_parser" for v in ("0", "2", "4", "5"))
LOADED_ON_USE = ("os_ken.lib.packet.bgp", "os_ken.lib.packet.zebra")
PACKET_LIBRARY = ("os_ken.lib.packet", "os_ken.lib.packet.packet")
# oslo_config (os-ken's configuration) checks URI options with rfc3986 and loads configuration sources
# through stevedore's plugins; os-ken has neither: with idna and unicodedata, 0.7 MB loaded only on use.
CONFIG_EXTRAS = ("rfc3986", "stevedore")
# os-ken asks pbr for its version when imported, and pbr asks importlib.metadata (zipfile, csv, email's
# parser: 1.6 MB with slixmpp's, evio.deferred_modules.installed_version); the version is read from the dist-info's name.
VERSION_LOOKUP = "pbr.version"


class UnusedParser(types.ModuleType):
    """Stands for an OpenFlow parser module that evio does not load."""

    def __getattr__(self, name: str) -> object:
        raise AttributeError(f"{self.__name__}.{name}: evio loads only the OpenFlow 1.3 parser (evio.sdn.osken_imports)")


def trim_os_ken() -> None:
    if "os_ken.ofproto.ofproto_protocol" in sys.modules:
        return  # already loaded in full
    for name in OTHER_VERSION_PARSERS:
        sys.modules.setdefault(name, UnusedParser(name))
    for name in LOADED_ON_USE + PACKET_LIBRARY + CONFIG_EXTRAS:
        defer(name)
    defer(VERSION_LOOKUP, {"VersionInfo": InstalledVersionInfo})
    # Imported now, the deferred `packet` is an attribute of the deferred package, so the parser's
    # `from os_ken.lib.packet import packet` finds it there instead of running the package's code.
    importlib.import_module("os_ken.lib.packet.packet")
