import socket

import pytest

from evio.tunnel.datapath.mmsg import (
    GroRecvBatch,
    RecvBatch,
    RecvfromBatch,
    SendBatch,
    SendtoBatch,
    enable_gro,
    make_batch,
    parse_sockaddr,
    sockaddr,
)


def receiver(family: int = socket.AF_INET, host: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.bind((host, 0))
    sock.settimeout(2)
    return sock


@pytest.mark.parametrize("cls", [SendBatch, SendtoBatch])
def test_a_burst_arrives_as_separate_datagrams(cls: type) -> None:
    rx = receiver()
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    batch = cls(8, 100, rx.getsockname())
    payloads = [bytes([i]) * (10 + i) for i in range(5)]
    for i, p in enumerate(payloads):
        start = i * batch.slot_size
        batch.view[start : start + len(p)] = p
        batch.set_length(i, len(p))
    assert [batch.length(i) for i in range(5)] == [len(p) for p in payloads]
    assert batch.send(tx, 5) == 5
    assert [rx.recv(200) for _ in range(5)] == payloads
    rx.close()
    tx.close()


def test_ipv6_destination() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        rx = receiver(socket.AF_INET6, "::1")
    except OSError:
        pytest.skip("no IPv6 loopback")
    tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    batch = SendBatch(2, 64, rx.getsockname())
    batch.view[0:3] = b"abc"
    batch.set_length(0, 3)
    assert batch.send(tx, 1) == 1
    assert rx.recv(64) == b"abc"


def test_sockaddr_layout_and_fallback_choice() -> None:
    addr = sockaddr(("10.1.2.3", 0x1234))
    assert len(addr) == 16 and addr[2:4] == b"\x12\x34" and addr[4:8] == bytes([10, 1, 2, 3])
    assert len(sockaddr(("::1", 1))) == 28
    assert isinstance(make_batch(4, 64, ("127.0.0.1", 9)), SendBatch)
    assert isinstance(make_batch(4, 64, "/not/an/ip"), SendtoBatch)


def test_a_refused_send_reports_nothing_sent() -> None:
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    batch = SendBatch(2, 64, ("127.0.0.1", 9))
    batch.set_length(0, 10)
    tx.close()  # a closed fd: sendmmsg fails
    assert batch.send(tx, 1) == 0


@pytest.mark.parametrize("cls", [RecvBatch, RecvfromBatch])
def test_receive_a_burst_with_lengths_and_sources(cls: type) -> None:
    rx = receiver()
    rx.setblocking(False)
    batch = cls(4, 64)
    assert batch.recv(rx) == 0  # nothing queued: no blocking
    senders = [receiver() for _ in range(2)]
    for i in range(6):
        senders[i % 2].sendto(bytes([i]) * (i + 1), rx.getsockname())
    got: list[tuple[bytes, tuple[object, ...]]] = []
    while len(got) < 6:
        count = batch.recv(rx)
        assert 0 < count <= 4
        for slot in range(count):
            start = slot * batch.slot_size
            got.append((bytes(batch.view[start : start + batch.length(slot)]), batch.source(slot)))
    assert [data for data, _ in got] == [bytes([i]) * (i + 1) for i in range(6)]
    assert [source for _, source in got] == [senders[i % 2].getsockname() for i in range(6)]
    for s in [rx, *senders]:
        s.close()


def test_parse_sockaddr_round_trip() -> None:
    assert parse_sockaddr(sockaddr(("192.0.2.7", 4242))) == ("192.0.2.7", 4242)
    assert parse_sockaddr(sockaddr(("fe80::1", 5, 0, 2))) == ("fe80::1", 5, 0, 2)


def fill(batch: SendBatch, sizes: list[int]) -> list[bytes]:
    payloads = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    for i, p in enumerate(payloads):
        start = i * batch.slot_size
        batch.view[start : start + len(p)] = p
        batch.set_length(i, len(p))
    return payloads


def test_runs_of_equal_datagrams_go_by_gso_and_arrive_as_the_same_datagrams() -> None:
    rx = receiver()
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    batch = SendBatch(64, 1500, rx.getsockname())
    # A bulk run longer than one GSO message can hold, a short tail, a lone odd size, another run.
    sizes = [1442] * 50 + [300] + [90, 1442] + [700] * 5 + [1442]
    payloads = fill(batch, sizes)
    assert batch.send(tx, len(sizes)) == len(sizes)
    assert batch.gso  # loopback takes GSO: it was used, not refused
    assert [rx.recv(2000) for _ in sizes] == payloads
    rx.close()
    tx.close()


def test_a_route_that_refuses_gso_gets_the_burst_one_datagram_per_message() -> None:
    rx = receiver()
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.SOL_SOCKET, 11, 1)  # SO_NO_CHECK: the kernel refuses GSO without checksums
    batch = SendBatch(8, 200, rx.getsockname())
    payloads = fill(batch, [100] * 6)
    assert batch.send(tx, 6) == 6
    assert not batch.gso
    assert [rx.recv(200) for _ in payloads] == payloads
    assert batch.send(tx, 6) == 6  # and it stays off
    assert [rx.recv(200) for _ in payloads] == payloads
    rx.close()
    tx.close()


def test_with_gro_a_gso_run_arrives_as_one_message_with_its_segment_size() -> None:
    rx = receiver()
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    assert enable_gro(rx)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    batch = SendBatch(64, 1500, rx.getsockname())
    sizes = [1442] * 10 + [300] + [90]
    payloads = fill(batch, sizes)
    assert batch.send(tx, len(sizes)) == len(sizes)
    ring = GroRecvBatch(4)
    rx.setblocking(False)
    got: list[tuple[int, bytes]] = []
    for _ in range(2):  # both messages are queued by now, on loopback; one call may take both
        for slot in range(ring.recv(rx)):
            got.append((ring.segment_size(slot), bytes(ring.view[slot * ring.slot_size : slot * ring.slot_size + ring.length(slot)])))
    # The run and its shorter tail in one buffer, cut at the segment size; the lone datagram as it is.
    assert got == [(1442, b"".join(payloads[:11])), (0, payloads[11])]
    assert enable_gro(rx, False)
    rx.close()
    tx.close()
