"""review21d R1': the review21c fix lets only a *broadcast* of the list hold an answer back. But under Bounded
Flood the root of a broadcast chooses its bounds, and a member is the root of its own broadcasts: it can send
the genuine signed list as a broadcast that reaches every node but the asker (clockwise up to L's id through
its successor, counter-clockwise up to L's id through its predecessor). Each holder then sees a real broadcast
of its list within its answer jitter and stays silent; L never gets it. Setting as test_review21c_revocation_
flood.py: trust mode, the XMPP server down or stripping the list, L missed the first copies (offline, joined
later). The reach of the hostile member's broadcast is computed with the real flooding bounds on a ring."""

from __future__ import annotations

from evio.ids import RING_SIZE
from evio.node import revocation_flood as rf
from evio.ratelimit import TokenBucket
from evio.sdn.flooding_bounds import forward_bounds, reverse_forward_bounds
from evio.signal import identity
from evio.signal.events import RevocationAdopted
from evio.testing.virtual_clock import VirtualClock
from tests.unit.node.test_review21c_revocation_flood import HOSTILE, list_frames
from tests.unit.node.test_revocation_flood import Medium, WiredFlood, fleet, signed, without_frame_budget

REACTION = 0.005  # from L's HAVE to the hostile copy at each holder (or: the copy streamed every 5 ms)


def reach(ring: list[int], root: int, sends: dict[int, tuple[int, bool]]) -> set[int]:
    """Nodes a broadcast from `root` reaches on a ring of successor/predecessor links, when the root sends
    neighbour -> (bound, reverse) and every other node forwards by the real (reverse_)forward_bounds."""
    links = {n: {ring[(i - 1) % len(ring)], ring[(i + 1) % len(ring)]} for i, n in enumerate(ring)}
    reached: set[int] = set()
    queue = [(n, b, rev, root) for n, (b, rev) in sends.items()]
    while queue:
        node, bound, reverse, came_from = queue.pop()
        reached.add(node)
        onward = (reverse_forward_bounds if reverse else forward_bounds)(node, bound, links[node], came_from)
        queue.extend((n, b, reverse, node) for n, b in onward.items())
    return reached


# Fixed since (rule 5 of revocation_flood.py): L says each HAVE again 1.5 s later while it lacks a newer list, and a
# holder that held its answer back and hears the same asker again answers firmly, whatever copies come by.
async def test_the_genuine_list_broadcast_to_all_but_the_asker_holds_every_answer_back() -> None:
    medium, nodes, clock = fleet(8)
    late = nodes[7]
    # Ring positions: the hostile member at 0, the 8 nodes after it; L somewhere in the middle.
    step = RING_SIZE // 16
    hostile_id = 0
    ids = {node: (i + 1) * step for i, node in enumerate(nodes)}
    ids[late] = 4 * step + step // 2
    ring = sorted([hostile_id, *ids.values()])
    successor, predecessor = ring[1], ring[-1]
    got = reach(ring, hostile_id, {successor: (ids[late], False), predecessor: (ids[late], True)})
    assert got == set(ring) - {hostile_id, ids[late]}, "the bounded broadcast reaches all but L"
    by_id = {v: k for k, v in ids.items()}

    for i, node in enumerate(nodes):
        node._rng.seed(2100 + i)  # each holder's answer jitter: reproducible
    late.connected = False
    rl = signed(5, revoked=3)
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(rl), "file")
    await clock.advance(max(rf.REPEATS) + 0.01)  # the first copy and its repeats: all missed by L
    late.connected = True

    def hostile_broadcast() -> None:  # its own broadcast of the genuine list, bounded around L
        for node_id in got:
            for frame in list_frames(rl):
                by_id[node_id].receive(frame, HOSTILE, broadcast=True)

    send = medium.send

    def watched_send(sender: WiredFlood, frame: bytes, to: bytes = rf.BROADCAST) -> None:
        send(sender, frame, to)
        if sender is late and rf.HEADER.unpack_from(frame)[2] == rf.HAVE:
            clock.call_later(REACTION, hostile_broadcast)  # the hostile member answers every HAVE of L's

    medium.send = watched_send  # type: ignore[method-assign]
    adopted: list[float] = []
    late.signaling.subscribe(RevocationAdopted, lambda _: adopted.append(clock.now()))
    start, asks = clock.now(), 0
    while clock.now() - start < 1800 and late.signaling.list is None:
        late.link_up()  # L asks: a link came up, its periodic HAVE, or it heard a holder's HAVE of a newer serial
        asks += 1
        await clock.advance(rf.HAVE_PERIOD)  # L's asks back off to HAVE_PERIOD; its periodic HAVE as often
    took = adopted[0] - start if adopted else clock.now() - start
    held = sum(n.counts["answer_heard_elsewhere"] for n in nodes)
    firm = sum(n.counts["sent_firm"] for n in nodes)
    print(f"L got the list after {took:.1f} s (virtual), {asks} asks, {late.counts['sent_follow_up']} follow-ups; "
          f"answers held back: {held}, firm answers: {firm}")
    # Without the hostile member: at L's first ask (test_review21c_revocation_flood.py: within 5 s).
    assert late.signaling.list is not None and took <= 5.0
    assert firm <= len(nodes) - 1


