"""The in-memory signaling hub, running the real endpoint logic (no server, no network), on a VirtualClock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from evio.signal.drops import DropReason
from evio.signal.endpoint import EndpointLimits
from evio.signal.errors import ErrorReason, HandlerBadRequest, HandlerRejected, ProtocolError, RequestError
from evio.signal.events import Connected, Disconnected, PeerAdded, PeerRemoved, RemovalCause
from evio.signal.protocol import Body
from evio.testing.fake_signal import FakeSignalClient, FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until

D = "x.test"


def virtual_hub() -> FakeSignalHub:
    return FakeSignalHub(VirtualClock())


def clock_of(hub: FakeSignalHub) -> VirtualClock:
    assert isinstance(hub.clock, VirtualClock)
    return hub.clock


async def until(hub: FakeSignalHub, cond: Callable[[], bool], what: str = "condition") -> None:
    await wait_until(cond, 5.0, what=what, clock=clock_of(hub))


async def overlay(hub: FakeSignalHub, n: int, limits: EndpointLimits | None = None) -> list[FakeSignalClient]:
    names = [f"n{i}@{D}" for i in range(1, n + 1)]
    hub.set_group("ov1", names)
    clients = [hub.client(name, {"ov1": i}, limits=limits) for i, name in enumerate(names, start=1)]
    for c in clients:
        await c.start()
    await until(hub, lambda: all(len(c.peers("ov1")) == n - 1 for c in clients))
    return clients


async def test_discovery_and_non_members_unseen() -> None:
    hub = virtual_hub()
    hub.set_group("ov1", [f"n{i}@{D}" for i in range(1, 6)])
    added: list[PeerAdded] = []
    clients = [hub.client(f"n{i}@{D}", {"ov1": i}) for i in range(1, 6)]
    clients[0].subscribe(PeerAdded, added.append)
    outsider = hub.client(f"evil@{D}", {"ov1": 99})
    for c in [*clients, outsider]:
        await c.start()
    await until(hub, lambda: all(len(c.peers("ov1")) == 4 for c in clients))
    assert set(clients[0].peers("ov1")) == {2, 3, 4, 5}
    assert sorted(e.node_id for e in added) == [2, 3, 4, 5]
    assert outsider.peers("ov1") == {}
    assert all(99 not in c.peers("ov1") for c in clients)


async def test_round_trip_and_typed_errors() -> None:
    hub = virtual_hub()
    a, b = await overlay(hub, 2, EndpointLimits(handler_timeout=0.2))
    calls: list[tuple[str, int, Body]] = []

    async def echo(ov: str, peer: int, body: Body) -> Body:
        calls.append((ov, peer, body))
        return {"echo": body}

    async def reject(ov: str, peer: int, body: Body) -> Body:
        raise HandlerRejected("no capacity")

    async def bad(ov: str, peer: int, body: Body) -> Body:
        raise HandlerBadRequest("missing ufrag")

    async def crash(ov: str, peer: int, body: Body) -> Body:
        raise KeyError("bug")

    async def slow(ov: str, peer: int, body: Body) -> Body:
        await clock_of(hub).sleep(10)
        return {}

    async def unsendable(ov: str, peer: int, body: Body) -> Body:
        return {"x": float("nan")}

    for name, fn in [("echo", echo), ("reject", reject), ("bad", bad), ("crash", crash), ("slow", slow),
                     ("unsendable", unsendable)]:
        b.register_handler(name, fn)
    assert await a.request("ov1", 2, "echo", {"k": [1, "v"]}) == {"echo": {"k": [1, "v"]}}
    assert calls == [("ov1", 1, {"k": [1, "v"]})]
    for action, reason in [("nope", ErrorReason.UNKNOWN_ACTION), ("reject", ErrorReason.REJECTED),
                           ("bad", ErrorReason.BAD_REQUEST), ("crash", ErrorReason.INTERNAL),
                           ("slow", ErrorReason.TIMEOUT), ("unsendable", ErrorReason.INTERNAL)]:
        with pytest.raises(RequestError) as info:
            await clock_of(hub).run(a.request("ov1", 2, action, {}, timeout=2.0))
        assert info.value.reason is reason, action
    assert a.drops.total == 0 and b.drops.total == 0
    with pytest.raises(ValueError):
        b.register_handler("echo", echo)
    with pytest.raises(ValueError):
        b.register_handler("Bad Name", echo)


async def test_local_errors() -> None:
    hub = virtual_hub()
    a, b = await overlay(hub, 2)

    async def hang(ov: str, peer: int, body: Body) -> Body:
        await clock_of(hub).sleep(10)
        return {}

    b.register_handler("hang", hang)
    with pytest.raises(RequestError) as info:
        await clock_of(hub).run(a.request("ov1", 2, "hang", {}, timeout=0.05))
    assert info.value.reason is ErrorReason.NO_RESPONSE
    with pytest.raises(RequestError) as info:
        await a.request("ov1", 77, "hang", {})
    assert info.value.reason is ErrorReason.UNKNOWN_PEER
    with pytest.raises(RequestError) as info:
        await a.request("ov9", 2, "hang", {})
    assert info.value.reason is ErrorReason.UNKNOWN_PEER
    with pytest.raises(ProtocolError):
        await a.request("ov1", 2, "hang", {"pad": "x" * 20000})
    await b.stop()
    await a.stop()


async def test_peer_leaving_fails_its_requests_and_is_removed() -> None:
    hub = virtual_hub()
    a, b = await overlay(hub, 2)
    removed: list[PeerRemoved] = []
    a.subscribe(PeerRemoved, removed.append)

    async def hang(ov: str, peer: int, body: Body) -> Body:
        await clock_of(hub).sleep(10)
        return {}

    b.register_handler("hang", hang)
    pending = asyncio.create_task(a.request("ov1", 2, "hang", {}, timeout=30))
    await until(hub, lambda: hub.delivered >= 1)
    await b.stop()
    with pytest.raises(RequestError) as info:
        await clock_of(hub).run(pending)
    assert info.value.reason is ErrorReason.UNREACHABLE
    assert removed == [PeerRemoved("ov1", 2, b.full_jid, RemovalCause.LEFT)]


async def test_bounce_when_session_vanished_silently() -> None:
    hub = virtual_hub()
    a, b = await overlay(hub, 2)
    del hub._online[b.full_jid]  # gone without an unavailable presence reaching anyone
    with pytest.raises(RequestError) as info:
        await a.request("ov1", 2, "x", {}, timeout=5)
    assert info.value.reason is ErrorReason.UNREACHABLE
    assert hub.bounced == 1


async def test_refused_input_is_counted_and_receiver_keeps_working() -> None:
    hub = virtual_hub()
    a, b, c = await overlay(hub, 3)
    hub.set_group("other", [f"n1@{D}", f"evil@{D}"])  # a contact, but not in ov1
    calls: list[int] = []

    async def echo(ov: str, peer: int, body: Body) -> Body:
        calls.append(peer)
        return body

    b.register_handler("echo", echo)
    hb, ha = f"{2:032x}", f"{1:032x}"

    def req(**kw: object) -> str:
        doc: dict[str, object] = {"v": 1, "kind": "request", "overlay": "ov1", "src": ha, "dst": hb,
                                  "txid": "t1", "action": "echo", "body": {}}
        doc.update(kw)
        return json.dumps(doc)

    hub.inject(f"evil@{D}/r", b.full_jid, req())  # not a member
    hub.inject(a.full_jid, b.full_jid, "{not json")  # malformed
    hub.inject(a.full_jid, b.full_jid, req(body={"pad": "x" * 20000}))  # oversized
    hub.inject(a.full_jid, b.full_jid, req(overlay="ov2"))  # an overlay b does not serve
    hub.inject(c.full_jid, b.full_jid, req())  # c claims to be a (src mismatch)
    hub.inject(a.full_jid, b.full_jid, req(dst=f"{3:032x}"))  # addressed to another node
    hub.inject(f"n1@{D}/other-session", b.full_jid, req())  # member account, unannounced session
    hub.inject(a.full_jid, b.full_jid, json.dumps({"v": 1, "kind": "response", "overlay": "ov1", "src": ha,
                                                   "dst": hb, "txid": "t9", "body": {}}))  # nothing asked
    await until(hub, lambda: b.drops.total == 8)
    assert calls == []
    expected = {DropReason.NOT_MEMBER: 1, DropReason.MALFORMED: 1, DropReason.OVERSIZED: 1,
                DropReason.FOREIGN_OVERLAY: 1, DropReason.WRONG_NODE: 2, DropReason.UNKNOWN_PEER: 1,
                DropReason.UNEXPECTED_RESPONSE: 1}
    assert b.drops.counts == expected
    assert await a.request("ov1", 2, "echo", {"still": "fine"}) == {"still": "fine"}
    assert calls == [1]


async def test_what_a_newer_release_sends_is_read_past_or_counted_apart_from_malformed_input() -> None:
    """protocol.py, "Compatibility between releases": added fields are ignored (counted), a new kind or another
    major version is dropped under its own reason, never as malformed."""
    hub = virtual_hub()
    a, b = await overlay(hub, 2)
    calls: list[Body] = []

    async def echo(ov: str, peer: int, body: Body) -> Body:
        calls.append(body)
        return body

    b.register_handler("echo", echo)
    doc: dict[str, object] = {"v": 1, "kind": "request", "overlay": "ov1", "src": f"{1:032x}", "dst": f"{2:032x}",
                              "txid": "t1", "action": "echo", "body": {"n": 1}, "trace": "x"}
    hub.inject(a.full_jid, b.full_jid, json.dumps(doc))  # a field added by a newer release
    await until(hub, lambda: calls == [{"n": 1}])
    assert b.ignored_fields == 1
    hub.inject(a.full_jid, b.full_jid, json.dumps({**doc, "kind": "notice"}))
    hub.inject(a.full_jid, b.full_jid, json.dumps({**doc, "v": 2}))
    await until(hub, lambda: b.drops.total == 2)
    assert b.drops.counts == {DropReason.UNKNOWN_KIND: 1, DropReason.UNSUPPORTED_VERSION: 1}
    assert b.peer_features("ov1", 1) == frozenset()  # this release announces none (the previous one would refuse)


async def test_overload_is_dropped() -> None:
    hub = virtual_hub()
    a, b = await overlay(hub, 2, EndpointLimits(max_inflight_handlers=2))
    release = asyncio.Event()

    async def wait(ov: str, peer: int, body: Body) -> Body:
        await release.wait()
        return {}

    b.register_handler("wait", wait)
    tasks = [asyncio.create_task(a.request("ov1", 2, "wait", {}, timeout=0.5)) for _ in range(3)]
    await until(hub, lambda: b.drops.count(DropReason.OVERLOADED) == 1)
    release.set()
    results = await clock_of(hub).run(asyncio.gather(*tasks, return_exceptions=True))
    assert sum(1 for r in results if r == {}) == 2
    await a.stop()
    await b.stop()


async def test_one_peer_cannot_fill_the_shared_handler_limit() -> None:
    """Issue 9: a flood from one peer used to take every in-flight slot, and other peers were dropped."""
    hub = FakeSignalHub()  # real time: the handlers wait on an event, not on the clock
    names = [f"n{i}@{D}" for i in range(1, 4)]
    hub.set_group("ov1", names)
    limits = EndpointLimits(max_inflight_handlers=16, max_inflight_per_peer=4)
    a, b, c = [hub.client(name, {"ov1": i}, limits=limits) for i, name in enumerate(names, start=1)]
    for client in (a, b, c):
        await client.start()
    await wait_until(lambda: all(len(x.peers("ov1")) == 2 for x in (a, b, c)))
    release = asyncio.Event()
    entered: list[int] = []

    async def wait(ov: str, peer: int, body: Body) -> Body:
        entered.append(peer)
        await release.wait()
        return {"from": peer}

    b.register_handler("wait", wait)
    flood = [asyncio.create_task(a.request("ov1", 2, "wait", {}, timeout=1.0)) for _ in range(40)]
    await wait_until(lambda: b.drops.count(DropReason.PEER_OVERLOADED) == 36)
    assert b.drops.count(DropReason.OVERLOADED) == 0
    fair = asyncio.create_task(c.request("ov1", 2, "wait", {}, timeout=2.0))
    await wait_until(lambda: 3 in entered)  # the other peer's request is being served, not queued or dropped
    release.set()
    assert await fair == {"from": 3}  # the other peer is still served
    results = await asyncio.gather(*flood, return_exceptions=True)
    assert sum(1 for r in results if r == {"from": 1}) == 4
    for client in (a, b, c):
        await client.stop()


async def test_server_restart_everyone_rejoins_and_rediscovers() -> None:
    hub = virtual_hub()
    clients = await overlay(hub, 4)
    log: list[object] = []
    clients[0].subscribe(Connected, log.append)
    clients[0].subscribe(Disconnected, log.append)
    clients[0].subscribe(PeerRemoved, log.append)
    hub.stop_server()
    assert not any(c.connected for c in clients)
    assert all(c.peers("ov1") == {} for c in clients)
    assert isinstance(log[0], Disconnected)
    assert all(isinstance(e, PeerRemoved) and e.cause is RemovalCause.SIGNAL_LOST for e in log[1:])
    with pytest.raises(RequestError) as info:
        await clients[0].request("ov1", 2, "x", {})
    assert info.value.reason is ErrorReason.NOT_CONNECTED
    hub.start_server()
    await until(hub, lambda: all(len(c.peers("ov1")) == 3 for c in clients))
    assert all(c.sessions == 2 for c in clients)
    assert any(isinstance(e, Connected) for e in log)


async def test_membership_revoked_by_server() -> None:
    hub = virtual_hub()
    a, b, c = await overlay(hub, 3)
    removed: list[PeerRemoved] = []
    a.subscribe(PeerRemoved, removed.append)
    hub.set_group("ov1", [f"n1@{D}", f"n2@{D}"])
    assert removed == [PeerRemoved("ov1", 3, c.full_jid, RemovalCause.MEMBERSHIP_REVOKED)]
    assert set(a.peers("ov1")) == {2}


async def test_a_member_removed_while_we_were_offline_is_revoked_at_login() -> None:
    """Issue 9: the roster read at login is reconciled with every node id seen before, present or not."""
    hub = virtual_hub()
    a, b, c = await overlay(hub, 3)
    removed: list[PeerRemoved] = []
    a.subscribe(PeerRemoved, removed.append)
    hub.kick(a.full_jid, relogin=False)
    hub.set_group("ov1", [f"n1@{D}", f"n2@{D}"], push=False)  # as prosody's mod_groups: no push
    hub.relogin(a.full_jid)
    await until(hub, lambda: 2 in a.peers("ov1"))
    revoked = [e for e in removed if e.cause is RemovalCause.MEMBERSHIP_REVOKED]
    assert [(e.overlay, e.node_id) for e in revoked] == [("ov1", 3)]
    assert 3 not in a.peers("ov1")
    for client in (a, b, c):
        await client.stop()


async def test_check_membership_reads_the_group_again() -> None:
    hub = virtual_hub()
    a, b, c = await overlay(hub, 3)
    removed: list[PeerRemoved] = []
    a.subscribe(PeerRemoved, removed.append)
    hub.set_group("ov1", [f"n1@{D}", f"n2@{D}"], push=False)
    hub.kick(c.full_jid)  # a sees only "unavailable"
    await until(hub, lambda: 3 not in a.peers("ov1"))
    assert [e.cause for e in removed] == [RemovalCause.LEFT]
    a.check_membership()
    assert [e.cause for e in removed] == [RemovalCause.LEFT, RemovalCause.MEMBERSHIP_REVOKED]
    for client in (a, b, c):
        await client.stop()
