"""Review21q Q5 (medium): one member makes a chosen node answer every iq it sends, at the XMPP server's full
per-connection rate, and the node's event loop pays for each.

Attack: a member knows every other member's full JID (the bare JID from the CA's member list or the roster, the
resource derived from the node id: `SignalSettings.effective_resource`) and sends it `<iq type='get'>` stanzas
(XEP-0199 pings, or any unknown payload) through the server. slixmpp parses each, and the node answers each (a
pong from the `xep_0199` plugin `_make_xmpp` registers; an error for anything else), on the daemon's event
loop. Nothing in evio's incoming filter (`SignalClient._count_in`) budgets stanzas per sender: the limits that
exist (offers, link requests, proof checks, member-list asks) apply after parsing and only to evio's own
payloads. The only bound is the server's shaper: 256 kB/s per c2s connection in the configs `evio server init`
writes (evio/server/configs.py), i.e. about 2,600 pings or 2,900 unknown iq a second from one member.

Impact: one member occupies most of one core of the victim node's event loop (the loop that also runs the
tunnels' control, liveness and the data path's readers), two saturate it; the victim is chosen by JID. Bounded by
the server's per-connection rate, hence medium.

Measured (the client's own `ClientXMPP` from `_make_xmpp`, fed in-process, `send` stubbed so the replies' TLS writes
are not counted; load average 4.5 on 2 cores): 213 us of CPU per ping (3,000 of 3,000 answered), 285 us per unknown
iq (3,000 errors sent), 87 us per small message; at 256 kB/s that is 56 %, 83 % and 32 % of a core. No drop counted.

Suggested fix: a per-sender stanza budget in the incoming filter (`PeerRateLimiter` keyed by the bare JID; the
server's own domain exempt or budgeted apart), dropping and counting past it before slixmpp's handlers; answer no
iq from accounts that are not contacts; and consider dropping `xep_0199` answers to anyone but the server.

The test installs `_count_in` as the login does (`SignalClient._login`); a fix elsewhere in the incoming path
should move the test with it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evio.signal.client import SignalClient, SignalSettings
from tests.unit.signal.test_review21h_stanza_size_unbounded import _stream

FLOOD = 3000


def _ping(i: int, sender: str) -> str:
    return f"<iq type='get' id='p{i}' from='{sender}' to='a@x.test/evio'><ping xmlns='urn:xmpp:ping'/></iq>"


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="review21q Q5: no per-sender stanza budget")
async def test_one_member_cannot_have_every_iq_of_a_flood_answered() -> None:
    client = SignalClient(SignalSettings(jid="a@x.test", server="127.0.0.1", password="pw", memberships={"ov1": 1}))
    xmpp, _ = _stream(client)
    xmpp.add_filter("in", client._count_in)
    replies: list[str] = []

    def send(data: Any, use_filters: bool = True) -> None:
        replies.append(str(data))

    xmpp.send = send
    try:
        flood = "".join(_ping(i, "b@x.test/evio") for i in range(FLOOD)).encode()
        for at in range(0, len(flood), 8192):  # one burst, as fast as the server relays it
            xmpp.data_received(flood[at : at + 8192])
        for _ in range(100):
            await asyncio.sleep(0)
        to_b = sum('to="b@x.test/evio"' in r for r in replies)
        xmpp.data_received(_ping(0, "c@x.test/evio").encode())  # another member, meanwhile
        for _ in range(10):
            await asyncio.sleep(0)
        to_c = sum('to="c@x.test/evio"' in r for r in replies)
    finally:
        xmpp.abort()
        await asyncio.sleep(0)
    print(f"{FLOOD} pings from one member in one burst: {to_b} answered; drops {client.drop_counts()}")
    assert to_c == 1, "the budget is per sender: another member is still answered"
    assert to_b <= FLOOD // 10, f"{to_b} of {FLOOD} answered: the flood costs the node a reply each"
