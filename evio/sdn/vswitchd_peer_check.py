"""Who is at the other end of an OpenFlow connection: only our ovs-vswitchd may control a bridge.

The daemon's controller listens on a Unix socket (evio.sdn.controller_socket),
the lab's standalone one on loopback TCP; OVS connects out to it, and the
controller knows a switch by the datapath id in its features reply. Those ids are predictable
(evio.bridge.ovs_bridge.datapath_id_for), so without a check any local
process could connect, claim a bridge's id and take its place. TCP has no
SO_PEERCRED, but the kernel lists every socket in /proc/net/tcp with its
owner's uid and inode: the connecting socket is the entry whose local address
is our peer and whose remote address is us, and it belongs to ovs-vswitchd if
that inode is one of the open files of the pid in vswitchd's pidfile (the one
`ovs-appctl` uses). A Unix socket peer is checked with SO_PEERCRED instead.

`VswitchdPeerCheck` reads the pidfile at every connection: a restarted
vswitchd is recognised at once.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SocketEntry:
    uid: int
    inode: int


def _hex_address(text: str) -> tuple[str, int]:
    """`0100007F:1F90` (IPv4) or 32 hex digits (IPv6), as /proc/net/tcp writes them, to (host, port)."""
    host_hex, _, port_hex = text.partition(":")
    raw = bytes.fromhex(host_hex)
    # The kernel prints the address as 32-bit words in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address), int(port_hex, 16)


def find_socket(proc_net_tcp: str, local: tuple[str, int], remote: tuple[str, int]) -> SocketEntry | None:
    """The entry of the socket bound to `local` and connected to `remote`, from /proc/net/tcp{,6} text."""
    want = ((_normal(local[0]), local[1]), (_normal(remote[0]), remote[1]))
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        try:
            entry = (_hex_address(fields[1]), _hex_address(fields[2]))
            if entry == want:
                return SocketEntry(int(fields[7]), int(fields[9]))
        except ValueError:
            continue
    return None


def _normal(host: str) -> str:
    address = ipaddress.ip_address(host.split("%")[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


def holds_socket(pid: int, inode: int, proc: Path = Path("/proc")) -> bool:
    """Whether process `pid` has socket `inode` open."""
    target = f"socket:[{inode}]"
    try:
        fds = os.listdir(proc / str(pid) / "fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(proc / str(pid) / "fd" / fd) == target:
                return True
        except OSError:
            continue
    return False


class VswitchdPeerCheck:
    """Refuses an OpenFlow connection unless it comes from the ovs-vswitchd of `run_dir`'s pidfile."""

    def __init__(self, run_dir: Path, proc: Path = Path("/proc")) -> None:
        self.run_dir = run_dir
        self.proc = proc

    def expected_pid(self) -> int | None:
        try:
            text = (self.run_dir / "ovs-vswitchd.pid").read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def __call__(self, sock: Any) -> str | None:
        """None if the peer of `sock` is our ovs-vswitchd, else why the connection is refused."""
        pid = self.expected_pid()
        if pid is None:
            return f"no ovs-vswitchd pid in {self.run_dir}"
        try:
            family = sock.family
            if family == socket.AF_UNIX:
                raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                peer_pid = struct.unpack("3i", raw)[0]
                return None if peer_pid == pid else f"peer is pid {peer_pid}, not ovs-vswitchd (pid {pid})"
            peer = sock.getpeername()
            ours = sock.getsockname()
        except OSError as exc:
            return f"cannot identify the peer: {exc}"
        table = "tcp6" if family == socket.AF_INET6 else "tcp"
        try:
            text = (self.proc / "self" / "net" / table).read_text()
        except OSError as exc:
            return f"cannot read /proc/net/{table}: {exc}"
        entry = find_socket(text, (peer[0], peer[1]), (ours[0], ours[1]))
        if entry is None:
            return f"no socket {peer[0]}:{peer[1]} in /proc/net/{table} (not a local process?)"
        if not holds_socket(pid, entry.inode, self.proc):
            return f"peer socket (uid {entry.uid}) is not held by ovs-vswitchd (pid {pid})"
        return None
