"""The client side of the daemon's control API: `evio status`, `evio ping` and the lab read daemons here.

Blocking calls (the CLI and the lab's threads use them). Every failure to
reach or understand the daemon is a `ControlError` with a one-line reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evio.node.control import ControlError, query, socket_path

STATUS_TIMEOUT = 5.0


def fetch_status(control_socket: Path, timeout: float = STATUS_TIMEOUT) -> dict[str, Any]:
    """The daemon's status document (evio.node.status, version 1)."""
    status = query(control_socket, "status", timeout)
    if not isinstance(status.get("overlays"), dict):
        raise ControlError(f"the daemon at {control_socket} sent a status without overlays")
    return status


def probe(control_socket: Path, overlay: str, peer: str, timeout: float) -> dict[str, Any]:
    """One echo through the tunnel to `peer` (32 hex digits) in `overlay`: {"result": "pong", "rtt_ms": ...}
    or {"result": "no-link", "setting_up": bool} or {"result": "timeout"}."""
    return query(control_socket, "probe", timeout + STATUS_TIMEOUT,
                 {"overlay": overlay, "peer": peer, "timeout": timeout})


def control_socket_for(state_dir: Path) -> Path:
    return socket_path(state_dir)


@dataclass(frozen=True)
class PeerMatch:
    overlay: str
    peer: str  # 32 hex digits
    name: str | None


def find_peer(status: Mapping[str, Any], wanted: str, overlay: str | None = None) -> PeerMatch:
    """The peer `wanted` names: a node id or a unique prefix of one, a bare or full JID, or a JID's user part.

    Looks at the members signaling sees and at the links (a linked peer may have gone offline).
    Raises ControlError when nothing or more than one peer matches.
    """
    text = wanted.strip().lower()
    if not text:
        raise ControlError("no peer given")
    matches: dict[tuple[str, str], str | None] = {}
    for name, doc in status.get("overlays", {}).items():
        if overlay is not None and name != overlay:
            continue
        known: dict[str, str | None] = {}
        for peer, jid in doc.get("peers", {}).items():
            known[peer] = jid.partition("/")[0] if isinstance(jid, str) else None
        for link in doc.get("links", []):
            known.setdefault(link["peer"], link.get("peer_name"))
        for peer, bare in known.items():
            user = bare.partition("@")[0].lower() if bare else None
            if peer.startswith(text) or (bare is not None and text in (bare.lower(), user)) or (
                    bare is not None and text.partition("/")[0] == bare.lower()):
                matches[(name, peer)] = bare
    if overlay is not None and overlay not in status.get("overlays", {}):
        raise ControlError(f"no overlay {overlay!r} on this node")
    if not matches:
        raise ControlError(f"no peer {wanted!r} known to this node (not a member online, not linked)")
    if len(matches) > 1:
        names = ", ".join(f"{peer[:12]} in {ov}" for ov, peer in sorted(matches))
        raise ControlError(f"{wanted!r} matches more than one peer ({names}); give more of the node id or --overlay")
    ((ov, peer), bare), = matches.items()
    return PeerMatch(ov, peer, bare)
