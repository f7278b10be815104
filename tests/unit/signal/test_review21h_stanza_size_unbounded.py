"""Review21h H5: the XMPP server makes a node hold a stanza of any size in memory (no stanza size bound).

Attack: slixmpp's `XMLStream.data_received` feeds every byte to an `XMLPullParser` and builds the stanza's
element tree until its end tag; nothing bounds a stanza's size or depth, and evio's incoming filter
(`SignalClient._count_in`, where `max_payload_bytes` and the member list's 8 MB apply) sees a stanza only once it
is complete. A hostile or compromised XMPP server (or whoever terminates the client's TLS where it is not
verified) opens a `<message>` and never closes it: the node keeps every byte. (Our own server's config sets
`max_stanza_size: 262144`, evio/server/configs.py; the client has no counterpart.)

Measured (the client's own `ClientXMPP` from `SignalClient._make_xmpp`, fed in-process; tracemalloc): 16 MB of one
unfinished `<body>` held after 256 chunks of 64 KiB, 0.04 s to take; the connection is not dropped. At the rate a
server can send, gigabytes within seconds: the node runs out of memory (systemd's MemoryMax, if set, kills it,
and every tunnel with it).

Fixed: the client's stream parser is bounded (`evio.signal.client._BoundedParser`, installed at every
`init_parser`): the bytes fed since the last stanza ended (`MAX_STANZA_BYTES`, 10 MB, above the largest member list
as sent) and a stanza's depth (`MAX_STANZA_DEPTH`, 32); past either the session is aborted (counted `oversized`,
logged) and logged in again as after any server failure. The depth bound ends the session only for a stanza the
server alone could send; a peer's is read past (review21s finding 3).
"""

from __future__ import annotations

import asyncio
import logging
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from evio.signal import member_list
from evio.signal.client import SignalClient, SignalSettings


class Transport:
    def __init__(self) -> None:
        self.aborted = False

    def write(self, data: bytes) -> None:
        pass

    def get_extra_info(self, *args: Any, **kwargs: Any) -> None:
        return None

    def is_closing(self) -> bool:
        return self.aborted

    def close(self) -> None:
        self.aborted = True

    def abort(self) -> None:
        self.aborted = True


async def test_an_endless_stanza_from_the_server_is_not_held_without_bound(tmp_path: Path) -> None:
    client = SignalClient(SignalSettings(jid="a@x.test", server="127.0.0.1", password="pw", memberships={"ov1": 1}))
    xmpp = client._make_xmpp()
    transport = Transport()
    xmpp.connection_made(transport)  # type: ignore[arg-type]
    xmpp.data_received(b"<stream:stream xmlns='jabber:client' xmlns:stream='http://etherx.jabber.org/streams' "
                       b"from='x.test' id='1' version='1.0'>")  # fmt: skip
    tracemalloc.start()
    try:
        xmpp.data_received(b"<message from='b@x.test/r' to='a@x.test/r'><body>")
        chunk = b"A" * 65536
        for _ in range(256):  # 16 MB of one body, never closed
            if transport.aborted:
                break
            xmpp.data_received(chunk)
        held, _ = tracemalloc.get_traced_memory()
        dropped = transport.aborted
    finally:
        tracemalloc.stop()
        xmpp.abort()
        await asyncio.sleep(0)
    assert dropped or held < 10_000_000, f"{held / 1e6:.1f} MB of one unfinished stanza held"


def _stream(client: SignalClient) -> tuple[Any, Transport]:
    xmpp = client._make_xmpp()
    transport = Transport()
    xmpp.connection_made(transport)
    xmpp.data_received(b"<stream:stream xmlns='jabber:client' xmlns:stream='http://etherx.jabber.org/streams' "
                       b"from='x.test' id='1' version='1.0'>")  # fmt: skip
    return xmpp, transport


async def test_the_largest_member_list_and_a_long_busy_stream_pass_a_deep_stanza_does_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="slixmpp")  # a DEBUG level left by another test logs each 9.5 MB stanza
    client = SignalClient(SignalSettings(jid="a@x.test", server="127.0.0.1", password="pw", memberships={"ov1": 1}))
    xmpp, transport = _stream(client)
    try:
        # The largest list: 65,536 members, its JSON just under MAX_TEXT_BYTES, its quotes escaped (9.5 MB).
        entry = "  [&quot;%032x&quot;, &quot;member%05d-of-the-overlay-with-a-long-name-and-then-more@overlay.example.org&quot;],"
        body = "".join(entry % (i, i) for i in range(65536)).encode()
        assert len(body.replace(b"&quot;", b'"')) < member_list.MAX_TEXT_BYTES < len(body)
        stanza = b"<message from='x.test' to='a@x.test/r'><body>" + body + b"</body></message>"
        small = b"<message from='b@x.test/r' to='a@x.test/r'><body>" + b"x" * 1000 + b"</body></message>"
        stream = stanza + small * 200 + stanza  # 19 MB in all, twice the bound, cut into chunks across stanza ends
        for at in range(0, len(stream), 65_000):
            xmpp.data_received(stream[at : at + 65_000])
        assert not transport.aborted and client.drop_counts() == {}
        xmpp.data_received(b"<message>" + b"<x>" * 40)
        assert transport.aborted and client.drop_counts() == {"oversized": 1}
    finally:
        xmpp.abort()
        await asyncio.sleep(0)
