"""Which step of a login failed, in words an operator can act on. Pure: the XMPP adapter feeds it.

A login goes through these steps in order. `LoginAttempt` is told of each one
reached and of each refusal heard; `failure()` then names the step that failed
and the thing it concerns (server and port, the name checked and the CA, the
account, the group):

1. tcp: connect to server:port (refused, unreachable, timed out, name not resolved);
2. tls: STARTTLS offered and the handshake done (direct TLS: from the first
   byte), the server's certificate verified for the JID's domain against
   `ca_file` or the system store;
3. sasl: the credentials accepted, or no mechanism offered that we accept.
   `not-authorized` (RFC 6120 6.5) covers both a wrong password and a missing
   account; the exchange tells them apart where it can: prosody refuses a
   SCRAM login for a missing account at once, and sends its challenge (salt and
   iteration count) only for an account it has. With PLAIN it answers both alike;
4. stream: a session bound to our own JID and the roster fetched;
5. membership: the roster has the overlay's group (`membership_failure`, per overlay).

The first refusal heard wins: what slixmpp does after it (try another
mechanism, give up, close the stream) follows from it and says less.
"""

from __future__ import annotations

import enum
import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass

from evio.signal.errors import LoginFailure, SignalStep


@dataclass(frozen=True)
class LoginTarget:
    """What a login attempt is aimed at, as the messages name it."""

    jid: str  # bare
    server: str
    port: int
    tls: str  # "starttls", "direct" or "plaintext"
    ca_file: str | None = None  # None: the system store
    client_cert: str | None = None  # set: login by SASL EXTERNAL with this certificate

    @property
    def domain(self) -> str:
        return self.jid.partition("@")[2]

    @property
    def address(self) -> str:
        host = f"[{self.server}]" if ":" in self.server else self.server
        return f"{host}:{self.port}"

    @property
    def trust(self) -> str:
        return f"the CA file {self.ca_file}" if self.ca_file else "the system CA store"


class Reached(enum.IntEnum):
    """How far an attempt got, in order."""

    CONNECTING = 0
    CONNECTED = 1  # TCP up (with direct TLS: TLS too)
    SECURED = 2  # TLS done
    AUTHENTICATED = 3  # SASL success
    SESSION = 4  # bound and roster fetched


_ERRNO_TEXT = {
    errno.ECONNREFUSED: "connection refused (nothing listens on port {port} there, or a firewall rejects it)",
    errno.EHOSTUNREACH: "host unreachable (no route to {server}, or it is down)",
    errno.ENETUNREACH: "network unreachable (no route to {server})",
    errno.ETIMEDOUT: "timed out (the host is down, or a firewall drops the packets)",
    errno.ECONNRESET: "connection reset by the server or something in between",
}

_SASL_CONDITIONS = {
    "account-disabled": "the account is disabled on the server",
    "credentials-expired": "the password has expired",
    "encryption-required": "the server wants encryption for this mechanism",
    "invalid-authzid": "the server refused the authorization identity",
    "invalid-mechanism": "the server does not support the mechanism chosen",
    "malformed-request": "the server found the request malformed",
    "mechanism-too-weak": "the server finds the mechanism too weak for this account",
    "temporary-auth-failure": "the server's authentication failed on its side; retrying",
}


