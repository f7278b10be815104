import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evio.ids import MAX_NODE_ID
from evio.sdn import frb
from evio.sdn.frb import (
    ETH_TYPE_FRB,
    FrbFrame,
    FrbHeader,
    FrbPackError,
    FrbParseError,
    FrbReason,
    FrbType,
    format_mac,
    pack,
    parse,
    parse_mac,
)

PEER_MAC = bytes.fromhex("020000000002")
OWN_MAC = bytes.fromhex("020000000001")
ROOT = 0x0123456789ABCDEF_FEDCBA9876543210
BOUND = 0x00000000000000FF_0000000000000001
# An ARP request from 52:54:00:00:00:01, as a leaf device would send it.
ARP = bytes.fromhex("ffffffffffff" "525400000001" "0806") + bytes(28)


def raw_frame(
    *,
    dst: bytes = b"\xff" * 6,
    src: bytes = OWN_MAC,
    ethertype: int = ETH_TYPE_FRB,
    root: int = ROOT,
    bound: int = BOUND,
    hop_count: int = 1,
    frb_type: int = 0,
    pl_count: int = 0,
    payload: bytes = ARP,
) -> bytes:
    """Frames built independently of the codec, the way the original serialises them."""
    return (
        dst
        + src
        + struct.pack("!H", ethertype)
        + struct.pack(
            "!16s16sBBB", root.to_bytes(16, "big"), bound.to_bytes(16, "big"), hop_count, frb_type, pl_count
        )
        + payload
    )


def rejected(data: bytes) -> FrbReason:
    with pytest.raises(FrbParseError) as info:
        parse(data)
    return info.value.reason


# ---------------------------------------------------------------- wire format


def test_type_numbers_match_the_original_boundedflood() -> None:
    # FloodRouteBound: FRB_BRDCST 0, FRB_LEAF_TX 1, FRB_FWD 2, FRB_LNK_CHK 3, FRB_LNK_ACK 4.
    assert [(t.name, t.value) for t in FrbType] == [
        ("BROADCAST", 0),
        ("LEAF_ANNOUNCE", 1),
        ("BROADCAST_FORWARD", 2),
        ("LINK_CHECK", 3),
        ("LINK_ACK", 4),
        ("BROADCAST_REVERSE", 5),  # evio's own, after the original's
    ]


def test_broadcast_layout_is_ethernet_then_35_byte_header_then_frame() -> None:
    wire = pack(frb.broadcast(ARP, ROOT, BOUND, 3))
    assert wire[0:6] == b"\xff" * 6  # dst: broadcast, as the original does
    assert wire[6:12] == ARP[6:12]  # src: the inner frame's source
    assert wire[12:14] == b"\xc0\xc0"
    assert wire[14:30] == ROOT.to_bytes(16, "big")
    assert wire[30:46] == BOUND.to_bytes(16, "big")
    assert wire[46:49] == bytes([3, 0, 0])
    assert wire[49:] == ARP
    assert wire == raw_frame(src=ARP[6:12], hop_count=3)


def test_parse_reads_a_frame_serialised_like_the_original() -> None:
    f = parse(raw_frame(hop_count=7))
    assert f.header == FrbHeader(ROOT, BOUND, 7, FrbType.BROADCAST, 0)
    assert f.dst == b"\xff" * 6 and f.src == OWN_MAC
    assert f.payload == ARP
    assert f.inner_src == "52:54:00:00:00:01"
    assert f.leaf_macs == ()


def test_ids_use_all_128_bits_big_endian() -> None:
    f = parse(raw_frame(root=MAX_NODE_ID, bound=0))
    assert (f.header.root_nid, f.header.bound_nid) == (MAX_NODE_ID, 0)
    assert pack(f) == raw_frame(root=MAX_NODE_ID, bound=0)


def test_parse_accepts_bytearray_and_memoryview() -> None:
    data = raw_frame()
    assert parse(bytearray(data)) == parse(data) == parse(memoryview(data))
    assert type(parse(memoryview(data)).payload) is bytes


