"""Join tokens: everything a new member needs, in one line, signed by the overlay CA.

`evio member add` makes one; `evio join` checks it and turns it into the
node's configuration. A token is

    evio1.<base64url(zlib(payload JSON))>.<base64url(Ed25519 signature)>

The signature is the overlay CA's, over a context string and the compressed
payload, so a token cut short, mangled in a paste or edited after it was made
is refused before anything is written. The payload carries the CA certificate
whose key signed it; who holds a token therefore learns nothing that lets it
forge another one for the same overlay (that needs the CA key, which never
leaves the server host), and `evio join --ca-fingerprint` pins the CA for those
who want to check the token came from their operator and not from someone who
made an overlay CA of their own.

A token holds secrets (the XMPP and TURN passwords, the node's private key):
treat it as a password. It is good for one join (decision 0083): `evio join`
signs in with its XMPP password and changes it to one only the node holds, so
a used token no longer signs in as the member, and a second `evio join` with it
is refused at that sign-in. Its `expires` (default 24 h) bounds a token that was
never used; it is checked here against the clock the caller passes, so it is
no defence by itself: whoever holds a token can read it with any clock. What a
used token still carries: the node key, which speaks for no other account
(a node takes a node id only from the account the CA's member list pairs it
with) but still signs the member's offers along the ring (0064), and the TURN
password, which buys relayed bandwidth and no identity; `evio member renew` and
`evio member remove` end those. Pure but for the clock passed in.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import json
import re
import zlib
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from evio import ids
from evio.signal import member_list
from evio.signal.identity import IdentityError
from evio.tunnel.path.trust import TrustAnchor

PREFIX = "evio1"
_CONTEXT = b"evio join token v1\n"
# Far above a real token (~3 KB, plus about 25 characters a member for the member list: ~30 KB at 1,000
# members): a bound, not a limit anyone meets. A big overlay's token is best passed with --token-file.
MAX_TOKEN_CHARS = 4 * 1024 * 1024
MAX_PAYLOAD_BYTES = member_list.MAX_TEXT_BYTES + 256 * 1024  # after decompression: a zip bomb stops here
# Member names become XMPP localparts and TURN usernames: keep them to what both take unescaped.
NODE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}\Z")


class TokenError(ValueError):
    """A token that cannot be used; the message is one line for the user."""


@dataclass(frozen=True)
class JoinToken:
    """What a member needs to join (see `evio join` for where each part goes)."""

    overlay: str
    node_name: str
    node_id: int
    address: str  # overlay address with prefix length, e.g. "10.254.0.2/16"
    xmpp_server: str
    xmpp_port: int
    jid: str
    xmpp_password: str
    xmpp_ca_pem: str  # verifies the XMPP server's TLS certificate
    stun: tuple[str, ...]  # "host:port"
    turn_server: str  # "host:port"
    turn_username: str
    turn_password: str
    ca_pem: str  # the overlay CA (trust anchor)
    cert_pem: str  # this node's certificate, naming node_id for the overlay
    key_pem: str  # its private key
    expires: datetime.datetime
    # The overlay CA's member list as it stands with this member (decision 0063), written beside the CA by
    # `evio join`: the node starts with the membership that lists it. Empty in a token of an earlier release.
    member_list: str = ""

    def payload(self) -> dict[str, Any]:
        return {
            "overlay": self.overlay,
            "node": {"name": self.node_name, "id": f"{self.node_id:032x}", "address": self.address},
            "signal": {
                "server": self.xmpp_server, "port": self.xmpp_port, "jid": self.jid,
                "password": self.xmpp_password, "ca": self.xmpp_ca_pem,
            },
            "nat_traversal": {
                "stun": list(self.stun),
                "turn": {"server": self.turn_server, "username": self.turn_username, "password": self.turn_password},
            },
            "trust": {"ca": self.ca_pem, "cert": self.cert_pem, "key": self.key_pem,
                      **({"members": self.member_list} if self.member_list else {})},
            "expires": int(self.expires.timestamp()),
        }  # fmt: skip


def ca_fingerprint(ca_pem: str) -> str:
    """SHA-256 of the CA certificate's DER, as `evio member add` prints it and `evio join --ca-fingerprint` takes it."""
    der = x509.load_pem_x509_certificate(ca_pem.encode()).public_bytes(serialization.Encoding.DER)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def encode(token: JoinToken, ca_key: ed25519.Ed25519PrivateKey) -> str:
    body = zlib.compress(json.dumps(token.payload(), separators=(",", ":"), sort_keys=True).encode(), 9)
    signature = ca_key.sign(_CONTEXT + body)
    return ".".join((PREFIX, _b64(body), _b64(signature)))


