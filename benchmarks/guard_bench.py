#!/usr/bin/env python3
"""What the RA and ARP guards (decision 0068) cost the controller per frame from a tunnel port.

    PYTHONPATH=. .venv/bin/python benchmarks/guard_bench.py [--calls 20000] [--rounds 7] [--router]

`BoundedFloodSwitch.guard_allows` is run on every packet-in from a tunnel port and on the inner frame of
every FRB broadcast, before anything else is done with it. This times it alone, in the process, on a switch
with one tunnel port and 64 certified IPv4 and IPv6 addresses, for the frames that come that way: the first
TCP segment of a flow, a broadcast ARP request, a neighbour solicitation and advertisement, a router
solicitation from a certified address (its owner's: judged, passed), a duplicate address detection probe for a
certified address, unicast so not its owner's (dropped, decision 0076), an ICMPv6 redirect (dropped, decision 0075),
an mDNS datagram, a TCP segment in VLAN 42 (an attached trunk's), an ICMP echo request (the first of a ping), and a
router advertisement from a member not named and an ICMP (IPv4) redirect (both dropped). Prints the median over
rounds of the mean per call of each, in nanoseconds. No root; a
benchmark, not a test.

`--router`: trust mode with `ipv6_routers` set (decision 0068, amended for review21k K7 and review21l): the tunnel's
peer holds the frames' source MAC and is the named router, and its RA (then taken, from fe80::1) bound fe80::1
before timing: the solicitation from fe80::1 meets the bound address's check and is noted as heard, the RA
refreshes its binding.

`--trust`: trust mode (`mac_owners` told: the 64 certified MACs and the frames' source MAC held by the tunnel's peer),
and three more frames (review21s 1, decision 0076 amended): a duplicate address detection probe for the link-local
address made from a certified member's MAC, unicast so not its holder's (dropped); the holder's own advertisement
of it (judged, passed); and a probe for a link-local address made from no held MAC (judged, passed).
"""

from __future__ import annotations

import argparse
import ipaddress
import statistics
import struct
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evio.sdn.switch import BoundedFloodSwitch  # noqa: E402
from evio.sdn.switch_terms import PortKind, SwitchPort  # noqa: E402

A, B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
TUNNEL = 2


def _ipv6(next_header: int, payload: bytes, dst: str = "ff02::1", hop_limit: int = 255, src: str = "fe80::1") -> bytes:
    return struct.pack("!IHBB16s16s", 6 << 28, len(payload), next_header, hop_limit,
                       ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed) + payload


def frames() -> dict[str, bytes]:
    ip4 = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 1, 0, 64, 6, 0, bytes([10, 7, 0, 2]), bytes([10, 7, 0, 1]))
    tcp = struct.pack("!HHIIHHHH", 40000, 22, 1, 0, 0x5002, 65535, 0, 0)
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, A, bytes([10, 7, 0, 2]), bytes(6), bytes([10, 7, 0, 1]))
    ns = bytes([135, 0, 0, 0, 0, 0, 0, 0]) + ipaddress.IPv6Address("fd00::1").packed + bytes([1, 1]) + A
    na = bytes([136, 0, 0, 0, 0x60, 0, 0, 0]) + ipaddress.IPv6Address("fd00::2").packed + bytes([2, 1]) + A
    owner = bytes.fromhex("020000000003")  # certified for fd00::3 (`switch`): its own RS is judged and passes
    rs = bytes([133, 0, 0, 0, 0, 0, 0, 0, 1, 1]) + owner
    probe = bytes([135, 0, 0, 0, 0, 0, 0, 0]) + ipaddress.IPv6Address("fd00::3").packed  # DAD, not its owner's
    redirect6 = bytes([137, 0, 0, 0, 0, 0, 0, 0]) + ipaddress.IPv6Address("2001:db8::1").packed * 2 + bytes([2, 1]) + A
    ra = bytes([134, 0, 0, 0, 64, 0, 7, 8]) + bytes(8)
    mdns = struct.pack("!HHHH", 5353, 5353, 20, 0) + bytes(12)
    icmp4 = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 56, 1, 0, 64, 1, 0, bytes([10, 7, 0, 2]), bytes([10, 7, 0, 1]))
    echo = struct.pack("!BBHHH", 8, 0, 0, 1, 1) + bytes(28)
    redirect = struct.pack("!BBH4s", 5, 1, 0, bytes([10, 7, 0, 2])) + ip4 + tcp[:8]
    return {
        "tcp (first of a flow)": B + A + b"\x08\x00" + ip4 + tcp,
        "arp request": (b"\xff" * 6 + A + b"\x08\x06" + arp).ljust(60, b"\0"),
        "neighbour solicitation": b"\x33\x33\xff\x00\x00\x01" + A + b"\x86\xdd" + _ipv6(58, ns, "ff02::1:ff00:1"),
        "neighbour advertisement": B + A + b"\x86\xdd" + _ipv6(58, na, "fe80::2"),
        "router solicitation (certified)": b"\x33\x33\x00\x00\x00\x02" + owner + b"\x86\xdd"
        + _ipv6(58, rs, "ff02::2", src="fd00::3"),
        "dad probe, certified (dropped)": b"\x33\x33\xff\x00\x00\x03" + A + b"\x86\xdd"
        + _ipv6(58, probe, "ff02::1:ff00:3", src="::"),
        "icmpv6 redirect (dropped)": B + A + b"\x86\xdd" + _ipv6(58, redirect6, "fe80::2"),
        "mdns": b"\x33\x33\x00\x00\x00\xfb" + A + b"\x86\xdd" + _ipv6(17, mdns, "ff02::fb", 1),
        "tcp in vlan 42": B + A + b"\x81\x00\x00\x2a\x08\x00" + ip4 + tcp,
        "icmp echo request": B + A + b"\x08\x00" + icmp4 + echo,
        "router advertisement (dropped)": b"\x33\x33\x00\x00\x00\x01" + A + b"\x86\xdd" + _ipv6(58, ra),
        "icmp redirect (dropped)": B + A + b"\x08\x00" + icmp4 + redirect,
    }


