"""TURN Allocate over UDP, TCP and TLS for netcheck, with aioice's client (the tunnel's own).

Each attempt allocates, then deletes the allocation at once (a server keeps it for its lifetime
otherwise). coturn serves TCP on the TURN port and TLS on 5349 when it has a certificate; a
refused TCP or TLS connection is "not offered", not a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time

from aioice import stun as aioice_stun
from aioice.turn import TurnClientTcpProtocol, TurnClientUdpProtocol

from evio.netcheck.findings import Transport, TurnAttempt, TurnOutcome
from evio.netcheck.stun import endpoint
from evio.tunnel.path.stun_guard import MalformedStun, parse_stun

TLS_PORT = 5349  # RFC 8656 section 3.1: TURN over TLS
LIFETIME = 60  # seconds asked for: the allocation is deleted right after anyway
_AUTH_CODES = {401, 403, 437, 438, 441, 486}  # the server answered and said no (RFC 8656 section 6.4)


class _Screen:
    """What a server sends goes through the tunnel's guarded parser first: aioice's own raises
    `struct.error` on some garbage, out of its receive callback. Garbage is kept, to be named."""

    garbage: str | None = None

    def datagram_received(self, data: bytes | str, addr: tuple[str, int]) -> None:
        try:
            parse_stun(bytes(data) if isinstance(data, bytes) else data.encode())
        except MalformedStun as exc:
            self.garbage = f"{len(data)} bytes that are not STUN ({exc})"
            return
        super().datagram_received(data, addr)  # type: ignore[misc]


class _UdpClient(_Screen, TurnClientUdpProtocol):
    pass


class _TcpClient(_Screen, TurnClientTcpProtocol):
    pass


async def allocate(
    name: str, transport: Transport, dest: tuple[str, int], username: str | None, password: str | None,
    timeout: float, tls_name: str | None = None,
) -> TurnAttempt:  # fmt: skip
    """One Allocate over `transport` to `dest` within `timeout` seconds."""
    address = endpoint(*dest)
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    deadline = started + timeout
    client: _UdpClient | _TcpClient | None = None
    inner: asyncio.BaseTransport | None = None
    try:
        if transport == "udp":
            inner, udp = await loop.create_datagram_endpoint(
                lambda: _UdpClient(dest, username=username, password=password, lifetime=LIFETIME,
                                   channel_refresh_time=LIFETIME - 10),
                remote_addr=dest,
            )  # fmt: skip
            client = udp
        else:
            context = _tls_context() if transport == "tls" else None
            inner, tcp = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _TcpClient(dest, username=username, password=password, lifetime=LIFETIME,
                                       channel_refresh_time=LIFETIME - 10),
                    host=dest[0], port=dest[1], ssl=context,
                    server_hostname=(tls_name or dest[0]) if context is not None else None,
                ),
                timeout,
            )  # fmt: skip
            client = tcp
        relayed = await asyncio.wait_for(client.connect(), max(deadline - time.monotonic(), 0.01))
        rtt = round((time.monotonic() - started) * 1000, 2)
        with contextlib.suppress(Exception):  # the verdict is made; a failed delete only lets it expire
            await asyncio.wait_for(client.delete(), max(deadline - time.monotonic(), 0.5))
        return TurnAttempt(name, transport, address, "allocated", rtt, endpoint(*relayed))
    except aioice_stun.TransactionFailed as exc:
        code, reason = exc.response.attributes.get("ERROR-CODE", (0, "no ERROR-CODE"))
        outcome: TurnOutcome = "refused" if code in _AUTH_CODES else "error"
        return TurnAttempt(name, transport, address, outcome, detail=f"{code} {reason}")
    except ssl.SSLCertVerificationError as exc:
        return TurnAttempt(name, transport, address, "error", detail=f"certificate: {exc.verify_message}")
    except ssl.SSLError as exc:
        return TurnAttempt(name, transport, address, "error", detail=f"TLS: {exc.reason or exc}")
    except ConnectionRefusedError:
        if transport == "udp":
            return TurnAttempt(name, transport, address, "no-answer", detail="port unreachable")
        return TurnAttempt(name, transport, address, "not-offered", detail="connection refused")
    except (TimeoutError, aioice_stun.TransactionTimeout):
        if client is not None and client.garbage is not None:
            return TurnAttempt(name, transport, address, "error", detail=f"answered garbage: {client.garbage}")
        return TurnAttempt(name, transport, address, "no-answer", detail=f"no answer within {timeout:g} s")
    except ConnectionError as exc:  # aioice: a success response without the attributes RFC 8656 requires
        return TurnAttempt(name, transport, address, "error", detail=str(exc) or type(exc).__name__)
    except OSError as exc:
        return TurnAttempt(name, transport, address, "no-answer", detail=exc.strerror or str(exc))
    finally:
        if inner is not None:
            inner.close()


def _tls_context() -> ssl.SSLContext:
    # The system's trust store: a TURN server's certificate is a public one, or TLS is not what it offers.
    return ssl.create_default_context()
