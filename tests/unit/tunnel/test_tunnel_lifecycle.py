"""The tunnel's lifecycle machine: events in, actions out, no I/O (evio.tunnel.lifecycle)."""

from __future__ import annotations

import pytest

from evio.config.model import Cipher
from evio.tunnel.lifecycle import (
    Answered,
    CancelMove,
    CancelSetup,
    Close,
    CloseDtls,
    CloseIce,
    CloseTap,
    Connect,
    Connecting,
    Fail,
    Failed,
    Handshake,
    HandshakeDone,
    LinkAlive,
    LinkDead,
    Moved,
    Offered,
    PathChosen,
    ReportDown,
    ReportUp,
    StartDatapath,
    Stop,
    StopDatapath,
    StopPump,
    Supervise,
    TearDown,
    TornDown,
    TunnelLifecycle,
    TunnelState,
    WatchForDirect,
)
from evio.tunnel.liveness import DownReason
from evio.tunnel.path.dtls import Fingerprint
from evio.tunnel.path.path_kind import PathKind

PEER = 0x2
TUNNEL = "t-1"
FINGERPRINT = Fingerprint("sha-256", ":".join(["AB"] * 32))
OFFERED = (Cipher.AES_256_GCM, Cipher.CHACHA20_POLY1305)
RELAY = PathChosen(PathKind.RELAY, "relay", "relay", ("192.0.2.1", 3478))
DIRECT = PathChosen(PathKind.DIRECT, "host", "srflx", ("198.51.100.7", 40000))
TEARDOWN = [CancelMove(), StopDatapath(say_close=True), CloseDtls(), StopPump(), CloseIce(), CloseTap()]


def machine(initiator: bool = True, now: float = 100.0) -> TunnelLifecycle:
    return TunnelLifecycle(PEER, TUNNEL, initiator, controlling=False, now=now)


def answered(node: int = PEER, tunnel: str = TUNNEL, cipher: Cipher = Cipher.AES_256_GCM) -> Answered:
    return Answered(node, tunnel, FINGERPRINT, cipher, OFFERED)


def established(path: PathChosen = DIRECT) -> TunnelLifecycle:
    life = machine()
    life.handle(answered())
    life.handle(Connecting(Cipher.AES_256_GCM))
    life.handle(path)
    life.handle(HandshakeDone("evt-0000"))
    return life


def test_a_good_answer_connects_with_the_pinned_fingerprint_and_the_chosen_cipher() -> None:
    life = machine()
    assert life.handle(answered(cipher=Cipher.CHACHA20_POLY1305)) == [Connect(FINGERPRINT, Cipher.CHACHA20_POLY1305)]
    assert life.state is TunnelState.NEGOTIATING  # nothing runs until the action is performed
    assert life.handle(Connecting(Cipher.CHACHA20_POLY1305)) == []
    assert life.state is TunnelState.CONNECTING and life.info.cipher is Cipher.CHACHA20_POLY1305


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (answered(node=0x3), "answer from another node or for another tunnel"),
        (answered(tunnel="t-2"), "answer from another node or for another tunnel"),
        (Answered(PEER, TUNNEL, FINGERPRINT, Cipher.CHACHA20_POLY1305, (Cipher.AES_256_GCM,)),
         "answer chose a cipher we did not offer: chacha20-poly1305"),
    ],
)
def test_an_answer_from_elsewhere_or_with_a_cipher_not_offered_fails(answer: Answered, reason: str) -> None:
    assert machine().handle(answer) == [Fail(reason)]


def test_the_responder_connects_with_what_it_answered() -> None:
    life = machine(initiator=False)
    assert life.handle(Offered(FINGERPRINT, Cipher.AES_256_GCM)) == [Connect(FINGERPRINT, Cipher.AES_256_GCM)]
    assert life.state is TunnelState.NEGOTIATING and not life.info.initiator


def test_a_chosen_path_is_authenticated_and_recorded() -> None:
    life = machine()
    life.handle(Connecting(Cipher.AES_256_GCM))
    assert life.handle(DIRECT) == [Handshake()]
    info = life.info
    assert info.state is TunnelState.AUTHENTICATING
    assert (info.path, info.local_candidate, info.remote_candidate, info.remote_addr) == (
        PathKind.DIRECT, "host", "srflx", ("198.51.100.7", 40000))


