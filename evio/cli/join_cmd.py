"""`evio join TOKEN`: a node joins an overlay with the token `evio member add` printed.

    evio join evio1.eJy...        # or: evio join --token-file FILE, or the token on stdin with "-"

In order: check the token (well formed, signed by its overlay CA, not expired),
that we are root, that Open vSwitch runs; only then write the files
(`evio.server.join`), check the config with the daemon's own loader, spend the
token (log in to the XMPP server with its password and change that password to
a fresh one, which only the node's `xmpp.password` holds: decision 0083), and
start the service (systemd) or print the one command that starts the daemon.
With systemd it waits until the node is signed in and linked. Any refusal before
the files are written changes nothing; a failure while writing or spending the
token removes what this run wrote and puts back what was there, so a token used
a second time fails at its login with nothing changed.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evio.server.join import CONFIG_DIR, STATE_DIR, NodeFile, config_path, joined_overlay, node_files
from evio.server.token import JoinToken, TokenError, decode

if TYPE_CHECKING:
    from evio.signal.client import SignalSettings

EXIT_OK = 0
EXIT_FAILED = 1
SYSTEMD_RUN_DIR = Path("/run/systemd/system")  # sd_booted(): present only when systemd is PID 1
SERVICE = "evio.service"
DEFAULT_WAIT = 30.0


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "join", help="join an overlay with a token from `evio member add` (writes /etc/evio, starts the service)"
    )
    parser.add_argument("token", nargs="?", metavar="TOKEN", help='the join token ("-": read it from stdin)')
    parser.add_argument("--token-file", type=Path, metavar="FILE", help="read the token from FILE")
    parser.add_argument("--ca-fingerprint", metavar="SHA256",
                        help="refuse a token whose overlay CA is not this one (evio member add prints it)")  # fmt: skip
    parser.add_argument("--force", action="store_true", help="replace a config this node already has")
    parser.add_argument("--no-start", action="store_true", help="write the files only; print how to start")
    parser.add_argument("--wait", type=float, default=DEFAULT_WAIT, metavar="S",
                        help=f"seconds to wait for the first link after starting (default {DEFAULT_WAIT:g})")  # fmt: skip
    parser.set_defaults(handler=join_command)


def _fail(message: str) -> int:
    print(f"evio join: {message}", file=sys.stderr)
    return EXIT_FAILED


def _read_token(args: argparse.Namespace) -> str:
    if args.token_file is not None:
        if args.token is not None:
            raise TokenError("give the token or --token-file, not both")
        try:
            return args.token_file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenError(f"cannot read {args.token_file}: {exc}") from None
    if args.token is None:
        raise TokenError("no token: evio join TOKEN (evio member add on the server host prints one)")
    if args.token == "-":
        return sys.stdin.read()
    return str(args.token)


def join_command(args: argparse.Namespace) -> int:
    try:
        token = decode(_read_token(args), datetime.datetime.now(datetime.UTC), args.ca_fingerprint)
    except TokenError as exc:
        return _fail(str(exc))
    if os.geteuid() != 0:
        return _fail("must run as root (it writes /etc/evio and starts the evio service)")
    problem = _existing_config_problem(token, args.force)
    if problem is not None:
        return _fail(problem)
    problems = _open_vswitch_problems()
    if problems:
        for line in problems:
            print(f"evio join: {line}", file=sys.stderr)
        print("evio join: nothing was written; run evio join again once that is fixed", file=sys.stderr)
        return EXIT_FAILED
    print(f"token: {token.node_name} in overlay {token.overlay}, node id {token.node_id:032x}, address {token.address},"
          f" signaling {token.jid} at {token.xmpp_server}:{token.xmpp_port}")  # fmt: skip
    # The node's own XMPP password, written in place of the token's, which dies when this one takes over.
    fresh = dataclasses.replace(token, xmpp_password=secrets.token_urlsafe(24))
    files = node_files(fresh, CONFIG_DIR, STATE_DIR)
    try:
        written = _write_files(files, lambda: _spend_token(token, fresh.xmpp_password))
    except TokenSpent as exc:
        return _fail(f"{exc}; nothing was written")
    except (OSError, ValueError) as exc:
        return _fail(f"could not write the node's files, none kept: {exc}")
    for path, mode in written:
        print(f"wrote {path} ({mode:04o})")
    command = f"evio run --config {config_path(CONFIG_DIR)}"
    if args.no_start:
        print(f"start the daemon with: {command}  (or: systemctl enable --now {SERVICE})")
        return EXIT_OK
    if not SYSTEMD_RUN_DIR.is_dir():
        print(f"no systemd on this host: start the daemon with\n  {command}")
        return EXIT_OK
    return _start_service(token, args.wait)


def _existing_config_problem(token: JoinToken, force: bool) -> str | None:
    path = config_path(CONFIG_DIR)
    if not path.exists() or force:
        return None
    try:
        existing = joined_overlay(json.loads(path.read_text()))
    except (OSError, ValueError, RecursionError):
        existing = None
    if existing == (token.overlay, token.jid):
        return f"{path} already joins overlay {token.overlay} as {token.jid}: pass --force to write it again"
    held = f"overlay {existing[0]} as {existing[1]}" if existing else "a config of its own"
    return f"{path} exists ({held}); this node joins one overlay by token: pass --force to replace it"


def _open_vswitch_problems() -> list[str]:
    from evio.node.preflight import LinuxProbe, preflight

    return [p.reason for p in preflight(LinuxProbe()) if p.what in ("program", "ovsdb", "vswitchd", "tun")]


class TokenSpent(Exception):
    """The token's password did not log in, or could not be changed: the join is refused, nothing written."""


