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
"""

from __future__ import annotations

import asyncio

import pytest

from evio.signal.client import MAX_STANZA_DEPTH, SignalClient, SignalSettings
from tests.unit.signal.test_review21h_stanza_size_unbounded import _stream


def _deep(sender: str, depth: int) -> bytes:
    inner = b"<x xmlns='urn:example:deep'>" * depth + b"</x>" * depth
    return f"<message from='{sender}' to='a@x.test/r'>".encode() + inner + b"</message>"


@pytest.mark.xfail(strict=True, reason="review21s finding 3: a member's stanza past MAX_STANZA_DEPTH aborts the "
                   "victim's XMPP session (judged as the server's)")
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
