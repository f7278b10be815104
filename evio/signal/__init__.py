"""Signaling: XMPP membership, discovery and request/response remote actions.

Pure core: ``protocol`` (wire schema), ``peers`` (peer table), ``transactions``
(request matching and deadlines), ``drops`` (refusal accounting), ``backoff``,
``events``, ``login_steps`` (which step of a login failed, in words). Adapter: ``client.SignalClient`` on slixmpp. Consumers depend on
``interface.Signaling``; ``evio.testing.fake_signal`` is the in-memory fake.
"""

from evio.signal.errors import (
    ErrorReason,
    HandlerBadRequest,
    HandlerRejected,
    ProtocolError,
    RequestError,
    SignalError,
)
from evio.signal.events import Connected, Disconnected, PeerAdded, PeerRemoved, RemovalCause

__all__ = [
    "Connected",
    "Disconnected",
    "ErrorReason",
    "HandlerBadRequest",
    "HandlerRejected",
    "PeerAdded",
    "PeerRemoved",
    "ProtocolError",
    "RemovalCause",
    "RequestError",
    "SignalError",
]
