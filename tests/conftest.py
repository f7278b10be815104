"""Suite-wide guards.

- A run that leaves an evio namespace behind fails, even if every test passed.
  Each tier cleans up in its own fixtures; this catches the hole none of them
  saw. Only namespaces with evio's prefixes that appeared during the run count.
- In CI (`CI` set, as root, after scripts/bootstrap) every test can run, so a
  skip there means a missing install or privilege: it fails instead of hiding.
"""

from __future__ import annotations

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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every test must run: {reason}"
