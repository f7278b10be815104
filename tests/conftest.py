"""Suite-wide guards.

- A run that leaves an evio namespace behind fails, even if every test passed.
  Each tier cleans up in its own fixtures; this catches the hole none of them
  saw. Only namespaces with evio's prefixes that appeared during the run count.
- In CI (`CI` set, as root, after scripts/bootstrap) every test can run, so a
  skip there means a missing install or privilege: it fails instead of hiding.
- `loopback_only`: aioice on loopback, for tests of real tunnels in one process (any tier).
- Logger levels come back after every test: `configure_logging` at -vv sets slixmpp and the other chatty libraries
  to DEBUG, and a test that forgot them made later slixmpp tests log every stanza (minutes, megabytes of output).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

_PREFIX = "ev"


def _evio_namespaces() -> set[str]:
    if shutil.which("ip") is None:
        return set()
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith(_PREFIX)}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BEFORE] = _evio_namespaces()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    leaked = _evio_namespaces() - session.config.stash.get(_BEFORE, set())
    if leaked:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"namespaces left behind by this run: {' '.join(sorted(leaked))}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[set[str]]()


@pytest.fixture(autouse=True)
def _logger_levels() -> Iterator[None]:
    from evio.node.logs import CHATTY_LIBRARIES

    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in CHATTY_LIBRARIES)]
    saved = [logger.level for logger in loggers]
    yield
    for logger, level in zip(loggers, saved, strict=True):
        logger.setLevel(level)


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """aioice gathers host candidates from every interface but 127.0.0.1: have it use 127.0.0.2, still
    loopback, so tunnels in one process need neither root nor a network."""
    import aioice.ice  # here, not at the top: the guards above need no tunnel library

    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda use_ipv4, use_ipv6: ["127.0.0.2"])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every test must run: {reason}"
