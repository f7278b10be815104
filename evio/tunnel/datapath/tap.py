"""TAP devices: one per tunnel, the tunnel's Ethernet end on this host.

The device is created by TUNSETIFF on /dev/net/tun without TUNSETPERSIST, so
the kernel removes it when its fd closes: a killed daemon leaves no TAP
behind. ``IFF_NO_PI`` means every read and write is exactly one Ethernet
frame. With ``offload`` the TAP also gets ``IFF_VNET_HDR`` and negotiates
checksum and TCP segmentation offload (``TUNSETOFFLOAD``): every read and
write then starts with a 10-byte virtio-net header and may carry a TCP
super-frame of up to 64 KiB (tunnel.offload). Where the kernel refuses, the
TAP is made again without them. MTU and state are set by ioctls on the TAP's
name, in a worker thread so the loop's thread never blocks. Addresses (only
the lab's tunnel tool gives any) and the netlink fallback for IPv6 use
pyroute2's synchronous ``IPRoute``, imported only then: importing pyroute2
costs a daemon some 10 MB of resident memory for nothing else it needs.
"""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import logging
import os
import socket
import struct
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from evio.tunnel.datapath.offload import VNET_HDR_LEN
from evio.tunnel.errors import TapError

logger = logging.getLogger(__name__)

TUNSETIFF = 0x400454CA
TUNSETOFFLOAD = 0x400454D0
TUNSETVNETHDRSZ = 0x400454D8
IN6_ADDR_GEN_MODE_NONE = 1  # linux/if_link.h
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
TUN_F_CSUM = 0x01
TUN_F_TSO4 = 0x02
TUN_F_TSO6 = 0x04
TAP_OFFLOADS = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6
"""No USO (TUN_F_USO4/6): Open vSwitch's userspace datapath (3.1) never builds UDP GSO
frames and does not parse them, so nothing would ever use it."""
IFNAMSIZ = 16
SIOCGIFFLAGS = 0x8913  # linux/sockios.h
SIOCSIFFLAGS = 0x8914
SIOCSIFMTU = 0x8922
SIOCSIFTXQLEN = 0x8943
IFF_UP = 0x1
TX_QUEUE_LEN = 4000
"""Frames the kernel may queue for the tunnel to read (the kernel's default is 1000). TCP through
the TAP is not held back by the queue (a tun device frees each frame's socket memory as it
queues it), so a burst that finds it full is dropped and retransmitted: with 1000, a native data
path moving 1-1.5 Gbit/s (90 000-130 000 frames a second, 8-11 ms of queue) lost frames whenever
the daemon was off the CPU for longer (docs/performance.md, "The native data path"). Not with
TSO (tunnel.tso): its reads are super-frames of up to 64 KiB, 45 times fewer, and 4 000 of them
would be 256 MiB."""


class TapDevice(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def fd(self) -> int: ...

    @property
    def mtu(self) -> int: ...

    @property
    def vnet_hdr(self) -> bool:
        """Whether reads and writes carry a virtio-net header (offloads negotiated)."""

    async def close(self) -> None: ...


class LinuxTap:
    """A non-persistent TAP device owned by this process."""

    def __init__(self, name: str, fd: int, mtu: int, vnet_hdr: bool = False) -> None:
        self._name = name
        self._fd = fd
        self._mtu = mtu
        self._vnet_hdr = vnet_hdr

    @property
    def name(self) -> str:
        return self._name

    @property
    def fd(self) -> int:
        return self._fd

    @property
    def mtu(self) -> int:
        return self._mtu

    @property
    def vnet_hdr(self) -> bool:
        return self._vnet_hdr

    @classmethod
    async def create(
        cls, name: str, mtu: int, addresses: Sequence[str] = (), up: bool = True, offload: bool = False,
        tso: bool = False,
    ) -> LinuxTap:
        """Create ``name``, set its MTU and addresses (CIDR strings) and bring it up; with offloads if asked and possible."""
        if not 0 < len(name.encode()) < IFNAMSIZ:
            raise TapError(f"bad interface name {name!r}")
        fd = _open_tap(name, True, tso) if offload else -1
        vnet_hdr = fd >= 0
        if not vnet_hdr:
            fd = _open_tap(name, False)
        try:
            loop = asyncio.get_running_loop()
            queue = None if vnet_hdr and tso else TX_QUEUE_LEN
            await loop.run_in_executor(None, _configure, name, mtu, list(addresses), up, queue)
        except BaseException as exc:
            os.close(fd)
            if isinstance(exc, OSError | ValueError):
                raise TapError(f"cannot set up TAP {name}: {exc}") from exc
            raise
        logger.debug("tap %s created, mtu %d, offloads %s", name, mtu, "on" if vnet_hdr else "off")
        return cls(name, fd, mtu, vnet_hdr)

    async def close(self) -> None:
        """Close the fd; the kernel deletes the device."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            logger.debug("tap %s closed", self._name)


def _open_tap(name: str, offload: bool, tso: bool = True) -> int:
    """The TAP's fd; with ``offload``, -1 where the kernel refuses the vnet header or the offloads."""
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise TapError(f"cannot open /dev/net/tun: {exc}") from exc
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI | (IFF_VNET_HDR if offload else 0)))
        if offload:
            fcntl.ioctl(fd, TUNSETVNETHDRSZ, struct.pack("i", VNET_HDR_LEN))
            fcntl.ioctl(fd, TUNSETOFFLOAD, TAP_OFFLOADS if tso else 0)
    except OSError as exc:
        os.close(fd)
        if offload:
            global _offload_warned
            if not _offload_warned:
                _offload_warned = True
                logger.warning("TAP offloads refused by the kernel (%s): tunnels move one frame per read and write", exc)
            return -1
        raise TapError(f"cannot create TAP {name}: {exc}") from exc
    return fd


