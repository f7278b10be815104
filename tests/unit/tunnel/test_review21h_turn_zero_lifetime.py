"""Review21h H3: a hostile TURN server makes the node refresh its allocation in a busy loop (LIFETIME 0).

Attack: aioice's TURN client (pinned 0.13, `aioice.turn.TurnClientMixin.refresh`, not patched by
`evio.tunnel.path.aioice_patches`) sleeps `5/6 * LIFETIME` seconds, LIFETIME taken as the server wrote it, and
loops. A TURN server (hostile or compromised; its answers are not checked against a bound) answering LIFETIME 0
makes every
allocation send a REFRESH as soon as the previous answer arrived: one transaction per round trip, forever, each
with its MESSAGE-INTEGRITY computed, per tunnel with a relay candidate, for the life of the tunnel.

Measured (in-process: a UDP "TURN server" on 127.0.0.1 answering every request with success and LIFETIME 0;
aioice's `create_turn_endpoint` as evio's gathering uses it, after `configure_aioice`): see the assertion
6,457 REFRESH requests in 0.5 s of one allocation (13,000/s, the loop busy), where an honest server's 600 s
lifetime gives none. Severity high: the server exhausts the node's event loop (every tunnel's keepalives late).

Fixed: an ALLOCATE or REFRESH answer granting less than 30 s is read as granting 30 s (patch 1, MIN_TURN_LIFETIME), counted. Proposed at the review: clamp the lifetime read from an ALLOCATE or REFRESH answer (e.g. at least 60 s: RFC 8656 says a
server may not grant less than its minimum, 600 s by default; anything below 30 s treated as "refresh failed:
the allocation is dropped" and counted), by a patch of `TurnClientMixin.refresh` in aioice_patches (an eighth);
and log the server's misbehaviour once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aioice.stun
import aioice.turn

from evio.tunnel.path import aioice_patches
from evio.tunnel.path.aioice_patches import configure_aioice


class HostileTurn(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.requests: dict[aioice.stun.Method, int] = {}
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        request = aioice.stun.parse_message(data)
        self.requests[request.message_method] = self.requests.get(request.message_method, 0) + 1
        answer = aioice.stun.Message(request.message_method, aioice.stun.Class.RESPONSE, request.transaction_id)
        answer.attributes["LIFETIME"] = 0
        answer.attributes["XOR-MAPPED-ADDRESS"] = addr
        answer.attributes["XOR-RELAYED-ADDRESS"] = ("127.0.0.1", 40000)
        self.transport.sendto(bytes(answer), addr)


async def test_a_turn_servers_zero_lifetime_does_not_make_the_node_refresh_in_a_loop() -> None:
    configure_aioice(0.1)
    raised_before = aioice_patches.TURN_LIFETIME_RAISED
    loop = asyncio.get_running_loop()
    server_transport, server = await loop.create_datagram_endpoint(HostileTurn, local_addr=("127.0.0.1", 0))
    try:
        transport, _ = await aioice.turn.create_turn_endpoint(
            asyncio.DatagramProtocol, server_transport.get_extra_info("sockname"), "u", "p")
        try:
            await asyncio.sleep(0.5)
        finally:
            transport.close()
    finally:
        server_transport.close()
    refreshes = server.requests.get(aioice.stun.Method.REFRESH, 0)
    assert refreshes <= 2, f"{refreshes} REFRESH requests in 0.5 s of one allocation ({server.requests})"
    assert raised_before < aioice_patches.TURN_LIFETIME_RAISED  # counted (evio status: stun.turn_lifetime_raised)
