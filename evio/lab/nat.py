"""nftables rulesets for the NAT routers.

eim:       masquerade keeps the source port when it can, so one inside socket
           maps to one outside address:port whatever the destination
           (endpoint-independent mapping, what hole punching needs).
symmetric: `masquerade random` picks a new port per 5-tuple, so each
           destination sees another mapping and hole punching fails.
none:      the router only routes; the node's private address is reachable.

Both NAT kinds drop new inbound connections in the input and forward chains.
Without that rule Linux NAT breaks simultaneous open: a peer's early probe
creates a conntrack entry that collides with the later outbound mapping, and
masquerade then moves to another port (recipes 4.4, pitfall 1).
"""

from __future__ import annotations

from evio.lab.topology import NatKind

NAT_TABLE = "evio_nat"


def nat_ruleset(kind: NatKind, wan_interface: str) -> str | None:
    """The `nft -f` input for a router whose public side is `wan_interface`; None for no NAT."""
    if kind == "none":
        return None
    masquerade = "masquerade random" if kind == "symmetric" else "masquerade"
    wan = _quoted(wan_interface)
    return (
        f"table ip {NAT_TABLE} {{\n"
        "  chain postrouting {\n"
        "    type nat hook postrouting priority srcnat; policy accept;\n"
        f"    oifname {wan} {masquerade}\n"
        "  }\n"
        "  chain input {\n"
        "    type filter hook input priority filter; policy accept;\n"
        f"    iifname {wan} ct state new drop\n"
        "  }\n"
        "  chain forward {\n"
        "    type filter hook forward priority filter; policy accept;\n"
        f"    iifname {wan} ct state new drop\n"
        "  }\n"
        "}\n"
    )


def _quoted(name: str) -> str:
    if not name or any(c in name for c in '"\\\n '):
        raise ValueError(f"interface name not usable in nft: {name!r}")
    return f'"{name}"'
