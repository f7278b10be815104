"""Fixtures for integration tests: root, real namespaces, real prosody and coturn.

- Tests marked `integration` are skipped (with the reason) only when not root;
  CI runs as root, so there they always run.
- `lab_factory(nodes=..., nat=..., ...)` brings up a lab with a fresh name and
  always tears it down after the test, whatever happened.
- `lab` is a ready 3-node lab with mixed NAT (eim, symmetric, none).

Lab names here are "t" + 4 random base-36 characters, so parallel test runs
and a user's own `evio lab` (default name "lab") never collide.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from evio.lab.lab import Lab
from evio.testing.labs import LabFactory, unique_lab_name


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("integration") and os.geteuid() != 0:
        pytest.skip("integration test: needs root (network namespaces, nftables, prosody, coturn)")


@pytest.fixture
def lab_factory() -> Iterator[LabFactory]:
    made: list[str] = []

    def make(**kwargs: Any) -> Lab:
        name = kwargs.pop("name", None) or unique_lab_name()
        made.append(name)
        return Lab.up(name, **kwargs)

    try:
        yield make
    finally:
        for name in made:
            Lab.down(name)  # also removes a half-built lab


@pytest.fixture
def lab(lab_factory: LabFactory) -> Lab:
    return lab_factory(nodes=3, nat="mixed")
