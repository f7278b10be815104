"""The edge-negotiation wire schema and the pacing helpers (pure)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evio.backoff import backoff_delay
from evio.overlay.adjacency import LinkType, RejectReason
from evio.overlay.negotiation import (
    LinkAnswer,
    LinkRefusal,
    LinkRequest,
    NegotiationError,
    ReleaseAnswer,
    ReleaseRequest,
    decode_link_answer,
    decode_link_request,
    decode_release_answer,
    decode_release_request,
    encode_link_answer,
    encode_link_request,
    encode_release_answer,
    encode_release_request,
)
from evio.overlay.peer_backoff import PeerBackoff
from evio.ratelimit import Rate, TokenBucket

types = st.sampled_from(list(LinkType))
optional_types = st.one_of(st.none(), types)
epochs = st.integers(0, 2**64 - 1)


def wire(body: dict[str, Any]) -> Any:
    return json.loads(json.dumps(body))


@given(types, st.booleans(), epochs)
def test_link_request_round_trip(link_type: LinkType, existing: bool, epoch: int) -> None:
    request = LinkRequest(link_type, existing, epoch)
    assert decode_link_request(wire(encode_link_request(request))) == request


@given(optional_types, epochs)
def test_accepted_answer_round_trip(held_as: LinkType | None, epoch: int) -> None:
    answer = LinkAnswer(True, held_as=held_as, epoch=epoch)
    assert decode_link_answer(wire(encode_link_answer(answer))) == answer


@given(st.sampled_from(list(LinkRefusal)))
def test_refusal_round_trip(refusal: LinkRefusal) -> None:
    answer = LinkAnswer(False, refusal=refusal)
    assert decode_link_answer(wire(encode_link_answer(answer))) == answer


@given(types, optional_types)
def test_release_round_trip(link_type: LinkType, held_as: LinkType | None) -> None:
    assert decode_release_request(wire(encode_release_request(ReleaseRequest(link_type)))) == ReleaseRequest(link_type)
    answer = ReleaseAnswer(held_as)
    assert decode_release_answer(wire(encode_release_answer(answer))) == answer


def test_every_reject_reason_has_a_wire_refusal() -> None:
    assert {LinkRefusal.of(r).value for r in RejectReason} <= {r.value for r in LinkRefusal}


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        "successor",
        {},
        {"v": 1, "type": "successor", "epoch": 1},  # missing existing
        {"v": 1, "type": "successor", "existing": False},  # missing epoch
        {"v": 2, "type": "successor", "existing": False, "epoch": 1},
        {"v": True, "type": "successor", "existing": False, "epoch": 1},  # bool is not the version
        {"v": 1, "type": "chord", "existing": False, "epoch": 1},
        {"v": 1, "type": 3, "existing": False, "epoch": 1},
        {"v": 1, "type": "successor", "existing": "no", "epoch": 1},
        {"v": 1, "type": "x" * 10_000, "existing": False, "epoch": 1},
        {"v": 1, "type": "successor", "existing": False, "epoch": -1},
        {"v": 1, "type": "successor", "existing": False, "epoch": 2**64},
        {"v": 1, "type": "successor", "existing": False, "epoch": True},
        {"v": 1, "type": "successor", "existing": False, "epoch": 1.0},
    ],
)
def test_malformed_link_requests_rejected_with_a_reason(body: Any) -> None:
    with pytest.raises(NegotiationError) as info:
        decode_link_request(body)
    assert str(info.value)


@pytest.mark.parametrize(
    "body",
    [
        {"v": 1, "accepted": True},
        {"v": 1, "accepted": True, "held_as": None},  # missing epoch
        {"v": 1, "accepted": True, "held_as": None, "epoch": "1"},
        {"v": 1, "accepted": "yes", "held_as": None},
        {"v": 1, "accepted": True, "held_as": "ring"},
        {"v": 1, "accepted": False, "refusal": "Bored!"},
        {"v": 1, "accepted": False, "refusal": None},
        {"v": 1, "accepted": False, "held_as": None},
        {"v": 1, "accepted": True, "held_as": None, "refusal": "collision"},
    ],
)
def test_malformed_link_answers_rejected(body: Any) -> None:
    with pytest.raises(NegotiationError):
        decode_link_answer(body)


@pytest.mark.parametrize("body", [{"v": 1}, {"v": 1, "type": None}, {"v": 2, "type": "successor"}])
def test_malformed_release_requests_rejected(body: Any) -> None:
    with pytest.raises(NegotiationError):
        decode_release_request(body)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=4)))
def test_decoders_raise_only_negotiation_errors(body: Any) -> None:
    for decode in (decode_link_request, decode_link_answer, decode_release_request, decode_release_answer):
        try:
            decode(body)
        except NegotiationError:
            pass


def test_answer_is_either_accepted_or_refused() -> None:
    with pytest.raises(ValueError):
        LinkAnswer(True, refusal=LinkRefusal.COLLISION)
    with pytest.raises(ValueError):
        LinkAnswer(False)


# -- backoff and change budget -----------------------------------------------------------------


def test_backoff_doubles_to_the_cap_with_bounded_jitter() -> None:
    rng = random.Random(1)
    for failures, nominal in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 30.0), (40, 30.0)]:
        for _ in range(50):
            assert nominal / 2 <= backoff_delay(failures, rng, 1.0, 30.0) <= nominal
    assert backoff_delay(0, rng, 1.0, 30.0) == 0.0


def test_peer_backoff_blocks_then_releases_and_resets_on_success() -> None:
    rng = random.Random(2)
    backoff = PeerBackoff(1.0, 8.0)
    retry = backoff.failed(7, 100.0, rng)
    assert 100.5 <= retry <= 101.0
    assert backoff.blocked(7, 100.2) and not backoff.blocked(7, retry)
    assert backoff.next_expiry(100.0) == retry and backoff.next_expiry(retry) is None
    retry2 = backoff.failed(7, retry, rng)
    assert retry2 - retry >= 1.0  # second failure: at least half of 2 s
    assert backoff.failures(7) == 2
    backoff.succeeded(7)
    assert backoff.failures(7) == 0 and not backoff.blocked(7, retry)
    assert backoff.peers() == set()


def test_change_budget_allows_a_burst_then_the_rate() -> None:
    budget = TokenBucket(Rate(per_second=2.0, burst=3), now=0.0)
    assert [budget.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert budget.next_token(0.0) == pytest.approx(0.5)
    assert not budget.take(0.4)
    assert budget.take(0.5)
    assert budget.take(10.0) and budget.take(10.0) and budget.take(10.0) and not budget.take(10.0)


def test_what_a_newer_release_adds_is_read_past() -> None:
    """negotiation.py, "Compatibility between releases": added fields are ignored, a new refusal reads as other."""
    request = {"v": 1, "type": "successor", "existing": False, "epoch": 1, "priority": 3}
    assert decode_link_request(request) == LinkRequest(LinkType.SUCCESSOR, False, 1)
    assert decode_link_answer({"v": 1, "accepted": True, "held_as": None, "epoch": 2, "x": []}) == LinkAnswer(True, epoch=2)
    refused = decode_link_answer({"v": 1, "accepted": False, "refusal": "maintenance"})
    assert refused == LinkAnswer(False, refusal=LinkRefusal.OTHER)
    with pytest.raises(NegotiationError):
        decode_link_answer({"v": 1, "accepted": False, "refusal": "Not a reason!"})
    assert decode_release_answer({"v": 1, "held_as": None, "x": 1}) == ReleaseAnswer(None)
