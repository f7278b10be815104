"""A presence the server lost at login is asked for again (decision 0067), on the in-memory hub and a VirtualClock.

Two members signing in to two nodes of an ejabberd cluster at the same moment may each miss the other's
presence for good (Mnesia replicates sessions asynchronously: each node looked for the other's session before
it had it). The hub's `loses_presence` plays that; a probe to the member's bare JID still gets it.
"""

from __future__ import annotations

from evio.signal.endpoint import PROBE_AFTER, PROBE_ROUNDS
from evio.signal.peers import bare_jid
from evio.testing.fake_signal import FakeSignalClient, FakeSignalHub
from evio.testing.virtual_clock import VirtualClock

D = "x.test"
LATEST = PROBE_AFTER * 1.25  # the first round's latest time after a login (jittered 0.75-1.25x)


async def start(hub: FakeSignalHub, names: list[str], online: list[str]) -> dict[str, FakeSignalClient]:
    hub.set_group("ov1", [f"{n}@{D}" for n in names])
    clients = {n: hub.client(f"{n}@{D}", {"ov1": i}) for i, n in enumerate(names, start=1) if n in online}
    for client in clients.values():
        await client.start()
    return clients


def knows(client: FakeSignalClient, *others: FakeSignalClient) -> bool:
    return all(other.node_id("ov1") in client.peers("ov1") for other in others)


async def test_two_members_whose_presence_the_server_lost_both_ways_hear_of_each_other_on_their_probe() -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    hub.loses_presence = lambda to, sender: {bare_jid(to), bare_jid(sender)} == {f"a@{D}", f"b@{D}"}
    clients = await start(hub, ["a", "b", "c"], ["a", "b", "c"])
    a, b, c = clients["a"], clients["b"], clients["c"]
    started = clock.now()
    await clock.run_until(lambda: knows(c, a, b) and knows(a, c) and knows(b, c), 5, what="c and the others")
    assert not knows(a, b) and not knows(b, a)  # lost at login, both ways

    await clock.run_until(lambda: knows(a, b) and knows(b, a), 60, what="a and b knowing each other")
    assert clock.now() - started <= LATEST
    assert (a.presences_recovered, b.presences_recovered) == (1, 1)
    assert (a.presence_probes, b.presence_probes) == (1, 1)  # the one member each had no presence of
    assert c.presence_probes == 0 and c.presences_recovered == 0  # it lost nothing


async def test_members_offline_are_probed_once_per_login_not_for_ever() -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    names = ["a", "b", *[f"off{i}" for i in range(10)]]
    clients = await start(hub, names, ["a", "b"])
    a, b = clients["a"], clients["b"]
    await clock.run_until(lambda: knows(a, b) and knows(b, a), 5, what="a and b")
    await clock.advance(600)
    assert (a.presence_probes, b.presence_probes) == (10, 10)  # one round: nothing came of it
    assert a.presences_recovered == b.presences_recovered == 0

    hub.kick(a.full_jid)  # a new login, a new round
    await clock.advance(600)
    assert (a.presence_probes, b.presence_probes) == (20, 10)


async def test_a_round_that_recovered_a_presence_is_followed_by_more_rounds_a_bounded_number() -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    hub.loses_presence = lambda to, sender: {bare_jid(to), bare_jid(sender)} == {f"a@{D}", f"b@{D}"}
    clients = await start(hub, ["a", "b", "off"], ["a", "b"])
    a = clients["a"]
    await clock.advance(600)
    # Round 1 probed b (lost) and off; it brought b, so round 2 probed off again; that brought nothing: no third.
    assert a.presence_probes == 3 and a.presences_recovered == 1
    assert PROBE_ROUNDS >= 2


async def test_no_probe_while_every_member_is_present() -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    clients = await start(hub, ["a", "b", "c"], ["a", "b", "c"])
    await clock.advance(600)
    assert hub.probes == 0
    assert all(knows(x, *[y for y in clients.values() if y is not x]) for x in clients.values())


async def test_a_session_that_ended_probes_nothing() -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    clients = await start(hub, ["a", "off"], ["a"])
    hub.stop_server()  # every session ends before the round is due
    await clock.advance(600)
    assert clients["a"].presence_probes == 0 and hub.probes == 0
