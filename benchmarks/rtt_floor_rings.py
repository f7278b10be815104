#!/usr/bin/env python3
"""One end of benchmarks/rtt_floor.py's "evio-rings" row: evio's native passes without the event loop.

    python benchmarks/rtt_floor_rings.py TAP LOCAL_ADDR:PORT REMOTE_ADDR:PORT KEY_HEX

The TAP (with its vnet header, as the endpoint opens it, TSO off), one connected UDP socket, and the
native data path's rings bound as decision 0077 binds them (`TxRing.bind`, `RxRing.bind`, AES-256-GCM,
a replay window, epoch 0), called from a plain Python thread blocking in `select.epoll`: no uvloop, no
asyncio, no data path object, no tunnel. What stays of Python is the epoll wrapper and the ring's entry
(the GIL taken and released once per pass), so this is an upper bound of what the same passes cost
run from a Rust thread per tunnel (0077's third alternative), and the forwarder-aead row a lower one.

Both ends seal and open with the same key and IV in both directions: a benchmark, never a tunnel.
Anything a pass leaves for Python (a drop, a leftover) is only counted; on SIGTERM the end prints how many
passes did, beside the rings' totals, so a run can tell that its plain passes ran no Python.
"""

from __future__ import annotations

import asyncio
import select
import signal
import socket
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evio.config.model import Cipher
from evio.tunnel.datapath import native
from evio.tunnel.datapath.buffers import zeroed
from evio.tunnel.datapath.mmsg import sockaddr
from evio.tunnel.datapath.record import ETHERNET_HEADER_LEN, OVERHEAD
from evio.tunnel.datapath.tap import LinuxTap

MTU = 1400  # peers_bench's overlay MTU; rtt_floor.py sets it and the address on the device
BATCH = 64  # the data path's default
RX_SLOT = 2048  # the receive pass's least slot (receive.py), above a record of MTU + 14 + OVERHEAD


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    name, local, remote, key_hex = sys.argv[1], _address(sys.argv[2]), _address(sys.argv[3]), sys.argv[4]
    key = bytes.fromhex(key_hex)
    module = native.module()
    if not native.bound():
        print("rtt_floor_rings: this evio_native has no bound rings (a build older than 0077)", file=sys.stderr)
        return 1
    # LinuxTap.create runs its configuration in an executor: a loop for that call only, gone before the passes.
    tap = asyncio.run(LinuxTap.create(name, MTU, offload=True, tso=False))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(local)
    sock.connect(remote)
    sock.setblocking(False)
    max_frame = MTU + ETHERNET_HEADER_LEN
    left_for_python = [0]

    def fallback(*_: Any) -> None:
        left_for_python[0] += 1

    iv = bytes(12)
    tx = module.TxRing(BATCH, max_frame, sockaddr(remote), None, tap.vnet_hdr)
    tx.bind(tap.fd, sock.fileno(), native.native_aead(Cipher.AES_256_GCM, key, iv), 0, 1 << 48, fallback)
    memory = zeroed(BATCH * RX_SLOT)
    rx = module.RxRing(memory, BATCH, RX_SLOT, False)
    rx.bind(sock.fileno(), tap.fd, native.native_aead(Cipher.AES_256_GCM, key, iv), module.ReplayWindow(2048),
            0, max_frame + OVERHEAD, None, tap.vnet_hdr, fallback)  # fmt: skip
    rings = {tap.fd: tx, sock.fileno(): rx}
    epoll = select.epoll()
    for fd in rings:
        epoll.register(fd, select.EPOLLIN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # out of epoll.poll, through the finally
    print(f"ready {name} vnet={tap.vnet_hdr}", flush=True)
    try:
        while True:
            for fd, _ in epoll.poll():
                rings[fd]()
    finally:
        print(f"passes left for Python {left_for_python[0]}; sent (records, bytes, reads) {tx.totals()}, "
              f"delivered (frames, bytes, writes, gro writes) {rx.totals()}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
