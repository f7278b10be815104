"""IceAgent gathering over loopback: excluded networks, and a gathering that never ends. No root, no network.

aioice gathers on every local address but 127.0.0.1; each test hands it
loopback addresses of its own choosing (all of 127.0.0.0/8 can be bound).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator

import aioice.ice
import pytest

from evio.tunnel.errors import GatherTimeout, SetupError
from evio.tunnel.ice import IceAgent, IceConfig, RelayPolicy


@pytest.fixture(autouse=True)
def two_loopback_addresses(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda use_ipv4, use_ipv6: ["127.0.0.2", "127.0.0.3"])
    yield


def local_hosts(agent: IceAgent) -> set[str]:
    assert agent.direct is not None
    return {c.host for c in agent.direct.local_candidates}


async def test_excluded_networks_are_left_out_before_gathering_for_that_agent_only() -> None:
    # aioice binds, and asks STUN, on every address it is given: an excluded one must never reach it.
    excluding = IceAgent(IceConfig(relay=RelayPolicy.NEVER, exclude_networks=("127.0.0.3/32",)), True, "a", 0.0)
    plain = IceAgent(IceConfig(relay=RelayPolicy.NEVER), False, "b", 0.0)
    try:
        direct, _ = (await asyncio.gather(excluding.gather(), plain.gather()))[0]
        assert local_hosts(excluding) == {"127.0.0.2"}
        assert direct is not None and all("127.0.0.3" not in c for c in direct.candidates)
        assert local_hosts(plain) == {"127.0.0.2", "127.0.0.3"}  # the exclusion is per agent
    finally:
        await asyncio.gather(excluding.close(), plain.close())


async def test_a_gathering_that_does_not_end_in_time_is_a_setup_error(caplog: pytest.LogCaptureFixture) -> None:
    # A STUN server that never answers: aioice would wait 5 s for it.
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    config = IceConfig(stun=(silent.getsockname(),), relay=RelayPolicy.NEVER, gather_timeout=0.2)
    agent = IceAgent(config, True, "a", 0.0)
    try:
        with pytest.raises(GatherTimeout, match="not gathered within 0.2 s") as raised:
            await agent.gather()
        assert isinstance(raised.value, SetupError)
    finally:
        await agent.close()
        silent.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
