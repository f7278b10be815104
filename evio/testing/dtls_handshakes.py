"""Two `DtlsHandshake`s run against each other in memory, without sockets."""

from __future__ import annotations

import time

from evio.tunnel.path.dtls import DtlsHandshake, DtlsState


def shuttle(client: DtlsHandshake, server: DtlsHandshake, drop: set[int] | None = None) -> int:
    """Carry datagrams between the two until both settle; how many flew. The datagrams numbered in
    `drop` (from 1, in the order sent) are lost on the way."""
    drop = drop or set()
    to_server = client.start()
    to_client: list[bytes] = []
    sent = 0
    for _ in range(50):
        if not to_server and not to_client:
            wait = client.timeout()
            if client.state is DtlsState.HANDSHAKING and wait is not None:
                # OpenSSL's retransmission timer runs on the real clock (1 s at first): its deadline is the condition.
                time.sleep(wait + 0.01)
                to_server = client.handle_timeout()
                continue
            break
        next_to_client = []
        for d in to_server:
            sent += 1
            if sent not in drop:
                next_to_client += server.receive(d)
        next_to_server = []
        for d in to_client:
            sent += 1
            if sent not in drop:
                next_to_server += client.receive(d)
        to_server, to_client = next_to_server, next_to_client
    return sent
