"""DtlsHandshake in memory: two machines exchanging datagrams directly."""

from __future__ import annotations

import datetime

import pytest

from evio.testing.dtls_handshakes import shuttle
from evio.tunnel.datapath.keys import EXPORTER_LABEL, EXPORTER_LEN
from evio.tunnel.errors import OfferError
from evio.tunnel.path.dtls import DtlsHandshake, DtlsRole, DtlsState, Fingerprint, TunnelCertificate

NOW = datetime.datetime(2026, 11, 21, tzinfo=datetime.UTC)


@pytest.fixture(scope="module")
def certs() -> tuple[TunnelCertificate, TunnelCertificate, TunnelCertificate]:
    return (
        TunnelCertificate.generate("a", NOW),
        TunnelCertificate.generate("b", NOW),
        TunnelCertificate.generate("mallory", NOW),
    )


def test_handshake_pins_and_exports_the_same_keys(certs: tuple[TunnelCertificate, ...]) -> None:
    a, b, _ = certs
    client = DtlsHandshake(a, DtlsRole.CLIENT, b.fingerprint)
    server = DtlsHandshake(b, DtlsRole.SERVER, a.fingerprint)
    shuttle(client, server)
    assert client.state is server.state is DtlsState.CONNECTED
    ka = client.export(EXPORTER_LABEL, EXPORTER_LEN)
    kb = server.export(EXPORTER_LABEL, EXPORTER_LEN)
    assert ka == kb and len(ka) == EXPORTER_LEN
    assert client.export(b"EXPERIMENTAL other", 32) != ka[:32]
    assert client.cipher_name()


@pytest.mark.parametrize("wrong_side", ["client", "server"])
def test_wrong_fingerprint_fails_both_sides(certs: tuple[TunnelCertificate, ...], wrong_side: str) -> None:
    a, b, mallory = certs
    client = DtlsHandshake(a, DtlsRole.CLIENT, mallory.fingerprint if wrong_side == "client" else b.fingerprint)
    server = DtlsHandshake(b, DtlsRole.SERVER, mallory.fingerprint if wrong_side == "server" else a.fingerprint)
    shuttle(client, server)
    assert client.state is DtlsState.FAILED
    assert server.state is DtlsState.FAILED
    checker = client if wrong_side == "client" else server
    assert checker.failure == "fingerprint mismatch"
    with pytest.raises(RuntimeError):
        client.export(EXPORTER_LABEL, EXPORTER_LEN)


def test_impostor_with_a_different_certificate_is_rejected(certs: tuple[TunnelCertificate, ...]) -> None:
    a, b, mallory = certs
    # Mallory answers in b's place, but the client pinned b's fingerprint.
    client = DtlsHandshake(a, DtlsRole.CLIENT, b.fingerprint)
    server = DtlsHandshake(mallory, DtlsRole.SERVER, a.fingerprint)
    shuttle(client, server)
    assert client.state is DtlsState.FAILED
    assert server.state is not DtlsState.CONNECTED or client.state is DtlsState.FAILED


def test_lost_flight_is_retransmitted_on_timeout(certs: tuple[TunnelCertificate, ...]) -> None:
    a, b, _ = certs
    client = DtlsHandshake(a, DtlsRole.CLIENT, b.fingerprint)
    server = DtlsHandshake(b, DtlsRole.SERVER, a.fingerprint)
    # Drop the first ClientHello: only the client's timer recovers it.
    first = client.start()
    assert first and client.timeout() is not None
    client2 = DtlsHandshake(a, DtlsRole.CLIENT, b.fingerprint)
    shuttle(client2, server, drop={1})
    assert client2.state is DtlsState.CONNECTED and server.state is DtlsState.CONNECTED


def test_a_lost_last_flight_is_answered_again_after_the_handshake(certs: tuple[TunnelCertificate, ...]) -> None:
    """The server is connected once the client's flight is in; its own last flight is lost, so the client sends its
    flight again, which the server, without renegotiation (OP_NO_RENEGOTIATION), still answers."""
    a, b, _ = certs
    client = DtlsHandshake(a, DtlsRole.CLIENT, b.fingerprint)
    server = DtlsHandshake(b, DtlsRole.SERVER, a.fingerprint)
    sent = shuttle(client, server, drop={4})  # ClientHello, the server's flight, the client's, the server's last
    assert sent > 4
    assert client.state is DtlsState.CONNECTED and server.state is DtlsState.CONNECTED


def test_close_notify_reaches_the_peer(certs: tuple[TunnelCertificate, ...]) -> None:
    a, b, _ = certs
    client = DtlsHandshake(a, DtlsRole.CLIENT, b.fingerprint)
    server = DtlsHandshake(b, DtlsRole.SERVER, a.fingerprint)
    shuttle(client, server)
    for d in client.close():
        server.receive(d)
    assert client.state is DtlsState.CLOSED
    assert server.state is DtlsState.CLOSED and server.failure == "closed by peer"
    assert server.receive(b"\x17\xfe\xfd") == []


def test_garbage_during_handshake_does_not_raise(certs: tuple[TunnelCertificate, ...]) -> None:
    a, b, _ = certs
    server = DtlsHandshake(b, DtlsRole.SERVER, a.fingerprint)
    server.receive(b"\x16\xfe\xfd" + bytes(40))
    assert server.state in (DtlsState.HANDSHAKING, DtlsState.FAILED)


def test_fingerprint_parse_and_format(certs: tuple[TunnelCertificate, ...]) -> None:
    fp = certs[0].fingerprint
    assert Fingerprint.parse(str(fp)) == fp
    assert Fingerprint.parse(str(fp).lower().replace("sha-256", "SHA-256")) == fp
    for bad in ["", "sha-1 AB", "sha-256 " + "AB" * 32, "md5 " + fp.value]:
        with pytest.raises(OfferError):
            Fingerprint.parse(bad)


# A plaintext fatal alert (handshake_failure) in epoch 0: anyone can forge one.
FORGED_ALERT = bytes([21, 0xFE, 0xFD, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 2, 40])


def test_a_failure_before_any_certificate_is_not_called_a_fingerprint_mismatch(certs: tuple[TunnelCertificate, ...]) -> None:
    a, b, _ = certs
    client = DtlsHandshake(a, DtlsRole.CLIENT, b.fingerprint)
    server = DtlsHandshake(b, DtlsRole.SERVER, a.fingerprint)
    for datagram in client.start():
        server.receive(datagram)
    server.receive(FORGED_ALERT)
    assert server.state is DtlsState.FAILED
    assert server.failure is not None and "fingerprint" not in server.failure
    assert "alert" in server.failure
