"""FdDatapath over socketpairs: frames cross, bad datagrams are dropped and counted."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator

import pytest

from evio.config.model import Cipher
from evio.ratelimit import Rate
from evio.testing.datapath_pair import MTU, RAPID_EPOCHS, Pair, close, collected, frame, make_pair, make_vnet_pair
from evio.testing.waiting import wait_until
from evio.tunnel.datapath.interface import DropReason
from evio.tunnel.datapath.keys import RekeyPolicy, make_aead, split_exporter
from evio.tunnel.datapath.record import (
    HELLO_PEER_SEEN,
    KIND_CONTROL,
    KIND_FRAME,
    OVERHEAD,
    ControlMessage,
    ControlOpcode,
    open_,
    pack_control,
    seal,
)

_implementation = "python"


@pytest.fixture(autouse=True)
def _each_implementation(implementation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test here runs over both data paths (tests/unit/tunnel/conftest.py)."""
    monkeypatch.setattr(sys.modules[__name__], "_implementation", implementation)


@pytest.fixture
async def pair(implementation: str) -> AsyncIterator[Pair]:
    p = await make_pair(implementation)
    yield p
    close(p)


@pytest.mark.parametrize("cipher, plain_syscalls", [(c, False) for c in Cipher] + [(Cipher.AES_256_GCM, True)])
async def test_frames_cross_both_ways(cipher: Cipher, plain_syscalls: bool) -> None:
    """Both ciphers, with sendmmsg/recvmmsg bursts and with one system call per datagram."""
    p = await make_pair(_implementation, cipher, plain_syscalls=plain_syscalls)
    try:
        sent_ab = [frame(i, 60 + i * 6) for i in range(200)]
        sent_ba = [frame(i, MTU + 14 - i) for i in range(50)]
        got_b: list[bytes] = []
        got_a: list[bytes] = []
        # In bursts of 10: a socketpair holds fewer datagrams than a TAP queue.
        for i in range(0, 200, 10):
            for f in sent_ab[i : i + 10]:
                p.a.tap.send_frame(f)
            await wait_until(collected(p.b.tap, got_b, i + 10))
        for i in range(0, 50, 10):
            for f in sent_ba[i : i + 10]:
                p.b.tap.send_frame(f)
            await wait_until(collected(p.a.tap, got_a, i + 10))
        assert got_b == sent_ab
        assert got_a == sent_ba
        sa, sb = p.a.datapath.stats(), p.b.datapath.stats()
        assert sa.implementation == _implementation
        assert (sa.tx_frames, sb.rx_frames, sb.tx_frames, sa.rx_frames) == (200, 200, 50, 50)
        assert sb.rx_bytes == sum(map(len, sent_ab))
        assert not sa.drops and not sb.drops
        # On the wire: one record per frame, exactly the frame plus overhead, never the plaintext.
        assert [len(d) for d in p.wire.a_to_b] == [len(f) + OVERHEAD for f in sent_ab]
        assert all(sent_ab[0][14:] not in d for d in p.wire.a_to_b)
    finally:
        close(p)


async def test_wire_format_matches_the_pure_codec(pair: Pair) -> None:
    secrets = split_exporter(pair.material, pair.cipher, True)
    keys = secrets.tx.keys()
    pair.a.tap.send_frame(frame(1))
    await wait_until(lambda: len(pair.wire.a_to_b) == 1)
    header, plain = open_(make_aead(pair.cipher, keys.key), keys.iv, pair.wire.a_to_b[0])
    assert (header.kind, header.epoch, header.counter, plain) == (KIND_FRAME, 0, 0, frame(1))
    # And a record built by the codec is accepted by the fast path.
    pair.wire.deliver_to_b(seal(make_aead(pair.cipher, keys.key), keys.iv, KIND_FRAME, 0, 5, frame(2)))
    got: list[bytes] = []
    await wait_until(collected(pair.b.tap, got, 2))
    assert got == [frame(1), frame(2)]


