"""review21v3 finding 2: a linked member renegotiates the tunnel's DTLS at will after the handshake, and each
renegotiation costs its peer a full handshake on the event loop, past every budget.

Attack: member A, linked to node u, is the DTLS server of their tunnel whenever its node id is the lower one (the
ICE-controlling side, the higher id, is the DTLS client: evio/tunnel/session.py). After the handshake u's
`DtlsHandshake.receive` still feeds every DTLS datagram from A's address (the data path hands anything that is not
a record to the ICE connection, the gate lets the selected address's through, `Tunnel._pump` takes it) to OpenSSL's
`recv`. A HelloRequest, sealed in the session's epoch (A holds the keys: it is the other end), makes u's OpenSSL
start a new full handshake as client: a ClientHello, then A's certificate through `_verify` (the fingerprint, and
with `trust` the overlay CA's signature: `TrustAnchor.refusal`), the server's key exchange signature, a new ECDHE
key, u's own CertificateVerify signature, all on u's event loop. The context sets neither `OP_NO_RENEGOTIATION`
nor any limit, and nothing counts DTLS datagrams after the handshake (decision 0079 budgets control records only).
The keys the data path uses are not renegotiated (they were exported once), so the handshakes buy the peer nothing:
an honest peer never asks for one. OpenSSL 3.0 refuses a *client*-initiated renegotiation by default (checked: a
ClientHello from the DTLS client after the handshake starts nothing), so A must be the server: the lower id.

Measured (this machine, OpenSSL 3.0.19, load 1.8-2.1, two `TunnelManager`s over loopback, no trust anchor: the
trust check would add an X.509 signature verification to each): 7 renegotiations cost u 44.5 ms inside
`DtlsHandshake.receive`, 6.4 ms each; again at load 4.4, 30 renegotiations 154 ms, 5.1 ms each. The client side's
public-key operations alone (two ECDSA P-256 verifications, a signature, an ECDHE key and its derivation) take
1.6 ms at load 4.2 (timeit, `cryptography`): the figures are inflated by the shared machine, by perhaps three
times. A's side of each is a few datagrams, an ECDHE key and a signature, on its own machine. About 200
renegotiations a second (at an unloaded 1.5 ms each: 700), under a thousand datagrams, fill u's event loop,
which also runs every other tunnel's
timers, ICE consent, the data paths (decision 0077), signaling and the controller's commands.

Beside it, cheaper: any datagram with a first byte of 20-63 from the selected address (the member's, or a spoofer's
of it) reaches OpenSSL's `recv` unbudgeted, ~46 us each against ~21 us for a stranger's forged 0x71 record (the
accepted residual) in the same harness (load 1.2); other non-record bytes (0x80...) ~26 us, to aioice's queue.

Impact: medium (review21o O4's yardstick: a chosen node's availability at a sustained rate, from a linked member;
here at a few hundred datagrams a second).

Suggested fix: `SSL.OP_NO_RENEGOTIATION` on the DTLS context (a HelloRequest is then answered with a
no_renegotiation warning and starts nothing), and after the handshake a small budget of DTLS datagrams per tunnel
(the retransmitted final flight and close_notify are all an honest peer sends), past it dropped and counted.

Fixed (decision 0008, amendment 1): the context sets `OP_NO_RENEGOTIATION` (a HelloRequest costs u some 80 us, a
warning alert, against 3.4-4.0 ms for the renegotiation it started, in memory at load 5), and `Tunnel._pump` feeds
OpenSSL at most `AFTER_HANDSHAKE` (10 at once, then 1 a second) of the DTLS datagrams that come once the handshake is
done; the rest are dropped unread, counted `dtls-rate` among the link's drops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from OpenSSL import SSL

from evio.node.status import link_document
from evio.testing.tunnel_nodes import A, B, Node
from evio.testing.waiting import wait_until
from evio.tunnel.datapath.interface import DropReason
from evio.tunnel.path.dtls import AFTER_HANDSHAKE, DtlsHandshake, DtlsRole, DtlsState
from evio.tunnel.session import Tunnel, TunnelState

pytestmark = pytest.mark.usefixtures("loopback_only")  # tests/conftest.py

ATTEMPTS = 5


async def _up(nodes: tuple[Node, Node]) -> tuple[Tunnel, Tunnel]:
    """A's tunnel to B and B's to A, both up; A (the lower id) is the DTLS server."""
    a, b = nodes
    await a.manager.connect(B)
    await wait_until(lambda: (t := b.manager.get(A)) is not None and t.state is TunnelState.UP, timeout=5)
    ta, tb = a.manager.get(B), b.manager.get(A)
    assert ta is not None and tb is not None and ta._dtls is not None and tb._dtls is not None
    assert ta._dtls.role is DtlsRole.SERVER and tb._dtls.role is DtlsRole.CLIENT
    return ta, tb


def _members_own_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    """A's DTLS stack is the member's own: the DTLS server's (A's) is made without OP_NO_RENEGOTIATION, whatever
    evio sets, so it may send a HelloRequest; B's is evio's as it is."""
    made = DtlsHandshake.__init__

    def own(self: DtlsHandshake, certificate: Any, role: DtlsRole, *args: Any, **kwargs: Any) -> None:
        if role is not DtlsRole.SERVER:
            made(self, certificate, role, *args, **kwargs)
            return
        with monkeypatch.context() as m:
            for cls in (SSL.Context, SSL.Connection):
                if hasattr(cls, "set_options"):
                    m.setattr(cls, "set_options", _without_no_renegotiation(cls.set_options))
            made(self, certificate, role, *args, **kwargs)

    monkeypatch.setattr(DtlsHandshake, "__init__", own)


def _without_no_renegotiation(set_options: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
    return lambda obj, options: set_options(obj, options & ~SSL.OP_NO_RENEGOTIATION)


async def _within(condition: Callable[[], object], seconds: float) -> bool:
    """Whether ``condition`` came true within ``seconds`` (False, not an error, when it did not)."""
    try:
        await wait_until(condition, timeout=seconds)
    except AssertionError:
        return False
    return True


def _send_from_a(ta: Tunnel, datagrams: list[bytes]) -> None:
    """What A's DTLS wrote, sent from A's tunnel socket to B (as the member's own DTLS stack would)."""
    underlay = getattr(ta._datapath, "_underlay")  # noqa: B009 - the running data path's (FdDatapath) underlay
    for datagram in datagrams:
        underlay.sock.sendto(datagram, underlay.peer)


async def test_a_member_cannot_make_its_peer_renegotiate_dtls(
    nodes: tuple[Node, Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    _members_own_stack(monkeypatch)
    ta, tb = await _up(nodes)
    assert ta._dtls is not None and tb._dtls is not None
    a_ssl, b_ssl = ta._dtls._ssl, tb._dtls._ssl
    before = b_ssl.total_renegotiations()
    for _ in range(ATTEMPTS):
        if not await _within(lambda: not a_ssl.renegotiate_pending(), 2):
            break  # B refused the last one (as it should): A's side stays pending
        a_ssl.renegotiate()  # a HelloRequest, sealed in the session's epoch
        try:
            a_ssl.do_handshake()
        except SSL.WantReadError:
            pass
        _send_from_a(ta, ta._dtls._drain())
        # B's ClientHello comes back through A's pump, which drives A's side on.
        seen = b_ssl.total_renegotiations()
        await _within(lambda: b_ssl.total_renegotiations() > seen, 0.5)  # noqa: B023 - awaited at once
    await _within(lambda: not a_ssl.renegotiate_pending(), 2)
    started = b_ssl.total_renegotiations() - before
    print(f"B ran {started} DTLS renegotiations for {ATTEMPTS} HelloRequests")
    assert tb.state is TunnelState.UP
    assert started == 0


async def test_the_peers_close_notify_is_still_heard(nodes: tuple[Node, Node]) -> None:
    """After the handshake, the one DTLS message an honest peer sends: its close_notify ends the tunnel at once."""
    ta, tb = await _up(nodes)
    assert ta._dtls is not None and tb._dtls is not None
    _send_from_a(ta, ta._dtls.close())
    await wait_until(lambda: tb._dtls is not None and tb._dtls.state is DtlsState.CLOSED, timeout=2)
    await wait_until(lambda: tb.state is not TunnelState.UP, timeout=2)


async def test_dtls_datagrams_after_the_handshake_are_budgeted(nodes: tuple[Node, Node]) -> None:
    """The lesser path: any datagram with a first byte of 20-63 from the peer's address reaches OpenSSL. After the
    handshake, past ``AFTER_HANDSHAKE`` it is dropped unread, counted ``dtls-rate`` among the link's drops."""
    ta, tb = await _up(nodes)
    sent = 60
    # An application-data record of epoch 1 OpenSSL cannot open (it reads and discards each).
    _send_from_a(ta, [bytes([23, 0xFE, 0xFD, 0, 1]) + i.to_bytes(6, "big") + (48).to_bytes(2, "big") + bytes(48) for i in range(sent)])
    # At most the burst and a token a second get through, a few seconds' worth here on a slow machine.
    read_at_most = AFTER_HANDSHAKE.burst + 5 * AFTER_HANDSHAKE.per_second
    await wait_until(lambda: tb.stats().dropped(DropReason.DTLS_RATE) >= sent - read_at_most, timeout=5)
    assert tb.stats().dropped(DropReason.DTLS_RATE) <= sent - AFTER_HANDSHAKE.burst
    assert tb.state is TunnelState.UP
    document = link_document(A, None, tb, {}, None, False, 0.0)  # what `evio status` shows of the link
    assert document["drops"]["dtls-rate"] == tb.stats().dropped(DropReason.DTLS_RATE)
