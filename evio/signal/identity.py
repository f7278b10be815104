"""Identity proofs and revocation lists: what binds a node id to the overlay CA, not to the XMPP server (issue 21).

Pure: bytes and ``now`` in, verdicts out. Two signed things travel in a second
element of a node's presence, ``<identity xmlns="urn:x-evio:identity:1">``
holding one JSON document (nodes of the previous release look only for their
``<evio>`` element and ignore this one)::

    {"v": 1,
     "claims": [{"overlay": O, "node": N, "cert": B64, "sig": B64}, ...],
     "revocations": [{"overlay": O, "serial": S, "issued": T, "nodes": [[N, U], ...], "sig": B64}, ...]}

*Claim proof*: the node certificate (DER) the overlay CA issued, naming node id
N for overlay O (`evio.tunnel.path.trust`), and an ECDSA signature by that
certificate's key over the claim: the claiming session's full JID, O and N.
The JID in the signature is what stops replay: another account (or a server
relaying it under another JID) cannot reuse M's proof, and the server can
only repeat it under M's own session, which it can make up anyway and which
gets no tunnel without M's key. A proof is about 750 bytes per overlay.

*Revocation list*: per overlay, the node ids the CA revoked, each with the
time U (Unix seconds) after which its last certificate has expired anyway
(the entry may then be dropped, which keeps the list short: certificates live
30 days), a serial S the server host increases with every list, the issue
time T, and the CA's signature over the rest. A node keeps the highest-serial
list that verifies against its CA for each overlay and puts it in its own
presence, so the list spreads member to member: the XMPP server carries it but
cannot forge it, and once any member has it, withholding it means
withholding that member's presence too (which the others notice as the
member leaving).

Bounds: the document at most `MAX_DOCUMENT_BYTES`, `MAX_CLAIMS` claims,
`MAX_LISTS` lists of at most `MAX_REVOKED` entries; anything else is
refused whole (``IdentityError``).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519


class TrustAnchor(Protocol):
    """An overlay's CA certificates (`evio.tunnel.path.trust.TrustAnchor`, which lives a layer above)."""

    @property
    def overlay(self) -> str: ...

    @property
    def authorities(self) -> tuple[x509.Certificate, ...]: ...

    def refusal(self, cert: x509.Certificate, node_id: int, now: datetime.datetime) -> str | None: ...

NAMESPACE = "urn:x-evio:identity:1"
ELEMENT = "identity"
VERSION = 1
MAX_DOCUMENT_BYTES = 16 * 1024
MAX_CLAIMS = 8
MAX_LISTS = 8
MAX_REVOKED = 256  # per overlay: entries go when the revoked certificate expires (30 days)
MAX_CERT_BYTES = 2048
MAX_SIG_BYTES = 160
_CLAIM_CONTEXT = b"evio-claim/1\x00"
_LIST_CONTEXT = b"evio-revocations/1\x00"
_NODE_RE = re.compile(r"[0-9a-f]{32}")
_OVERLAY_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")


class IdentityError(ValueError):
    """A document, proof or list that is malformed or does not verify; the message says why."""


@dataclass(frozen=True)
class ClaimProof:
    overlay: str
    node_id: int
    cert_der: bytes
    signature: bytes


@dataclass(frozen=True)
class RevocationList:
    overlay: str
    serial: int
    issued: int  # Unix seconds
    revoked: Mapping[int, int] = field(default_factory=dict)  # node id -> until (Unix seconds)
    signature: bytes = b""

    def signed_bytes(self) -> bytes:
        body = {
            "overlay": self.overlay, "serial": self.serial, "issued": self.issued,
            "nodes": [[f"{n:032x}", u] for n, u in sorted(self.revoked.items())],
        }  # fmt: skip
        return _LIST_CONTEXT + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    def node_ids(self, now: float) -> frozenset[int]:
        """The node ids revoked at `now` (entries whose certificates expired are moot)."""
        return frozenset(n for n, until in self.revoked.items() if until > now)

    def to_json(self) -> dict[str, Any]:
        return {
            "overlay": self.overlay, "serial": self.serial, "issued": self.issued,
            "nodes": [[f"{n:032x}", u] for n, u in sorted(self.revoked.items())],
            "sig": base64.b64encode(self.signature).decode(),
        }  # fmt: skip


