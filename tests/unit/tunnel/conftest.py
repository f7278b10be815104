"""The native data path for the tunnel tests: required where it should be built, and each data path in turn."""

from __future__ import annotations

import os
import shutil

import pytest

from evio.tunnel import native


@pytest.fixture
def native_built() -> None:
    """evio_native is importable: skipped where there is no cargo to build it, failed where there is."""
    if not native.available():
        if shutil.which("cargo") or os.path.exists(os.path.expanduser("~/.cargo/bin/cargo")):
            pytest.fail("cargo is installed but evio_native is not: run scripts/build-native")
        pytest.skip("no cargo on this machine: the native data path is not built")


@pytest.fixture(params=["python", "native"])
def implementation(request: pytest.FixtureRequest) -> str:
    """Each data path in turn (`evio.testing.datapath_pair`'s implementations), the native one if built."""
    if request.param == "native":
        request.getfixturevalue("native_built")
    return str(request.param)
