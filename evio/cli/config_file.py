"""Reading the config file for a command: the one place its errors are worded for a person."""

from __future__ import annotations

import sys

from evio.config.loader import ConfigError, ConfigFileError, load_config
from evio.config.model import Config

EXIT_INVALID = 1
EXIT_UNREADABLE = 2


def load_or_report(name: str, prefix: str = "", closing: str | None = None) -> Config | int:
    """The config in `name`, or, after printing every problem to stderr, the exit status to return.

    Each problem is one line `PREFIX FILE: $.json.path: reason` (`FILE:LINE:COL` for JSON
    that does not parse). `closing` ends an invalid file's report; by default it counts the problems.
    """
    try:
        return load_config(name)
    except ConfigFileError as exc:
        where = f"{name}:{exc.location}" if exc.location else name
        print(f"{prefix}{where}: {exc.reason}", file=sys.stderr)
        return EXIT_UNREADABLE
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{prefix}{name}: {problem}", file=sys.stderr)
        print(f"{prefix}{name}: {closing or problem_count(len(exc.problems))}", file=sys.stderr)
        return EXIT_INVALID


def problem_count(count: int) -> str:
    return f"invalid ({count} problem{'s' if count != 1 else ''})"
