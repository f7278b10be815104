"""Review21s finding 3: any account on the server ends a chosen node's XMPP session with one small stanza, 33
elements deep, and again at each login.

Attack: review21h H5 bounded the client's stream parser (`evio.signal.client._BoundedParser`) against a hostile
*server*: past `MAX_STANZA_DEPTH` (32) elements below the stream's root, or 10 MB, `_stanza_refused` aborts the
session, counted `oversized` against "server", and the node logs in again. But the depth of a stanza is the
sender's to choose: a member (or any account on the server: prosody delivers a message to a bound full JID
without any roster relation; `evio server init` enables no block for strangers, and only federation is off) sends
`<message to='victim@x/<node id>'>` with 33 nested elements of its own namespace, some 300 bytes, far within the
server's `max_stanza_size` (256 KB); neither prosody nor ejabberd bounds depth, and both relay an unknown child of
a message as it is. The victim's full JID is known to every member (account from the member list or the roster,
resource from the node id: decision 0080). The depth is checked at every start event before the sender's budget
(decision 0080's `_admit_stanza`) is read, so a stanza past that budget aborts too.

Measured (the client's own `ClientXMPP` from `SignalClient._make_xmpp`, fed in-process as H5's test): one 33-deep
message from `m@x.test/r1`: the transport aborted, `oversized` 1; nothing charged to m. Against a real prosody 0.12
(`evio.testing.prosody.local_prosody`, a throwaway script, load 2.6): account m, in no group (no roster relation to
the victim), logged in with a bare socket, bound a resource and sent one 33-deep message (about 1 KB) to the
victim's full JID; prosody relayed it and the victim's `SignalClient` logged "the server sent a stanza more than 32
elements deep: session aborted, logging in again" and its session ended.

Impact: high by the yardstick (a member stalls a node cheaply): one ~300-byte stanza per login of the victim,
sent blindly every second or on its presence, keeps a chosen node's signaling down: every peer sees it leave and
come back (each doubts its tunnel and answers its presence again), offers and answers in flight are lost, a node
without links yet (a restart, a newcomer) never makes its first ones over XMPP, member list and revocation updates
through the server do not reach it, and a session aborted before `session_start` completed counts as a failed
login, whose backoff grows to `reconnect_cap`. Tunnels already up survive (and in trust mode ring signaling, 0064,
still carries offers between nodes that have links), so this is the signaling plane of the chosen node, not its
data plane; rate it medium if that is judged bounded.

Suggested fix: tell a stanza's sender before judging its depth: a stanza whose `from` is neither empty, our
server's domain nor our own account is read past (as `_admit_stanza`'s refusal does: not handed to slixmpp, the
element taken off the root) once it goes past `MAX_STANZA_DEPTH`, counted (`oversized` or `malformed`) against
its sender, not the server, and the session kept; only stanzas that only the server could have sent (no `from`,
its domain, our own account) end the session. The byte bound can stay a session abort (the server's own
`max_stanza_size`, 256 KB, already refuses a member's stanza long before 10 MB).

Fixed as suggested (decision 0063, amended): a peer's stanza past the depth bound is read past whole and counted
`oversized` against its account; slixmpp is handed a stanza only at its end, so one read past after its start is
never half seen; only a stanza with no `from`, the server's domain or our own account ends the session.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc

import pytest

from evio.signal.client import MAX_STANZA_DEPTH, SignalClient, SignalSettings
from tests.unit.signal.test_review21h_stanza_size_unbounded import _stream


def _deep(sender: str, depth: int) -> bytes:
    inner = b"<x xmlns='urn:example:deep'>" * depth + b"</x>" * depth
    return f"<message from='{sender}' to='a@x.test/r'>".encode() + inner + b"</message>"


async def test_a_members_deep_stanza_does_not_end_the_session() -> None:
    client = SignalClient(SignalSettings(jid="a@x.test", server="127.0.0.1", password="pw", memberships={"ov1": 1}))
    xmpp, transport = _stream(client)
    try:
        xmpp.data_received(_deep("m@x.test/r1", MAX_STANZA_DEPTH + 1))  # 33 below the stream's root, with <message>
        print(f"a member's {MAX_STANZA_DEPTH + 1}-deep message: session aborted {transport.aborted}, "
              f"drops {client.drop_counts()}")
        assert not transport.aborted
        # The stream goes on: the next stanza of another member is read.
        xmpp.data_received(b"<message from='b@x.test/r' to='a@x.test/r'><body>hi</body></message>")
        assert not transport.aborted
    finally:
        xmpp.abort()
        await asyncio.sleep(0)


async def test_a_members_stanza_at_the_depth_bound_is_read() -> None:
    """What a fix must keep: a stanza within the bound is not refused."""
    client = SignalClient(SignalSettings(jid="a@x.test", server="127.0.0.1", password="pw", memberships={"ov1": 1}))
    xmpp, transport = _stream(client)
    try:
        xmpp.data_received(_deep("m@x.test/r1", MAX_STANZA_DEPTH - 1))  # with <message>: exactly the bound
        assert not transport.aborted and client.drop_counts() == {}
    finally:
        xmpp.abort()
        await asyncio.sleep(0)


def _message(sender: str, body: str) -> bytes:
    return f"<message from='{sender}' to='a@x.test/r' type='chat'><body>{body}</body></message>".encode()


@pytest.mark.parametrize("chunk", [1, 7, 8192], ids=["byte by byte", "7 bytes", "8 KB"])
async def test_after_a_deep_stanza_the_same_member_and_another_are_read(
    chunk: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The deep stanza is read past whole, however it is cut: the next ones, of its sender and of another member,
    reach the message handlers, and the drop is counted against its sender, not the server."""
    client = SignalClient(SignalSettings(jid="a@x.test", server="127.0.0.1", password="pw", memberships={"ov1": 1}))
    xmpp, transport = _stream(client)
    read: list[tuple[str, str]] = []
    xmpp.add_event_handler("message", lambda m: read.append((str(m["from"]), m["body"])))
    try:
        # Deeper than the bound, with text, attributes, siblings and a namespaced payload past it.
        deep = _deep("m@x.test/r1", 3 * MAX_STANZA_DEPTH).replace(
            b"</x></x>", b"<y a='1'>text</y><z xmlns='urn:other'/></x>tail</x>", 5
        )
        data = _message("m@x.test/r1", "before") + deep + _message("m@x.test/r1", "after")
        data += _message("b@x.test/r", "another") + deep + _message("x.test", "server")
        for at in range(0, len(data), chunk):
            xmpp.data_received(data[at : at + chunk])
        assert not transport.aborted
        assert read == [("m@x.test/r1", "before"), ("m@x.test/r1", "after"), ("b@x.test/r", "another"),
                        ("x.test", "server")]  # fmt: skip
        assert client.drop_counts() == {"oversized": 2}
        assert "peer=m@x.test" in caplog.text and "peer=server" not in caplog.text
        assert len(xmpp.xml_root) == 0, "nothing of the stanzas read past is kept under the stream's root"
    finally:
        xmpp.abort()
        await asyncio.sleep(0)


