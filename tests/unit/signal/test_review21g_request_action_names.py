"""Review21g G4: one member grows a node's memory, and its `evio status`, without bound with requests through the
server naming actions that do not exist (the server path's twin of G3).

Attack: `SignalEndpoint._start_handler` counts every request a member sends before anything else:
`self.requests_in[request.action] += 1`, a Counter keyed by the action name, which the protocol bounds in length
(`ACTION_RE`, 64 characters) but not in number. Hostile member B sends node A requests, each naming a new action
(64 random letters); A answers each with unknown_action, and keeps one more key. The Counter is in the overlay's
status (`overlay_status`: "messages": {"requests_in": ...}).

Measured (FakeSignalHub, real endpoint): 2,000 such requests left 2,000 keys in `requests_in` and a
`message_counts()` of 142,044 bytes of JSON (about 70 bytes of status and 200 of memory per request, forever).
At the few dozen requests a second a member's session carries, that is hundreds of MB a day and an `evio status`
that grows with it.

Fixed: count requests by action only for the actions a handler is registered for (the rest under one
key, "unknown"), and never key a counter by a peer-chosen string (see also G3 for the ring).
"""

from __future__ import annotations

import random

import pytest

from evio.signal.errors import RequestError
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.waiting import wait_until


async def test_requests_naming_invented_actions_do_not_grow_the_nodes_counters() -> None:
    hub = FakeSignalHub()
    hub.set_group("ov1", ["a@x.test", "b@x.test"])
    a, b = hub.client("a@x.test", {"ov1": 5}), hub.client("b@x.test", {"ov1": 6})
    await a.start()
    await b.start()
    try:
        await wait_until(lambda: 6 in a.peers("ov1") and 5 in b.peers("ov1"), timeout=5.0)
        rng = random.Random(1)
        for _ in range(200):
            action = "z" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(63))
            with pytest.raises(RequestError):
                await b.request("ov1", 5, action, {}, timeout=1.0)
        assert len(a.message_counts()["requests_in"]) <= 8, f"{len(a.message_counts()['requests_in'])} actions counted"
    finally:
        await a.stop()
        await b.stop()
