"""Load aioice's mDNS module (and dnspython with it) only if an mDNS name is ever resolved.

aioice imports `aioice.mdns` whatever the candidates, and with it most of
dnspython: about 2 MB of every daemon's memory. The module is needed only to
resolve a remote candidate named `<uuid>.local`, and evio refuses any
candidate that is not an IP address before it reaches aioice
(evio.tunnel.path.offer_answer), so a daemon never resolves one.

At import, aioice uses two names of the module: `MDnsProtocol` (in a
signature, evaluated then) and, per remote candidate, `is_mdns_hostname`.
`defer_mdns()`, called before aioice is first imported, makes the module at
first hold just these two (the test for a name is the same pattern as
aioice's); the first lookup of any other name runs the real module's code in
its place, so resolving a `.local` name would still work
(evio.deferred_modules).
Called after aioice is loaded, it changes nothing.

Figures: docs/design.md, "What a daemon imports".
"""

from __future__ import annotations

import asyncio
import re

from evio.deferred_modules import defer

MDNS_MODULE = "aioice.mdns"

# draft-ietf-mmusic-mdns-ice-candidates section 3.1.1: a UUID label under .local, as aioice tests it.
_MDNS_NAME = re.compile(r"^[a-zA-Z0-9-]{1,63}\.local\Z")


def is_mdns_hostname(name: str) -> bool:
    return _MDNS_NAME.match(name) is not None


class MDnsProtocol(asyncio.DatagramProtocol):
    """Stands for aioice's class until its module is loaded (aioice names it in a signature)."""


def defer_mdns() -> None:
    defer(MDNS_MODULE, {"is_mdns_hostname": is_mdns_hostname, "MDnsProtocol": MDnsProtocol})
