from collections.abc import Callable
from typing import Any

import pytest

from evio.tunnel.datapath.record import HELLO_PEER_SEEN, ControlMessage, ControlOpcode
from evio.tunnel.liveness import (
    MAX_PENDING_ECHOES,
    DownReason,
    EchoAnswered,
    Liveness,
    LivenessConfig,
    LivenessState,
    PeerAlive,
    PeerDead,
    SendControl,
)

CFG = LivenessConfig(hello_interval=0.1, keepalive_interval=1.0, dead_after=3.0, establish_timeout=2.0)


def test_hello_until_heard_then_up() -> None:
    lv = Liveness(CFG, now=0.0)
    assert lv.start(0.0) == [SendControl(ControlOpcode.HELLO)]
    assert lv.tick(0.05, 0, 1) == []
    assert lv.tick(0.1, 0, 1) == [SendControl(ControlOpcode.HELLO)]
    actions = lv.on_control(0.12, ControlMessage(ControlOpcode.HELLO, 0))
    assert actions == [PeerAlive(), SendControl(ControlOpcode.HELLO, HELLO_PEER_SEEN)]
    assert lv.state is LivenessState.UP
    assert lv.tick(0.3, 1, 2) == []


def test_hello_with_peer_seen_is_not_answered() -> None:
    lv = Liveness(CFG, now=0.0)
    assert lv.on_control(0.01, ControlMessage(ControlOpcode.HELLO, HELLO_PEER_SEEN)) == [PeerAlive()]


def test_data_records_alone_bring_the_link_up() -> None:
    lv = Liveness(CFG, now=0.0)
    assert lv.tick(0.05, 3, 0) == [PeerAlive()]


def test_never_authenticated_goes_down() -> None:
    lv = Liveness(CFG, now=0.0)
    lv.start(0.0)
    t = 0.0
    actions: list[object] = []
    while t < 2.0:
        t = round(t + 0.1, 3)
        actions = list(lv.tick(t, 0, 0))
    assert actions == [PeerDead(DownReason.NOT_AUTHENTICATED)]
    assert lv.tick(t + 1, 5, 5) == []


def echo(token: int) -> SendControl:
    return SendControl(ControlOpcode.ECHO_REQUEST, 0, token)


def test_an_echo_every_keepalive_interval_stands_in_for_keepalives_and_dead_after_silence() -> None:
    lv = Liveness(CFG, now=0.0)
    lv.tick(0.0, 1, 1)
    assert lv.state is LivenessState.UP
    # Sending and receiving steadily: one echo request a second, nothing else.
    sent = [(i, lv.tick(i * 0.25, 1 + i, 1 + i)) for i in range(1, 20)]
    assert [(i, a) for i, a in sent if a] == [(4, [echo(1)]), (8, [echo(2)]), (12, [echo(3)]), (16, [echo(4)])]
    t = 19 * 0.25
    # Tx stops: the echo requests keep the link alive; no separate keepalive.
    assert lv.tick(t + 0.25, 100, 20) == [echo(5)]
    assert lv.tick(t + 0.9, 101, 21) == []
    assert lv.tick(t + 1.25, 102, 21) == [echo(6)]
    # Rx stops at t+1.25: dead 2.5 s later (3 s minus two 0.25 s ticks), not before.
    assert lv.tick(t + 2.25, 102, 22) == [echo(7)]
    assert lv.tick(t + 3.25, 102, 23) == [echo(8)]
    assert lv.tick(t + 3.5, 102, 24) == [echo(9)]  # silent for an interval and a tick: every tick now
    assert lv.tick(t + 3.75, 102, 24) == [PeerDead(DownReason.PEER_SILENT)]
    assert lv.state is LivenessState.DOWN


def test_keepalive_when_echoes_are_rarer_than_the_idle_limit() -> None:
    lv = Liveness(CFG, now=0.0)
    lv.tick(0.0, 1, 1)
    assert lv.tick(0.25, 2, 1) == []
    assert lv.tick(0.9, 3, 1) == []
    # tx idle since 0.0 and the echo is due at the same time: the echo goes, not both.
    assert lv.tick(1.0, 4, 1) == [echo(1)]


