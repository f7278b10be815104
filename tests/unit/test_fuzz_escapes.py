"""Inputs benchmarks/fuzz.py found escaping as exceptions, each reproduced on the unit it reached."""

from __future__ import annotations

import datetime

import pytest

from evio.tunnel.dtls import DtlsHandshake, DtlsRole, DtlsState, TunnelCertificate


@pytest.fixture(scope="module")
def certs() -> tuple[TunnelCertificate, TunnelCertificate]:
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    return TunnelCertificate.generate("a", now), TunnelCertificate.generate("b", now)


def test_an_empty_datagram_into_a_dtls_handshake_is_ignored(certs: tuple[TunnelCertificate, TunnelCertificate]) -> None:
    # Found by the dtls target: OpenSSL's memory BIO refuses a zero-length write (WantReadError while
    # handshaking, SSL.Error([]) once connected). The session's pump skips empty datagrams, but
    # DtlsHandshake.receive takes whatever a caller hands it.
    a, b = certs
    client, server = DtlsHandshake(a, DtlsRole.CLIENT, b.fingerprint), DtlsHandshake(b, DtlsRole.SERVER, a.fingerprint)
    assert server.receive(b"") == [] and server.state is DtlsState.HANDSHAKING
    flight = client.start()
    for _ in range(6):
        flight = [out for datagram in flight for out in server.receive(datagram)]
        flight = [out for datagram in flight for out in client.receive(datagram)]
    assert client.state is DtlsState.CONNECTED and server.state is DtlsState.CONNECTED
    assert client.receive(b"") == [] and server.receive(b"") == []
    assert client.state is DtlsState.CONNECTED and server.state is DtlsState.CONNECTED
