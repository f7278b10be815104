"""A bigger receive buffer on ovs-vswitchd's packet socket of each tunnel TAP (netdev datapath only).

Why: the userspace (netdev) datapath reads a "system" port, such as our
tunnel TAPs, through an AF_PACKET socket that has the kernel's default
receive buffer (net.core.rmem_default, 208 KiB: some 60 full frames). A tunnel
writes frames into its TAP in bursts of up to 64, and on a busy machine
vswitchd is often not running when they arrive: the socket overflows and the
frames are dropped where no interface counter sees it (`ss -0 -m` shows the
count as `d...`). Measured here: 5-14 % of a TCP stream's segments
retransmitted and the stream at a third of its rate; with a 4 MiB buffer, no
retransmissions. OVS has no setting for this buffer and rmem_default is
host-wide (read-only inside a network namespace), so the buffer is raised on
vswitchd's socket itself: fetched with pidfd_getfd(2) (Linux 5.6, root), set
with SO_RCVBUFFORCE. The kernel (system) datapath has no such socket.
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from evio.bridge.ovs_paths import VSWITCHD_PIDFILE

log = logging.getLogger(__name__)

PORT_RECEIVE_BUFFER = 4 * 1024 * 1024
"""Bytes of queued frames vswitchd's socket may hold (as the kernel counts them, with overhead)."""

_SYS_PIDFD_GETFD = 438  # the same number on every architecture (the unified syscall table)
_SO_RCVBUFFORCE = 33


class PortTuner(Protocol):
    def __call__(self, port_name: str) -> None:
        """Tune what the switch opened for `port_name`; never raises (logs instead)."""


def packet_socket_inodes(proc_net_packet: str, ifindex: int) -> set[int]:
    """Inodes of the packet sockets bound to `ifindex`, from the text of /proc/<pid>/net/packet.

    Columns: sk RefCnt Type Proto Iface R Rmem User Inode.
    """
    inodes = set()
    for line in proc_net_packet.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 9 and fields[4].isdigit() and fields[8].isdigit() and int(fields[4]) == ifindex:
            inodes.add(int(fields[8]))
    return inodes


def socket_fds(links: Iterable[tuple[int, str]], inodes: set[int]) -> list[int]:
    """File descriptors among (fd, readlink target) pairs that are one of `inodes` ("socket:[123]")."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    return sorted(fd for fd, target in links if target in wanted)


class PacketSocketTuner:
    """Raises the receive buffer of vswitchd's packet sockets on a port; best effort, logs once."""

    def __init__(
        self,
        rundir: Path,
        size: int = PORT_RECEIVE_BUFFER,
        proc: Path = Path("/proc"),
        set_buffer: Callable[[int, int, int], None] | None = None,
    ) -> None:
        self._rundir = rundir
        self._size = size
        self._proc = proc
        self._set_buffer = set_buffer or set_receive_buffer
        self._warned = False

    def __call__(self, port_name: str) -> None:
        try:
            done = self.tune(port_name)
        except (OSError, ValueError) as exc:
            if not self._warned:  # once per bridge: the cause is the same for every port
                self._warned = True
                log.warning("cannot raise ovs-vswitchd's receive buffer on %s (frames may be dropped under load): %s",
                            port_name, exc)
            return
        log.debug("ovs-vswitchd packet sockets on %s: %d set to %d bytes", port_name, done, self._size)

    def tune(self, port_name: str) -> int:
        """How many sockets were set; OSError or ValueError when vswitchd or the port cannot be read."""
        pid = int((self._rundir / VSWITCHD_PIDFILE).read_text().strip())
        here = self._proc / str(pid)
        # The port's index as vswitchd sees it: through its root, /sys is that of its network
        # namespace (`ip netns exec` mounts it so), whichever namespace we run in.
        ifindex = int((here / "root" / "sys" / "class" / "net" / port_name / "ifindex").read_text())
        inodes = packet_socket_inodes((here / "net" / "packet").read_text(), ifindex)
        if not inodes:
            return 0
        fd_dir = here / "fd"
        links = []
        for entry in fd_dir.iterdir():
            try:
                links.append((int(entry.name), os.readlink(entry)))
            except (OSError, ValueError):  # closed meanwhile
                continue
        fds = socket_fds(links, inodes)
        for fd in fds:
            self._set_buffer(pid, fd, self._size)
        return len(fds)


def set_receive_buffer(pid: int, fd: int, size: int) -> None:
    """SO_RCVBUF of process `pid`'s socket `fd` made `size` bytes (as the kernel counts), past rmem_max."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        ours = libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
        if ours < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"pidfd_getfd: {os.strerror(errno)}")
        # The copy is the same socket as vswitchd's: the option set here is the one it reads with.
        with socket.socket(fileno=ours) as sock:
            sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, size // 2)  # the kernel doubles it
    finally:
        os.close(pidfd)
