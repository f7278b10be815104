"""Fixtures of the tunnel tests: the native data path (required where it should be built, and each data
path in turn), and two nodes with real tunnel managers on one fake signaling hub."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator

import pytest

from evio.testing.fake_tunnel_signaling import FakeTunnelSignalingHub
from evio.testing.tunnel_nodes import FAST, A, B, Node, make_node
from evio.tunnel.config import TunnelSettings
from evio.tunnel.datapath import native


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


@pytest.fixture
def hub() -> FakeTunnelSignalingHub:
    return FakeTunnelSignalingHub()


@pytest.fixture
async def nodes(hub: FakeTunnelSignalingHub) -> AsyncIterator[tuple[Node, Node]]:
    """Nodes A and B (`FAST` liveness), closed after the test with every TAP they opened."""
    config = TunnelSettings(liveness=FAST)
    a, b = make_node(hub, A, config), make_node(hub, B, config)
    yield a, b
    await a.manager.close()
    await b.manager.close()
    assert all(t.closed for t in a.taps + b.taps)
