"""Where the bridges reach the controller: a Unix socket in a directory only root may create in.

Loopback TCP let any local user stand in for the controller (issue 21 M1): the
port was probed free, closed and bound again by os-ken, and after a crash the
bridges (fail_mode=secure) kept connecting to a port nobody held. Whoever
listened there read every decrypted frame the switch sent up and could send
frames out as this node. A path in a private directory cannot be taken so:

1. `controller_socket_path`: the socket's place. ovs-vswitchd connects only to
   `unix:` controllers inside its run directory (it refuses others as a
   "possibility for remote exploit"), so the directory is `evio/` in OVS's
   rundir, the socket named after the daemon's state directory (one daemon
   per state directory; a restarted one takes the same path, so bridges left
   by a crash find it again).
2. `bind_controller_socket`: the directory is made (or checked) owned by us,
   mode 0700, or 0750 with the OVS user's group when ovs-vswitchd runs as
   another user (the rundir's owner); a stale socket from a crashed run is
   removed, the new one bound, restricted the same way and listening, all
   before any bridge is made. Nobody else can create a file there, so after
   a crash the path stays dead until the next daemon binds it.
3. `SwitchAdmission`: every accepted connection's SO_PEERCRED must be the
   ovs-vswitchd of the rundir's pidfile, root, or the OVS user; anything else
   is closed at once and counted. (The controller then still checks, at the
   features reply, that the peer is that vswitchd: evio.sdn.vswitchd_peer_check.)
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import stat
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from evio.ratelimit import LogLimiter

log = logging.getLogger(__name__)

SOCKET_DIR_NAME = "evio"
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL
LISTEN_BACKLOG = 16  # one connection per bridge; a handful of overlays
REFUSAL_LOG_INTERVAL = 10.0


class ControllerSocketError(OSError):
    """The controller's socket cannot be made safely (its directory is someone else's, the path too long...)."""


@dataclass(frozen=True)
class OvsOwner:
    """Who ovs-vswitchd runs as: the owner of its run directory (root, or e.g. `openvswitch`)."""

    uid: int
    gid: int

    @classmethod
    def of_run_dir(cls, run_dir: Path) -> OvsOwner:
        st = os.stat(run_dir)
        return cls(st.st_uid, st.st_gid)

    @property
    def is_root(self) -> bool:
        return self.uid == 0


@dataclass(frozen=True)
class PeerCredentials:
    pid: int
    uid: int
    gid: int


def controller_socket_path(ovs_run_dir: Path, state_dir: Path) -> Path:
    """The daemon's controller socket: `<OVS rundir>/evio/<12 hex of its state directory>.sock`."""
    tag = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
    return ovs_run_dir / SOCKET_DIR_NAME / f"{tag}.sock"


def bind_controller_socket(path: Path, owner: OvsOwner) -> socket.socket:
    """A listening Unix socket at `path` that only root and `owner` can reach; raises ControllerSocketError."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ControllerSocketError(f"controller socket path {path} is longer than {MAX_SOCKET_PATH} bytes")
    _private_dir(path.parent, owner)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise ControllerSocketError(f"{path} exists and is not a socket; not removing it")
        os.unlink(path)  # a crashed run's: nobody listens on it any more
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        if owner.is_root:
            os.chmod(path, 0o600)
        else:
            _share_with_group(path, owner.gid)
            os.chmod(path, 0o660)
        listener.listen(LISTEN_BACKLOG)
    except BaseException:
        listener.close()
        raise
    return listener


def _private_dir(directory: Path, owner: OvsOwner) -> None:
    """`directory` exists, is a real directory of ours, and no one but us (and the OVS user's group) enters it."""
    parent = os.stat(directory.parent)
    if parent.st_mode & stat.S_IWOTH and not parent.st_mode & stat.S_ISVTX:
        raise ControllerSocketError(f"{directory.parent} is writable by every user; the controller socket cannot live there")
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise ControllerSocketError(f"{directory} is not a directory")
    if st.st_uid != os.geteuid():
        raise ControllerSocketError(f"{directory} belongs to uid {st.st_uid}, not to us; remove it")
    if owner.is_root:
        os.chmod(directory, 0o700)
    else:
        _share_with_group(directory, owner.gid)
        os.chmod(directory, 0o750)


def _share_with_group(path: Path, gid: int) -> None:
    if os.lstat(path).st_gid == gid:
        return
    try:
        os.chown(path, -1, gid)
    except PermissionError as exc:
        raise ControllerSocketError(
            f"cannot give {path} to group {gid} (ovs-vswitchd runs as another user): {exc.strerror}; "
            "the daemon needs CAP_CHOWN for that (add it to the unit's CapabilityBoundingSet)"
        ) from exc


def peer_credentials(sock: socket.socket) -> PeerCredentials:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return PeerCredentials(pid, uid, gid)


def admission_refusal(peer: PeerCredentials, vswitchd_pid: int | None, owner: OvsOwner) -> str | None:
    """None if `peer` may speak OpenFlow to us (ovs-vswitchd, root or the OVS user), else why not."""
    if peer.pid == vswitchd_pid or peer.uid == 0 or peer.uid == owner.uid:
        return None
    return f"pid {peer.pid} uid {peer.uid} is neither ovs-vswitchd (pid {vswitchd_pid}), root nor the OVS user (uid {owner.uid})"


class SwitchAdmission:
    """At accept: who connected (SO_PEERCRED), against the vswitchd pidfile in `run_dir` and its owner."""

    def __init__(self, run_dir: Path, owner: OvsOwner) -> None:
        self.run_dir = run_dir
        self.owner = owner
        self.refused = 0
        self._log = LogLimiter[int](REFUSAL_LOG_INTERVAL)

    def vswitchd_pid(self) -> int | None:
        try:
            text = (self.run_dir / "ovs-vswitchd.pid").read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def __call__(self, conn: socket.socket) -> bool:
        """Whether to keep `conn`; a refused one is counted and logged (once per uid per interval)."""
        try:
            peer = peer_credentials(conn)
        except OSError as exc:
            reason: str | None = f"cannot read its credentials: {exc}"
            uid = -1
        else:
            reason = admission_refusal(peer, self.vswitchd_pid(), self.owner)
            uid = peer.uid
        if reason is None:
            return True
        self.refused += 1
        if self._log.should_log(uid, time.monotonic()):
            log.warning("controller connection refused: %s (refused so far: %d)", reason, self.refused)
        return False