def test_echo_requests_are_answered_and_replies_give_the_rtt() -> None:
    a, b = Liveness(CFG, now=0.0), Liveness(CFG, now=0.0)
    a.tick(0.0, 1, 1)
    b.tick(0.0, 1, 1)
    token, actions = a.probe(2.0)
    assert actions == [echo(token)]
    request = ControlMessage(ControlOpcode.ECHO_REQUEST, 0, token)
    assert b.on_control(2.01, request) == [SendControl(ControlOpcode.ECHO_REPLY, 0, token)]
    reply = ControlMessage(ControlOpcode.ECHO_REPLY, 0, token)
    (answered,) = a.on_control(2.03, reply)
    assert isinstance(answered, EchoAnswered) and answered.token == token
    assert answered.rtt == pytest.approx(0.03)
    assert a.rtt.last == pytest.approx(0.03) and a.rtt.samples == 1 and a.rtt.last_at == 2.03
    # A reply repeated, or for a token never sent, is ignored.
    assert a.on_control(2.05, reply) == []
    assert a.on_control(2.05, ControlMessage(ControlOpcode.ECHO_REPLY, 0, 999)) == []
    assert a.rtt.samples == 1


def test_probe_only_when_up_and_pending_echoes_are_bounded() -> None:
    lv = Liveness(CFG, now=0.0)
    assert lv.probe(0.0) == (0, [])
    lv.tick(0.0, 1, 1)
    tokens = [lv.probe(0.1 + i)[0] for i in range(MAX_PENDING_ECHOES + 5)]
    assert lv.on_control(50.0, ControlMessage(ControlOpcode.ECHO_REPLY, 0, tokens[0])) == []  # forgotten
    (answered,) = lv.on_control(50.0, ControlMessage(ControlOpcode.ECHO_REPLY, 0, tokens[-1]))
    assert isinstance(answered, EchoAnswered)
    assert lv.rtt.smoothed == pytest.approx(50.0 - (0.1 + MAX_PENDING_ECHOES + 4))


def test_close_goes_down_at_once() -> None:
    lv = Liveness(CFG, now=0.0)
    lv.tick(0.0, 1, 1)
    assert lv.on_control(0.5, ControlMessage(ControlOpcode.CLOSE, 0)) == [PeerDead(DownReason.PEER_CLOSED)]
    assert lv.on_control(0.6, ControlMessage(ControlOpcode.HELLO, 0)) == []


def test_tick_interval_and_config_checks() -> None:
    assert CFG.tick_interval(LivenessState.ESTABLISHING) == 0.1
    assert CFG.tick_interval(LivenessState.UP) == 0.25
    assert CFG.silence_limit == 2.5


def test_dead_peer_reported_within_dead_after_wherever_its_last_record_falls() -> None:
    tick = CFG.tick_interval(LivenessState.UP)
    for offset in (0.0, 0.01, 0.12, 0.249):
        last_rx = 10.0 + offset  # the peer sends every 0.1 s until then, then dies
        records = [i * 0.1 for i in range(int(last_rx * 10))] + [last_rx]
        lv = Liveness(CFG, now=0.0)
        now, reported = 0.0, None
        while reported is None:
            now = round(now + tick, 6)
            received = sum(1 for t in records if t <= now)
            if any(isinstance(a, PeerDead) for a in lv.tick(now, received, received)):
                reported = now
        assert last_rx < reported <= last_rx + CFG.dead_after, (offset, reported)


def test_config_checks() -> None:
    with pytest.raises(ValueError):
        LivenessConfig(keepalive_interval=1.5, dead_after=3)
    with pytest.raises(ValueError):
        LivenessConfig(keepalive_interval=30, dead_after=60)


def doubting(actions: list[object]) -> list[object]:
    """What a doubt's tick decides, without the echo requests (periodic ones, and the probe's own)."""
    return [a for a in actions if not (isinstance(a, SendControl) and a.opcode is ControlOpcode.ECHO_REQUEST)]


def echoes(actions: list[object]) -> int:
    return sum(1 for a in actions if isinstance(a, SendControl) and a.opcode is ControlOpcode.ECHO_REQUEST)


PROBE = LivenessConfig(hello_interval=0.1, keepalive_interval=1.0, dead_after=3.0, establish_timeout=2.0,
                       probe_interval=0.05, probe_floor=0.25, probe_rtt_factor=4.0, probe_timeout=1.0)


