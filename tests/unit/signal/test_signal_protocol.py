"""The signaling wire schema: round trips and every way a payload can be refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evio.signal import protocol
from evio.signal.errors import ErrorReason, Malformed, ProtocolError
from evio.signal.protocol import Announcement, ErrorReply, Membership, Request, Response

A = 0x0123456789ABCDEF0123456789ABCDEF
B = 0xFEDCBA9876543210FEDCBA9876543210
HA = f"{A:032x}"
HB = f"{B:032x}"


def _request_doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "v": 1, "kind": "request", "overlay": "ov1", "src": HA, "dst": HB,
        "txid": "t-1", "action": "link.request", "body": {"x": [1, 2, {"y": None}]},
    }
    doc.update(changes)
    return doc


def _text(doc: Any) -> str:
    return json.dumps(doc)


def _refused(text: str, reason: Malformed, max_bytes: int = protocol.MAX_PAYLOAD_BYTES) -> None:
    with pytest.raises(ProtocolError) as info:
        protocol.decode(text, max_bytes)
    assert info.value.reason is reason, info.value


def test_request_round_trip() -> None:
    req = Request("ov1", A, B, "t-1", "link.request", {"cands": ["a", "b"], "n": 1.5, "ok": True})
    assert protocol.decode(protocol.encode(req)) == req


def test_response_and_error_round_trip() -> None:
    resp = Response("ov-2_x", B, A, "abc", {})
    assert protocol.decode(protocol.encode(resp)) == resp
    err = ErrorReply("ov1", B, A, "abc", ErrorReason.REJECTED, "too many links")
    assert protocol.decode(protocol.encode(err)) == err


def test_announcement_round_trip() -> None:
    ann = Announcement((Membership("ov1", A), Membership("ov2", B)))
    assert protocol.decode_announcement(protocol.encode_announcement(ann)) == ann
    assert protocol.decode_announcement(protocol.encode_announcement(Announcement(()))) == Announcement(())


def test_unicode_body_survives_and_counts_bytes() -> None:
    req = Request("ov1", A, B, "t", "a", {"name": "żółw ✓"})
    assert protocol.decode(protocol.encode(req)) == req
    text = protocol.encode(req)
    limit = len(text.encode("utf-8")) - 1
    assert len(text) <= limit  # only the byte count exceeds the limit
    _refused(text, Malformed.TOO_LARGE, max_bytes=limit)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", Malformed.NOT_JSON),
        ("{", Malformed.NOT_JSON),
        ("not json", Malformed.NOT_JSON),
        ("<xml/>", Malformed.NOT_JSON),
        ("[" * 5000 + "]" * 5000, Malformed.NOT_JSON),  # nesting bomb within the size limit
        (_text(_request_doc(body={"n": 1})).replace("1}", "NaN}"), Malformed.NOT_JSON),
        (_text(_request_doc(body={"n": 1})).replace("1}", "Infinity}"), Malformed.NOT_JSON),
        ("[]", Malformed.NOT_OBJECT),
        ('"a string"', Malformed.NOT_OBJECT),
        ("42", Malformed.NOT_OBJECT),
        ("null", Malformed.NOT_OBJECT),
        ('{"v": 1, "v": 1, "kind": "request"}', Malformed.DUPLICATE_KEY),
        (_text({"kind": "request"}), Malformed.MISSING_FIELD),
        (_text(_request_doc(v=2)), Malformed.BAD_VERSION),
        (_text(_request_doc(v="1")), Malformed.BAD_VERSION),
        (_text(_request_doc(v=True)), Malformed.BAD_VERSION),
        (_text(_request_doc(v=1.0)), Malformed.BAD_VERSION),
        (_text({"v": 1}), Malformed.MISSING_FIELD),
        (_text(_request_doc(kind="query")), Malformed.UNKNOWN_KIND),
        (_text(_request_doc(kind=1)), Malformed.UNKNOWN_KIND),
        (_text({"v": 1, "kind": "announce", "members": []}), Malformed.UNKNOWN_KIND),
        (_text({k: v for k, v in _request_doc().items() if k != "body"}), Malformed.MISSING_FIELD),
        (_text({k: v for k, v in _request_doc().items() if k != "txid"}), Malformed.MISSING_FIELD),
        (_text(_request_doc(overlay="")), Malformed.BAD_OVERLAY_ID),
        (_text(_request_doc(overlay="a" * 33)), Malformed.BAD_OVERLAY_ID),
        (_text(_request_doc(overlay="ov 1")), Malformed.BAD_OVERLAY_ID),
        (_text(_request_doc(overlay=7)), Malformed.BAD_OVERLAY_ID),
        (_text(_request_doc(src=HA.upper())), Malformed.BAD_NODE_ID),
        (_text(_request_doc(src=HA[:-1])), Malformed.BAD_NODE_ID),
        (_text(_request_doc(src=A)), Malformed.BAD_NODE_ID),
        (_text(_request_doc(dst="0x" + HB[2:])), Malformed.BAD_NODE_ID),
        (_text(_request_doc(txid="")), Malformed.BAD_TXID),
        (_text(_request_doc(txid="a" * 65)), Malformed.BAD_TXID),
        (_text(_request_doc(txid="a b")), Malformed.BAD_TXID),
        (_text(_request_doc(txid=5)), Malformed.BAD_TXID),
        (_text(_request_doc(action="")), Malformed.BAD_ACTION),
        (_text(_request_doc(action="Link")), Malformed.BAD_ACTION),
        (_text(_request_doc(action="1abc")), Malformed.BAD_ACTION),
        (_text(_request_doc(action="a" * 65)), Malformed.BAD_ACTION),
        (_text(_request_doc(action=None)), Malformed.BAD_ACTION),
        (_text(_request_doc(body=[1])), Malformed.WRONG_TYPE),
        (_text(_request_doc(body="x")), Malformed.WRONG_TYPE),
        (_text(_request_doc(body=None)), Malformed.WRONG_TYPE),
    ],
)
def test_malformed_message_refused(text: str, reason: Malformed) -> None:
    _refused(text, reason)


def _error_doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"v": 1, "kind": "error", "overlay": "ov1", "src": HA, "dst": HB, "txid": "t",
                           "reason": "rejected", "text": ""}
    doc.update(changes)
    return doc


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (_error_doc(reason="no_response"), Malformed.BAD_ERROR_REASON),  # local-only reasons never travel
        (_error_doc(reason="unknown_peer"), Malformed.BAD_ERROR_REASON),
        (_error_doc(reason="Not A Reason!"), Malformed.BAD_ERROR_REASON),
        (_error_doc(reason=None), Malformed.BAD_ERROR_REASON),
        (_error_doc(text="x" * 257), Malformed.BAD_TEXT),
        (_error_doc(text=3), Malformed.BAD_TEXT),
        ({k: v for k, v in _error_doc().items() if k != "text"}, Malformed.MISSING_FIELD),
        ({"v": 1, "kind": "response", "overlay": "ov1", "src": HA, "dst": HB, "txid": "t"}, Malformed.MISSING_FIELD),
    ],
)
def test_malformed_error_and_response_refused(doc: dict[str, Any], reason: Malformed) -> None:
    _refused(_text(doc), reason)


def test_size_limit() -> None:
    big = Request("ov1", A, B, "t", "a", {"pad": "x" * (protocol.MAX_PAYLOAD_BYTES)})
    with pytest.raises(ProtocolError) as info:
        protocol.encode(big)
    assert info.value.reason is Malformed.TOO_LARGE
    small = Request("ov1", A, B, "t", "a", {"pad": "x" * 100})
    text = protocol.encode(small)
    _refused(text, Malformed.TOO_LARGE, max_bytes=len(text) - 1)
    assert protocol.decode(text, max_bytes=len(text)) == small
    _refused(" " * (protocol.MAX_PAYLOAD_BYTES + 1), Malformed.TOO_LARGE)


@pytest.mark.parametrize(
    ("envelope", "reason"),
    [
        (Request("ov1", A, B, "t", "a", {"f": float("nan")}), Malformed.NOT_JSON),
        (Request("ov1", A, B, "t", "a", {"s": {1, 2}}), Malformed.NOT_JSON),
        (Request("ov1", A, B, "t", "BAD", {}), Malformed.BAD_ACTION),
        (Request("bad overlay", A, B, "t", "a", {}), Malformed.BAD_OVERLAY_ID),
        (Request("ov1", -1, B, "t", "a", {}), Malformed.BAD_NODE_ID),
        (Request("ov1", A, 1 << 128, "t", "a", {}), Malformed.BAD_NODE_ID),
        (Request("ov1", A, B, "", "a", {}), Malformed.BAD_TXID),
        (Request("ov1", A, B, "t", "a", [1]), Malformed.WRONG_TYPE),  # type: ignore[arg-type]
        (ErrorReply("ov1", A, B, "t", ErrorReason.NO_RESPONSE, ""), Malformed.BAD_ERROR_REASON),
    ],
)
def test_encode_refuses_what_decode_would(envelope: protocol.Envelope, reason: Malformed) -> None:
    with pytest.raises(ProtocolError) as info:
        protocol.encode(envelope)
    assert info.value.reason is reason


def test_encode_truncates_long_error_text() -> None:
    err = ErrorReply("ov1", A, B, "t", ErrorReason.INTERNAL, "e" * 1000)
    decoded = protocol.decode(protocol.encode(err))
    assert isinstance(decoded, ErrorReply) and len(decoded.text) == protocol.MAX_TEXT_CHARS


def _ann(**changes: Any) -> str:
    doc: dict[str, Any] = {"v": 1, "kind": "announce", "members": [{"overlay": "ov1", "node": HA}]}
    doc.update(changes)
    return _text(doc)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("nope", Malformed.NOT_JSON),
        ("[]", Malformed.NOT_OBJECT),
        (_ann(v=0), Malformed.BAD_VERSION),
        (_ann(kind="request"), Malformed.UNKNOWN_KIND),
        (_ann(features="frb.v2"), Malformed.WRONG_TYPE),
        (_ann(features=["Frb v2"]), Malformed.WRONG_TYPE),
        (_ann(features=[f"f{i}" for i in range(protocol.MAX_FEATURES + 1)]), Malformed.WRONG_TYPE),
        (_text({"v": 1, "kind": "announce"}), Malformed.MISSING_FIELD),
        (_ann(members={"overlay": "ov1"}), Malformed.WRONG_TYPE),
        (_ann(members=["ov1"]), Malformed.WRONG_TYPE),
        (_ann(members=[{"overlay": "ov1"}]), Malformed.MISSING_FIELD),
        (_ann(members=[{"overlay": "o v", "node": HA}]), Malformed.BAD_OVERLAY_ID),
        (_ann(members=[{"overlay": "ov1", "node": "zz"}]), Malformed.BAD_NODE_ID),
        (_ann(members=[{"overlay": "ov1", "node": HA}, {"overlay": "ov1", "node": HB}]),
         Malformed.DUPLICATE_MEMBERSHIP),
        (_ann(members=[{"overlay": f"o{i}", "node": HA} for i in range(protocol.MAX_MEMBERSHIPS + 1)]),
         Malformed.TOO_MANY_MEMBERSHIPS),
        (" " * (protocol.MAX_PAYLOAD_BYTES + 1), Malformed.TOO_LARGE),
    ],
)
def test_malformed_announcement_refused(text: str, reason: Malformed) -> None:
    with pytest.raises(ProtocolError) as info:
        protocol.decode_announcement(text)
    assert info.value.reason is reason


# -- compatibility: what a newer release may add (protocol.py, "Compatibility between releases")


def test_fields_a_newer_release_adds_are_ignored_and_listed() -> None:
    request = protocol.decode(_text(_request_doc(extra=1, reason="internal")))
    assert request == Request("ov1", A, B, "t-1", "link.request", {"x": [1, 2, {"y": None}]})
    assert request.ignored == ("extra", "reason")
    response = protocol.decode(_text({"v": 1, "kind": "response", "overlay": "ov1", "src": HA, "dst": HB,
                                      "txid": "t", "body": {}, "action": "a"}))
    assert isinstance(response, Response) and response.ignored == ("action",)
    error = protocol.decode(_text(_error_doc(body={})))
    assert isinstance(error, ErrorReply) and error.ignored == ("body",)
    assert protocol.decode(protocol.encode(request)).ignored == ()


def test_an_error_reason_a_newer_release_adds_decodes_as_other_with_the_reason_in_the_text() -> None:
    error = protocol.decode(_text(_error_doc(reason="quota_exceeded", text="try later")))
    assert isinstance(error, ErrorReply)
    assert error.reason is ErrorReason.OTHER and error.text == "quota_exceeded: try later"
    with pytest.raises(ProtocolError):  # never sent: it is this release's name for what it does not know
        protocol.encode(ErrorReply("ov1", A, B, "t", ErrorReason.OTHER, ""))


def test_an_announcement_with_newer_fields_and_features_is_read() -> None:
    text = _ann(features=["frb.v2", "records.x"], extra={"a": 1}, members=[{"overlay": "ov1", "node": HA, "x": 1}])
    ann = protocol.decode_announcement(text)
    assert ann == Announcement((Membership("ov1", A),), frozenset({"frb.v2", "records.x"}))
    assert ann.ignored == ("extra", "members.x")


def test_features_are_announced_only_when_there_are_some() -> None:
    """The previous release (0.1.0) refuses an announcement with a field it does not know: this one sends none."""
    assert not protocol.FEATURES
    plain = json.loads(protocol.encode_announcement(Announcement((Membership("ov1", A),), protocol.FEATURES)))
    assert set(plain) == {"v", "kind", "members"}
    ann = Announcement((Membership("ov1", A),), frozenset({"b.x", "a"}))
    assert json.loads(protocol.encode_announcement(ann))["features"] == ["a", "b.x"]
    assert protocol.decode_announcement(protocol.encode_announcement(ann)) == ann


def test_encode_announcement_refuses_duplicates_and_excess() -> None:
    with pytest.raises(ProtocolError) as info:
        protocol.encode_announcement(Announcement((Membership("ov1", A), Membership("ov1", B))))
    assert info.value.reason is Malformed.DUPLICATE_MEMBERSHIP
    many = tuple(Membership(f"o{i}", A) for i in range(protocol.MAX_MEMBERSHIPS + 1))
    with pytest.raises(ProtocolError) as info:
        protocol.encode_announcement(Announcement(many))
    assert info.value.reason is Malformed.TOO_MANY_MEMBERSHIPS


def test_protocol_error_is_not_a_bare_index_or_key_error() -> None:
    for text in ["{}", '{"v":1,"kind":"request"}', '{"v":1,"kind":"error","overlay":"o","src":"","dst":""}']:
        with pytest.raises(ProtocolError):
            protocol.decode(text)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=200), _json_values.map(json.dumps),
                 st.dictionaries(st.sampled_from(sorted(_request_doc()) + ["x"]), _json_values).map(json.dumps)))
def test_decode_only_ever_raises_protocol_error(text: str) -> None:
    for decode in (protocol.decode, protocol.decode_announcement):
        try:
            decode(text)
        except ProtocolError:
            pass
