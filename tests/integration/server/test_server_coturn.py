"""coturn started from the configuration `evio server init` wrote allocates for a user TurnAdmin added.

The file is init's own (long-term credentials in the sqlite userdb, the
denied peer ranges), with only its listening address and port pointed at
loopback. aioice's TURN client allocates as a member's tunnel would; a wrong
password and a removed user are refused, and so are relays to loopback and
RFC 1918 peers, while a public peer is permitted.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aioice import stun
from aioice.turn import TurnClientUdpProtocol

from evio.node.sdn import free_tcp_port
from evio.server.init import InitOptions, run_init
from evio.server.turn_admin import TurnAdmin, turn_admin
from evio.testing.waiting import tcp_listening, wait_until_blocking

pytestmark = pytest.mark.integration

DOMAIN = "evio.test"


@pytest.fixture
def coturn(tmp_path: Path) -> Iterator[tuple[int, TurnAdmin]]:
    port = free_tcp_port()
    options = InitOptions(
        domain=DOMAIN, address="127.0.0.1", state_dir=tmp_path / "state", xmpp_port=free_tcp_port(),
        prosody_config=tmp_path / "prosody.cfg.lua", groups_file=tmp_path / "groups.txt",
        prosody_certs=tmp_path / "certs", turn_config=tmp_path / "turnserver.conf", turn_db=tmp_path / "turndb",
        systemd_dir=tmp_path / "systemd",
        turn_port=port, relay_ports=(61000, 61999), turn_listening_ips=("127.0.0.1",),
    )  # fmt: skip
    settings = run_init(options).settings
    assert settings is not None
    out_path = tmp_path / "coturn.out"
    # The pid file and the log to stdout are the Debian unit's business (it passes --pidfile=): here the test's.
    argv = ["turnserver", "-c", settings.turn_config, "--pidfile", str(tmp_path / "turnserver.pid"),
            "--log-file", "stdout"]  # fmt: skip
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_blocking(lambda: tcp_listening(port) or proc.poll() is not None, 10, what="coturn listening")
        assert proc.poll() is None, out_path.read_text()
        yield port, turn_admin(settings)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


async def _client(port: int, user: str, password: str) -> tuple[asyncio.DatagramTransport, TurnClientUdpProtocol]:
    loop = asyncio.get_running_loop()
    return await loop.create_datagram_endpoint(
        lambda: TurnClientUdpProtocol(("127.0.0.1", port), username=user, password=password, lifetime=60,
                                      channel_refresh_time=50),
        remote_addr=("127.0.0.1", port),
    )  # fmt: skip


def _error_code(exc: stun.TransactionFailed) -> int:
    return int(exc.response.attributes["ERROR-CODE"][0])


async def test_coturn_allocates_for_a_member_and_relays_only_to_public_peers(coturn: tuple[int, TurnAdmin]) -> None:
    port, admin = coturn
    admin.add_user("n1", "pw-n1")
    admin.add_user("n2", "pw-n2")

    transport, client = await _client(port, "n1", "pw-n1")
    try:
        started = time.monotonic()
        relayed = await client.connect()
        print(f"\nallocation for n1: {relayed} in {1000 * (time.monotonic() - started):.1f} ms "
              f"(load average {os.getloadavg()[0]:.2f})")  # fmt: skip
        assert relayed[0] == "127.0.0.1" and 61000 <= relayed[1] <= 61999
        await client.channel_bind(0x4000, ("192.0.2.10", 40000))  # a public peer: permitted
        for peer in (("127.0.0.1", 22), ("10.1.2.3", 40000), ("192.168.1.1", 40000), ("100.64.0.1", 40000)):
            with pytest.raises(stun.TransactionFailed) as refused:
                await client.channel_bind(0x4001, peer)
            assert _error_code(refused.value) == 403, peer
        await client.delete()
    finally:
        transport.close()

    # A wrong password, and a member removed since, get no allocation.
    admin.remove_user("n2")
    for user, password in (("n1", "wrong"), ("n2", "pw-n2")):
        transport, client = await _client(port, user, password)
        try:
            with pytest.raises(stun.TransactionFailed) as refused:
                await client.connect()
            assert _error_code(refused.value) == 401, user
        finally:
            transport.close()
