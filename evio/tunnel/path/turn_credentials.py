"""Time-limited TURN credentials (the "TURN REST API" of coturn, draft-uberti-behave-turn-rest).

The server and the daemon share a secret. The username is the expiry time
(Unix seconds) and a user tag; the password is the base64 HMAC-SHA1 of the
username under the secret. ``now`` is passed in, so this stays pure.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass, field

from evio.config.model import TurnServer


@dataclass(frozen=True)
class TurnCredentials:
    username: str
    password: str = field(repr=False)


def rest_credentials(secret: str, user: str, now: float, ttl: float = TurnServer.ttl) -> TurnCredentials:
    if ttl <= 0:
        raise ValueError("ttl must be positive")
    username = f"{int(now + ttl)}:{user}"
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return TurnCredentials(username, base64.b64encode(digest).decode())


@dataclass(frozen=True)
class TurnRelay:
    host: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    secret: str | None = field(default=None, repr=False)
    """REST API shared secret: time-limited credentials are derived from it."""
    credential_ttl: float = TurnServer.ttl
    transport: str = TurnServer.transport
    """"auto", "udp", "tcp" or "tls" (servers.attempts)."""
    tls_port: int = TurnServer.tls_port
    ca_file: str | None = None

    def credentials(self, user: str, now: float) -> TurnCredentials:
        if self.secret is not None:
            return rest_credentials(self.secret, user, now, self.credential_ttl)
        if self.username is None or self.password is None:
            raise ValueError("a TURN server needs a username and password or a REST secret")
        return TurnCredentials(self.username, self.password)