def test_broadcast_whose_bound_is_its_root_is_well_formed() -> None:
    # The root's last neighbour gets bound = root: its arc wraps back round.
    assert parse(raw_frame(bound=ROOT)).header.bound_nid == ROOT


def test_broadcast_forward_is_parsed_like_a_broadcast() -> None:
    f = parse(raw_frame(frb_type=2))
    assert f.header.frb_type is FrbType.BROADCAST_FORWARD
    assert f.payload == ARP
    assert rejected(raw_frame(frb_type=2, hop_count=0)) is FrbReason.BAD_HOP_COUNT


def test_leaf_announce_round_trip_and_macs() -> None:
    macs = ["52:54:00:00:00:01", "52:54:00:00:00:0a", "02:42:ac:11:00:02"]
    f = frb.leaf_announce(PEER_MAC, OWN_MAC, ROOT, macs)
    wire = pack(f)
    assert len(wire) == 49 + 18
    assert wire[46:49] == bytes([0, 1, 3])  # hop_count 0, LEAF_ANNOUNCE, 3 MACs
    assert wire[14:30] == wire[30:46]  # bound = root, as the original sends it
    back = parse(wire)
    assert back == f
    assert back.leaf_macs == tuple(macs)


def test_leaf_announce_with_no_leaves_is_valid() -> None:
    f = parse(pack(frb.leaf_announce(PEER_MAC, OWN_MAC, ROOT, [])))
    assert f.header.pl_count == 0 and f.leaf_macs == ()


@pytest.mark.parametrize("make", [frb.link_check, frb.link_ack])
def test_link_check_and_ack_are_49_bytes_with_root_as_bound(make: object) -> None:
    assert callable(make)
    f = make(PEER_MAC, OWN_MAC, ROOT)
    wire = pack(f)
    assert len(wire) == 49
    assert parse(wire) == f
    assert f.header.root_nid == f.header.bound_nid == ROOT and f.header.hop_count == 0


def test_short_frames_padded_to_ethernet_minimum_are_accepted() -> None:
    check = pack(frb.link_check(PEER_MAC, OWN_MAC, ROOT))
    assert parse(check + bytes(11)) == parse(check)
    assert parse(check + b"\xaa" * 11).payload == b""  # junk padding, as some NICs send
    one = pack(frb.leaf_announce(PEER_MAC, OWN_MAC, ROOT, ["52:54:00:00:00:01"]))
    assert len(one) == 55
    assert parse(one + bytes(5)).leaf_macs == ("52:54:00:00:00:01",)


def test_mac_text_round_trip() -> None:
    assert format_mac(bytes.fromhex("0a1b2c3d4e5f")) == "0a:1b:2c:3d:4e:5f"
    assert parse_mac("0A:1B:2c:3d:4e:5f") == bytes.fromhex("0a1b2c3d4e5f")
    for bad in ["", "0a:1b:2c:3d:4e", "0a:1b:2c:3d:4e:5f:00", "0a1b:2c:3d:4e:5f:", "zz:1b:2c:3d:4e:5f"]:
        with pytest.raises(ValueError):
            parse_mac(bad)


# ---------------------------------------------------------------- every rejection has its reason


@pytest.mark.parametrize("size", [0, 1, 13, 14, 48])
def test_too_short(size: int) -> None:
    assert rejected(raw_frame()[:size]) is FrbReason.TOO_SHORT


def test_wrong_ethertype() -> None:
    assert rejected(raw_frame(ethertype=0x0806)) is FrbReason.WRONG_ETHERTYPE
    # An 802.1Q tag moves the ethertype: not an FRB as far as the original is concerned.
    tagged = raw_frame()[:12] + b"\x81\x00\x00\x01" + raw_frame()[12:]
    assert rejected(tagged) is FrbReason.WRONG_ETHERTYPE


@pytest.mark.parametrize("value", [6, 7, 0x7F, 0xFF])
def test_unknown_type(value: int) -> None:
    err = pytest.raises(FrbParseError, parse, raw_frame(frb_type=value)).value
    assert err.reason is FrbReason.UNKNOWN_TYPE
    assert str(value) in str(err)


