"""Errors of the lab. Everything the lab raises on purpose is a LabError."""

from __future__ import annotations


class LabError(Exception):
    """Base of the lab's errors; the CLI prints its message and exits non-zero."""


class LabPlanError(LabError, ValueError):
    """Bad lab parameters: name, node count, NAT kind, overlay id, domain."""


class LabPermissionError(LabError):
    """Not root, or a required system tool is missing."""


class LabExistsError(LabError):
    """A lab of that name (or something with its prefix) already exists."""


class LabNotFoundError(LabError):
    """No lab of that name is up."""


class LabDaemonsRunningError(LabError):
    """A tool that needs the nodes to itself (their accounts, TAPs, addresses) while their daemons run."""


class LabStateError(LabError):
    """The lab's state file is missing, unreadable or from another version."""


class LabCommandError(LabError):
    """A system command (ip, nft, tc, prosodyctl, ...) failed."""

    def __init__(self, argv: list[str], returncode: int, stderr: str, stdin: str | None = None) -> None:
        detail = stderr.strip() or "(no output)"
        super().__init__(f"{' '.join(argv)} exited with {returncode}: {detail}")
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr
        self.stdin = stdin


class LabServiceError(LabError):
    """prosody or coturn did not start (the message carries the end of its log)."""
