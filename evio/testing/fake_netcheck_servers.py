"""Misbehaving and well-behaved servers on loopback for netcheck's unit tests.

    FakeStunServer(behaviour, mapped)  UDP: answers Binding (with `mapped` as the address it claims to see,
                                       to play a NAT), or sends garbage, or nothing; refuses every
                                       Allocate with 401 as a TURN server does a wrong password
    FakeXmppServer(context)            TCP: a stream header, STARTTLS, then TLS with `context`'s certificate

    async with FakeStunServer("answer") as stun: ...  stun.address == ("127.0.0.1", port)
"""

from __future__ import annotations

import asyncio
import ssl
from types import TracebackType
from typing import Literal, cast

from aioice import stun

StunBehaviour = Literal["answer", "garbage", "silent"]

GARBAGE = b"\x01\x01\x00\x03not stun at all"  # a Binding-response type, then a length that is no multiple of 4


class FakeStunServer(asyncio.DatagramProtocol):
    def __init__(
        self, behaviour: StunBehaviour = "answer", mapped: tuple[str, int] | None = None, host: str = "127.0.0.1"
    ) -> None:
        self.host = host
        self.behaviour = behaviour
        self.mapped = mapped
        self.requests = 0
        self.allocates = 0
        self.largest = 0  # the largest request received, in bytes
        self._transport: asyncio.DatagramTransport | None = None
        self.address = (host, 0)

    async def __aenter__(self) -> FakeStunServer:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: self, local_addr=(self.host, 0))
        self._transport = cast(asyncio.DatagramTransport, transport)
        self.address = self._transport.get_extra_info("sockname")[:2]
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._transport is not None:
            self._transport.close()

    @property
    def endpoint(self) -> str:
        host, port = self.address
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        assert self._transport is not None
        self.requests += 1
        self.largest = max(self.largest, len(data))
        if self.behaviour == "silent":
            return
        if self.behaviour == "garbage":
            self._transport.sendto(GARBAGE, addr)
            return
        request = stun.parse_message(data)
        if request.message_method == stun.Method.BINDING:
            response = stun.Message(stun.Method.BINDING, stun.Class.RESPONSE, transaction_id=request.transaction_id)
            response.attributes["XOR-MAPPED-ADDRESS"] = self.mapped or addr
        elif request.message_method == stun.Method.ALLOCATE:
            self.allocates += 1
            response = stun.Message(stun.Method.ALLOCATE, stun.Class.ERROR, transaction_id=request.transaction_id)
            response.attributes["ERROR-CODE"] = (401, "Unauthorized")
            response.attributes["REALM"] = "fake.test"
            response.attributes["NONCE"] = b"0123456789abcdef"
        else:
            return
        self._transport.sendto(bytes(response), addr)


class FakeXmppServer:
    """Enough of an XMPP server for a client to reach TLS: stream features with STARTTLS, <proceed/>."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        self.address = ("127.0.0.1", 0)
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> FakeXmppServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.address = self._server.sockets[0].getsockname()[:2]
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b">")  # <?xml ...?>
            await reader.readuntil(b">")  # <stream:stream ...>
            writer.write(
                b"<?xml version='1.0'?><stream:stream xmlns='jabber:client' "
                b"xmlns:stream='http://etherx.jabber.org/streams' id='1' from='fake' version='1.0'>"
                b"<stream:features><starttls xmlns='urn:ietf:params:xml:ns:xmpp-tls'><required/></starttls>"
                b"</stream:features>"
            )
            await reader.readuntil(b"/>")
            writer.write(b"<proceed xmlns='urn:ietf:params:xml:ns:xmpp-tls'/>")
            await writer.drain()
            await writer.start_tls(self.context)
            await reader.read(1)  # until the client leaves
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()