def _up(config: LivenessConfig = PROBE, rtt: float | None = None) -> Liveness:
    """An UP link at 0.01; with `rtt`, one echo answered after that long (the RTT is known)."""
    lv = Liveness(config, now=0.0)
    lv.start(0.0)
    lv.on_control(0.01, ControlMessage(ControlOpcode.HELLO, HELLO_PEER_SEEN))
    assert lv.state is LivenessState.UP
    if rtt is not None:
        token, _ = lv.probe(0.02)
        lv.on_control(0.02 + rtt, ControlMessage(ControlOpcode.ECHO_REPLY, 0, token))
        assert lv.rtt.last == pytest.approx(rtt)
    return lv


def test_probe_without_a_known_rtt_waits_the_probe_timeout() -> None:
    lv = _up()
    assert lv.probe_deadline() == PROBE.probe_timeout
    actions = lv.doubt(0.5, rx_records=7)
    assert echoes(actions) == 1 and doubting(actions) == []
    assert lv.probing and lv.tick_interval() == PROBE.probe_interval
    assert lv.doubt(0.55, rx_records=7) == []  # one probe at a time
    assert doubting(lv.tick(1.49, 7, 10)) == []
    assert doubting(lv.tick(1.5, 7, 11)) == [PeerDead(DownReason.PEER_SILENT)]  # not 3 s of silence
    assert lv.state is LivenessState.DOWN


def test_probe_of_a_near_peer_ends_after_the_floor_with_several_echoes_unanswered() -> None:
    lv = _up(rtt=0.002)
    assert lv.probe_deadline() == PROBE.probe_floor
    sent = echoes(lv.doubt(0.5, rx_records=7))
    now = 0.5
    while now < 0.68:
        now = round(now + 0.06, 3)
        actions = lv.tick(now, 7, 9)
        sent += echoes(actions)
        assert doubting(actions) == [], now
    assert doubting(lv.tick(0.75, 7, 9)) == [PeerDead(DownReason.PEER_SILENT)]
    assert sent >= 4  # one lost datagram does not kill a live peer


def test_probe_of_a_far_peer_waits_a_few_rtts_at_most_the_probe_timeout() -> None:
    far = _up(rtt=0.1)
    assert far.probe_deadline() == pytest.approx(0.4)
    far.doubt(0.5, rx_records=7)
    assert doubting(far.tick(0.89, 7, 9)) == []
    assert doubting(far.tick(0.91, 7, 9)) == [PeerDead(DownReason.PEER_SILENT)]
    assert _up(rtt=0.5).probe_deadline() == PROBE.probe_timeout


def test_probe_answered_keeps_the_link() -> None:
    lv = _up(rtt=0.002)
    (echo,) = lv.doubt(0.5, rx_records=7)
    assert isinstance(echo, SendControl)
    reply = lv.on_control(0.52, ControlMessage(ControlOpcode.ECHO_REPLY, 0, echo.token))
    assert reply == [EchoAnswered(echo.token, pytest.approx(0.02))]
    assert not lv.probing and lv.tick_interval() == PROBE.tick_interval(LivenessState.UP)
    assert doubting(lv.tick(1.6, 8, 9)) == []
    assert lv.state is LivenessState.UP


def test_records_counted_during_a_doubt_keep_a_busy_peer_up_until_it_answers() -> None:
    """Records counted after the probe began restart its deadline (earlier ones do not count): a busy peer whose
    first replies were lost stays up past the first deadline; the answer to the probe ends the doubt."""
    lv = _up(rtt=0.002)
    (asked,) = lv.doubt(0.5, rx_records=7)
    assert isinstance(asked, SendControl)
    assert echoes(lv.tick(0.55, 7, 8)) == 1  # nothing new since the probe: still doubting, asking again
    now, rx, asking = 0.55, 7, 0
    while now < 1.2:  # well past the first deadline (0.75), the peer's records counted at every tick
        now, rx = round(now + PROBE.probe_interval, 3), rx + 1
        actions = lv.tick(now, rx, rx)
        asking += echoes(actions)
        assert doubting(actions) == [] and lv.probing, now
    assert asking >= 6  # still asking at the probe's pace
    lv.on_control(1.21, ControlMessage(ControlOpcode.ECHO_REPLY, 0, asked.token))
    assert not lv.probing
    assert doubting(lv.tick(1.6, rx, rx + 1)) == []  # quiet since, past the deadline, but the probe was answered