def test_multicast_outer_source() -> None:
    assert rejected(raw_frame(src=bytes.fromhex("010000000001"))) is FrbReason.BAD_SOURCE_MAC


def test_broadcast_with_hop_count_zero() -> None:
    assert rejected(raw_frame(hop_count=0)) is FrbReason.BAD_HOP_COUNT


@pytest.mark.parametrize("frb_type", [1, 3, 4])
def test_one_hop_control_frames_need_hop_count_zero_and_bound_equal_root(frb_type: int) -> None:
    assert rejected(raw_frame(frb_type=frb_type, hop_count=1, bound=ROOT, payload=b"")) is FrbReason.BAD_HOP_COUNT
    assert rejected(raw_frame(frb_type=frb_type, hop_count=0, bound=BOUND, payload=b"")) is FrbReason.BAD_BOUND


def test_payload_count_on_types_without_counted_payload() -> None:
    assert rejected(raw_frame(pl_count=1)) is FrbReason.PAYLOAD_COUNT_MISMATCH
    for t in (3, 4):
        assert rejected(raw_frame(frb_type=t, hop_count=0, bound=ROOT, pl_count=2, payload=b"")) is (
            FrbReason.PAYLOAD_COUNT_MISMATCH
        )


def test_broadcast_without_inner_frame() -> None:
    assert rejected(raw_frame(payload=b"")) is FrbReason.EMPTY_PAYLOAD


@pytest.mark.parametrize("size", [1, 6, 13])
def test_broadcast_with_inner_frame_shorter_than_an_ethernet_header(size: int) -> None:
    assert rejected(raw_frame(payload=ARP[:size])) is FrbReason.TRUNCATED_PAYLOAD


def test_leaf_announce_shorter_than_its_count() -> None:
    macs = bytes.fromhex("525400000001525400000002")
    data = raw_frame(frb_type=1, hop_count=0, bound=ROOT, pl_count=3, payload=macs)
    assert rejected(data) is FrbReason.TRUNCATED_PAYLOAD
    # Even padded to 60 bytes: the padding is not a third MAC.
    one = raw_frame(frb_type=1, hop_count=0, bound=ROOT, pl_count=2, payload=macs[:6])
    assert rejected(one + bytes(60 - len(one))) is FrbReason.TRUNCATED_PAYLOAD


def test_trailing_bytes_that_are_not_padding() -> None:
    macs = bytes.fromhex("525400000001525400000002")
    data = raw_frame(frb_type=1, hop_count=0, bound=ROOT, pl_count=2, payload=macs + b"\x00")
    assert rejected(data) is FrbReason.TRAILING_BYTES
    check = raw_frame(frb_type=3, hop_count=0, bound=ROOT, payload=b"")
    for extra in (1, 10, 12, 100):
        assert rejected(check + bytes(extra)) is FrbReason.TRAILING_BYTES


def test_broadcast_carrying_an_frb() -> None:
    assert rejected(raw_frame(payload=raw_frame())) is FrbReason.NESTED_FRB


def test_broadcast_whose_inner_source_is_multicast() -> None:
    inner = b"\xff" * 6 + bytes.fromhex("330000000001") + b"\x08\x00" + bytes(20)
    assert rejected(raw_frame(payload=inner)) is FrbReason.BAD_INNER_SOURCE_MAC


@pytest.mark.parametrize("mac", ["010000000001", "ffffffffffff", "000000000000"])
def test_leaf_announce_with_a_mac_that_cannot_be_a_leaf(mac: str) -> None:
    payload = bytes.fromhex("525400000001" + mac)
    data = raw_frame(frb_type=1, hop_count=0, bound=ROOT, pl_count=2, payload=payload)
    assert rejected(data) is FrbReason.BAD_LEAF_MAC


def test_leaf_announce_with_a_mac_twice() -> None:
    payload = bytes.fromhex("525400000001" "525400000002" "525400000001")
    data = raw_frame(frb_type=1, hop_count=0, bound=ROOT, pl_count=3, payload=payload)
    assert rejected(data) is FrbReason.DUPLICATE_LEAF_MAC