async def test_replayed_datagrams_dropped_and_counted(pair: Pair) -> None:
    for i in range(3):
        pair.a.tap.send_frame(frame(i))
    await wait_until(lambda: pair.b.datapath.stats().rx_frames == 3)
    for d in pair.wire.a_to_b:
        pair.wire.deliver_to_b(d)
    await wait_until(lambda: pair.b.datapath.stats().dropped(DropReason.REPLAYED) == 3)
    assert len(pair.b.tap.frames()) == 3
    assert pair.b.datapath.stats().rx_frames == 3


async def test_stale_counter_dropped(pair: Pair) -> None:
    # Window is 128: after 200 frames the first ones are stale.
    for i in range(0, 200, 20):
        for j in range(i, i + 20):
            pair.a.tap.send_frame(frame(j, 60))
        await wait_until(lambda i=i: pair.b.datapath.stats().rx_frames == i + 20)
    pair.wire.deliver_to_b(pair.wire.a_to_b[0])
    await wait_until(lambda: pair.b.datapath.stats().dropped(DropReason.STALE) == 1)


async def test_tampered_forged_truncated_and_unknown_epoch(pair: Pair) -> None:
    pair.wire.filter_a_to_b = lambda d: []  # capture only
    pair.a.tap.send_frame(frame(0))
    await wait_until(lambda: len(pair.wire.a_to_b) == 1)
    good = pair.wire.a_to_b[0]
    tampered_payload = bytearray(good)
    tampered_payload[40] ^= 0x01
    tampered_counter = bytearray(good)
    tampered_counter[9] ^= 0x01
    for bad in (bytes(tampered_payload), bytes(tampered_counter), good[:-1] + bytes([good[-1] ^ 0x80])):
        pair.wire.deliver_to_b(bad)
    pair.wire.deliver_to_b(bytes([KIND_FRAME]) + bytes(20))
    pair.wire.deliver_to_b(bytes([KIND_FRAME, 9]) + good[2:])
    pair.wire.deliver_to_b(good)
    await wait_until(lambda: pair.b.datapath.stats().dropped(DropReason.UNKNOWN_EPOCH) == 1)
    await wait_until(lambda: pair.b.datapath.stats().rx_frames == 1)
    stats = pair.b.datapath.stats()
    assert stats.dropped(DropReason.FORGED) == 3
    assert stats.dropped(DropReason.TRUNCATED) == 1
    assert stats.rx_frames == 1  # only the good one
    assert pair.b.tap.frames() == [frame(0)]


async def test_forged_records_do_not_move_the_replay_window(pair: Pair) -> None:
    # A forged record with a huge counter must not make genuine ones stale.
    pair.wire.deliver_to_b(bytes([KIND_FRAME, 0]) + (2**63).to_bytes(8, "big") + os.urandom(80))
    await wait_until(lambda: pair.b.datapath.stats().dropped(DropReason.FORGED) == 1)
    pair.a.tap.send_frame(frame(7))
    await wait_until(lambda: pair.b.tap.frames() == [frame(7)])


async def test_foreign_datagrams_go_back_to_the_owner(pair: Pair) -> None:
    stun = b"\x00\x01\x00\x00\x21\x12\xa4\x42" + bytes(12)
    dtls = b"\x16\xfe\xfd" + bytes(10)
    pair.wire.deliver_to_b(stun)
    pair.wire.deliver_to_b(dtls)
    await wait_until(lambda: len(pair.b.underlay.foreign) == 2)
    assert pair.b.underlay.foreign == [stun, dtls]
    assert pair.b.underlay.owner_paused
    assert pair.b.datapath.stats().foreign == 2