def _dies_at(lv: Liveness, now: float, rx_records: int) -> float:
    """Ticks at the probe's pace from `now`, nothing more counted: when the link is declared dead."""
    actions = lv.tick(now, rx_records, 99)
    while not doubting(actions):
        assert now < 2 * PROBE.dead_after, "never dead"
        now = round(now + PROBE.probe_interval, 3)
        actions = lv.tick(now, rx_records, 99)
    assert doubting(actions) == [PeerDead(DownReason.PEER_SILENT)]
    return now


def test_a_record_in_flight_when_the_doubt_began_does_not_answer_it() -> None:
    """The CI flake of the vanished-peer session test: a PMTU_ACK the peer sent before it vanished was counted
    0.1 ms into the doubt, and the tunnel went down after the whole silence limit, not the probe's bound."""
    lv = _up(rtt=0.002)
    assert lv.probe_deadline() == PROBE.probe_floor
    lv.doubt(0.5, rx_records=7)
    lv.on_control(0.5001, ControlMessage(ControlOpcode.PMTU_ACK, 0, 12345))
    # Counted by the next tick, then silence: dead one deadline after that tick.
    assert _dies_at(lv, 0.55, 8) == pytest.approx(0.55 + PROBE.probe_floor)


def test_only_a_reply_to_the_doubts_own_echo_answers_it() -> None:
    lv = _up(rtt=0.002)
    earlier, _ = lv.probe(0.45)
    (asked,) = lv.doubt(0.5, rx_records=7)
    assert isinstance(asked, SendControl)
    # The reply to an echo sent before the doubt measures the RTT but answers nothing: the peer may have
    # sent it and gone.
    assert lv.on_control(0.5002, ControlMessage(ControlOpcode.ECHO_REPLY, 0, earlier)) == [
        EchoAnswered(earlier, pytest.approx(0.0502))]
    assert lv.probing
    assert _dies_at(lv, 0.55, 8) == pytest.approx(0.55 + PROBE.probe_floor)
    alive = _up(rtt=0.002)
    (asked,) = alive.doubt(0.5, rx_records=7)
    assert isinstance(asked, SendControl)
    alive.on_control(0.503, ControlMessage(ControlOpcode.ECHO_REPLY, 0, asked.token))
    assert not alive.probing and doubting(alive.tick(0.9, 8, 9)) == []


def test_probe_before_the_link_is_up_does_nothing() -> None:
    lv = Liveness(PROBE, now=0.0)
    lv.start(0.0)
    assert lv.doubt(0.01, 0) == [] and not lv.probing


def test_probe_config_checks() -> None:
    with pytest.raises(ValueError, match="probe_interval"):
        LivenessConfig(probe_interval=0.3, probe_floor=0.25)
    with pytest.raises(ValueError, match="probe_interval"):
        LivenessConfig(probe_floor=1.5, probe_timeout=1.0)
    with pytest.raises(ValueError, match="probe_rtt_factor"):
        LivenessConfig(probe_rtt_factor=0.5)


# ---------------------------------------------------------------- one echo exchange per interval