def held_frames() -> dict[str, bytes]:
    """`--trust`'s frames: the link-local address made from 02:00:00:00:00:03 (a certified MAC) is fe80::ff:fe00:3."""
    holder = bytes.fromhex("020000000003")
    held, unheld = "fe80::ff:fe00:3", "fe80::ff:fe00:ff03"  # 02:00:00:00:ff:03 is nobody's
    probe = bytes([135, 0, 0, 0, 0, 0, 0, 0]) + ipaddress.IPv6Address(held).packed
    free = bytes([135, 0, 0, 0, 0, 0, 0, 0]) + ipaddress.IPv6Address(unheld).packed
    na = bytes([136, 0, 0, 0, 0x60, 0, 0, 0]) + ipaddress.IPv6Address(held).packed + bytes([2, 1]) + holder
    return {
        "dad probe, held mac's (dropped)": b"\x33\x33\xff\x00\x00\x03" + A + b"\x86\xdd"
        + _ipv6(58, probe, "ff02::1:ff00:3", src="::"),
        "dad probe, no held mac's": b"\x33\x33\xff\x00\xff\x03" + A + b"\x86\xdd"
        + _ipv6(58, free, "ff02::1:ff00:ff03", src="::"),
        "advertisement, holder's own": B + holder + b"\x86\xdd" + _ipv6(58, na, "fe80::2", src=held),
    }


def switch(router: bool = False, trust: bool = False) -> BoundedFloodSwitch:
    sw = BoundedFloodSwitch(0x100, "02:00:00:00:01:00", packet_in_rate=1e9, packet_in_burst=10**9)
    sw.port_added(SwitchPort(1, "evbr", PortKind.LEAF, None, "02:00:00:00:01:fe"), 0.0)
    sw.port_added(SwitchPort(TUNNEL, "evt200", PortKind.PEER, 0x200), 0.0)
    for i in range(64):
        mac = f"02:00:00:00:{i // 256:02x}:{i % 256 + 3:02x}"
        sw.neighbors.certified[ipaddress.IPv4Address(f"10.7.0.{i + 3}")] = mac
        sw.neighbors.certified[ipaddress.IPv6Address(f"fd00::{i + 3:x}")] = mac
    if trust:
        sw.mac_owners = {**{mac: 0x300 + i for i, mac in enumerate(sorted(set(sw.neighbors.certified.values())))},
                         A.hex(":"): 0x200}
    if router:
        sw.ipv6_routers = frozenset({0x200})
        sw.mac_owners = {**sw.mac_owners, A.hex(":"): 0x200}
        assert sw.guard_allows(TUNNEL, frames()["router advertisement (dropped)"], None, 0.0)
        assert sw.router_addresses.bound
    return sw


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20000, help="calls per frame and round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--router", action="store_true", help="the peer is the named router, its address bound")
    ap.add_argument("--trust", action="store_true", help="mac_owners told; probes for held MACs' addresses too")
    args = ap.parse_args()
    sw = switch(args.router, args.trust)
    named = {name.replace("(dropped)", "(named router)") if args.router else name: frame
             for name, frame in {**frames(), **(held_frames() if args.trust else {})}.items()}
    results: dict[str, list[float]] = {name: [] for name in named}
    for _ in range(args.rounds):
        for name, frame in named.items():
            allows = sw.guard_allows
            t0 = time.perf_counter_ns()
            for _ in range(args.calls):
                allows(TUNNEL, frame, None, 1.0)
            results[name].append((time.perf_counter_ns() - t0) / args.calls)
    for name, per_call in results.items():
        print(f"{name:32s} {statistics.median(per_call):7.0f} ns per frame")
    return 0


if __name__ == "__main__":
    sys.exit(main())