async def test_control_messages_delivered_not_written_to_tap(pair: Pair) -> None:
    pair.a.datapath.send_control(ControlMessage(ControlOpcode.HELLO, HELLO_PEER_SEEN))
    pair.a.datapath.send_control(ControlMessage(ControlOpcode.KEEPALIVE, 0))
    await wait_until(lambda: len(pair.b.control) == 2)
    assert pair.b.control == [ControlMessage(ControlOpcode.HELLO, 1), ControlMessage(ControlOpcode.KEEPALIVE, 0)]
    assert pair.b.tap.frames() == []
    stats = pair.b.datapath.stats()
    assert (stats.rx_records, stats.rx_frames) == (2, 0)
    # Control and frames share one counter sequence: a replayed control record is dropped too.
    pair.wire.deliver_to_b(pair.wire.a_to_b[0])
    await wait_until(lambda: pair.b.datapath.stats().dropped(DropReason.REPLAYED) == 1)
    assert len(pair.b.control) == 2


async def test_malformed_control_payload_counted(pair: Pair) -> None:
    keys = split_exporter(pair.material, pair.cipher, True).tx.keys()
    aead = make_aead(pair.cipher, keys.key)
    pair.wire.deliver_to_b(seal(aead, keys.iv, KIND_CONTROL, 0, 100, b"\x09\x00"))
    pair.wire.deliver_to_b(seal(aead, keys.iv, KIND_CONTROL, 0, 101, b"\x01"))
    pair.wire.deliver_to_b(seal(aead, keys.iv, KIND_CONTROL, 0, 102, pack_control(ControlOpcode.CLOSE)))
    await wait_until(lambda: len(pair.b.control) == 1)
    # 0x09 is no opcode of this release: a newer peer's control message, counted apart (record.py, Compatibility).
    assert pair.b.datapath.stats().dropped(DropReason.UNKNOWN_CONTROL) == 1
    assert pair.b.datapath.stats().dropped(DropReason.BAD_CONTROL) == 1


