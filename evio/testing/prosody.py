"""A prosody of a test's own on 127.0.0.1, with its admin shell: membership changed as an admin would.

Host ``overlay.test``, plaintext c2s on loopback (tests only), shared roster
groups from a groups file (mod_groups), accounts registered with
``prosodyctl register`` (password ``pw-<user>``). `LocalProsody.shell` runs a
``prosodyctl shell`` command against the running server (delete an account,
reload the groups, close a session). Needs root (prosody refuses otherwise
without ``run_as_root``) and the prosody package.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from evio.node.sdn import free_tcp_port
from evio.testing.waiting import tcp_listening, wait_until_blocking

DOMAIN = "overlay.test"


@dataclass
class LocalProsody:
    directory: Path
    port: int

    @property
    def config(self) -> Path:
        return self.directory / "prosody.cfg.lua"

    @property
    def groups_file(self) -> Path:
        return self.directory / "groups.txt"

    def ctl(self, *args: str) -> str:
        done = subprocess.run(
            ["prosodyctl", "--config", str(self.config), *args], capture_output=True, text=True, timeout=30
        )
        if done.returncode != 0:
            raise RuntimeError(f"prosodyctl {' '.join(args)}: {done.stdout}{done.stderr}")
        return done.stdout

    def shell(self, command: str) -> str:
        """One admin shell command on the running server, e.g. ``user:delete('n3@overlay.test')``."""
        out = self.ctl("shell", command)
        if "OK" not in out:
            raise RuntimeError(f"prosodyctl shell {command!r}: {out}")
        return out

    def set_groups(self, groups: Mapping[str, list[str]]) -> None:
        """Rewrite the groups file and reload mod_groups (online sessions are not told: rosters are cached)."""
        self.groups_file.write_text(_groups_text(groups))
        self.shell(f"module:reload('groups', '{DOMAIN}')")


def _groups_text(groups: Mapping[str, list[str]]) -> str:
    return "".join(f"[{name}]\n" + "".join(f"{jid}\n" for jid in members) for name, members in groups.items())


@contextmanager
def local_prosody(directory: Path, accounts: list[str], groups: Mapping[str, list[str]]) -> Iterator[LocalProsody]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "data").mkdir()
    server = LocalProsody(directory, free_tcp_port())
    server.groups_file.write_text(_groups_text(groups))
    write_config(directory, server.port, [
        "c2s_require_encryption = false",
        "allow_unencrypted_plain_auth = true",
        f'admin_socket = "{directory}/data/prosody.sock"',
        'modules_enabled = { "roster"; "saslauth"; "disco"; "ping"; "groups"; "admin_socket"; "admin_shell" }',
    ])  # fmt: skip
    for user in accounts:
        server.ctl("register", user, DOMAIN, f"pw-{user}")
    with running_prosody(server.config, server.port):
        yield server


def write_config(directory: Path, port: int, settings: Sequence[str]) -> Path:
    """prosody.cfg.lua in `directory` for a prosody on 127.0.0.1:`port` alone (no s2s, no direct TLS unless
    `settings` say), host ``overlay.test``, its data, logs and groups file (groups.txt) in `directory`.
    Each of `settings` replaces the base line of its option: prosody refuses an option set twice."""
    base = [
        "run_as_root = true",
        f'pidfile = "{directory}/prosody.pid"',
        f'data_path = "{directory}/data"',
        f'log = {{ info = "{directory}/prosody.log"; error = "{directory}/prosody.err" }}',
        'interfaces = { "127.0.0.1" }',
        f"c2s_ports = {{ {port} }}",
        "c2s_direct_tls_ports = {}",
        "s2s_ports = {}",
        "network_settings = { nagle = false }",
        f'groups_file = "{directory}/groups.txt"',
    ]
    overridden = {line.split("=", 1)[0].strip() for line in settings}
    lines = [line for line in base if line.split("=", 1)[0].strip() not in overridden]
    config = directory / "prosody.cfg.lua"
    config.write_text("\n".join([*lines, *settings, f'VirtualHost "{DOMAIN}"', ""]))
    return config


@contextmanager
def running_prosody(config: Path, port: int) -> Iterator[None]:
    """Prosody in the foreground with `config` until the block ends; entered once it listens on `port`.

    Its output goes to prosody.out beside the config, and is shown if it exits before listening.
    """
    out_path = config.parent / "prosody.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(["prosody", "--config", str(config), "-F"], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until_blocking(lambda: tcp_listening(port) or proc.poll() is not None, 10, what="prosody listening")
        if proc.poll() is not None:
            raise RuntimeError(f"prosody did not start: {out_path.read_text()}")
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