def test_parse_error_says_why() -> None:
    err = pytest.raises(FrbParseError, parse, raw_frame(ethertype=0x0800)).value
    assert "WRONG_ETHERTYPE" in str(err) and "0x0800" in str(err)
    assert not isinstance(err, (IndexError, struct.error))


# ---------------------------------------------------------------- pack refuses what cannot go on the wire


def header(
    root_nid: int = ROOT, bound_nid: int = BOUND, hop_count: int = 1, frb_type: int = 0, pl_count: int = 0
) -> FrbHeader:
    # frb_type as a plain int on purpose: pack must cope with values outside FrbType.
    return FrbHeader(root_nid, bound_nid, hop_count, frb_type, pl_count)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "frame",
    [
        FrbFrame(b"\xff" * 6, OWN_MAC, header(root_nid=MAX_NODE_ID + 1), ARP),
        FrbFrame(b"\xff" * 6, OWN_MAC, header(bound_nid=-1), ARP),
        FrbFrame(b"\xff" * 6, OWN_MAC, header(hop_count=256), ARP),
        FrbFrame(b"\xff" * 6, OWN_MAC, header(pl_count=256), ARP),
        FrbFrame(b"\xff" * 5, OWN_MAC, header(), ARP),
        FrbFrame(b"\xff" * 6, OWN_MAC + b"\x00", header(), ARP),
    ],
)
def test_pack_refuses_fields_that_do_not_fit(frame: FrbFrame) -> None:
    assert pytest.raises(FrbPackError, pack, frame).value.reason is FrbReason.OUT_OF_RANGE


def test_pack_refuses_unknown_type() -> None:
    f = FrbFrame(b"\xff" * 6, OWN_MAC, header(frb_type=9), ARP)
    assert pytest.raises(FrbPackError, pack, f).value.reason is FrbReason.UNKNOWN_TYPE


def test_pack_refuses_what_parse_would_reject() -> None:
    f = FrbFrame(b"\xff" * 6, OWN_MAC, header(hop_count=0), ARP)
    assert pytest.raises(FrbPackError, pack, f).value.reason is FrbReason.BAD_HOP_COUNT
    check = frb.link_check(PEER_MAC, OWN_MAC, ROOT)
    padded = FrbFrame(check.dst, check.src, check.header, bytes(11))
    # parse would take these as padding; pack never pads, so it refuses them.
    assert pytest.raises(FrbPackError, pack, padded).value.reason is FrbReason.TRAILING_BYTES


def test_constructors_refuse_bad_input() -> None:
    assert pytest.raises(FrbPackError, frb.broadcast, b"", ROOT, BOUND, 1).value.reason is FrbReason.EMPTY_PAYLOAD
    assert pytest.raises(FrbPackError, frb.broadcast, ARP[:13], ROOT, BOUND, 1).value.reason is (
        FrbReason.TRUNCATED_PAYLOAD
    )
    many = [format_mac(b"\x02" + i.to_bytes(5, "big")) for i in range(256)]
    assert pytest.raises(FrbPackError, frb.leaf_announce, PEER_MAC, OWN_MAC, ROOT, many).value.reason is (
        FrbReason.OUT_OF_RANGE
    )
    assert pack(frb.leaf_announce(PEER_MAC, OWN_MAC, ROOT, many[:255]))[48] == 255
    assert pytest.raises(FrbPackError, frb.leaf_announce, PEER_MAC, OWN_MAC, ROOT, ["nonsense"]).value.reason is (
        FrbReason.BAD_LEAF_MAC
    )


def test_pack_errors_are_value_errors_and_parse_errors_are_not() -> None:
    # A bad frame from the network is not a programming error: callers catch FrbParseError alone.
    assert issubclass(FrbPackError, ValueError)
    assert not issubclass(FrbParseError, ValueError)
    assert issubclass(FrbParseError, frb.FrbError) and issubclass(FrbPackError, frb.FrbError)


# ---------------------------------------------------------------- fuzzing

