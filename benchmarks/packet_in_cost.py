#!/usr/bin/env python3
"""What the controller spends on one packet-in of a new flow, in the process: parse, logic, answer.

    .venv/bin/python benchmarks/packet_in_cost.py [--packet-ins 300] [--rounds 5]

The os-ken app (`evio.sdn.ofapp.BoundedFloodApp`, built by evio.testing.fake_ofapp) on a switch with a
local port and a tunnel port; each packet-in is an OF 1.3 PACKET_IN as OVS sends it, parsed by os-ken's
parser and handed to the app as a switch connection's receive thread does, with a new source each time
(so each installs a flow and its way back), a new app every `--packet-ins` (the port's packet-in rate
would refuse more; the script stops if it does). Two ways of writing the answer, interleaved round by round:
over a connected socket (the daemon's way: PacketOut and FlowMods packed by evio.sdn.openflow_wire, one
write) and through os-ken's `send_msg` (its classes build and serialize each message: the way before
decision 0054). Prints the median and 90th percentile per packet-in of the parse and of the handling.
No root; a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from os_ken.controller import ofp_event  # noqa: E402
from os_ken.controller.handler import MAIN_DISPATCHER  # noqa: E402
from os_ken.ofproto import ofproto_parser  # noqa: E402
from os_ken.ofproto import ofproto_v1_3 as ofp  # noqa: E402
from os_ken.ofproto import ofproto_v1_3_parser as parser  # noqa: E402

from evio.sdn.switch_terms import Drop  # noqa: E402
from evio.testing.fake_ofapp import FakeDatapath, FakeEvent, FakeMsg, connect, make_app, port_desc  # noqa: E402
from evio.testing.frames import H1, H2, eth  # noqa: E402


class DiscardingSocket:
    """A connected switch's socket that keeps nothing (the app sets TCP_NODELAY on it)."""

    def __init__(self) -> None:
        self.writes = 0

    def sendall(self, data: bytes) -> None:
        self.writes += 1

    def setsockopt(self, *args: object) -> None:
        pass


def raw_packet_in(frame: bytes, in_port: int) -> bytes:
    match = bytearray()
    parser.OFPMatch(in_port=in_port).serialize(match, 0)
    body = struct.pack("!IHBBQ", ofp.OFP_NO_BUFFER, len(frame), 0, 1, 0) + bytes(match) + b"\0\0" + frame
    return struct.pack("!BBHI", 4, ofp.OFPT_PACKET_IN, 8 + len(body), 0) + body


def switch(packed: bool) -> tuple[Any, FakeDatapath]:
    app, commands, _, _ = make_app()
    dp = FakeDatapath(0xAAAA)
    if packed:
        dp.socket = DiscardingSocket()  # type: ignore[attr-defined]
    commands.attach("red", 0xAAAA, node_id=100)
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(ofp.OFPP_LOCAL, "evored", H1), port_desc(2, "evot200", "02:00:00:00:00:99")])
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 2}, data=eth(H1, H2))))  # H2 behind port 2
    return app, dp


def one_round(packed: bool, count: int, first: int) -> tuple[list[int], list[int]]:
    app, dp = switch(packed)
    dp.sent.clear()
    parse, handle = [], []
    limited = app.overlays["red"].switch.drops[Drop.RATE_LIMITED]
    for i in range(first, first + count):
        source = f"02:10:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}:01"
        raw = raw_packet_in(eth(H2, source, payload=b"x" * 84), ofp.OFPP_LOCAL)  # a local host to H2
        t0 = time.perf_counter_ns()
        version, msg_type, msg_len, xid = ofproto_parser.header(raw)
        msg = ofproto_parser.msg(dp, version, msg_type, msg_len, xid, raw)
        t1 = time.perf_counter_ns()
        app._send_event(ofp_event.EventOFPPacketIn(msg), MAIN_DISPATCHER)
        t2 = time.perf_counter_ns()
        parse.append(t1 - t0)
        handle.append(t2 - t1)
    if app.overlays["red"].switch.drops[Drop.RATE_LIMITED] != limited:
        raise SystemExit("the port's packet-in rate refused some: fewer --packet-ins per round")
    answered = dp.socket.writes if packed else len(dp.packet_outs())  # type: ignore[attr-defined]
    if answered < count:
        raise SystemExit(f"only {answered} of {count} packet-ins were answered")
    return parse, handle


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packet-ins", type=int, default=20,
                    help="per round and way, each round on a new app (default 20: a port's packet-in rate)")
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args()
    results: dict[str, tuple[list[int], list[int]]] = {"packed (socket)": ([], []), "os-ken classes": ([], [])}
    for r in range(args.rounds):
        for name, packed in (("packed (socket)", True), ("os-ken classes", False)):
            parse, handle = one_round(packed, args.packet_ins, r * args.packet_ins)
            results[name][0].extend(parse)
            results[name][1].extend(handle)
    for name, (parse, handle) in results.items():
        p, h = sorted(x / 1000 for x in parse), sorted(x / 1000 for x in handle)
        print(f"{name}: parse median {statistics.median(p):.1f} us (p90 {p[int(0.9 * len(p))]:.1f}), "
              f"handling median {statistics.median(h):.1f} us (p90 {h[int(0.9 * len(h))]:.1f}), {len(h)} packet-ins")
    return 0


if __name__ == "__main__":
    sys.exit(main())
