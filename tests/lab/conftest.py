"""Fixtures for the paper's scenarios on whole overlays of full nodes (the `tests/lab` tier).

- The tests are marked `lab` (root, namespaces, prosody, coturn, OVS, daemons; minutes each), apart from
  `integration`, so a tier is chosen with `-m`; they are skipped, with the reason, only when not root;
  CI runs as root, so there they run.
- `lab_factory` (per test) and `module_lab_factory` (one lab shared by a module's tests) bring labs up
  with fresh names, as in tests/integration, and always take them down.
- `figures.record(Figure(...))` keeps a measured figure beside the paper's. At the end of the run
  every figure is printed in the terminal summary (a plain `pytest tests` shows them) and, if
  EVIO_SCENARIO_RESULTS names a file, appended to it as JSON lines.
- When a test fails, the last lines of its labs' daemon logs are printed with the failure and, if
  EVIO_LAB_LOGS names a directory, the whole logs and each daemon's status are copied under it.

n is 16, or EVIO_SCENARIO_NODES.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from node_image import BuiltImage, build_image
from scenario_lab import FigureBook, daemon_log_tails, keep_lab_logs

from evio.lab.lab import Lab
from evio.testing.labs import LabFactory, unique_lab_name
from evio.testing.scenarios import Figure, figure_lines

LOG_LINES_ON_FAILURE = 40

_FIGURES = pytest.StashKey[list[Figure]]()
_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
_MODULE_LABS = pytest.StashKey["_Labs"]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("lab") and os.geteuid() != 0:
        pytest.skip("lab scenario: needs root (network namespaces, nftables, prosody, coturn, Open vSwitch)")


# -- labs ----------------------------------------------------------------------------------------


class _Labs:
    """Labs made for a test or a module: fresh names, always taken down, logs shown on a failure."""

    def __init__(self) -> None:
        self.made: list[Lab] = []
        self._names: list[str] = []

    def make(self, **kwargs: Any) -> Lab:
        name = kwargs.pop("name", None) or unique_lab_name()
        self._names.append(name)  # before up: a half-built lab is removed too
        lab = Lab.up(name, **kwargs)
        self.made.append(lab)
        return lab

    def print_logs(self, test: str) -> None:
        for lab in self.made:
            print(daemon_log_tails(lab, LOG_LINES_ON_FAILURE))
            keep = os.environ.get("EVIO_LAB_LOGS")
            if keep:
                print(f"whole logs of lab {lab.name}: {keep_lab_logs(lab, Path(keep) / _safe(test))}")

    def remove_all(self) -> None:
        for name in self._names:
            Lab.down(name)
        self.made.clear()
        self._names.clear()


def _safe(test: str) -> str:
    """A test id as a directory name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", test)


def _failed(item: pytest.Item, when: str) -> bool:
    report = item.stash.get(_REPORTS, {}).get(when)
    return report is not None and report.failed


@pytest.fixture
def lab_factory(request: pytest.FixtureRequest) -> Iterator[LabFactory]:
    labs = _Labs()
    try:
        yield labs.make
    finally:
        if _failed(request.node, "call"):
            labs.print_logs(request.node.nodeid)
        labs.remove_all()


@pytest.fixture(scope="module")
def module_lab_factory(request: pytest.FixtureRequest) -> Iterator[LabFactory]:
    labs = _Labs()
    request.node.stash[_MODULE_LABS] = labs  # the node is the module here
    try:
        yield labs.make
    finally:
        labs.remove_all()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


@pytest.fixture(autouse=True)
def module_lab_logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    """A failed test's module lab is still up here: print its daemons' logs with the failure."""
    yield
    module = request.node.getparent(pytest.Module)
    labs = module.stash.get(_MODULE_LABS, None) if module is not None else None
    if labs is not None and _failed(request.node, "call"):
        labs.print_logs(request.node.nodeid)


# -- the node image (docker/) ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def node_image(request: pytest.FixtureRequest) -> BuiltImage:
    """docker/build-image, once per run (cached across runs under EVIO_IMAGE_CACHE)."""
    if os.geteuid() != 0:
        pytest.skip("node image: needs root (debootstrap, rootful podman)")
    image = build_image()
    image.remove_exited_test_containers()
    request.config.stash[_IMAGE_BUILD] = image.seconds
    return image


_IMAGE_BUILD = pytest.StashKey[float]()


# -- figures -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def figures(request: pytest.FixtureRequest) -> FigureBook:
    return FigureBook(request.config.stash.setdefault(_FIGURES, []))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    built = config.stash.get(_IMAGE_BUILD, None)
    if built is not None:
        terminalreporter.write_line(f"node image: docker/build-image took {built:.1f} s in this run")
    recorded = config.stash.get(_FIGURES, [])
    if not recorded:
        return
    terminalreporter.write_sep("=", "evio lab scenarios: measured beside the paper")
    for line in figure_lines(recorded):
        terminalreporter.write_line(line)
