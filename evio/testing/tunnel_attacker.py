"""An on-path attacker for tunnel tests: capture frame records on an interface, send them back replayed and tampered.

Run inside a namespace that carries the tunnel's underlay (root needed)::

    python -m evio.testing.tunnel_attacker --iface IF --dst IP --count 5

It waits for ``count`` IPv4/UDP datagrams to ``dst`` whose payload is a frame
record, then transmits on the same interface, as Ethernet frames:

- each captured frame again, unchanged (replays);
- each captured frame with its record counter moved far ahead (the header is
  authenticated, so these are forgeries that pass the replay check);
- one record cut short (truncated).

UDP checksums of the injected datagrams are set to 0 (allowed in IPv4): a
captured outgoing packet may only carry a partial checksum (veth offload).
Prints one JSON line with what it sent.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
from collections.abc import Sequence

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
RECORD_KIND_FRAME = 0x70
COUNTER_JUMP = 1 << 40


def _udp_payload_offset(frame: bytes) -> int | None:
    """Offset of the UDP payload in an Ethernet/IPv4/UDP frame, else None."""
    if len(frame) < 14 + 20 + 8 or struct.unpack_from("!H", frame, 12)[0] != ETH_P_IP:
        return None
    ihl = (frame[14] & 0x0F) * 4
    if frame[14 + 9] != socket.IPPROTO_UDP:
        return None
    return 14 + ihl + 8


def _with_zero_udp_checksum(frame: bytes) -> bytearray:
    out = bytearray(frame)
    ihl = (out[14] & 0x0F) * 4
    struct.pack_into("!H", out, 14 + ihl + 6, 0)
    return out


def capture(sock: socket.socket, dst: str, count: int, timeout: float) -> list[bytes]:
    dst_bytes = socket.inet_aton(dst)
    found: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(found) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        sock.settimeout(remaining)
        try:
            frame = sock.recv(65535)
        except TimeoutError:
            break
        offset = _udp_payload_offset(frame)
        if offset is None or frame[14 + 16 : 14 + 20] != dst_bytes:
            continue
        if len(frame) > offset + 26 and frame[offset] == RECORD_KIND_FRAME:
            found.append(frame)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--iface", required=True)
    p.add_argument("--dst", required=True, help="the receiving tunnel end's underlay address")
    p.add_argument("--count", type=int, default=5)
    p.add_argument("--timeout", type=float, default=10.0)
    args = p.parse_args(argv)

    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((args.iface, 0))
    frames = capture(sock, args.dst, args.count, args.timeout)
    sent = {"captured": len(frames), "replayed": 0, "tampered": 0, "truncated": 0}
    for frame in frames:
        sock.send(_with_zero_udp_checksum(frame))
        sent["replayed"] += 1
    for frame in frames:
        forged = _with_zero_udp_checksum(frame)
        offset = _udp_payload_offset(frame)
        assert offset is not None
        counter = struct.unpack_from("!Q", forged, offset + 2)[0]
        struct.pack_into("!Q", forged, offset + 2, counter + COUNTER_JUMP)
        sock.send(forged)
        sent["tampered"] += 1
    if frames:
        frame = frames[0]
        offset = _udp_payload_offset(frame)
        assert offset is not None
        short = _with_zero_udp_checksum(frame[: offset + 12])
        ihl = (short[14] & 0x0F) * 4
        struct.pack_into("!H", short, 14 + 2, len(short) - 14)  # IP total length
        struct.pack_into("!H", short, 14 + ihl + 4, len(short) - 14 - ihl)  # UDP length
        struct.pack_into("!H", short, 14 + 10, 0)
        struct.pack_into("!H", short, 14 + 10, _ip_checksum(bytes(short[14 : 14 + ihl])))
        sock.send(short)
        sent["truncated"] += 1
    sys.stdout.write(json.dumps(sent) + "\n")
    return 0 if frames else 1


def _ip_checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


if __name__ == "__main__":
    sys.exit(main())