def _run_pair(phase_b: float, seconds: float, delay: float = 0.01,
              lost: Callable[[str, float, SendControl], bool] | None = None, jitter: float = 0.0) -> dict[str, Any]:
    """Two ends ticking every 0.25 s (B, the follower, `phase_b` after A), records taking `delay`; what
    each sent and heard."""
    import heapq
    import random

    rng = random.Random(7)

    ends = {"a": Liveness(CFG, now=0.0, leads=True), "b": Liveness(CFG, now=0.0, leads=False)}
    other = {"a": "b", "b": "a"}
    rx = {"a": 0, "b": 0}
    tx = {"a": 0, "b": 0}
    requests = {"a": 0, "b": 0}
    arrivals = {"a": 0, "b": 0}  # datagrams received: each a wake-up of that end's loop
    dead: list[tuple[str, float]] = []
    queue: list[tuple[float, int, str, object]] = []
    order = 0

    def push(at: float, end: str, what: object) -> None:
        nonlocal order
        order += 1
        heapq.heappush(queue, (at, order, end, what))

    def execute(end: str, now: float, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, SendControl):
                tx[end] += 1
                if action.opcode is ControlOpcode.ECHO_REQUEST:
                    requests[end] += 1
                if lost is None or not lost(end, now, action):
                    push(now + delay, other[end], ControlMessage(action.opcode, action.flags, action.token))
            elif isinstance(action, PeerDead):
                dead.append((end, now))

    for end in ends:
        ends[end].tick(0.0, 1, 1)  # up
    push(0.25, "a", "tick")
    push(0.25 + phase_b, "b", "tick")
    while queue:
        now, _, end, what = heapq.heappop(queue)
        if now > seconds:
            break
        if what == "tick":
            # A loop runs its timers a little late, by a varying amount: the grid point, plus up to `jitter`.
            late = now + rng.uniform(0.0, jitter)
            execute(end, late, ends[end].tick(late, rx[end], tx[end]))
            push(now + 0.25, end, "tick")
        else:
            assert isinstance(what, ControlMessage)
            rx[end] += 1
            arrivals[end] += 1
            execute(end, now, ends[end].on_control(now, what))
    return {"requests": requests, "arrivals": arrivals, "dead": dead, "ends": ends}


@pytest.mark.parametrize(("phase_b", "jitter"), [(0.0, 0.0), (0.1, 0.0), (0.2, 0.0), (-0.1, 0.0), (0.0, 0.02), (0.1, 0.02)])
def test_the_leader_asks_every_interval_the_follower_answers_and_asks_only_for_its_rtt(
    phase_b: float, jitter: float
) -> None:
    got = _run_pair(phase_b, seconds=60.0, jitter=jitter)
    assert got["dead"] == []
    # Both asking every second, each end would receive 120 records in 60 s (a request and a reply a
    # second): now the leader's 60 exchanges and the follower's one every rtt_refresh (4 s).
    assert got["requests"]["a"] >= 58 and got["requests"]["b"] <= 60 / 4 + 1, got
    for end in ("a", "b"):
        assert got["arrivals"][end] <= 60 + 15 + 2, got
        assert got["ends"][end].rtt.samples >= 60 / 4 - 1  # each end's RTT stays measured


def test_when_the_leaders_requests_stop_the_follower_asks_again_at_its_next_tick() -> None:
    # A's requests are lost from 20 s on: B must ask itself, and nobody dies.
    got = _run_pair(0.1, seconds=40.0,
                    lost=lambda end, now, action: end == "a" and now >= 20.0
                    and action.opcode is ControlOpcode.ECHO_REQUEST)
    assert got["dead"] == []
    assert got["requests"]["b"] >= (40 - 20) / CFG.keepalive_interval - 2


def test_a_follower_leaves_its_requests_and_keepalives_to_the_leader_but_for_its_rtt() -> None:
    lv = Liveness(CFG, now=0.0, leads=False)
    lv.tick(0.0, 1, 1)
    sent: list[tuple[float, list[object]]] = []
    rx = tx = 1
    for i in range(1, 41):  # 10 s of ticks; the leader asks at every whole second, 10 ms late
        t = i * 0.25
        if i % 4 == 0:
            rx += 1
            tx += 1
            assert lv.on_control(t + 0.01, ControlMessage(ControlOpcode.ECHO_REQUEST, 0, i)) == [
                SendControl(ControlOpcode.ECHO_REPLY, 0, i)]
        actions = list(lv.tick(t, rx, tx))
        if actions:
            sent.append((t, actions))
            for action in actions:  # the leader answers at once
                if isinstance(action, SendControl) and action.opcode is ControlOpcode.ECHO_REQUEST:
                    tx += 1
                    rx += 1
                    lv.on_control(t + 0.02, ControlMessage(ControlOpcode.ECHO_REPLY, 0, action.token))
    # Its first request for an RTT, then one every rtt_refresh (4 s), and no keepalive: its replies are
    # its traffic.
    assert [(t, a) for t, a in sent] == [(1.0, [echo(1)]), (5.0, [echo(2)]), (9.0, [echo(3)])]
    assert lv.rtt.samples == 3
    # The leader stops: the follower asks once it heard nothing for an interval and a tick.
    assert lv.tick(11.0, rx, tx) == []  # the last request came at 10.0
    assert lv.tick(11.25, rx, tx) == [echo(4)]  # nothing heard for an interval and a tick: it asks


