"""The node's side of a join token: the files `evio join` writes, decided without touching the disk.

    /etc/evio/config.json            the daemon's config, no secrets inline     0600
    /etc/evio/<overlay>/xmpp.password, turn.password, node.key                   0600
    /etc/evio/<overlay>/xmpp-ca.crt, ca.crt, node.crt                            0644
    /etc/evio/<overlay>/member-list.json (the CA's member list, if the token has one) 0644

`node_files` returns them as (path, content, mode); `evio join` writes the
secrets first and the config last, and checks the config with the daemon's
own loader before it takes its place, so a node never holds a config that
`evio run` would refuse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evio.server.token import JoinToken

CONFIG_DIR = Path("/etc/evio")
STATE_DIR = Path("/var/lib/evio")
_BRIDGE_PREFIX = "evbr-"
_IFNAMSIZ = 15


@dataclass(frozen=True)
class NodeFile:
    path: Path
    content: str
    mode: int


def config_path(config_dir: Path = CONFIG_DIR) -> Path:
    return config_dir / "config.json"


def node_files(token: JoinToken, config_dir: Path = CONFIG_DIR, state_dir: Path = STATE_DIR) -> list[NodeFile]:
    """Every file of the node, the config last."""
    d = config_dir / token.overlay
    secrets = [
        NodeFile(d / "xmpp.password", token.xmpp_password + "\n", 0o600),
        NodeFile(d / "turn.password", token.turn_password + "\n", 0o600),
        NodeFile(d / "node.key", token.key_pem, 0o600),
        NodeFile(d / "xmpp-ca.crt", token.xmpp_ca_pem, 0o644),
        NodeFile(d / "ca.crt", token.ca_pem, 0o644),
        NodeFile(d / "node.crt", token.cert_pem, 0o644),
    ]
    if token.member_list:  # beside the CA: the overlay's membership from the start (decisions 0059, 0063)
        secrets.append(NodeFile(d / "member-list.json", token.member_list, 0o644))
    config = json.dumps(config_document(token, d, state_dir), indent=2) + "\n"
    return [*secrets, NodeFile(config_path(config_dir), config, 0o600)]


def config_document(token: JoinToken, overlay_dir: Path, state_dir: Path) -> dict[str, Any]:
    bridge: dict[str, Any] = {"address": token.address}
    if len(_BRIDGE_PREFIX + token.overlay) > _IFNAMSIZ:
        bridge["name"] = (_BRIDGE_PREFIX + token.overlay)[:_IFNAMSIZ]  # the default name would not fit
    return {
        "node": {"id": f"{token.node_id:032x}", "state_dir": str(state_dir)},
        "overlays": {
            token.overlay: {
                "signal": {
                    "server": token.xmpp_server,
                    "port": token.xmpp_port,
                    "jid": token.jid,
                    "password_file": str(overlay_dir / "xmpp.password"),
                    "ca_file": str(overlay_dir / "xmpp-ca.crt"),
                    "tls": "starttls",
                },
                "nat_traversal": {
                    "stun": list(token.stun),
                    "turn": [
                        {
                            "server": token.turn_server,
                            "username": token.turn_username,
                            "password_file": str(overlay_dir / "turn.password"),
                        }
                    ],  # fmt: skip
                },
                "bridge": bridge,
                "trust": {
                    "ca_file": str(overlay_dir / "ca.crt"),
                    "cert_file": str(overlay_dir / "node.crt"),
                    "key_file": str(overlay_dir / "node.key"),
                },
            }
        },
    }


def joined_overlay(config: Any) -> tuple[str, str] | None:
    """(overlay, jid) of a config `evio join` wrote, or None for anything else."""
    try:
        [(overlay, section)] = config["overlays"].items()
        return str(overlay), str(section["signal"]["jid"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
