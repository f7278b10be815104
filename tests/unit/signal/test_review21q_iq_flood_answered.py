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

Fixed (decision 0080): a budget per sending account (`evio.signal.client.SENDER_RATE`, 20 a second after 200),
read at each stanza's start tag by the client's stream parser (`_BoundedParser`, installed by `_make_xmpp`, as the
login uses it): a stanza past it is dropped unread (slixmpp builds no stanza object and runs no handler), counted
`sender_rate`. The server's domain and our own account are not budgeted. The test installs `_count_in` as the login
does (`SignalClient._one_session`): the budget sits before it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from evio.signal.client import SENDER_RATE, SignalClient, SignalSettings
from tests.unit.signal.test_review21h_stanza_size_unbounded import _stream

FLOOD = 3000


def _ping(i: int, sender: str) -> str:
    return f"<iq type='get' id='p{i}' from='{sender}' to='a@x.test/evio'><ping xmlns='urn:xmpp:ping'/></iq>"


async def test_one_member_cannot_have_every_iq_of_a_flood_answered() -> None:
    client, xmpp, replies = _client_keeping_replies()
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
    assert client.drop_counts().get("sender_rate", 0) == FLOOD - to_b, "every stanza not read is counted"


async def test_the_servers_stanzas_amid_a_members_flood_are_all_read_and_a_dropped_stanza_leaves_nothing() -> None:
    client, xmpp, replies = _client_keeping_replies()
    try:
        # A member's flood, deep stanzas among it, with the server's pings and our own account's between.
        deep = "<message from='b@x.test/evio' to='a@x.test/evio'>" + "<x>" * 20 + "</x>" * 20 + "</message>"
        flood = "".join(_ping(i, "b@x.test/evio") + deep + _ping(i, "x.test") + _ping(i, "a@x.test")
                        for i in range(FLOOD))  # fmt: skip
        data = flood.encode()
        for at in range(0, len(data), 8192):
            xmpp.data_received(data[at : at + 8192])
        for _ in range(100):
            await asyncio.sleep(0)
        to_server = sum('to="x.test"' in r for r in replies)
        to_self = sum('to="a@x.test"' in r for r in replies)
        to_b = sum('to="b@x.test/evio"' in r for r in replies)
        held = len(xmpp.xml_root)
    finally:
        xmpp.abort()
        await asyncio.sleep(0)
    assert to_server == FLOOD and to_self == FLOOD, "the server's and our own account's stanzas are not budgeted"
    assert SENDER_RATE.burst // 2 <= to_b <= FLOOD // 10
    assert held == 0, "a stanza dropped unread is not kept under the stream's root"
    assert client.stanzas_in >= 4 * FLOOD, "every stanza, read or not, tells the keepalive the server is there"


def _client_keeping_replies() -> tuple[SignalClient, Any, list[str]]:
    """A client on an in-process stream, its incoming filter installed as the login does, what it sends kept."""
    client = SignalClient(SignalSettings(jid="a@x.test", server="127.0.0.1", password="pw", memberships={"ov1": 1}))
    xmpp, _ = _stream(client)
    xmpp.add_filter("in", client._count_in)
    replies: list[str] = []

    def send(data: Any, use_filters: bool = True) -> None:
        replies.append(str(data))

    xmpp.send = send
    return client, xmpp, replies
