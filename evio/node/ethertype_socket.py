"""An ethertype's socket on the bridge's own port: opening it, reading its broadcasts (document_flood.py,
host_claims.py)."""

from __future__ import annotations

import logging
import socket
from collections import Counter
from collections.abc import Callable

READ_BATCH = 64  # frames read per wake-up, so a flood cannot hold the loop


def open_ethertype_socket(ifname: str, ethertype: int) -> socket.socket:
    """A non-blocking AF_PACKET socket bound to `ifname`, receiving frames of `ethertype` without their
    Ethernet header (SOCK_DGRAM); closed again if it cannot be bound."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ethertype))
    try:
        sock.bind((ifname, ethertype))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def read_broadcasts(sock: socket.socket, counts: Counter[str], log: logging.Logger, what: str,
                    receive: Callable[[bytes, bytes], None]) -> None:
    """Hand each frame waiting on `sock` (an AF_PACKET socket) to `receive(data, sender MAC)`, at most READ_BATCH;
    our own sends, seen leaving, are skipped. A failed read is counted (`read_failed`) and ends the batch."""
    read_frames(sock, counts, log, what, lambda data, sender, _broadcast: receive(data, sender))


def read_frames(sock: socket.socket, counts: Counter[str], log: logging.Logger, what: str,
                receive: Callable[[bytes, bytes, bool], None]) -> None:
    """As `read_broadcasts`, telling `receive` too whether the frame was sent to the broadcast address (a
    member can send a unicast frame to one node's bridge MAC that the others never see)."""
    for _ in range(READ_BATCH):
        try:
            data, address = sock.recvfrom(2048)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            counts["read_failed"] += 1
            log.debug("%s read failed: %s", what, exc)
            return
        if address[2] == socket.PACKET_OUTGOING:
            continue
        receive(data, bytes(address[4][:6]), address[2] == socket.PACKET_BROADCAST)