@pytest.mark.parametrize("sender", [None, "x.test", "a@x.test/other", "A@X.test"])
async def test_a_deep_stanza_only_the_server_could_send_still_ends_the_session(sender: str | None) -> None:
    """No `from`, the server's domain or our own account: what only the server writes (a hostile server, review21h
    H5) still ends the session, counted against the server."""
    client = SignalClient(SignalSettings(jid="a@x.test", server="127.0.0.1", password="pw", memberships={"ov1": 1}))
    xmpp, transport = _stream(client)
    try:
        stanza = _deep(sender or "", MAX_STANZA_DEPTH + 1)
        xmpp.data_received(stanza.replace(b" from=''", b"") if sender is None else stanza)
        assert transport.aborted and client.drop_counts() == {"oversized": 1}
    finally:
        xmpp.abort()
        await asyncio.sleep(0)


async def test_reading_past_a_deep_stanza_holds_no_tree() -> None:
    """A member's stanza as large as the server relays (prosody's `max_stanza_size`, 256 KB), its elements past the
    bound, fed as the network cuts it: what it costs to read past, and that what it built is not kept."""
    client = SignalClient(SignalSettings(jid="a@x.test", server="127.0.0.1", password="pw", memberships={"ov1": 1}))
    xmpp, transport = _stream(client)
    size = 256 * 1024
    head = _deep("m@x.test/r1", MAX_STANZA_DEPTH + 1)[: -(len(b"</x>") * (MAX_STANZA_DEPTH + 1) + len(b"</message>"))]
    tail = b"</x>" * (MAX_STANZA_DEPTH + 1) + b"</message>"
    wide = head + b"<y/>" * ((size - len(head) - len(tail)) // 4) + tail  # 65,000 siblings below the bound
    deep = head + b"<y>" * ((size - len(head) - len(tail)) // 7) + b"</y>" * ((size - len(head) - len(tail)) // 7)
    deep += tail  # 37,000 levels more
    try:
        for name, stanza in (("wide", wide), ("deep", deep)):
            tracemalloc.start()
            started = time.process_time()
            for at in range(0, len(stanza), 8192):
                xmpp.data_received(stanza[at : at + 8192])
            cpu = time.process_time() - started
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            print(f"a member's {len(stanza) // 1024} KB stanza past the depth bound ({name}), read past: "
                  f"{cpu * 1e3:.0f} ms of CPU, {peak / 1e6:.2f} MB at most held")  # fmt: skip
            assert not transport.aborted and len(xmpp.xml_root) == 0
            # Wide: its elements are cut off each batch (a tree of 65,000 is 5.5 MB as an admitted stanza builds it).
            # Deep: the parser's own open elements stay until they end, 37,000 here (10 MB), as they would in any
            # stanza the server relays; none are handed to slixmpp.
            assert peak < (2_000_000 if name == "wide" else 16_000_000)
        assert client.drop_counts() == {"oversized": 2}
    finally:
        xmpp.abort()
        await asyncio.sleep(0)
