"""TAP MTU: the largest IP packet a tunnel carries without fragmenting its underlay datagram.

An Ethernet frame of ``mtu + 14`` bytes becomes one record of
``mtu + 14 + record.OVERHEAD`` bytes, sent in one UDP datagram, which may
cross a TURN relay as ChannelData (4 more bytes). The MTU is computed for the
relayed case even on direct paths, so it does not change with the path.
"""

from __future__ import annotations

import ipaddress

from evio.tunnel.datapath.record import ETHERNET_HEADER_LEN, OVERHEAD

IPV4_HEADER_LEN = 20
IPV6_HEADER_LEN = 40
UDP_HEADER_LEN = 8
TURN_CHANNEL_HEADER_LEN = 4
MIN_TAP_MTU = 576  # the IPv4 minimum every host must accept (RFC 791)


def tap_mtu(underlay_mtu: int = 1500, ipv6_underlay: bool = False, via_turn: bool = True) -> int:
    """MTU to set on the TAP so that every frame fits one underlay datagram."""
    overhead = (
        (IPV6_HEADER_LEN if ipv6_underlay else IPV4_HEADER_LEN)
        + UDP_HEADER_LEN
        + (TURN_CHANNEL_HEADER_LEN if via_turn else 0)
        + OVERHEAD
        + ETHERNET_HEADER_LEN
    )
    mtu = underlay_mtu - overhead
    if mtu < MIN_TAP_MTU:
        raise ValueError(f"underlay MTU {underlay_mtu} leaves only {mtu} bytes for the TAP")
    return mtu


def max_datagram_len(mtu: int) -> int:
    """Largest UDP payload a tunnel with this TAP MTU sends (TURN channel header included)."""
    return mtu + ETHERNET_HEADER_LEN + OVERHEAD + TURN_CHANNEL_HEADER_LEN


# Linux's socket options for the DF bit (linux/in.h, linux/in6.h): a path MTU probe is sent with
# PMTUDISC_PROBE, DF set and the kernel's path MTU cache ignored, so it is never fragmented on the way
# nor refused by a cached size; the socket goes back to what it had after it (evio.tunnel.pmtu).
IP_MTU_DISCOVER, IPV6_MTU_DISCOVER, PMTUDISC_PROBE = 10, 23, 3


def datagram_overhead(peer: object, hoff: int) -> int:
    """IP and UDP headers (and a ChannelData header, ``hoff``) around a record sent to ``peer``."""
    ipv6 = False
    if isinstance(peer, tuple):
        try:
            address = ipaddress.ip_address(str(peer[0]).partition("%")[0])
        except ValueError:
            address = None
        ipv6 = isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None
    return (IPV6_HEADER_LEN if ipv6 else IPV4_HEADER_LEN) + UDP_HEADER_LEN + hoff