def list_broadcasts(medium: Medium, since: int) -> int:
    """Lists sent (their first chunk) on the medium since frame `since`, by broadcast or unicast."""
    return sum(1 for _, f in medium.frames[since:] if rf.HEADER.unpack_from(f)[2] == rf.LIST and rf.HEADER.unpack_from(f)[4] == 0)


def lists_sent(medium: Medium, since: int) -> tuple[int, int]:
    """(broadcasts, unicasts) of a list since frame `since`."""
    firsts = [to for (_, f), to in zip(medium.frames[since:], medium.destinations[since:], strict=True)
              if rf.HEADER.unpack_from(f)[2] == rf.LIST and rf.HEADER.unpack_from(f)[4] == 0]  # fmt: skip
    broadcasts = sum(1 for to in firsts if to == rf.BROADCAST)
    return broadcasts, len(firsts) - broadcasts


async def settled_fleet(n: int, late: int | None = None) -> tuple[Medium, list[WiredFlood], VirtualClock]:
    """A fleet of `n` holding serial 5 (but node `late`, which missed every copy), whose nodes have said their
    periodic HAVEs: each knows the others' places on the ring."""
    medium, nodes, clock = fleet(n)
    for i, node in enumerate(nodes):
        node._rng.seed(4200 + i)
        if i != late:
            node.arm_periodic_have()
    if late is not None:
        nodes[late].connected = False  # it misses every copy and HAVE, and asks when the test says
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(signed(5, revoked=3)), "file")
    await clock.advance(1.5 * rf.HAVE_PERIOD_MAX)  # every periodic HAVE said once at least
    assert all(len(node._have_heard) >= n - 2 for i, node in enumerate(nodes) if i != late)
    for node in nodes:  # quiet from now on: what goes on the wire is the test's
        if node._periodic_timer is not None:
            node._periodic_timer.cancel()
    await clock.advance(rf.FOLLOW_UP + rf.ANSWER_JITTER)
    if late is not None:
        nodes[late].connected = True
    return medium, nodes, clock


