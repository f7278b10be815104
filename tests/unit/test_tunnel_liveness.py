import pytest

from evio.tunnel.liveness import (
    DownReason,
    Liveness,
    LivenessConfig,
    LivenessState,
    PeerAlive,
    PeerDead,
    SendControl,
)
from evio.tunnel.record import HELLO_PEER_SEEN, ControlMessage, ControlOpcode

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


def test_keepalive_only_when_idle_and_dead_after_silence() -> None:
    lv = Liveness(CFG, now=0.0)
    lv.tick(0.0, 1, 1)
    assert lv.state is LivenessState.UP
    # Sending and receiving steadily: nothing to do.
    for i in range(1, 20):
        assert lv.tick(i * 0.25, 1 + i, 1 + i) == []
    t = 19 * 0.25
    # Tx stops: a keepalive after 1 s; rx keeps coming.
    assert lv.tick(t + 0.5, 100, 20) == []
    assert lv.tick(t + 0.9, 101, 20) == []
    assert lv.tick(t + 1.0, 102, 20) == [SendControl(ControlOpcode.KEEPALIVE)]
    # Rx stops at t+1.0: dead 2.5 s later (3 s minus two 0.25 s ticks), not before.
    assert lv.tick(t + 1.5, 102, 21) == []
    assert lv.tick(t + 2.4, 102, 21) == []
    assert lv.tick(t + 2.5, 102, 21) == [SendControl(ControlOpcode.KEEPALIVE)]
    assert lv.tick(t + 3.4, 102, 22) == []
    assert lv.tick(t + 3.5, 102, 22) == [PeerDead(DownReason.PEER_SILENT)]
    assert lv.state is LivenessState.DOWN


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
