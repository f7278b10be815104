"""The bulk transfer's exchange over a local socket pair: both ways at once, hashes that match, and a deadline."""

from __future__ import annotations

import socket
import threading
import time

from evio.lab.tcp_bulk import BulkReport, exchange


def test_both_ends_send_and_receive_everything_and_the_hashes_match() -> None:
    left, right = socket.socketpair()
    reports: dict[str, BulkReport] = {}

    def side(name: str, sock: socket.socket) -> None:
        with sock:
            reports[name] = exchange(sock, 3_000_000, time.monotonic() + 30)

    threads = [threading.Thread(target=side, args=(n, s)) for n, s in (("left", left), ("right", right))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    one, other = reports["left"], reports["right"]
    assert one.error is None and other.error is None, reports
    assert one.sent == one.received == other.sent == other.received == 3_000_000
    assert one.sent_sha256 == other.received_sha256 and other.sent_sha256 == one.received_sha256
    assert one.sent_sha256 != other.sent_sha256  # random bytes: each end's own


def test_a_peer_that_sends_nothing_and_never_closes_ends_in_an_error_at_the_deadline() -> None:
    left, right = socket.socketpair()
    with left, right:
        started = time.monotonic()
        report = exchange(left, 1000, started + 0.3)
        assert report.sent == 1000 and report.received == 0
        assert report.error is not None and "receive after 0 bytes" in report.error
        assert time.monotonic() - started < 5


def test_a_trickle_that_never_ends_stops_at_the_deadline() -> None:
    """A collapsed path still moves a little: every byte resets no per-call timeout past the deadline."""
    left, right = socket.socketpair()
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.02):
            right.send(b"x")

    with left, right:
        feeder = threading.Thread(target=trickle)
        feeder.start()
        try:
            started = time.monotonic()
            report = exchange(left, 0, started + 0.5)
        finally:
            stop.set()
            feeder.join(5)
        assert 0 < report.received < 100 and report.error is not None, report  # "timed out" or "deadline passed"
        assert time.monotonic() - started < 3
