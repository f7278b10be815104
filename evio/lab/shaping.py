"""Rate limits on lab links with tc (tbf or htb; netem is not available here).

A qdisc shapes what leaves an interface, so a node's link is shaped at both
ends of the router: the WAN interface (the node's upload) and the LAN
interface (its download). These functions only build `tc -batch` lines.
"""

from __future__ import annotations

from typing import Literal

Shaper = Literal["tbf", "htb"]

_MIN_BURST = 32 * 1024  # bytes; below a few MTU-sized GSO segments tbf drops large packets
_LATENCY_MS = 50  # tbf queue length expressed as the longest time a packet may wait


def burst_bytes(rate_mbit: float) -> int:
    """10 ms worth of traffic at `rate_mbit`, at least 32 KiB (the bucket must hold one timer tick)."""
    return max(_MIN_BURST, int(rate_mbit * 1_000_000 / 8 / 100))


def shape_lines(interface: str, rate_mbit: float, shaper: Shaper = "tbf") -> list[str]:
    """tc batch lines that limit traffic leaving `interface` to `rate_mbit`."""
    if not rate_mbit > 0:
        raise ValueError(f"rate must be positive, got {rate_mbit!r} Mbit/s")
    rate = f"{rate_mbit:g}mbit"
    burst = burst_bytes(rate_mbit)
    if shaper == "tbf":
        return [f"qdisc replace dev {interface} root tbf rate {rate} burst {burst} latency {_LATENCY_MS}ms"]
    if shaper == "htb":
        return [
            f"qdisc replace dev {interface} root handle 1: htb default 1",
            f"class replace dev {interface} parent 1: classid 1:1 htb rate {rate} ceil {rate} burst {burst}",
        ]
    raise ValueError(f"unknown shaper {shaper!r}")


def unshape_lines(interface: str) -> list[str]:
    """tc batch lines that remove a shaper (the default qdisc comes back)."""
    return [f"qdisc del dev {interface} root"]