@dataclass(frozen=True)
class IdentityDocument:
    claims: tuple[ClaimProof, ...] = ()
    revocations: tuple[RevocationList, ...] = ()


# ---------------------------------------------------------------------------- claims


def claim_bytes(full_jid: str, overlay: str, node_id: int) -> bytes:
    return _CLAIM_CONTEXT + f"{full_jid}\x00{overlay}\x00{node_id:032x}".encode()


# What reading a certificate from a peer may raise: cryptography parses most of its fields only when they are first
# read, and some errors are not ValueErrors (a DER whose version byte was 0x12 raised InvalidVersion out of a
# presence's proof check: fuzz target `claims`).
UNREADABLE: tuple[type[Exception], ...] = (ValueError, TypeError, UnsupportedAlgorithm, x509.InvalidVersion,
                                           x509.DuplicateExtension, x509.UnsupportedGeneralNameType)  # fmt: skip


def load_certificate(der: bytes) -> x509.Certificate:
    """The certificate in `der`; ValueError, whatever cryptography found wrong with it."""
    try:
        return x509.load_der_x509_certificate(der)
    except UNREADABLE as exc:
        raise ValueError(str(exc) or type(exc).__name__) from None


def san_names(cert: x509.Certificate, scheme: str, overlay: str) -> list[str]:
    """What `cert`'s SAN URIs ``<scheme>:<overlay>:<name>`` name for `overlay`, in their order: its node ids
    (`evio.tunnel.path.trust`), its own overlay addresses (`evio.signal.overlay_addresses`). None without a SAN."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    prefix = f"{scheme}:{overlay}:"
    uris = san.get_values_for_type(x509.UniformResourceIdentifier)
    return [uri[len(prefix) :] for uri in uris if uri.startswith(prefix)]


def make_proof(
    key: ec.EllipticCurvePrivateKey, cert: x509.Certificate, full_jid: str, overlay: str, node_id: int
) -> ClaimProof:
    signature = key.sign(claim_bytes(full_jid, overlay, node_id), ec.ECDSA(hashes.SHA256()))
    return ClaimProof(overlay, node_id, cert.public_bytes(serialization.Encoding.DER), signature)


def proof_refusal(anchor: TrustAnchor, proof: ClaimProof, full_jid: str, now: datetime.datetime) -> str | None:
    """Why `proof` does not prove `full_jid`'s claim of its node id under `anchor`; None when it does."""
    try:
        cert = load_certificate(proof.cert_der)
    except ValueError as exc:
        return f"certificate unreadable: {exc}"
    refusal = anchor.refusal(cert, proof.node_id, now)
    if refusal is not None:
        return refusal
    public = cert.public_key()
    if not isinstance(public, ec.EllipticCurvePublicKey):
        return "certificate key is not ECDSA"
    try:
        public.verify(proof.signature, claim_bytes(full_jid, proof.overlay, proof.node_id), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return "signature does not match the claim (another session's proof?)"
    return None


# ---------------------------------------------------------------------------- revocation lists

CaKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey


def sign_list(ca_key: CaKey, overlay: str, serial: int, issued: int, revoked: Mapping[int, int]) -> RevocationList:
    unsigned = RevocationList(overlay, serial, issued, dict(revoked))
    return RevocationList(overlay, serial, issued, dict(revoked), ca_sign(ca_key, unsigned.signed_bytes()))


def list_refusal(anchor: TrustAnchor, rl: RevocationList) -> str | None:
    """Why `rl` is not the overlay CA's; None when one of the anchor's CAs signed it."""
    if rl.overlay != anchor.overlay:
        return f"a list for overlay {rl.overlay}, not {anchor.overlay}"
    return ca_signature_refusal(anchor, rl.signed_bytes(), rl.signature)


def ca_sign(ca_key: CaKey, data: bytes) -> bytes:
    if isinstance(ca_key, ed25519.Ed25519PrivateKey):
        return ca_key.sign(data)
    return ca_key.sign(data, ec.ECDSA(hashes.SHA256()))


def ca_signature_refusal(anchor: TrustAnchor, data: bytes, signature: bytes) -> str | None:
    """Why `signature` over `data` is not one of the anchor's CAs'; None when one of them made it."""
    for ca in anchor.authorities:
        public = ca.public_key()
        try:
            if isinstance(public, ed25519.Ed25519PublicKey):
                public.verify(signature, data)
            elif isinstance(public, ec.EllipticCurvePublicKey):
                public.verify(signature, data, ec.ECDSA(hashes.SHA256()))
            else:
                continue
        except InvalidSignature:
            continue
        return None
    return "not signed by the overlay CA"


def list_to_text(rl: RevocationList) -> str:
    """The list alone as a JSON file (`evio member remove` writes it; `load_list` reads it)."""
    return json.dumps(rl.to_json(), indent=1) + "\n"


def load_list(text: str) -> RevocationList:
    return _list(_loads(text))


# ---------------------------------------------------------------------------- the document


def encode(document: IdentityDocument) -> str:
    doc = {
        "v": VERSION,
        "claims": [
            {"overlay": p.overlay, "node": f"{p.node_id:032x}", "cert": base64.b64encode(p.cert_der).decode(),
             "sig": base64.b64encode(p.signature).decode()}
            for p in document.claims
        ],
        "revocations": [rl.to_json() for rl in document.revocations],
    }  # fmt: skip
    text = json.dumps(doc, separators=(",", ":"))
    if len(text) > MAX_DOCUMENT_BYTES:
        raise IdentityError(f"identity document of {len(text)} bytes > {MAX_DOCUMENT_BYTES}")
    return text


def encode_within(
    claims: tuple[ClaimProof, ...], lists: Iterable[RevocationList]
) -> tuple[str, tuple[RevocationList, ...]]:
    """`claims` and as many of `lists` as fit in `MAX_DOCUMENT_BYTES` (what `decode` takes), and the lists left out.

    Each list may hold `MAX_REVOKED` entries and a node `MAX_LISTS` lists, about 49 bytes an entry: a full list is
    12.4 KB, eight are 100 KB, and two of 200 entries with their claims were already past the limit, which `encode`
    refused, so the node could make no presence at all (review21q Q1). The claims go first (without them no peer links to us);
    then the lists, shortest first, so that the most overlays' lists ride in the presence; a list left out still
    spreads through its overlay's revocation flood and the file beside the CA (decision 0081). IdentityError
    only if the claims alone do not fit (`MAX_CLAIMS` certificates of at most `MAX_CERT_BYTES`)."""
    base = len(encode(IdentityDocument(claims, ())))
    kept: list[RevocationList] = []
    left: list[RevocationList] = []
    size = base
    for rl in sorted(lists, key=lambda rl: (len(rl.revoked), rl.overlay)):
        grows = len(json.dumps(rl.to_json(), separators=(",", ":"))) + (1 if kept else 0)  # a comma between
        if len(kept) < MAX_LISTS and size + grows <= MAX_DOCUMENT_BYTES:
            kept.append(rl)
            size += grows
        else:
            left.append(rl)
    kept.sort(key=lambda rl: rl.overlay)
    return encode(IdentityDocument(claims, tuple(kept))), tuple(left)


def decode(text: str) -> IdentityDocument:
    if not isinstance(text, str) or len(text) > MAX_DOCUMENT_BYTES:
        raise IdentityError(f"not text of at most {MAX_DOCUMENT_BYTES} bytes")
    doc = _loads(text)
    _fields(doc, {"v", "claims", "revocations"})
    if type(doc["v"]) is not int or doc["v"] != VERSION:
        raise IdentityError(f"version {doc['v']!r}")
    claims_raw, lists_raw = doc["claims"], doc["revocations"]
    if not isinstance(claims_raw, list) or len(claims_raw) > MAX_CLAIMS:
        raise IdentityError(f"claims: a list of at most {MAX_CLAIMS}")
    if not isinstance(lists_raw, list) or len(lists_raw) > MAX_LISTS:
        raise IdentityError(f"revocations: a list of at most {MAX_LISTS}")
    claims = []
    for item in claims_raw:
        _fields(item, {"overlay", "node", "cert", "sig"})
        claims.append(ClaimProof(_overlay(item["overlay"]), _node(item["node"]),
                                 _b64(item["cert"], MAX_CERT_BYTES), _b64(item["sig"], MAX_SIG_BYTES)))  # fmt: skip
    if len({c.overlay for c in claims}) != len(claims):
        raise IdentityError("an overlay claimed twice")
    lists = tuple(_list(item) for item in lists_raw)
    if len({rl.overlay for rl in lists}) != len(lists):
        raise IdentityError("two lists for one overlay")
    return IdentityDocument(tuple(claims), lists)


def _list(item: Any) -> RevocationList:
    _fields(item, {"overlay", "serial", "issued", "nodes", "sig"})
    serial, issued, nodes = item["serial"], item["issued"], item["nodes"]
    for name, value in (("serial", serial), ("issued", issued)):
        if type(value) is not int or not 0 <= value < 1 << 53:
            raise IdentityError(f"{name} must be a non-negative integer")
    if not isinstance(nodes, list) or len(nodes) > MAX_REVOKED:
        raise IdentityError(f"nodes: a list of at most {MAX_REVOKED}")
    revoked: dict[int, int] = {}
    for entry in nodes:
        if not isinstance(entry, list) or len(entry) != 2 or type(entry[1]) is not int or not 0 <= entry[1] < 1 << 53:
            raise IdentityError("each revoked entry is [node id, until]")
        node_id = _node(entry[0])
        if node_id in revoked:
            raise IdentityError("a node id listed twice")
        revoked[node_id] = entry[1]
    return RevocationList(_overlay(item["overlay"]), serial, issued, revoked, _b64(item["sig"], MAX_SIG_BYTES))


def merge_lists(known: Iterable[RevocationList]) -> dict[str, RevocationList]:
    """The highest-serial list per overlay."""
    best: dict[str, RevocationList] = {}
    for rl in known:
        if rl.overlay not in best or rl.serial > best[rl.overlay].serial:
            best[rl.overlay] = rl
    return best


def _loads(text: str) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise IdentityError(f"key {k[:20]!r} twice")
            out[k] = v
        return out

    def no_constants(name: str) -> Any:
        raise IdentityError(f"{name} is not JSON")

    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constants)
    except IdentityError:
        raise
    except (ValueError, RecursionError) as exc:
        raise IdentityError(f"not JSON: {str(exc)[:80]}") from None


def _fields(doc: Any, expected: set[str]) -> None:
    if not isinstance(doc, dict) or doc.keys() != expected:
        got = sorted(doc)[:8] if isinstance(doc, dict) else type(doc).__name__
        raise IdentityError(f"expected an object with {sorted(expected)}, got {got}")


def _overlay(value: Any) -> str:
    if not isinstance(value, str) or not _OVERLAY_RE.fullmatch(value):
        raise IdentityError("bad overlay id")
    return value


def _node(value: Any) -> int:
    if not isinstance(value, str) or not _NODE_RE.fullmatch(value):
        raise IdentityError("bad node id")
    return int(value, 16)


def _b64(value: Any, limit: int) -> bytes:
    if not isinstance(value, str) or len(value) > (limit * 4) // 3 + 4:
        raise IdentityError(f"base64 of at most {limit} bytes expected")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise IdentityError("bad base64") from None
