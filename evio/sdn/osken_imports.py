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
# os-ken asks pbr for its version when imported, and pbr asks importlib.metadata (zipfile, csv, email's
# parser: 1.6 MB with slixmpp's, evio.deferred_modules.installed_version); the version is read from the dist-info's name.
VERSION_LOOKUP = "pbr.version"
# The other versions' constants: ofproto_protocol reads their OFP_VERSION when imported, and os-ken's
# Datapath sets its flow format from 1.0's NXFF_OPENFLOW10 (a Nicira extension of 1.0 only) for every switch; 0.3 MB
# traced with 1.5's OXS fields. The values are 1.0-1.5's own (tests/unit/sdn/test_sdn_osken_imports.py
# checks them against the modules); any other name loads the module.
OTHER_VERSION_CONSTANTS = {
    "os_ken.ofproto.ofproto_v1_0": {"OFP_VERSION": 1, "NXFF_OPENFLOW10": 0},
    "os_ken.ofproto.ofproto_v1_2": {"OFP_VERSION": 3},
    "os_ken.ofproto.ofproto_v1_4": {"OFP_VERSION": 5},
    "os_ken.ofproto.ofproto_v1_5": {"OFP_VERSION": 6},
}
# Nicira's match rules for OpenFlow 1.0 (NXM), which os-ken's controller imports for 1.0's flow
# formats only: 0.23 MB traced.
NXM_RULES = "os_ken.ofproto.nx_match"
# os-ken's address converters without netaddr (evio.sdn.osken_addrconv; 0.65 MB traced), and netaddr itself,
# which os_ken.lib.ip imports for validity checks a daemon does not call: both load on another name's use.
ADDRESS_CONVERTERS = "os_ken.lib.addrconv"
NETADDR = "netaddr"
# os-ken's configuration: evio.sdn.osken_config in the place of oslo_config (0.9 MB traced; and with it
# rfc3986 and stevedore, for URI options and configuration-source plugins, which were deferred before).
CONFIG = "os_ken.cfg"


class UnusedParser(types.ModuleType):
    """Stands for an OpenFlow parser module that evio does not load."""

    def __getattr__(self, name: str) -> object:
        raise AttributeError(f"{self.__name__}.{name}: evio loads only the OpenFlow 1.3 parser (evio.sdn.osken_imports)")


def trim_os_ken() -> None:
    if "os_ken.ofproto.ofproto_protocol" in sys.modules:
        return  # already loaded in full
    for name in OTHER_VERSION_PARSERS:
        sys.modules.setdefault(name, UnusedParser(name))
    for name in LOADED_ON_USE + PACKET_LIBRARY + (NXM_RULES,):
        defer(name)
    for name, constants in OTHER_VERSION_CONSTANTS.items():
        defer(name, constants)
    defer(ADDRESS_CONVERTERS, importlib.import_module("evio.sdn.osken_addrconv").CONVERTERS)
    defer(NETADDR)
    sys.modules.setdefault(CONFIG, importlib.import_module("evio.sdn.osken_config"))
    defer(VERSION_LOOKUP, {"VersionInfo": InstalledVersionInfo})
    # Imported now, the deferred `packet` is an attribute of the deferred package, so the parser's
    # `from os_ken.lib.packet import packet` finds it there instead of running the package's code.
    importlib.import_module("os_ken.lib.packet.packet")
