"""Small checks run from inside lab namespaces: STUN mapping, TCP reachability, TURN REST credentials.

Used by the lab's integration tests and available to diagnostics; the sockets
are created inside a namespace with `run_in`/`socket_in` and then used from
the calling thread.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket

from aioice import stun

from evio.lab.netns import socket_in

_STUN_TRIES = 3


class ProbeError(Exception):
    """A probe got no (valid) answer."""


def stun_binding(sock: socket.socket, server: tuple[str, int], timeout: float = 1.0) -> tuple[str, int]:
    """The address:port `server` saw this UDP socket's binding request come from (XOR-MAPPED-ADDRESS).

    Retransmits the same transaction a few times, as RFC 5389 section 7.2.1 does over UDP.
    """
    request = stun.Message(message_method=stun.Method.BINDING, message_class=stun.Class.REQUEST)
    payload = bytes(request)
    sock.settimeout(timeout)
    for _ in range(_STUN_TRIES):
        sock.sendto(payload, server)
        try:
            while True:
                data, sender = sock.recvfrom(2048)
                try:
                    response = stun.parse_message(data)
                except ValueError:
                    continue
                if response.transaction_id == request.transaction_id:
                    host, port = response.attributes["XOR-MAPPED-ADDRESS"]
                    return str(host), int(port)
        except TimeoutError:
            continue
    raise ProbeError(f"no STUN answer from {server[0]}:{server[1]}")


def stun_mapping(netns: str, servers: list[tuple[str, int]], timeout: float = 1.0) -> list[tuple[str, int]]:
    """From one new UDP socket in `netns`, the mapped address each of `servers` reports, in order."""
    sock = socket_in(netns, socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        sock.bind(("0.0.0.0", 0))
        return [stun_binding(sock, server, timeout) for server in servers]


def tcp_connect(netns: str, address: str, port: int, timeout: float = 2.0) -> str:
    """Try a TCP connection from `netns`: "connected", "refused" (RST came back) or "timeout" (dropped)."""
    sock = socket_in(netns, socket.AF_INET, socket.SOCK_STREAM)
    with sock:
        sock.settimeout(timeout)
        try:
            sock.connect((address, port))
        except ConnectionRefusedError:
            return "refused"
        except TimeoutError:
            return "timeout"
        return "connected"


def turn_rest_credentials(secret: str, user: str, expires_at: int) -> tuple[str, str]:
    """coturn REST API (use-auth-secret) credentials: ("<expiry>:<user>", base64(HMAC-SHA1(secret, username)))."""
    username = f"{expires_at}:{user}"
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return username, base64.b64encode(digest).decode()
