"""The daemon config file of each lab node (the shape of evio/config/schema.json). Pure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evio.lab.topology import LabNodePlan, LabPlan

TURN_CREDENTIAL_TTL = 86400


def node_dir(lab_dir: Path, node: LabNodePlan) -> Path:
    return lab_dir / "nodes" / node.name


def node_config_path(lab_dir: Path, node: LabNodePlan) -> Path:
    return node_dir(lab_dir, node) / "config.json"


def bridge_name(plan: LabPlan) -> str:
    """The overlay bridge of every node (each in its own namespace, so the same name never clashes)."""
    return f"evbr-{plan.overlay}"


def node_config(
    plan: LabPlan,
    node: LabNodePlan,
    *,
    lab_dir: Path,
    node_id: str,
    password: str,
    turn_secret: str,
    ca_file: Path,
    plaintext: bool = False,
    topology: dict[str, Any] | None = None,
    trust: dict[str, Any] | None = None,
    switching: str = "bounded-flood",
    tunnel: dict[str, Any] | None = None,
    servers: list[str] | None = None,
) -> dict[str, Any]:
    """The config `evio run --config` reads on this node: its identity, the lab's servers, its overlay.

    `topology` is the overlay's `topology` section (s, k, ...); absent, the daemon's defaults apply.
    `trust` is the overlay's `trust` section (CA, certificate, key files); absent, XMPP-only trust.
    `switching` is the bridge's switching mode ("stp": RSTP in OVS, no controller, no on-demand links).
    `tunnel` is the overlay's `tunnel` section; absent, the defaults apply.
    `servers` (host:port each, in the order tried) replaces the one server on the public address (a cluster).
    """
    pub = plan.public
    stun = f"{pub.address}:{pub.stun_port}"
    home = node_dir(lab_dir, node)
    signal: dict[str, Any] = {
        "server": str(pub.address),
        "port": pub.xmpp_port,
        "jid": f"{node.localpart}@{pub.domain}",
        "password": password,
        "ca_file": str(ca_file),
        "tls": "starttls",
    }
    if servers:
        del signal["server"], signal["port"]
        signal["servers"] = list(servers)
    if plaintext:
        signal["insecure_plaintext"] = True
    overlay: dict[str, Any] = {
        "signal": signal,
        "nat_traversal": {
            "stun": [stun],
            "turn": [{"server": stun, "rest_secret": turn_secret, "ttl": TURN_CREDENTIAL_TTL}],
        },
        "bridge": {
            "name": bridge_name(plan),
            "address": str(node.overlay_address),
            # No OVS kernel module in the lab; each node runs its own userspace vswitchd.
            "datapath": "netdev",
        },
    }
    if switching != "bounded-flood":
        overlay["bridge"]["switching"] = switching
    if topology:
        overlay["topology"] = dict(topology)
    if trust:
        overlay["trust"] = dict(trust)
    if tunnel:
        overlay["tunnel"] = dict(tunnel)
    return {
        "node": {"id": node_id, "state_dir": str(home / "state")},
        "logging": {"level": "info", "destination": "file", "file": str(home / "evio.log")},
        "overlays": {plan.overlay: overlay},
    }