async def test_rekey_by_record_count_keeps_traffic_flowing() -> None:
    p = await make_pair(_implementation, rekey=RekeyPolicy(max_records=10, peer_epochs=RAPID_EPOCHS))
    try:
        sent = [frame(i, 100) for i in range(45)]
        got: list[bytes] = []
        for i, f in enumerate(sent):
            p.a.tap.send_frame(f)
            await wait_until(collected(p.b.tap, got, i + 1))
        assert got == sent
        assert p.a.datapath.stats().tx_epoch == 4
        assert p.b.datapath.stats().rx_epoch == 4
        epochs = [d[1] for d in p.wire.a_to_b]
        assert epochs == [i // 10 for i in range(45)]
        # A record of an epoch two behind is unknown now.
        p.wire.deliver_to_b(p.wire.a_to_b[0])
        await wait_until(lambda: p.b.datapath.stats().dropped(DropReason.UNKNOWN_EPOCH) == 1)
    finally:
        close(p)


async def test_reordered_records_across_an_epoch_change() -> None:
    p = await make_pair(_implementation, rekey=RekeyPolicy(max_records=4, peer_epochs=RAPID_EPOCHS))
    try:
        held: list[bytes] = []

        def hold_counter_3_of_epoch_0(d: bytes) -> list[bytes]:
            if d[9] == 3 and d[1] == 0:
                held.append(d)
                return []
            return [d]

        p.wire.filter_a_to_b = hold_counter_3_of_epoch_0
        for i in range(6):
            p.a.tap.send_frame(frame(i))
        await wait_until(lambda: p.b.datapath.stats().rx_frames == 5)
        assert p.b.datapath.stats().rx_epoch == 1
        p.wire.deliver_to_b(held[0])  # the straggler of epoch 0
        await wait_until(lambda: p.b.datapath.stats().rx_frames == 6)
    finally:
        close(p)


async def test_only_the_peers_own_records_spend_its_budget_of_epochs() -> None:
    """Records of the next epoch that fail authentication spend nothing (a stranger cannot hold back an honest
    rekey); the peer's own moves do, and past the budget a record of the next epoch is dropped unopened."""
    p = await make_pair(_implementation, rekey=RekeyPolicy(peer_epochs=Rate(per_second=0.001, burst=1)))
    try:
        secret = split_exporter(p.material, p.cipher, True).tx
        forged = [bytes([KIND_FRAME, 1]) + i.to_bytes(8, "big") + os.urandom(80) for i in range(1, 51)]
        for record in forged:
            p.wire.deliver_to_b(record)
        await wait_until(lambda: p.b.datapath.stats().dropped(DropReason.FORGED) == 50)
        for _ in range(2):
            secret = secret.next()
            keys = secret.keys()
            p.wire.deliver_to_b(seal(make_aead(p.cipher, keys.key), keys.iv, KIND_FRAME, secret.epoch, 1, frame(secret.epoch)))
        await wait_until(lambda: p.b.datapath.stats().dropped(DropReason.EPOCH_RATE) == 1)
        assert p.b.tap.frames() == [frame(1)]  # the peer's first move followed, its second dropped
        stats = p.b.datapath.stats()
        assert stats.rx_epoch == 1 and stats.dropped(DropReason.FORGED) == 50
    finally:
        close(p)


async def test_manual_rekey(pair: Pair) -> None:
    pair.a.datapath.rekey()
    pair.a.tap.send_frame(frame(1))
    await wait_until(lambda: pair.b.tap.frames() == [frame(1)])
    assert pair.wire.a_to_b[-1][1] == 1
    assert pair.b.datapath.stats().rx_epoch == 1


@pytest.mark.parametrize("plain_syscalls", [False, True])
async def test_turn_channel_framing(plain_syscalls: bool) -> None:
    p = await make_pair(_implementation, channel=0x4001, plain_syscalls=plain_syscalls)
    try:
        p.a.tap.send_frame(frame(1))
        await wait_until(lambda: len(p.wire.a_to_b) == 1)
        d = p.wire.a_to_b[0]
        assert d[:2] == b"\x40\x01" and int.from_bytes(d[2:4], "big") == len(d) - 4 == len(frame(1)) + OVERHEAD
        got: list[bytes] = []
        await wait_until(collected(p.b.tap, got, 1))
        assert got == [frame(1)]
        # Padding after the announced length is ignored; other channels and STUN go to the TURN client.
        p.wire.deliver_to_b(d[:1] + d[1:] + b"\x00\x00")
        other_channel = b"\x40\x02" + d[2:]
        stun = b"\x01\x01\x00\x00\x21\x12\xa4\x42" + bytes(12)
        inner_dtls = b"\x40\x01\x00\x04\x16\xfe\xfd\x00"
        for x in (other_channel, stun, inner_dtls):
            p.wire.deliver_to_b(x)
        await wait_until(lambda: len(p.b.underlay.foreign) == 3)
        assert p.b.underlay.foreign == [other_channel, stun, inner_dtls]
        assert p.b.datapath.stats().dropped(DropReason.REPLAYED) == 1
        p.wire.deliver_to_b(b"\x40\x01\x00\x30" + bytes(8))
        await wait_until(lambda: p.b.datapath.stats().dropped(DropReason.TRUNCATED) == 1)
    finally:
        close(p)


async def test_oversized_tap_frame_dropped(pair: Pair) -> None:
    pair.a.tap.send_frame(bytes(MTU + 15))
    pair.a.tap.send_frame(frame(3))
    await wait_until(lambda: pair.b.tap.frames() == [frame(3)])
    assert pair.a.datapath.stats().dropped(DropReason.OVERSIZED) == 1


async def test_inject_and_stop(pair: Pair) -> None:
    keys = split_exporter(pair.material, pair.cipher, True).tx.keys()
    pair.b.datapath.inject(seal(make_aead(pair.cipher, keys.key), keys.iv, KIND_FRAME, 0, 3, frame(9)))
    assert pair.b.tap.frames() == [frame(9)]
    pair.b.datapath.stop()
    pair.b.datapath.stop()
    assert not pair.b.underlay.owner_paused
    pair.b.datapath.inject(b"anything")
    assert pair.b.datapath.stats().dropped(DropReason.EARLY) == 1


def test_icmp_errors_do_not_stop_the_reader_under_uvloop() -> None:
    """uvloop drops a reader on the first socket error; the underlay socket must not be connected."""
    uvloop = pytest.importorskip("uvloop")
    import socket

    async def scenario() -> None:
        p = await make_pair(_implementation)
        try:
            # A closed port answers with ICMP port unreachable.
            closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            closed.bind(("127.0.0.1", 0))
            dead_end = closed.getsockname()
            closed.close()
            p.b.underlay.sock.sendto(b"\x70" + bytes(40), dead_end)
            p.b.underlay.sock.sendto(b"\x70" + bytes(40), dead_end)
            await asyncio.sleep(0.05)  # loop turns for the errors to reach the reader: nothing to observe but its death
            p.a.tap.send_frame(frame(1))
            got: list[bytes] = []
            await wait_until(collected(p.b.tap, got, 1), timeout=2)
            assert got == [frame(1)]
        finally:
            close(p)

    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


def test_maintain_revives_a_reader_dropped_after_an_icmp_error_under_uvloop() -> None:
    """The TURN client's socket is connected: its reader can die under uvloop; maintain() revives it."""
    uvloop = pytest.importorskip("uvloop")
    import socket

    async def scenario() -> None:
        p = await make_pair(_implementation)
        try:
            sock = p.b.underlay.sock
            closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            closed.bind(("127.0.0.1", 0))
            dead_end = closed.getsockname()
            closed.close()
            sock.connect(dead_end)
            sock.send(b"x")  # ICMP port unreachable: a socket error, and uvloop drops the reader
            await asyncio.sleep(0.05)  # loop turns for the error to reach the reader (uvloop shows no reader to wait for)
            sock.connect(p.b.underlay.wire_end.getsockname())
            p.b.datapath.maintain()  # records came in since the start: this tick leaves the reader ...
            p.b.datapath.maintain()  # ... the next, finding nothing new, re-arms it
            p.a.tap.send_frame(frame(2))
            got: list[bytes] = []
            await wait_until(collected(p.b.tap, got, 1), timeout=2)
            assert got == [frame(2)]
        finally:
            close(p)

    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


async def test_maintain_leaves_a_reader_alone_while_records_come_through_it() -> None:
    """A re-arm is some ten system calls per tunnel and tick: only when nothing came in since the last."""
    p = await make_pair(_implementation)
    try:
        dp = p.b.datapath
        selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]

        def reader() -> object:
            return selector.get_key(p.b.underlay.sock.fileno()).data[0]

        dp.maintain()
        dp.maintain()  # nothing new between the two: re-armed
        armed = reader()
        p.a.tap.send_frame(frame(3))
        got: list[bytes] = []
        await wait_until(collected(p.b.tap, got, 1), timeout=2)
        dp.maintain()
        assert reader() is armed  # a record came through it: armed, left alone
        dp.maintain()
        assert reader() is not armed  # nothing new since: re-armed, as a dropped reader would need
    finally:
        close(p)