async def test_a_forged_asker_asking_twice_costs_a_few_unicast_answers() -> None:
    """What the firm answer costs when the asker is invented: a member sends, every ANSWER_INTERVAL for a minute,
    a HAVE of serial 0 from a new MAC, holds the answers back with its own copy, and asks again from the same MAC
    FOLLOW_UP later (as L does). The first ask costs about one broadcast of the list (none with the copies), the
    second FIRM_FEW unicasts (the chosen few, whatever the fleet's size); an ask of the widest level makes every
    node answer, by unicast, at most as FIRM_RATE allows."""
    n, seconds = 16, 60
    medium, nodes, clock = await settled_fleet(n)
    rl = nodes[0].signaling.list
    assert rl is not None
    figures = {}
    pairs = int(seconds / rf.ANSWER_INTERVAL)
    for copies, level in ((False, 0), (True, 0), (True, 255)):
        for node in nodes:
            node._last_answer = float("-inf")
            node._firm_budget = TokenBucket(rf.FIRM_RATE, clock.now())
        before = len(medium.frames)
        for pair in range(pairs):
            asker = (0x02EE00000000 + 0x100 * level + 2 * pair + copies).to_bytes(6, "big")
            have = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.HAVE, 0, level, 0)
            for node in nodes:
                node.receive(have, asker)
            if copies:
                await clock.advance(REACTION)
                for node in nodes:
                    for frame in list_frames(rl):
                        node.receive(frame, HOSTILE)
            await clock.advance(rf.FOLLOW_UP)
            for node in nodes:
                node.receive(have, asker)
            await clock.advance(rf.ANSWER_INTERVAL - rf.FOLLOW_UP - (REACTION if copies else 0))
        figures[copies, level] = lists_sent(medium, before)
        print(f"{pairs} forged askers of level {level} asking twice in {seconds} s"
              f"{' (with the member copies)' if copies else ''}: the {n} nodes sent the list "
              f"{figures[copies, level][0]} times by broadcast, {figures[copies, level][1]} by unicast")
    assert figures[False, 0][0] <= pairs + 2 and figures[True, 0][0] <= pairs // 2
    assert figures[False, 0][1] <= (rf.FIRM_FEW + 1) * pairs and figures[True, 0][1] <= (rf.FIRM_FEW + 1) * pairs
    assert figures[True, 255][1] <= n * (rf.FIRM_RATE.burst + rf.FIRM_RATE.per_second * seconds)


async def test_a_lost_answer_is_made_up_by_the_follow_up_within_two_seconds() -> None:
    """No hostile member: the one answer to L's HAVE is lost on the way (a datagram), the others held back by it.
    L's follow-up is answered by the few holders it chooses, by unicast. Without loss L never follows up."""
    medium, nodes, clock = await settled_fleet(8, late=7)
    late = nodes[7]
    before = len(medium.frames)
    late.link_up()
    late.connected = False  # the answer is lost
    await clock.advance(rf.ANSWER_JITTER + 0.01)
    late.connected = True
    assert late.signaling.list is None and list_broadcasts(medium, before) == 1
    await clock.advance(rf.FOLLOW_UP + rf.ANSWER_JITTER)
    print(f"L got the list by its follow-up; lists sent (broadcast, unicast): {lists_sent(medium, before)}")
    assert late.signaling.list is not None and late.counts["sent_follow_up"] == 1
    assert lists_sent(medium, before) == (1, rf.FIRM_FEW)
    await clock.advance(rf.FOLLOW_UP)
    assert late.counts["sent_follow_up"] == 1, "the follow-up is said once"


async def lost_answer_cost(n: int) -> tuple[int, int, int, float]:
    """Fleet of `n`, settled; L (which missed the list) asks and the one answer is lost: (unicast lists sent for
    the firm answers, their frames, frames delivered for them, seconds until L holds the list)."""
    medium, nodes, clock = await settled_fleet(n, late=n - 1)
    late = nodes[-1]
    adopted: list[float] = []
    late.signaling.subscribe(RevocationAdopted, lambda _: adopted.append(clock.now()))
    start = clock.now()
    late.link_up()
    late.connected = False  # the answer is lost
    await clock.advance(rf.ANSWER_JITTER + 0.01)
    late.connected = True
    before, delivered = len(medium.frames), medium.deliveries
    await clock.advance(rf.FOLLOW_UP + rf.ANSWER_JITTER)
    lists = [to for (_, f), to in zip(medium.frames[before:], medium.destinations[before:], strict=True)
             if rf.HEADER.unpack_from(f)[2] in (rf.MANIFEST, rf.LIST)]  # fmt: skip
    assert lists and set(lists) == {late.mac}, "the answers to the follow-up are unicasts to L"
    late.connected = False  # L's follow-up and the answers to it cost this much, delivered
    firm = sum(n.counts["sent_firm"] for n in nodes)
    return firm, len(lists), medium.deliveries - delivered, adopted[0] - start if adopted else float("inf")


