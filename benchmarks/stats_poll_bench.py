"""The cost of one poll of flow byte counters while a member injects flows (issue 21, H3; not a test).

    .venv/bin/python benchmarks/stats_poll_bench.py [--flows 10000,50000]

A member adjacent to this node sends N frames from invented source MACs to a
host here, and first teaches each source a root (an FRB broadcast rooted at
itself, so every flow it makes is one on-demand links would count: the worst
case for the poll). The real switch logic installs its flows in the fake flow
table. Then one poll is timed as the controller pays for it: the switch's
stats reply encoded as OpenFlow 1.3 multipart messages (<= 64 KiB each), parsed
by os-ken, turned into byte counts (`openflow_messages.flow_byte_counts`) and fed to the
on-demand policy (`OverlaySwitch.flow_stats`), process CPU time.

"before": every evio flow of N, as main's poll asked for them (main kept all N).
"after": what this branch's request (`openflow_messages.flow_stats_request`) gets back from
the table the bounded switch left after the same N frames.
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from os_ken.ofproto import ofproto_parser, ofproto_v1_3, ofproto_v1_3_parser

from evio.config.model import OnDemandConfig
from evio.sdn import frb
from evio.sdn.boundary import AttachOverlay
from evio.sdn.openflow_messages import COUNTED_COOKIE, flow_byte_counts, flow_stats_request
from evio.sdn.overlay_switch import OverlaySwitch
from evio.testing.fake_flow_table import FakeFlow, FakeNetwork

ofp = ofproto_v1_3
parser = ofproto_v1_3_parser
US, HOSTILE = 1 << 120 | 1, 3 << 120 | 3


def encode_reply(flows: list[FakeFlow]) -> list[bytes]:
    """`flows` as the switch's OFPMP_FLOW reply: multipart messages of at most 64 KiB."""
    messages: list[bytes] = []
    body = bytearray()

    def close(more: bool) -> None:
        header = struct.pack(ofp.OFP_HEADER_PACK_STR, ofp.OFP_VERSION, ofp.OFPT_MULTIPART_REPLY,
                             ofp.OFP_MULTIPART_REPLY_SIZE + len(body), 1)
        flags = ofp.OFPMPF_REPLY_MORE if more else 0
        messages.append(header + struct.pack(ofp.OFP_MULTIPART_REPLY_PACK_STR, ofp.OFPMP_FLOW, flags)[0:8]
                        + bytes(body))

    for f in flows:
        entry = bytearray(ofp.OFP_FLOW_STATS_0_SIZE)
        match_len = parser.OFPMatch(**f.fields).serialize(entry, ofp.OFP_FLOW_STATS_0_SIZE)
        inst = bytearray()
        parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(f.outputs[0])]).serialize(
            inst, 0)
        entry = entry[: ofp.OFP_FLOW_STATS_0_SIZE + match_len] + inst
        struct.pack_into(ofp.OFP_FLOW_STATS_0_PACK_STR, entry, 0, len(entry), 0, 1, 0, f.priority, f.idle_timeout,
                         f.hard_timeout, f.flags, f.cookie, f.packets, f.bytes)
        if len(body) + len(entry) + ofp.OFP_MULTIPART_REPLY_SIZE > 0xFFFF:
            close(more=True)
            body = bytearray()
        body += entry
    close(more=False)
    return messages


def timed_poll(overlay: OverlaySwitch, messages: list[bytes], now: float) -> tuple[float, int]:
    """CPU seconds to parse the reply and feed it to the policy; the number of flows in it."""
    dp = FakeDatapathCodec()
    start = time.process_time()
    stats: list[Any] = []
    for data in messages:
        version, msg_type, msg_len, xid = ofproto_parser.header(data)
        msg = ofproto_parser.msg(dp, version, msg_type, msg_len, xid, data)
        stats += msg.body
    counts = flow_byte_counts(stats)
    overlay.flow_stats(counts, now)
    return time.process_time() - start, len(counts)


class FakeDatapathCodec:
    ofproto = ofp
    ofproto_parser = parser
    id = 1


def attack(n: int) -> tuple[OverlaySwitch, list[FakeFlow], list[FakeFlow]]:
    """The bounded switch after `n` invented sources; (its overlay, every flow, the flows the poll asks for)."""
    net = FakeNetwork(flow_idle_timeout=30)
    net.add_node(US)
    net.add_node(HOSTILE)
    net.connect(US, HOSTILE)
    node = net.nodes[US]
    host = node.switch.ports[1].hw_addr
    assert host is not None
    net.inject(US, 1, bytes.fromhex("ff" * 6) + frb.parse_mac(host) + b"\x08\x00" + b"x" * 46)
    rng = random.Random(21)
    for i in range(n):
        net.now = i / 500  # two packet-ins a source, at the per-port packet-in rate
        src = bytearray(rng.randbytes(6))
        src[0] = (src[0] & 0xFC) | 0x02
        mac = bytes(src).hex(":")
        hello = bytes.fromhex("ff" * 6) + bytes(src) + b"\x08\x06" + b"x" * 46
        net.from_neighbour(US, HOSTILE, frb.pack(frb.broadcast(hello, HOSTILE, HOSTILE, 1)))
        net.from_neighbour(US, HOSTILE, frb.parse_mac(host) + frb.parse_mac(mac) + b"\x08\x00" + b"x" * 46)
    overlay = OverlaySwitch(AttachOverlay("red", 1, US, on_demand=OnDemandConfig()))
    overlay.switch = node.switch
    request = flow_stats_request(node.table.codec)
    everything = node.table.entries
    polled = [f for f in everything if f.cookie & request.cookie_mask == request.cookie & request.cookie_mask]
    return overlay, [f for f in everything if f.is_unicast], polled


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flows", default="10000,50000")
    args = ap.parse_args()
    for n in (int(x) for x in args.flows.split(",")):
        overlay, kept, polled = attack(n)
        # main's switch kept one flow per invented source; its poll asked for all of them
        before = [FakeFlow(10, {"in_port": 2, "eth_src": f"02:66:{i >> 24 & 0xFF:02x}:{i >> 16 & 0xFF:02x}:"
                                f"{i >> 8 & 0xFF:02x}:{i & 0xFF:02x}", "eth_dst": "fe:00:00:00:00:01"},
                           (1,), 30, COUNTED_COOKIE, 1, 0.0, 1, 60) for i in range(n)]
        t_before, n_before = timed_poll(overlay, encode_reply(before), 100.0)
        t_after, n_after = timed_poll(overlay, encode_reply(polled), 101.0)
        print(f"{n} invented sources: before {n_before} flows polled, {t_before:.3f} s CPU; "
              f"after {len(kept)} flows kept, {n_after} polled, {t_after:.3f} s CPU")


if __name__ == "__main__":
    main()