# -- TAP offloads (vnet headers) ----------------------------------------------------------------


@pytest.mark.parametrize("vnet_b", [False, True], ids=["to-plain-tap", "to-vnet-tap"])
async def test_a_super_frame_crosses_as_records_of_the_mtu(vnet_b: bool) -> None:
    """A TSO super-frame from A's TAP leaves as records of at most the MTU, each a whole frame; B gets them
    back as frames with valid checksums (plain TAP) or joined into one super-frame again (vnet TAP)."""
    from evio.testing.tcp_frames import complete, gso, parse, tcp_frame
    from evio.tunnel.datapath.offload import GSO_TCPV4, VNET_HDR_LEN, VnetHeader

    p = await make_vnet_pair(_implementation, True, vnet_b, tso=True)
    try:
        payload = os.urandom(40000)
        superframe = tcp_frame(payload, partial=True)
        p.a.tap.send_frame(gso(False, 1374).pack() + superframe)
        got: list[bytes] = []
        if vnet_b:
            # Joined per receive burst: how the wire delivers decides how many super-frames.
            joined = bytearray()

            def all_joined() -> bool:
                for g in p.b.tap.frames():
                    got.append(g)
                    vnet = VnetHeader.unpack(g)
                    fields = parse(complete(vnet, g[VNET_HDR_LEN:]))
                    assert fields["tcp_ok"] and fields["ip_ok"]
                    joined.extend(fields["payload"])  # type: ignore[arg-type]
                return len(joined) >= len(payload)

            await wait_until(all_joined)
            assert joined == payload
            gro_writes = p.b.datapath.stats().gro_writes
            assert gro_writes >= 1 and len(got) < 30
            assert sum(VnetHeader.unpack(g).gso_type == GSO_TCPV4 for g in got) == gro_writes
        else:
            await wait_until(collected(p.b.tap, got, 30))
            fields_list = [parse(f) for f in got]
            assert all(f["tcp_ok"] and f["ip_ok"] for f in fields_list)
            assert b"".join(f["payload"] for f in fields_list) == payload  # type: ignore[misc]
        assert all(len(d) <= MTU + 14 + OVERHEAD for d in p.wire.a_to_b)
        assert len(p.wire.a_to_b) == 30
        sa = p.a.datapath.stats()
        assert (sa.tap_reads, sa.gso_reads, sa.tx_frames) == (1, 1, 30)
        assert not sa.drops and not p.b.datapath.stats().drops
    finally:
        close(p)