def decode(text: str, now: datetime.datetime, ca_fingerprint_pin: str | None = None) -> JoinToken:
    """The token in `text`, checked: well formed, signed by its overlay CA, not expired, pinned CA if given."""
    text = "".join(text.split())  # a token pasted across lines or with a trailing newline is still the token
    if len(text) > MAX_TOKEN_CHARS:
        raise TokenError(f"not an evio join token: {len(text)} characters, more than any token has")
    parts = text.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        if parts[0].startswith("evio") and parts[0] != PREFIX:
            raise TokenError(f"a join token of another format ({parts[0]!r}): this evio reads {PREFIX!r} tokens")
        raise TokenError(f"not an evio join token (it starts with {PREFIX}. and has two dots); was it cut short?")
    try:
        body, signature = _unb64(parts[1]), _unb64(parts[2])
        inflater = zlib.decompressobj()
        raw = inflater.decompress(body, MAX_PAYLOAD_BYTES)
        if inflater.unconsumed_tail or not inflater.eof:
            raise TokenError("the token is damaged: its payload is cut short or too large")
        payload = json.loads(raw)
    except RecursionError:  # read before the signature is checked: no ValueError (review21i I8)
        raise TokenError("the token is damaged (cut short or changed in a paste?): nested too deeply") from None
    except (binascii.Error, ValueError, zlib.error) as exc:
        if isinstance(exc, TokenError):
            raise
        raise TokenError(f"the token is damaged (cut short or changed in a paste?): {exc}") from None
    token = _from_payload(payload)
    ca = _certificate(token.ca_pem, "trust.ca")
    public_key = ca.public_key()
    if not isinstance(public_key, ed25519.Ed25519PublicKey):
        raise TokenError("the token's overlay CA is not an Ed25519 key, as `evio member add` makes")
    try:
        public_key.verify(signature, _CONTEXT + body)
    except InvalidSignature:
        raise TokenError(
            "the token's signature does not verify: it was changed after `evio member add` made it"
        ) from None
    if ca_fingerprint_pin is not None and ca_fingerprint(token.ca_pem) != ca_fingerprint_pin.strip().lower():
        raise TokenError(
            f"the token's overlay CA is {ca_fingerprint(token.ca_pem)}, not the {ca_fingerprint_pin.strip()} you gave"
        )
    if now >= token.expires:
        raise TokenError(
            f"the token expired at {token.expires:%Y-%m-%d %H:%M} UTC: ask the overlay's operator for a new one"
            f" (evio member remove {token.node_name} --overlay {token.overlay}, then evio member add again)"
        )
    try:
        anchor = TrustAnchor.from_pem(token.overlay, token.ca_pem.encode())
    except ValueError as exc:
        raise TokenError(f"the token's overlay CA cannot be used: {exc}") from None
    refusal = anchor.refusal(_certificate(token.cert_pem, "trust.cert"), token.node_id, now)
    if refusal is not None:
        raise TokenError(f"the token's node certificate cannot be used: {refusal}")
    _private_key(token.key_pem)
    if token.member_list:
        _check_member_list(token, anchor)
    return token


def _check_member_list(token: JoinToken, anchor: TrustAnchor) -> None:
    """The list must be the overlay CA's, and pair this node's id with its account, or the node would start
    with a membership that leaves it out."""
    try:
        listed = member_list.load(token.member_list)
    except IdentityError as exc:
        raise TokenError(f"the token's trust.members is not a member list: {exc}") from None
    refusal = member_list.refusal(anchor, listed)
    if refusal is not None:
        raise TokenError(f"the token's trust.members cannot be used: {refusal}")
    if listed.members.get(token.node_id) != token.jid:
        raise TokenError(f"the token's trust.members does not list {token.jid} as node {token.node_id:032x}")


def _from_payload(payload: Any) -> JoinToken:
    def field(path: str, kind: type) -> Any:
        value: Any = payload
        for part in path.split("."):
            if not isinstance(value, dict) or part not in value:
                raise TokenError(f"the token has no {path}: made by another evio version?")
            value = value[part]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise TokenError(f"the token's {path} is not a {kind.__name__}")
        return value

    stun = field("nat_traversal.stun", list)
    if not all(isinstance(s, str) for s in stun):
        raise TokenError("the token's nat_traversal.stun is not a list of strings")
    node_hex = field("node.id", str)
    try:
        node_id = int(node_hex, 16)
    except ValueError:
        raise TokenError("the token's node.id is not 32 hex digits") from None
    if len(node_hex) != 32:
        raise TokenError("the token's node.id is not 32 hex digits")
    try:
        expires = datetime.datetime.fromtimestamp(field("expires", int), datetime.UTC)
    except (OverflowError, OSError, ValueError):
        raise TokenError("the token's expires is not a time") from None
    # Whoever hands out a token chooses every field (its CA is its own unless pinned), and the overlay id
    # becomes a directory name: refuse what is not one before anything is written.
    overlay, node_name = field("overlay", str), field("node.name", str)
    if not ids.OVERLAY_ID.fullmatch(overlay):  # it names a directory under /etc/evio (review21g G2)
        raise TokenError(f"the token's overlay {overlay[:40]!r} is not an overlay id: 1 to 32 of A-Z a-z 0-9 _ -")
    if not NODE_NAME.match(node_name):
        raise TokenError(f"the token's node.name {node_name[:40]!r} is not a member name: 1 to 32 of a-z 0-9 _ -")
    return JoinToken(
        overlay=overlay, node_name=node_name, node_id=node_id,
        address=field("node.address", str), xmpp_server=field("signal.server", str),
        xmpp_port=field("signal.port", int), jid=field("signal.jid", str),
        xmpp_password=field("signal.password", str), xmpp_ca_pem=field("signal.ca", str), stun=tuple(stun),
        turn_server=field("nat_traversal.turn.server", str), turn_username=field("nat_traversal.turn.username", str),
        turn_password=field("nat_traversal.turn.password", str), ca_pem=field("trust.ca", str),
        cert_pem=field("trust.cert", str), key_pem=field("trust.key", str), expires=expires,
        member_list=field("trust.members", str) if "members" in payload.get("trust", {}) else "",
    )  # fmt: skip


def _certificate(pem: str, path: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem.encode())
    except ValueError as exc:
        raise TokenError(f"the token's {path} is not a PEM certificate: {exc}") from None


def _private_key(pem: str) -> None:
    try:
        serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise TokenError(f"the token's trust.key is not an unencrypted PEM key: {exc}") from None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not text:
        raise ValueError("an empty part")
    # validate=True: a character outside the alphabet is damage, not something to skip silently
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