_offload_warned = False


def _configure(name: str, mtu: int, addresses: list[str], up: bool, tx_queue_len: int | None = None) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as control:
        _set_mtu(control, name, mtu)
        if tx_queue_len is not None:
            _set_tx_queue_len(control, name, tx_queue_len)
        if addresses:
            _add_addresses(name, addresses)
        else:
            _disable_ipv6(name)
            _refuse_ipv4(name)
        if up:
            _set_up(control, name)


def _set_mtu(control: socket.socket, name: str, mtu: int) -> None:
    fcntl.ioctl(control, SIOCSIFMTU, struct.pack("16si12x", name.encode(), mtu))


def _set_tx_queue_len(control: socket.socket, name: str, length: int) -> None:
    fcntl.ioctl(control, SIOCSIFTXQLEN, struct.pack("16si20x", name.encode(), length))


def _set_up(control: socket.socket, name: str) -> None:
    request = struct.pack("16sH14x", name.encode(), 0)
    flags: int = struct.unpack_from("16sH", fcntl.ioctl(control, SIOCGIFFLAGS, request))[1]
    fcntl.ioctl(control, SIOCSIFFLAGS, struct.pack("16sH14x", name.encode(), flags | IFF_UP))


def _add_addresses(name: str, addresses: list[str]) -> None:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=name)
        if not found:
            raise ValueError(f"{name} vanished")
        for cidr in addresses:
            iface = ipaddress.ip_interface(cidr)
            ipr.addr("add", index=found[0], address=str(iface.ip), prefixlen=iface.network.prefixlen)


def _netlink_no_ipv6_addresses(name: str) -> None:
    """Address generation mode `none` on `name` through rtnetlink (raises OSError or NetlinkError)."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=name)
        if not found:
            raise OSError(f"{name} vanished")
        ipr.link("set", index=found[0], IFLA_AF_SPEC={"attrs": [("AF_INET6", {"attrs": [(
            "IFLA_INET6_ADDR_GEN_MODE", IN6_ADDR_GEN_MODE_NONE)]})]})  # fmt: skip


def _disable_ipv6(name: str, netlink_fallback: Callable[[str], Any] = _netlink_no_ipv6_addresses) -> None:
    """A TAP that is only a bridge port needs no addresses of its own.

    Left on, the kernel gives it an IPv6 link-local address and sends router
    and neighbour solicitations and MLD reports out of it: multicast that
    reaches the peer's bridge outside any FRB and is dropped there as noise.
    """
    try:
        with open(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6", "w") as knob:
            knob.write("1")
    except FileNotFoundError:
        pass  # no IPv6 in this kernel or namespace: nothing to silence
    except OSError as exc:
        # A read-only /proc/sys (a container; systemd's ProtectKernelTunables=). Without an
        # address generation mode the TAP gets no link-local address, so it has no source
        # to solicit from; failing that too, the TAP works and only keeps its chatter.
        try:
            netlink_fallback(name)
        except Exception as netlink_exc:  # noqa: BLE001 - OSError or pyroute2's NetlinkError: the TAP works anyway
            global _ipv6_warned
            if not _ipv6_warned:
                _ipv6_warned = True
                logger.warning("cannot switch IPv6 off on tunnel TAPs (%s; netlink: %s): they will send IPv6 "
                               "link-local chatter", exc, netlink_exc)


_ipv6_warned = False


def _refuse_ipv4(name: str) -> None:
    """Keep the host's IPv4 stack from taking in what arrives on a bridge-port TAP.

    On the userspace datapath Open vSwitch reads a TAP through a packet
    socket, which does not take frames from the kernel: every frame a tunnel
    writes into the TAP also goes up the host's own stack, as if received on
    that interface. Under Bounded Flood broadcasts travel inside FRBs, which
    the stack ignores, but under STP switching (and for any other raw
    broadcast) a node answered an ARP request or a broadcast ping once per TAP
    it came in on, besides once from the bridge. Strict reverse-path filtering
    on the TAP drops them: the node's addresses are reached through the
    bridge's internal port, never through a TAP. (The kernel uses the larger
    of this and `all`; on an interface without addresses loose filtering, 2,
    refuses them as well.)
    """
    try:
        with open(f"/proc/sys/net/ipv4/conf/{name}/rp_filter", "w") as knob:
            knob.write("1")
    except OSError as exc:
        global _ipv4_warned
        if not _ipv4_warned:
            _ipv4_warned = True
            logger.warning("cannot set rp_filter on tunnel TAPs (%s): a node may answer a broadcast or an ARP "
                           "request once more per TAP it arrives on", exc)


_ipv4_warned = False