async def test_frames_cross_between_vnet_taps_in_order() -> None:
    """Small frames and partial checksums through two vnet TAPs: everything arrives, in order, completed."""
    from evio.testing.tcp_frames import parse, tcp_frame
    from evio.tunnel.datapath.offload import F_NEEDS_CSUM, VNET_HDR_LEN, VnetHeader

    p = await make_vnet_pair(_implementation, True, True)
    try:
        sent = [frame(i, 60 + i) for i in range(20)]
        for f in sent:
            p.a.tap.send_frame(bytes(VNET_HDR_LEN) + f)
        partial = tcp_frame(b"q" * 500, partial=True)
        p.a.tap.send_frame(VnetHeader(F_NEEDS_CSUM, 0, 0, 0, 34, 16).pack() + partial)
        got: list[bytes] = []
        await wait_until(collected(p.b.tap, got, 21))
        assert [g[VNET_HDR_LEN:] for g in got[:20]] == sent
        assert all(g[:VNET_HDR_LEN] == bytes(VNET_HDR_LEN) for g in got)
        assert parse(got[20][VNET_HDR_LEN:])["tcp_ok"]
    finally:
        close(p)


@pytest.mark.parametrize(
    "bad",
    [
        b"\x00" * 5,  # shorter than a vnet header
        bytes(10) + b"\x02" * 8,  # a (10-byte) vnet header and half an Ethernet header
        bytes([1, 0]) + (60000).to_bytes(2, "little") * 4 + b"\x02" * 100,  # checksum offsets beyond the frame
        bytes([1, 1]) + (1000).to_bytes(2, "little") * 4 + b"\x02" * 100,  # GSO of something that is not TCP
        bytes([0, 0]) + bytes(8) + b"\x02" * (MTU + 100),  # a plain frame above the MTU
    ],
)
async def test_malformed_tap_reads_are_dropped_and_counted(bad: bytes) -> None:
    p = await make_vnet_pair(_implementation, True, False)
    try:
        p.a.tap.send_frame(bad)
        p.a.tap.send_frame(bytes(10) + frame(1))
        got: list[bytes] = []
        await wait_until(collected(p.b.tap, got, 1))
        assert got == [frame(1)]
        drops = p.a.datapath.stats().drops
        assert sum(drops.values()) == 1
        assert set(drops) <= {DropReason.BAD_OFFLOAD, DropReason.OVERSIZED}
    finally:
        close(p)
