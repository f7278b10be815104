"""Files that hold secrets, and the config file itself: bounded reads, owner and mode checked.

Like ssh, the daemon refuses a secret that other local users can read: a
`password_file` (XMPP's or a TURN server's), a client key, an overlay trust
key, or a config file with passwords or TURN secrets written inline must
belong to the user evio runs as (or root) and must not be accessible by group
or others. A config file anyone else can write is refused whatever it holds:
it decides what the daemon (root) runs. `evio run` refuses to start on any of
these and `evio config check` reports them, both through `secret_problems`.
Trust anchors (the overlay CA, the lists beside it, the node's certificate, a
server CA) are public but decide whom the node trusts: like the config file,
they and the directories of every file checked must not be writable by group
or others (a writable directory lets its files be replaced).

Reads are bounded and only of regular files: `password_file: /dev/zero` or a
FIFO is refused instead of read until memory runs out or forever.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evio.config.model import Config

MAX_SECRET_BYTES = 4096  # a password or key file larger than this is not one
MAX_CONFIG_BYTES = 1 << 20


class FileCheckError(ValueError):
    """A file evio refuses to read; the message names the file and the fix."""


def read_regular(path: Path, limit: int) -> bytes:
    """At most `limit` bytes of the regular file `path` (FileCheckError for anything else, OSError as is)."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just after.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise FileCheckError(f"{path}: is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise FileCheckError(f"{path}: not a regular file")
        data = os.read(fd, limit + 1) if st.st_size <= limit else b""
        if st.st_size > limit or len(data) > limit:
            raise FileCheckError(f"{path}: larger than {limit} bytes")
        return data
    finally:
        os.close(fd)


def read_password_file(path: Path) -> str:
    """The password in `path`: its first line, without the line ending.

    At most MAX_SECRET_BYTES of a regular file are read (FileCheckError otherwise).
    """
    return read_regular(path, MAX_SECRET_BYTES).decode("utf-8").split("\n", 1)[0].rstrip("\r")


def secret_file_problem(path: Path, euid: int | None = None) -> str | None:
    """Why evio refuses to take a secret from `path` (owner, mode, kind), or None."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path}: cannot read: {exc.strerror or exc}"
    if not stat.S_ISREG(st.st_mode):
        return f"{path}: not a regular file"
    return _owner_problem(path, st, euid) or _private_problem(path, st, "holds a secret")


def config_file_problem(path: Path, has_inline_secrets: bool, euid: int | None = None) -> str | None:
    """Why evio refuses to run from the config file `path`, or None."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path}: cannot read: {exc.strerror or exc}"
    owner = _owner_problem(path, st, euid)
    if owner:
        return owner
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"{path}: permissions {_mode(st)} let group or others change it, and it decides what evio runs as "
            f"root; fix: chmod go-w {path}"
        )
    if has_inline_secrets:
        return _private_problem(
            path, st, "holds passwords or TURN secrets inline", alternative=" (or move them to password_file)"
        )
    return None


def secret_problems(config_path: Path, config: Config, euid: int | None = None) -> list[str]:
    """Every refused secret of a loaded config: the config file itself, password files, private keys."""
    inline = any(
        ov.signal.password is not None or any(t.password or t.rest_secret for t in ov.nat_traversal.turn)
        for ov in config.overlays.values()
    )
    problems = [p for p in [config_file_problem(config_path, inline, euid)] if p]
    seen: set[Path] = set()
    for secret in _secret_files(config):
        if secret not in seen:
            seen.add(secret)
            if problem := secret_file_problem(secret, euid):
                problems.append(problem)
    for anchor in _anchor_files(config):
        if anchor not in seen:
            seen.add(anchor)
            if problem := anchor_file_problem(anchor, euid):
                problems.append(problem)
    for directory in dict.fromkeys(path.parent for path in [config_path, *seen]):
        if problem := directory_problem(directory, euid):
            problems.append(problem)
    return problems


def anchor_file_problem(path: Path, euid: int | None = None) -> str | None:
    """Why evio refuses to trust what `path` holds (owner, who may change it), or None; a missing file is for
    the loader to report."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path}: cannot read: {exc.strerror or exc}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"{path}: permissions {_mode(st)} let group or others change it, and it decides whom evio trusts; "
            f"fix: chmod go-w {path}"
        )
    return _owner_problem(path, st, euid)


def directory_problem(path: Path, euid: int | None = None) -> str | None:
    """Why a directory holding the config, a secret or a trust anchor lets others replace them, or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None  # its files were reported
    if st.st_mode & stat.S_ISVTX and st.st_uid == 0:
        return None  # like /tmp: others may add files but not replace ours
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"{path}: permissions {_mode(st)} let group or others replace the files evio reads from it; "
            f"fix: chmod go-w {path}"
        )
    return _owner_problem(path, st, euid)


def _secret_files(config: Config) -> list[Path]:
    """The files a config names that hold secrets: password files and private keys."""
    files: list[Path | None] = []
    for ov in config.overlays.values():
        files.extend((ov.signal.password_file, ov.signal.client_key))
        files.extend(turn.password_file for turn in ov.nat_traversal.turn)
        if ov.trust is not None:
            files.append(ov.trust.key_file)
    return [path for path in files if path is not None]


def _anchor_files(config: Config) -> list[Path]:
    """The public files a config names that decide whom the node trusts."""
    files: list[Path | None] = []
    for ov in config.overlays.values():
        files.append(ov.signal.ca_file)
        if ov.trust is not None:
            # the lists the daemon keeps beside the CA (evio.node.plan's REVOCATION_FILE and MEMBER_FILE)
            directory = ov.trust.ca_file.parent
            files.extend((ov.trust.ca_file, ov.trust.cert_file, directory / "revoked.json",
                          directory / "member-list.json"))  # fmt: skip
    return [path for path in files if path is not None]


def _owner_problem(path: Path, st: os.stat_result, euid: int | None) -> str | None:
    me = os.geteuid() if euid is None else euid
    if st.st_uid in (me, 0):
        return None
    return (
        f"{path}: owned by uid {st.st_uid}, not by the user evio runs as (uid {me}) or root; "
        f"fix: chown {me} {path}"
    )


def _private_problem(path: Path, st: os.stat_result, why: str, alternative: str = "") -> str | None:
    if not st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return None
    return (
        f"{path}: permissions {_mode(st)} are too open: it {why} and must not be accessible by group or "
        f"others; fix: chmod 600 {path}{alternative}"
    )


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"
