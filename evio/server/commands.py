"""Running the servers' admin tools (prosodyctl, ejabberdctl, turnadmin): one place for timeouts and errors."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence

TIMEOUT = 60.0  # ejabberdctl starts an Erlang node per command: about 1 s, far more on a loaded host


class ServerAdminError(Exception):
    """An admin command failed: which command, and what it said."""

    def __init__(self, command: Sequence[str], output: str) -> None:
        self.command = list(command)
        self.output = output.strip()
        super().__init__(f"{shlex.join(self.command)}: {self.output or 'failed'}")


def run_command(
    argv: Sequence[str], *, stdin: str | None = None, timeout: float = TIMEOUT, secret: str | None = None
) -> str:
    """Run `argv`, return its stdout; raise ServerAdminError on a non-zero exit, a timeout or a missing tool.

    `stdin` carries what must not appear on a command line (passwords: /proc/*/cmdline is world-readable);
    a `secret` that must be an argument is shown as ``***`` in the error.
    """
    shown = [("***" if secret and a == secret else a) for a in argv]
    try:
        done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise ServerAdminError(shown, f"{argv[0]} not found: is the package installed?") from None
    except subprocess.TimeoutExpired:
        raise ServerAdminError(shown, f"no answer within {timeout:.0f} s") from None
    if done.returncode != 0:
        said = f"{done.stdout.strip()} {done.stderr.strip()}".strip()
        if secret:
            said = said.replace(secret, "***")
        raise ServerAdminError(shown, f"exit {done.returncode}: {said}")
    return done.stdout
