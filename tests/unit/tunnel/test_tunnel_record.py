import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from hypothesis import given
from hypothesis import strategies as st

from evio.tunnel.datapath.record import (
    HEADER_LEN,
    HELLO_PEER_SEEN,
    KIND_CONTROL,
    KIND_FRAME,
    OVERHEAD,
    ControlMessage,
    ControlOpcode,
    PacketClass,
    classify,
    nonce,
    open_,
    pack_control,
    pack_header,
    parse_control,
    parse_header,
    seal,
)
from evio.tunnel.errors import RecordError, UnknownControlError

KEY = bytes(range(32))
IV = bytes(range(100, 112))


@pytest.mark.parametrize(
    "first, expected",
    [
        (0, PacketClass.STUN),
        (1, PacketClass.STUN),
        (3, PacketClass.STUN),
        (20, PacketClass.DTLS),
        (22, PacketClass.DTLS),
        (63, PacketClass.DTLS),
        (64, PacketClass.TURN_CHANNEL),
        (79, PacketClass.TURN_CHANNEL),
        (KIND_FRAME, PacketClass.RECORD),
        (KIND_CONTROL, PacketClass.RECORD),
        (4, PacketClass.OTHER),
        (128, PacketClass.OTHER),
        (255, PacketClass.OTHER),
    ],
)
def test_classify_follows_rfc7983(first: int, expected: PacketClass) -> None:
    assert classify(first) is expected


def test_record_kinds_are_outside_every_assigned_range() -> None:
    for kind in (KIND_FRAME, KIND_CONTROL):
        assert not kind <= 3 and not 16 <= kind <= 79 and not 128 <= kind <= 191


def test_header_round_trip_and_epoch_wraps_to_one_byte() -> None:
    data = pack_header(KIND_FRAME, 257, 2**64 - 1) + bytes(16)
    header = parse_header(data)
    assert (header.kind, header.epoch, header.counter) == (KIND_FRAME, 1, 2**64 - 1)
    assert len(pack_header(KIND_FRAME, 0, 0)) == HEADER_LEN == 10


@pytest.mark.parametrize("data, reason", [(b"", "truncated"), (bytes(25), "truncated"), (b"\x72" + bytes(30), "unknown kind")])
def test_parse_header_rejects(data: bytes, reason: str) -> None:
    with pytest.raises(RecordError) as err:
        parse_header(data)
    assert err.value.reason == reason


def test_nonce_xors_counter_into_low_bytes() -> None:
    assert nonce(IV, 0) == IV
    assert nonce(bytes(12), 0x0102) == bytes(10) + b"\x01\x02"
    assert nonce(IV, 5)[:4] == IV[:4]
    assert len({nonce(IV, c) for c in range(1000)}) == 1000


@pytest.mark.parametrize("aead", [AESGCM(KEY), ChaCha20Poly1305(KEY)])
@given(payload=st.binary(max_size=1500), counter=st.integers(0, 2**64 - 1), epoch=st.integers(0, 255))
def test_seal_open_round_trip(aead: AESGCM, payload: bytes, counter: int, epoch: int) -> None:
    record = seal(aead, IV, KIND_FRAME, epoch, counter, payload)
    assert len(record) == len(payload) + OVERHEAD
    header, plain = open_(aead, IV, record)
    assert plain == payload
    assert (header.epoch, header.counter) == (epoch, counter)


@given(position=st.integers(0, 40), bit=st.integers(0, 7))
def test_any_flipped_bit_is_forged(position: int, bit: int) -> None:
    aead = AESGCM(KEY)
    record = bytearray(seal(aead, IV, KIND_FRAME, 0, 7, b"x" * 15))
    record[position] ^= 1 << bit
    with pytest.raises(RecordError):
        open_(aead, IV, bytes(record))


def test_wrong_key_is_forged() -> None:
    record = seal(AESGCM(KEY), IV, KIND_FRAME, 0, 1, b"frame")
    with pytest.raises(RecordError) as err:
        open_(AESGCM(bytes(32)), IV, record)
    assert err.value.reason == "forged"


def test_control_round_trip_and_rejects() -> None:
    assert parse_control(pack_control(ControlOpcode.HELLO, HELLO_PEER_SEEN)) == ControlMessage(ControlOpcode.HELLO, 1)
    with pytest.raises(RecordError):
        parse_control(b"\x01")
    with pytest.raises(UnknownControlError):  # a newer release's opcode: counted apart from malformed ones
        parse_control(b"\x09\x00")


def test_seal_rejects_counter_out_of_range() -> None:
    with pytest.raises(RecordError):
        seal(AESGCM(KEY), IV, KIND_FRAME, 0, 2**64, b"")


def test_echo_control_messages_carry_a_token_and_others_keep_two_bytes() -> None:
    from evio.tunnel.datapath.record import ControlMessage, ControlOpcode, RecordError, pack_control, parse_control

    wire = pack_control(ControlOpcode.ECHO_REQUEST, 0, 0x0102030405060708)
    assert len(wire) == 10
    assert parse_control(wire) == ControlMessage(ControlOpcode.ECHO_REQUEST, 0, 0x0102030405060708)
    assert len(pack_control(ControlOpcode.KEEPALIVE, 0, 7)) == 2  # the token is for echoes only
    for bad in (wire[:2], wire + b"x", pack_control(ControlOpcode.HELLO) + b"\0", b"\x09\x00", b"\x04"):
        with pytest.raises(RecordError):
            parse_control(bad)