async def test_one_lost_answer_costs_the_same_few_unicasts_whatever_the_fleet_size() -> None:
    """review21e: under the firm answers of review21d every holder that heard both asks broadcast the list to the
    whole overlay, N broadcasts each flooded to N nodes for one lost answer. The chosen few answer by unicast."""
    figures = {n: await lost_answer_cost(n) for n in (16, 64, 256)}
    for n, (firm, frames, delivered, took) in figures.items():
        print(f"fleet of {n}: L's follow-up and the firm answers to it: {firm} firm answers, {frames} frames of "
              f"the list sent, {delivered} frames delivered with the follow-up's own flood (a broadcast from every "
              f"holder: {(n - 2) * frames // max(firm, 1)} sent, {(n - 2) * (n - 1) * frames // max(firm, 1)} "
              f"delivered); L held the list {took:.2f} s after its HAVE")
    # Each firm answer is the list's manifest and its one chunk (review21e E3).
    assert {figures[n][:2] for n in figures} == {(rf.FIRM_FEW, 2 * rf.FIRM_FEW)}, "grows with the fleet"
    assert all(delivered == n - 1 + frames for n, (_, frames, delivered, _) in figures.items())
    assert all(took <= 2 * rf.FOLLOW_UP for *_, took in figures.values())


async def test_an_asker_the_chosen_few_do_not_reach_asks_again_wider() -> None:
    """The chosen few answered L's follow-up, but their unicasts were lost too (or the few were forged MACs said
    to sit next to L on the ring): L's next ask, of level 1, is answered by FIRM_FEW * FIRM_WIDEN holders."""
    medium, nodes, clock = await settled_fleet(64, late=63)
    late = nodes[-1]
    late.link_up()
    late.connected = False  # the answer and both firm answers are lost
    await clock.advance(rf.ANSWER_JITTER + rf.FOLLOW_UP + rf.ANSWER_JITTER + 0.01)
    late.connected = True
    assert late.signaling.list is None and sum(n.counts["sent_firm"] for n in nodes) == rf.FIRM_FEW
    nodes[0].link_up()  # a holder's HAVE: L asks again (level 1), and follows up
    await clock.advance(rf.ANSWER_JITTER + rf.HAVE_INTERVAL + rf.FOLLOW_UP + rf.ANSWER_JITTER)
    firm = sum(n.counts["sent_firm"] for n in nodes)
    print(f"level 1: {firm - rf.FIRM_FEW} more firm answers")
    assert late.signaling.list is not None
    assert rf.FIRM_FEW < firm <= rf.FIRM_FEW + rf.FIRM_FEW * rf.FIRM_WIDEN


async def test_asks_are_remembered_within_bounds() -> None:
    """Every ask is noted for FIRM_WINDOW (to know a repeated one): at most MAX_ASKERS, the oldest forgotten and
    counted; all forgotten once the window passed."""
    _, nodes, clock = fleet(1)
    node = without_frame_budget(nodes[0])
    node.signaling.receive_revocation_list(identity.list_to_text(signed(5)), "file")
    have = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.HAVE, 0, 0, 0)
    for sender in range(rf.MAX_ASKERS + 10):
        node.receive(have, (0x02EE00000000 + sender).to_bytes(6, "big"))
    assert len(node._asked) == rf.MAX_ASKERS and node.counts["askers_forgotten"] == 10
    assert node.counts["sent_firm"] == 0 and node.counts["firm_held"] == 0, "no sender asked twice"
    await clock.advance(rf.FIRM_WINDOW + 0.01)
    node.receive(have, HOSTILE)
    assert list(node._asked) == [HOSTILE]
