"""Bulk TCP both ways at once, with a hash of every byte: did a data path carry it all, intact, and how fast.

    python -m evio.lab.tcp_bulk serve --bind 10.99.0.2 --port 5310 --bytes 50000000
    python -m evio.lab.tcp_bulk send --connect 10.99.0.2:5310 --bytes 50000000

The server takes one connection; then each end sends ``--bytes`` random bytes
(so no two blocks are alike and a misplaced one changes the hash) while it
receives the other's, closes its sending half, and prints one JSON line:
the bytes it sent and received, the SHA-256 of each, the seconds from the
connection to the last byte received, and what went wrong, if anything. What
one end sent must hash to what the other received. ``--deadline`` bounds the
whole exchange: a data path that collapses reports the bytes it carried in
that time instead of hanging. Exit status 0 when all the bytes went both ways.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass

CHUNK = 256 * 1024


@dataclass
class BulkReport:
    """What one end sent and received, with hashes; seconds from the connection to its last received byte."""

    sent: int = 0
    sent_sha256: str = ""
    received: int = 0
    received_sha256: str = ""
    seconds: float = 0.0
    error: str | None = None


def exchange(sock: socket.socket, nbytes: int, deadline: float) -> BulkReport:
    """Sends `nbytes` random bytes on `sock` while receiving until the other end closes, by `deadline`
    (time.monotonic)."""
    report = BulkReport()
    started = time.monotonic()
    sent_hash, errors = hashlib.sha256(), []

    def send() -> None:
        try:
            while report.sent < nbytes:
                block = os.urandom(min(CHUNK, nbytes - report.sent))
                sent_hash.update(block)
                # sendall's timeout bounds the whole call; a trickle past the deadline ends at the next block.
                _check(deadline)
                sender_view.sendall(block)
                report.sent += len(block)
            sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            errors.append(f"send after {report.sent} bytes: {exc}")

    # The sender writes through a duplicate of the socket, with a timeout of its own: a socket's timeout
    # is one value for every thread that uses it.
    sender_view = sock.dup()
    sender_view.settimeout(max(deadline - time.monotonic(), 0.001))
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    received_hash, buffer = hashlib.sha256(), bytearray(CHUNK)
    view = memoryview(buffer)
    try:
        while True:
            # Every call waits at most until the deadline: a collapsed path ends there, even one that trickles.
            sock.settimeout(_check(deadline))
            n = sock.recv_into(buffer)
            if not n:
                break
            received_hash.update(view[:n])
            report.received += n
    except OSError as exc:
        errors.append(f"receive after {report.received} bytes: {exc}")
    report.seconds = time.monotonic() - started
    sender.join(max(deadline - time.monotonic(), 0.0) + 1.0)
    if sender.is_alive():
        errors.append(f"send after {report.sent} bytes: not done by the deadline")
    sender_view.close()
    report.sent_sha256, report.received_sha256 = sent_hash.hexdigest(), received_hash.hexdigest()
    report.error = "; ".join(errors) or None
    return report


def _check(deadline: float) -> float:
    """Seconds left until `deadline`; TimeoutError (an OSError) once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


def serve(bind: str, port: int, nbytes: int, seconds: float) -> BulkReport:
    with socket.create_server((bind, port)) as listener:
        print(json.dumps({"listening": f"{bind}:{port}"}), flush=True)
        listener.settimeout(seconds)
        conn, _ = listener.accept()
        with conn:
            return exchange(conn, nbytes, time.monotonic() + seconds)


def send(host: str, port: int, nbytes: int, seconds: float) -> BulkReport:
    deadline = time.monotonic() + seconds
    with socket.create_connection((host, port), timeout=min(seconds, 10.0)) as sock:
        return exchange(sock, nbytes, deadline)


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected host:port, got {text!r}")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evio.lab.tcp_bulk", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    server = sub.add_parser("serve")
    server.add_argument("--bind", required=True)
    server.add_argument("--port", type=int, required=True)
    client = sub.add_parser("send")
    client.add_argument("--connect", type=_host_port, required=True, metavar="HOST:PORT")
    for p in (server, client):
        p.add_argument("--bytes", type=int, required=True, help="bytes each end sends")
        p.add_argument("--deadline", type=float, default=120.0, help="seconds for the whole exchange (default 120)")
    args = parser.parse_args(argv)
    if args.bytes < 0:
        parser.error("--bytes must be >= 0")
    try:
        if args.mode == "serve":
            report = serve(args.bind, args.port, args.bytes, args.deadline)
        else:
            host, port = args.connect
            report = send(host, port, args.bytes, args.deadline)
    except OSError as exc:
        report = BulkReport(error=f"{args.mode}: {exc}")
    print(json.dumps(asdict(report)), flush=True)
    whole = report.error is None and report.sent == args.bytes and report.received == args.bytes
    return 0 if whole else 1


if __name__ == "__main__":
    sys.exit(main())
