"""Tunnel offer/answer: what two nodes exchange through signaling before ICE.

The initiator sends an offer, the responder returns an answer; both carry the
sender's node id, ICE parameters for the direct attempt and for the relay
fallback, and the fingerprint of the DTLS certificate the peer must pin. The
offer lists the ciphers the initiator accepts in order of preference; the
answer names the one chosen.

Schema (a JSON object, every field required unless noted)::

    {"v": 1, "tunnel": T, "node": N, "fingerprint": "sha-256 AB:..:EF",
     "direct": ICE | null, "relay": ICE | null,
     "ciphers": ["aes-256-gcm", ...]      (offer)
     "cipher": "aes-256-gcm"}             (answer)
    ICE = {"ufrag": U, "pwd": P, "candidates": ["candidate:...", ...]}

Compatibility between releases (evio.signal.protocol, docs/operations.md
"Upgrades"): a field this release does not know, in the body or an ICE
object, is ignored (a newer release's), as is a cipher it does not know in an
offer; ``v`` changes only with a change older nodes cannot read. The previous
release, 0.1.0, refuses a field it does not know: this release adds none.

``TunnelSignaling`` is the narrow interface the tunnel needs from evio.signal:
one request/response action. ``RemoteActionSignaling`` adapts
``evio.signal.interface.Signaling`` to it; tests use the in-memory fake in
``evio.testing.fake_tunnel_signaling``, and the lab tool a Unix socket.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from aioice import Candidate

from evio.config.model import Cipher
from evio.tunnel.errors import OfferError, SignalingFailed
from evio.tunnel.path.dtls import Fingerprint

if TYPE_CHECKING:
    from evio.signal.interface import Signaling

VERSION = 1
ACTION = "tunnel.offer"
MAX_CANDIDATES = 32
MAX_CANDIDATE_LEN = 256
_ICE_CHARS = re.compile(r"[A-Za-z0-9+/]+")
_TUNNEL_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")
_NODE_ID = re.compile(r"[0-9a-f]{32}")

Body = dict[str, Any]


@dataclass(frozen=True)
class IceParameters:
    ufrag: str
    pwd: str = field(repr=False)  # the ICE password: whoever has it can answer our checks
    candidates: tuple[str, ...]

    def parsed_candidates(self) -> list[Candidate]:
        return [Candidate.from_sdp(c.removeprefix("candidate:")) for c in self.candidates]


@dataclass(frozen=True)
class TunnelOffer:
    tunnel_id: str
    node_id: int
    fingerprint: Fingerprint
    direct: IceParameters | None
    relay: IceParameters | None
    ciphers: tuple[Cipher, ...]

    def to_body(self) -> Body:
        body = _common_body(self.tunnel_id, self.node_id, self.fingerprint, self.direct, self.relay)
        body["ciphers"] = [c.value for c in self.ciphers]
        return body

    @classmethod
    def from_body(cls, body: object) -> TunnelOffer:
        """The offer in `body`; OfferError (and nothing else) for any body that is not one."""
        return _total(lambda: cls._parse(body))

    @classmethod
    def _parse(cls, body: object) -> TunnelOffer:
        fields = _check_fields(body, "ciphers")
        ciphers_raw = fields["ciphers"]
        if not isinstance(ciphers_raw, list) or not 1 <= len(ciphers_raw) <= len(Cipher):
            raise OfferError("ciphers", "expected a non-empty list")
        known = {x.value: x for x in Cipher}
        ciphers: list[Cipher] = []
        for i, name in enumerate(ciphers_raw):
            if not isinstance(name, str):
                raise OfferError(f"ciphers[{i}]", "expected a string")
            if name in known and known[name] not in ciphers:
                ciphers.append(known[name])  # unknown names are skipped: a newer peer may offer more
        if not ciphers:
            raise OfferError("ciphers", "no cipher this node knows")
        return cls(*_common_fields(fields), ciphers=tuple(ciphers))


@dataclass(frozen=True)
class TunnelAnswer:
    tunnel_id: str
    node_id: int
    fingerprint: Fingerprint
    direct: IceParameters | None
    relay: IceParameters | None
    cipher: Cipher

    def to_body(self) -> Body:
        body = _common_body(self.tunnel_id, self.node_id, self.fingerprint, self.direct, self.relay)
        body["cipher"] = self.cipher.value
        return body

    @classmethod
    def from_body(cls, body: object) -> TunnelAnswer:
        """The answer in `body`; OfferError (and nothing else) for any body that is not one."""
        return _total(lambda: cls._parse(body))

    @classmethod
    def _parse(cls, body: object) -> TunnelAnswer:
        fields = _check_fields(body, "cipher")
        name = fields["cipher"]
        known = {x.value: x for x in Cipher}
        if not isinstance(name, str) or name not in known:
            raise OfferError("cipher", "unknown cipher")
        return cls(*_common_fields(fields), cipher=known[name])


def choose_cipher(offered: tuple[Cipher, ...], supported: tuple[Cipher, ...]) -> Cipher:
    """The first offered cipher we support (the initiator's preference wins)."""
    for cipher in offered:
        if cipher in supported:
            return cipher
    raise OfferError("ciphers", "no cipher in common")


# -- the interface ------------------------------------------------------------------

OfferHandler = Callable[[int, Body], Awaitable[Body]]
"""Called with the offering peer's node id and the offer body; returns the answer body."""


class TunnelSignaling(Protocol):
    async def request(self, peer: int, body: Body, timeout: float) -> Body:
        """Send an offer to ``peer`` and return its answer; raises SignalingFailed."""

    def serve(self, handler: OfferHandler) -> None:
        """Route incoming offers to ``handler``."""


class RemoteActionSignaling:
    """``TunnelSignaling`` over evio.signal remote actions, in one overlay."""

    def __init__(self, signaling: Signaling, overlay: str) -> None:
        self._signaling = signaling
        self._overlay = overlay

    async def request(self, peer: int, body: Body, timeout: float) -> Body:
        from evio.signal.errors import SignalError

        try:
            return await self._signaling.request(self._overlay, peer, ACTION, body, timeout=timeout)
        except SignalError as exc:
            raise SignalingFailed(f"offer to {peer:032x}: {exc}") from exc

    def serve(self, handler: OfferHandler) -> None:
        from evio.signal.errors import HandlerBadRequest, HandlerRejected

        async def on_request(overlay: str, peer: int, body: Body) -> Body:
            if overlay != self._overlay:
                raise HandlerRejected(f"tunnels of overlay {overlay} are not served here")
            try:
                return await handler(peer, body)
            except OfferError as exc:
                raise HandlerBadRequest(str(exc)) from exc
            except SignalingFailed as exc:
                raise HandlerRejected(str(exc)) from exc

        self._signaling.register_handler(ACTION, on_request)


# -- parsing helpers ------------------------------------------------------------------

_T = TypeVar("_T")


def _total(parse: Callable[[], _T]) -> _T:
    """Run a parser of peer input so that only OfferError leaves it.

    The parsers check every field, but they call into aioice and the standard
    library; a case they missed must still be a counted bad offer, never a
    traceback in the signaling handler.
    """
    try:
        return parse()
    except OfferError:
        raise
    except Exception as exc:  # noqa: BLE001 - the last-resort net this function exists for
        raise OfferError("$", f"unreadable ({type(exc).__name__})") from None


def _common_body(
    tunnel_id: str, node_id: int, fingerprint: Fingerprint, direct: IceParameters | None, relay: IceParameters | None
) -> Body:
    return {
        "v": VERSION,
        "tunnel": tunnel_id,
        "node": f"{node_id:032x}",
        "fingerprint": str(fingerprint),
        "direct": _ice_body(direct) if direct else None,
        "relay": _ice_body(relay) if relay else None,
    }


def _ice_body(ice: IceParameters) -> Body:
    return {"ufrag": ice.ufrag, "pwd": ice.pwd, "candidates": list(ice.candidates)}


def _check_fields(body: object, extra: str) -> Mapping[str, Any]:
    if not isinstance(body, dict) or not all(isinstance(k, str) for k in body):
        raise OfferError("$", "expected an object")
    expected = {"v", "tunnel", "node", "fingerprint", "direct", "relay", extra}
    missing = expected - set(body)  # fields beyond `expected` are a newer release's: ignored
    if missing:
        raise OfferError(sorted(missing)[0], "missing")
    if body["v"] != VERSION:
        raise OfferError("v", f"unsupported version {body['v']!r}")
    return body


def _common_fields(fields: Mapping[str, Any]) -> tuple[str, int, Fingerprint, IceParameters | None, IceParameters | None]:
    tunnel_id = fields["tunnel"]
    if not isinstance(tunnel_id, str) or not _TUNNEL_ID.fullmatch(tunnel_id):
        raise OfferError("tunnel", "expected 8-64 characters [A-Za-z0-9_-]")
    node = fields["node"]
    if not isinstance(node, str) or not _NODE_ID.fullmatch(node):
        raise OfferError("node", "expected 32 lowercase hex digits")
    fingerprint_text = fields["fingerprint"]
    if not isinstance(fingerprint_text, str):
        raise OfferError("fingerprint", "expected a string")
    fingerprint = Fingerprint.parse(fingerprint_text)
    direct = None if fields["direct"] is None else _parse_ice(fields["direct"], "direct")
    relay = None if fields["relay"] is None else _parse_ice(fields["relay"], "relay")
    return tunnel_id, int(node, 16), fingerprint, direct, relay


def _parse_ice(raw: object, path: str) -> IceParameters:
    if not isinstance(raw, dict) or not {"ufrag", "pwd", "candidates"} <= set(raw):
        raise OfferError(path, "expected ufrag, pwd, candidates")
    ufrag, pwd, candidates = raw["ufrag"], raw["pwd"], raw["candidates"]
    # RFC 8839 section 5.4: ice-char, ufrag 4-256 and pwd 22-256 characters.
    if not isinstance(ufrag, str) or not 4 <= len(ufrag) <= 256 or not _ICE_CHARS.fullmatch(ufrag):
        raise OfferError(f"{path}.ufrag", "expected 4-256 ice-chars")
    if not isinstance(pwd, str) or not 22 <= len(pwd) <= 256 or not _ICE_CHARS.fullmatch(pwd):
        raise OfferError(f"{path}.pwd", "expected 22-256 ice-chars")
    if not isinstance(candidates, list) or len(candidates) > MAX_CANDIDATES:
        raise OfferError(f"{path}.candidates", f"expected a list of at most {MAX_CANDIDATES}")
    for i, c in enumerate(candidates):
        if not isinstance(c, str) or len(c) > MAX_CANDIDATE_LEN:
            raise OfferError(f"{path}.candidates[{i}]", "expected a short string")
        try:
            candidate = Candidate.from_sdp(c.removeprefix("candidate:"))
            ipaddress.ip_address(candidate.host)  # an address, never a name to resolve
            if not 1 <= candidate.port <= 65535:
                raise ValueError(f"port {candidate.port} out of range")
        except (ValueError, IndexError) as exc:
            raise OfferError(f"{path}.candidates[{i}]", f"not an ICE candidate: {exc}") from None
    return IceParameters(ufrag, pwd, tuple(candidates))