def _spend_token(token: JoinToken, new_password: str) -> None:
    """Make `new_password` the account's in place of the token's (decision 0083): the token is good for one join.
    Runs once the files are staged (the XMPP server's CA among them), before the config takes its place."""
    from evio.signal.client import SignalSettings
    from evio.signal.errors import PasswordChangeError

    settings = SignalSettings(
        jid=token.jid, server=token.xmpp_server, port=token.xmpp_port, memberships={token.overlay: token.node_id},
        password=token.xmpp_password, ca_file=CONFIG_DIR / token.overlay / "xmpp-ca.crt", resource="evio-join",
    )  # fmt: skip
    try:
        _change_password(settings, new_password)
    except PasswordChangeError as exc:
        if exc.refused:
            raise TokenSpent(f"{token.xmpp_server}:{token.xmpp_port} refused the token's login as {token.jid}: a "
                             "token is good for one join, and this one was used already (or the member was "
                             "removed); ask the operator for a new one (evio member add)") from None  # fmt: skip
        raise TokenSpent(f"could not change the password of {token.jid} at {token.xmpp_server}:{token.xmpp_port}"
                         f" ({exc}); run evio join again once the XMPP server answers") from None  # fmt: skip


def _change_password(settings: SignalSettings, new_password: str) -> None:
    """The XMPP server's in-band change (`SignalClient.change_password`); unit tests fake the server here."""
    from evio.signal.client import SignalClient

    asyncio.run(SignalClient(settings).change_password(new_password))


def _write_files(files: list[NodeFile], before_commit: Callable[[], None] = lambda: None) -> list[tuple[Path, int]]:
    """Secrets first, config last and only once the daemon's loader takes it and `before_commit` returned. A
    file already there is set aside first; on any failure what we wrote is removed and what was there is put
    back, so a refused join loses nothing (with --force, the node's old key and certificates)."""
    from evio.config import ConfigError, load_config
    from evio.config.secrets import secret_problems

    made: list[Path] = []
    made_dirs: list[Path] = []
    set_aside: list[tuple[Path, Path]] = []
    try:
        for file in files[:-1]:
            _make_dir(file.path.parent, made_dirs)
            _set_aside(file.path, set_aside)
            _write(file.path, file.content, file.mode)
            made.append(file.path)
        config = files[-1]
        _make_dir(config.path.parent, made_dirs)
        staged = config.path.with_name(f".{config.path.name}.join")
        staged.unlink(missing_ok=True)  # left by a join that was killed: ours, never anyone's config
        _write(staged, config.content, config.mode)
        made.append(staged)
        try:
            loaded = load_config(staged)
        except ConfigError as exc:
            raise ValueError(f"the config made from the token is refused by this evio: {exc}") from None
        problems = secret_problems(staged, loaded)
        if problems:
            raise ValueError("; ".join(problems))
        before_commit()
        os.replace(staged, config.path)
        made[-1] = config.path
    except BaseException:
        for path in reversed(made):
            path.unlink(missing_ok=True)
        for original, aside in reversed(set_aside):
            os.replace(aside, original)
        for directory in reversed(made_dirs):
            shutil.rmtree(directory, ignore_errors=True)
        raise
    for _, aside in set_aside:
        aside.unlink(missing_ok=True)
    return [(f.path, f.mode) for f in files]


def _set_aside(path: Path, set_aside: list[tuple[Path, Path]]) -> None:
    if path.exists() or path.is_symlink():
        aside = path.with_name(f".{path.name}.join-old")
        os.replace(path, aside)
        set_aside.append((path, aside))


def _make_dir(path: Path, made: list[Path]) -> None:
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=0o750)
        made.append(directory)


def _write(path: Path, content: str, mode: int) -> None:
    # O_EXCL: the path was cleared first, so anything found there now (a link planted meanwhile) is refused
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, content.encode())
        os.fchmod(fd, mode)  # the umask may have narrowed it
    finally:
        os.close(fd)


def _start_service(token: JoinToken, wait: float) -> int:
    for argv in (["systemctl", "enable", SERVICE], ["systemctl", "restart", SERVICE]):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return _fail(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()}")
    print(f"started {SERVICE}; waiting up to {wait:g} s for the first link")
    return _wait_linked(token, wait)


def _wait_linked(token: JoinToken, wait: float) -> int:
    from evio.node.control_client import ControlError, control_socket_for, fetch_status

    deadline = time.monotonic() + wait
    last = "the daemon has not answered yet"
    while time.monotonic() < deadline:
        try:
            overlay = fetch_status(control_socket_for(STATE_DIR))["overlays"][token.overlay]
        except (ControlError, KeyError, TypeError) as exc:
            last = f"the daemon has not answered yet ({exc})"
        else:
            signal = overlay.get("signal") or {}
            links = [link for link in overlay.get("links", []) if link.get("state") == "up"]
            if links:
                print(f"linked: {len(links)} link(s) up, signed in as {signal.get('jid')}; see evio status")
                return EXIT_OK
            if signal.get("connected") and not overlay.get("peers"):
                print(f"signed in as {signal.get('jid')}; no other member is online yet: links come as they do")
                return EXIT_OK
            last = "signed in, no link up yet" if signal.get("connected") else "not signed in yet"
            error = signal.get("last_error")
            if isinstance(error, dict) and error.get("message"):
                last += f" (last error: {error['message']})"
        time.sleep(0.25)
    return _fail(f"no link within {wait:g} s: {last}; see journalctl -u {SERVICE} and evio status")