def test_a_leader_asks_every_interval_whatever_the_peer_does() -> None:
    lv = Liveness(CFG, now=0.0)  # leads by default: the behaviour before followers
    lv.tick(0.0, 1, 1)
    lv.on_control(0.5, ControlMessage(ControlOpcode.ECHO_REQUEST, 0, 7))
    assert lv.tick(1.0, 2, 2) == [echo(1)]


def test_an_idle_tunnel_on_a_lossy_path_is_not_declared_dead() -> None:
    # 20 % of datagrams lost each way for 10 minutes: with one exchange per interval, lost replies
    # must not add up to the silence limit (an end that hears nothing asks at every tick).
    import random

    rng = random.Random(11)
    got = _run_pair(0.1, seconds=600.0, jitter=0.02, lost=lambda end, now, action: rng.random() < 0.2)
    assert got["dead"] == []


def test_a_silent_peer_is_asked_at_every_tick_later_when_the_loop_runs_late() -> None:
    lv = Liveness(CFG, now=0.0, leads=False)
    lv.tick(0.0, 1, 1)
    lv.on_control(0.1, ControlMessage(ControlOpcode.ECHO_REPLY, 0, 999))  # heard at 0.1
    assert lv.tick(1.5, 1, 1) == [echo(1)]  # due anyway (no RTT yet)
    assert lv.tick(1.75, 1, 2) == [echo(2)]  # silent for an interval and a tick: every tick
    late = Liveness(CFG, now=0.0, leads=False)
    late.tick(0.0, 1, 1, patience=2.0)
    late.on_control(0.1, ControlMessage(ControlOpcode.ECHO_REPLY, 0, 999))
    assert late.tick(1.5, 1, 1, patience=2.0) == [echo(1)]
    assert late.tick(1.75, 1, 2, patience=2.0) == []  # with the loop twice as late, not yet
    assert late.tick(2.75, 1, 2, patience=2.0) == [echo(2)]  # ... an interval later: the due echo


def test_revived_after_a_silent_path_the_link_is_up_and_its_silence_counted_afresh() -> None:
    """The session moved to a standby relay when the probe went unanswered (decision 0057): UP again, a new
    doubt may start, and an unanswered one ends it as before."""
    lv = _up(rtt=0.002)
    lv.doubt(0.5, rx_records=7)
    assert doubting(lv.tick(0.75, 7, 9)) == [PeerDead(DownReason.PEER_SILENT)]
    assert lv.tick(0.8, 7, 9) == []  # down: nothing more, until revived
    lv.revive(0.8)
    assert lv.state is LivenessState.UP and not lv.probing
    # Silent since 0.01, but the silence is counted from the revival: not dead before it lasted the limit.
    assert doubting(lv.tick(0.8 + PROBE.silence_limit - 0.1, 7, 10)) == []
    (asked,) = lv.doubt(3.0, rx_records=7)
    assert isinstance(asked, SendControl) and asked.opcode is ControlOpcode.ECHO_REQUEST
    lv.on_control(3.004, ControlMessage(ControlOpcode.ECHO_REPLY, 0, asked.token))  # answered on the new path
    assert doubting(lv.tick(3.05, 8, 11)) == [] and not lv.probing
    lv.doubt(3.1, rx_records=8)
    assert doubting(lv.tick(3.4, 8, 12)) == [PeerDead(DownReason.PEER_SILENT)]


def test_a_doubt_before_any_echo_measured_the_path_takes_a_round_trip_measured_otherwise() -> None:
    """The standby relay's checks measured the relayed paths (decision 0057): the deadline is a few of those
    round trips, not the probe timeout; an echo-measured RTT, once there is one, wins."""
    lv = _up()
    lv.doubt(0.5, rx_records=7, rtt=0.002)
    assert doubting(lv.tick(0.74, 7, 9)) == []
    assert doubting(lv.tick(0.75, 7, 9)) == [PeerDead(DownReason.PEER_SILENT)]  # the floor, not 1 s
    far = _up(rtt=0.2)
    far.doubt(0.5, rx_records=7, rtt=0.002)
    assert doubting(far.tick(0.76, 7, 9)) == []  # 4 x 0.2 s from its own echoes
