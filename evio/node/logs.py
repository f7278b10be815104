"""Where the daemon's log goes: stderr, a file, or journald (config `logging`)."""

from __future__ import annotations

import logging
import logging.handlers
import re
import sys

from evio.config.model import LoggingConfig
from evio.node.errors import DependencyError

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries that log every packet or state change at INFO; they speak at WARNING unless we debug.
CHATTY_LIBRARIES = ("aioice", "slixmpp", "os_ken", "pyroute2")


# What must never reach a log, even at -vv, where slixmpp logs every stanza it sends and receives:
# SASL exchanges (PLAIN carries the password in base64; SCRAM proofs allow offline guessing) and
# the ICE passwords of tunnel offers, in evio payloads (JSON, possibly XML-escaped).
_SECRETS = (
    (re.compile(r"(<(auth|response|challenge|success)\b[^>]*>)[^<]+(</\2>)"), r"\1[redacted]\3"),
    # XEP-0077's password change (`evio join`, decision 0083), with or without a namespace prefix
    (re.compile(r"(<((?:[\w.-]+:)?password)\b[^>]*>)[^<]+(</\2>)"), r"\1[redacted]\3"),
    (re.compile(r'((?:"|&quot;)(?:pwd|password|rest_secret|secret)(?:"|&quot;)\s*:\s*(?:"|&quot;))(?:(?!"|&quot;).)*'),
     r"\1[redacted]"),
)


def redact(text: str) -> str:
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class SecretRedactor(logging.Filter):
    """Rewrites every record a handler emits so that no credential in it is written (see `_SECRETS`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def journal_handler() -> logging.Handler:
    """A handler writing to journald, with structured priority; needs python3-systemd."""
    try:
        from systemd.journal import JournalHandler
    except ImportError as exc:
        raise DependencyError(
            "logging.destination is journald but the systemd Python module is missing "
            "(install python3-systemd, or `pip install systemd-python` in the daemon's environment), "
            "or log to stderr: under systemd, stderr goes to the journal anyway"
        ) from exc
    handler: logging.Handler = JournalHandler(SYSLOG_IDENTIFIER="evio")
    return handler


def configure_logging(config: LoggingConfig, verbose: int = 0) -> None:
    """Replace the root logger's handlers with the one the config asks for.

    `verbose` (from -v) lowers the level below the config's, never raises it.
    """
    level = logging.getLevelName(config.level.upper())
    if verbose:
        level = min(level, logging.INFO if verbose == 1 else logging.DEBUG)
    handler: logging.Handler
    if config.destination == "journald":
        handler = journal_handler()
    elif config.destination == "file":
        assert config.file is not None  # the loader requires it
        config.file.parent.mkdir(parents=True, exist_ok=True)
        # Reopens the file when logrotate moves it away.
        handler = logging.handlers.WatchedFileHandler(config.file, encoding="utf-8")
        handler.setFormatter(logging.Formatter(FORMAT))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(SecretRedactor())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level)
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(level if level <= logging.DEBUG else max(level, logging.WARNING))

