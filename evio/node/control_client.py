"""The client side of the daemon's control API: `evio status`, `evio ping` and the lab read daemons here.

Blocking calls (the CLI and the lab's threads use them). Every failure to
reach or understand the daemon is a `ControlError` with a one-line reason.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOCKET_NAME = "control.sock"
MAX_RESPONSE_BYTES = 16 * 1024 * 1024


class ControlError(Exception):
    """The daemon could not be asked, or answered with an error."""


def socket_path(state_dir: Path) -> Path:
    return state_dir / SOCKET_NAME


def query(path: Path, request: str, timeout: float = 5.0, fields: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Ask the daemon listening on `path` (blocking; for the CLI). Returns the answer's payload."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(str(path))
            conn.sendall(json.dumps({**(fields or {}), "request": request}).encode() + b"\n")
            chunks = []
            size = 0
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise ControlError(f"answer from {path} too large")
        except FileNotFoundError:
            raise ControlError(f"no daemon control socket at {path} (is evio running?)") from None
        except ConnectionRefusedError:
            raise ControlError(f"nothing listens on {path} (the daemon is not running)") from None
        except PermissionError:
            raise ControlError(f"no access to {path} (the control socket is root's only)") from None
        except TimeoutError:
            raise ControlError(f"the daemon at {path} did not answer within {timeout:g} s") from None
        except OSError as exc:
            raise ControlError(f"cannot ask the daemon at {path}: {exc}") from None
    try:
        answer = json.loads(b"".join(chunks))
    except (ValueError, RecursionError):
        raise ControlError(f"unreadable answer from {path}") from None
    if not isinstance(answer, dict):
        raise ControlError(f"unreadable answer from {path}")
    if not answer.get("ok"):
        raise ControlError(str(answer.get("error", "request failed")))
    payload = answer.get(request, {})
    return payload if isinstance(payload, dict) else {}

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