node_ids = st.integers(min_value=0, max_value=MAX_NODE_ID)
unicast_macs = st.binary(min_size=6, max_size=6).map(lambda b: bytes([b[0] & 0xFE]) + b[1:])
leaf_macs = unicast_macs.filter(lambda b: b != bytes(6))


@st.composite
def inner_frames(draw: st.DrawFn) -> bytes:
    dst = draw(st.binary(min_size=6, max_size=6))
    src = draw(unicast_macs)
    ethertype = draw(st.integers(0, 0xFFFF).filter(lambda t: t != ETH_TYPE_FRB))
    return dst + src + struct.pack("!H", ethertype) + draw(st.binary(max_size=80))


@st.composite
def valid_frames(draw: st.DrawFn) -> FrbFrame:
    frb_type = draw(st.sampled_from(FrbType))
    src = draw(unicast_macs)
    dst = draw(st.binary(min_size=6, max_size=6))
    root = draw(node_ids)
    if frb_type.carries_frame:
        bound = draw(st.one_of(node_ids, st.just(root)))
        hops = draw(st.integers(1, 255))
        inner = draw(inner_frames())
        if frb_type is FrbType.BROADCAST_REVERSE:  # the header of a group-addressed frame only
            inner = bytes([inner[0] | 1]) + inner[1:14]
        return FrbFrame(dst, src, FrbHeader(root, bound, hops, frb_type, 0), inner)
    if frb_type is FrbType.LEAF_ANNOUNCE:
        macs = draw(st.lists(leaf_macs, max_size=20, unique=True))
        return FrbFrame(dst, src, FrbHeader(root, root, 0, frb_type, len(macs)), b"".join(macs))
    return FrbFrame(dst, src, FrbHeader(root, root, 0, frb_type, 0))


FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(valid_frames())
def test_pack_then_parse_round_trips(frame: FrbFrame) -> None:
    wire = pack(frame)
    assert parse(wire) == frame
    assert pack(parse(wire)) == wire


def _parse_or_reason(data: bytes) -> FrbFrame | FrbReason:
    try:
        return parse(data)
    except FrbParseError as err:
        assert isinstance(err.reason, FrbReason)
        return err.reason


def _consistent(data: bytes, result: FrbFrame | FrbReason) -> None:
    """Whatever parse accepts, pack reproduces: exactly, or up to minimum-frame padding."""
    if isinstance(result, FrbFrame):
        wire = pack(result)
        assert data == wire or (len(data) == 60 and data.startswith(wire))


@FUZZ
@given(st.binary(max_size=200))
def test_parse_of_random_bytes_raises_only_the_typed_error(data: bytes) -> None:
    _consistent(data, _parse_or_reason(data))


@FUZZ
@given(
    st.integers(0, 0xFF), st.integers(0, 7), st.integers(0, 4), node_ids, st.booleans(), st.binary(max_size=80)
)
def test_parse_of_random_frb_shaped_bytes_raises_only_the_typed_error(
    hop_count: int, frb_type: int, pl_count: int, root: int, bound_is_root: bool, payload: bytes
) -> None:
    # Random bytes rarely get past the ethertype; these reach every later check.
    bound = root if bound_is_root else root ^ 1
    data = raw_frame(
        root=root, bound=bound, hop_count=hop_count, frb_type=frb_type, pl_count=pl_count, payload=payload
    )
    _consistent(data, _parse_or_reason(data))


@FUZZ
@given(valid_frames(), st.data())
def test_parse_of_damaged_frames_raises_only_the_typed_error(frame: FrbFrame, data: st.DataObject) -> None:
    wire = bytearray(pack(frame))
    action = data.draw(st.sampled_from(["truncate", "extend", "flip"]))
    if action == "truncate":
        del wire[data.draw(st.integers(0, len(wire) - 1)) :]
    elif action == "extend":
        wire += data.draw(st.binary(min_size=1, max_size=20))
    else:
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(wire) - 1))
            wire[at] ^= data.draw(st.integers(1, 255))
    _consistent(bytes(wire), _parse_or_reason(bytes(wire)))