class LoginAttempt:
    """One connect-and-login attempt: the steps reached and the first refusal heard."""

    def __init__(self, target: LoginTarget) -> None:
        self.target = target
        self.reached = Reached.CONNECTING
        self._challenged = False  # a SASL challenge came: the server went on past our name
        self._failure: tuple[SignalStep, str] | None = None

    # -- progress --------------------------------------------------------------------------

    def connected(self) -> None:
        self.reached = max(self.reached, Reached.SECURED if self.target.tls == "direct" else Reached.CONNECTED)

    def secured(self) -> None:
        self.reached = max(self.reached, Reached.SECURED)

    def challenged(self) -> None:
        self._challenged = True

    def authenticated(self) -> None:
        self.reached = max(self.reached, Reached.AUTHENTICATED)

    def session_started(self) -> None:
        self.reached = Reached.SESSION

    # -- refusals ------------------------------------------------------------------------------

    def tcp_failed(self, number: int | None, text: str) -> None:
        t = self.target
        template = _ERRNO_TEXT.get(number) if number is not None else None
        if template is not None:
            what = template.format(port=t.port, server=t.server)
        elif number:
            what = os.strerror(number).lower()
        else:
            what = text
        self._first(SignalStep.TCP, f"TCP connect to {t.address} failed: {what}")

    def name_not_resolved(self) -> None:
        t = self.target
        self._first(SignalStep.TCP, f"TCP connect to {t.address} failed: name {t.server!r} not resolved (no address in DNS "
                                    "or /etc/hosts)")

    def tls_failed(self, verify_message: str | None, text: str) -> None:
        """The handshake failed; `verify_message` is the verifier's word when it was the certificate."""
        t = self.target
        if verify_message is not None:
            message = (f"TLS: the certificate of {t.address} was refused for the name {t.domain!r}, checked against "
                       f"{t.trust}: {verify_message}")
        else:
            hint = " (tls is \"direct\": does this port speak TLS from the first byte?)" if t.tls == "direct" else ""
            message = f"TLS handshake with {t.address} failed: {text}{hint}"
        self._first(SignalStep.TLS, message)

    def tls_not_offered(self) -> None:
        self._first(SignalStep.TLS, f"TLS: {self.target.address} did not offer STARTTLS; no credentials are sent in "
                                    "the clear (a server without TLS, or something in between removing it)")

    def sasl_refused(self, mechanism: str, condition: str, text: str) -> None:
        t = self.target
        who = (f"SASL {mechanism} login as {t.jid} with the certificate {t.client_cert}" if t.client_cert
               else f"SASL {mechanism} login as {t.jid}")
        if condition == "not-authorized" and t.client_cert:
            why = "the server does not accept that certificate for this account, or there is no such account"
        elif condition == "not-authorized" and mechanism.startswith("SCRAM-") and self._challenged:
            why = "wrong password (the server sent its SCRAM challenge for the account, so it knows it)"
        elif condition == "not-authorized" and mechanism.startswith("SCRAM-"):
            why = f"no account {t.jid} on the server, or it is disabled (refused before any password was checked)"
        elif condition == "not-authorized":
            why = "wrong password, or no such account on the server (the server answers both alike)"
        else:
            why = _SASL_CONDITIONS.get(condition, "see the server's log")
            if text:
                why += f"; the server said: {text}"
        self._first(SignalStep.SASL, f"{who} refused ({condition or 'no condition'}): {why}")

    def no_mechanism(self, offered: Iterable[str]) -> None:
        t = self.target
        names = ", ".join(sorted(offered)) or "none"
        needed = ("a client certificate login needs EXTERNAL" if t.client_cert
                  else "a password login needs SCRAM-SHA-1/256/512, or PLAIN over TLS")
        self._first(SignalStep.SASL, f"SASL: {t.address} offers no login mechanism we accept (offered: {names}; "
                                     f"{needed})")

    def stream_error(self, condition: str, text: str) -> None:
        detail = f" ({text})" if text else ""
        if condition == "host-unknown":
            detail = f": it does not serve the domain {self.target.domain!r}{detail}"
        self._first(SignalStep.STREAM, f"{self.target.address} closed the stream with {condition}{detail}")

    def stream_failed(self, message: str) -> None:
        self._first(SignalStep.STREAM, message)

    # -- the end of an attempt ---------------------------------------------------------------------

    def ended(self, reason: str) -> None:
        """The stream ended before a session: say where, unless a refusal already said why."""
        t = self.target
        where = {
            Reached.CONNECTING: (SignalStep.TCP, f"TCP connect to {t.address} ended: {reason}"),
            Reached.CONNECTED: (SignalStep.STREAM,
                                f"{t.address} closed the connection before TLS ({reason}); is it the XMPP client port, "
                                f"and does tls \"{t.tls}\" match it?"),
            Reached.SECURED: (SignalStep.STREAM, f"{t.address} closed the stream after TLS, before login ({reason})"),
        }.get(self.reached, (SignalStep.STREAM, f"logged in as {t.jid}, but the stream ended before the session "
                                                f"started ({reason})"))
        self._first(*where)

    def timed_out(self, seconds: float) -> None:
        t = self.target
        within = f"within {seconds:.0f} s"
        if self.reached is Reached.CONNECTING and t.tls == "direct":
            step, message = SignalStep.TCP, f"TCP connect and TLS handshake with {t.address}: not done {within}"
        elif self.reached is Reached.CONNECTING:
            step, message = SignalStep.TCP, (f"TCP connect to {t.address}: no answer {within} (timed out: the host is "
                                             "down, or a firewall drops the packets)")
        elif self.reached is Reached.CONNECTED and t.tls != "plaintext":
            step, message = SignalStep.TLS, f"TLS with {t.address}: TCP connected, but STARTTLS not done {within}"
        elif self.reached < Reached.AUTHENTICATED:
            step, message = SignalStep.SASL, f"SASL login as {t.jid} at {t.address}: no answer {within}"
        else:
            step, message = SignalStep.STREAM, (f"logged in as {t.jid} at {t.address}, but no session (resource "
                                                f"binding, roster) {within}")
        self._first(step, message)

    def failure(self, now: float) -> LoginFailure | None:
        if self._failure is None:
            return None
        step, message = self._failure
        return LoginFailure(step, message, now)

    def _first(self, step: SignalStep, message: str) -> None:
        if self._failure is None:
            self._failure = (step, message)


def membership_failure(jid: str, overlay: str, group: str, now: float) -> LoginFailure:
    """Logged in, but the roster shows no group `group`: the account is not (visibly) in overlay `overlay`.

    A group is seen through its other members (mod_groups and mod_shared_roster
    list no one to himself), so an account alone in its group looks the same.
    """
    return LoginFailure(
        SignalStep.MEMBERSHIP,
        f"account {jid} is not a member of overlay {overlay} (no roster group {group!r} on the server lists it "
        "with another member)",
        now,
    )