@pytest.mark.parametrize(("path", "watch"), [(DIRECT, []), (RELAY, [WatchForDirect()])])
def test_after_the_handshake_the_data_path_starts_and_a_relay_watches_for_the_direct_path(path: PathChosen, watch: list[WatchForDirect]) -> None:
    life = machine()
    life.handle(Connecting(Cipher.AES_256_GCM))
    life.handle(path)
    assert life.handle(HandshakeDone("evt-0000")) == [StartDatapath(), *watch, Supervise()]
    assert life.state is TunnelState.ESTABLISHING and life.info.tap == "evt-0000"


def test_the_link_is_up_only_when_liveness_says_the_peer_is_alive() -> None:
    life = established()
    assert life.up_since is None
    (report,) = life.handle(LinkAlive(now=101.25))
    assert isinstance(report, ReportUp)
    assert report.info.state is TunnelState.UP and report.info.setup_seconds == pytest.approx(1.25)
    assert life.up_since == 101.25 and life.info == report.info


def test_a_move_changes_the_path_and_nothing_else() -> None:
    life = established(RELAY)
    life.handle(LinkAlive(now=101.0))
    assert life.handle(Moved(PathKind.DIRECT, "host", "host", ("198.51.100.7", 40000))) == []
    assert life.state is TunnelState.UP and life.info.path is PathKind.DIRECT and life.info.remote_candidate == "host"


@pytest.mark.parametrize("state_event", [None, DIRECT])
def test_a_close_while_setting_up_cancels_the_setup(state_event: PathChosen | None) -> None:
    life = machine()
    if state_event is not None:
        life.handle(Connecting(Cipher.AES_256_GCM))
        life.handle(state_event)
    assert life.handle(Close("closed locally")) == [Stop(), CancelSetup()]
    assert life.down_reason == "closed locally"


def test_a_close_once_established_only_stops_supervision() -> None:
    life = established()
    assert life.handle(Close("closed locally")) == [Stop()]
    life.handle(LinkAlive(now=102.0))
    assert life.handle(Close("again")) == [Stop()]
    assert life.down_reason == "closed locally"  # the first reason stays


def test_the_first_reason_given_is_the_one_reported() -> None:
    life = established()
    assert life.handle(LinkDead(DownReason.PEER_SILENT.value)) == [Stop()]
    assert life.handle(Failed("cancelled")) == []
    assert life.handle(Close("closed locally")) == [Stop()]
    assert life.down_reason == DownReason.PEER_SILENT.value


@pytest.mark.parametrize(
    ("reason", "say_close"),
    [
        ("closed locally", True),
        ("underlay failed", True),
        (DownReason.PEER_CLOSED.value, False),  # the peer said so: nobody to tell
        (DownReason.PEER_SILENT.value, False),
    ],
)
def test_teardown_tells_the_peer_unless_it_is_already_gone(reason: str, say_close: bool) -> None:
    life = established()
    life.handle(LinkDead(reason))
    assert life.handle(TearDown()) == [CancelMove(), StopDatapath(say_close), CloseDtls(), StopPump(), CloseIce(), CloseTap()]


def test_a_tunnel_that_was_up_ends_closed_and_one_that_never_was_failed() -> None:
    up = established()
    up.handle(LinkAlive(now=101.0))
    up.handle(Close("closed locally"))
    assert up.handle(TearDown()) == TEARDOWN
    (report,) = up.handle(TornDown())
    assert isinstance(report, ReportDown)
    assert (report.info.state, report.info.reason) == (TunnelState.CLOSED, "closed locally")

    never = machine()
    never.handle(Failed("ICE failed"))
    never.handle(TearDown())
    (report,) = never.handle(TornDown())
    assert isinstance(report, ReportDown)
    assert (report.info.state, report.info.reason) == (TunnelState.FAILED, "ICE failed")


def test_teardown_happens_once() -> None:
    life = machine()
    life.handle(TearDown())
    assert len(life.handle(TornDown())) == 1
    assert life.handle(TearDown()) == [] and life.handle(TornDown()) == []
    assert life.info.reason == "closed"  # no reason given: "closed"


def test_a_stranger_event_is_refused() -> None:
    with pytest.raises(TypeError):
        machine().handle(object())  # type: ignore[arg-type]
