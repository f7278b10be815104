"""AdoptedTransport lends its socket to the data path: the owner closing it (aioice ending a
connection on its own) must not close the socket under a data path still reading it."""

from __future__ import annotations

import asyncio
import socket

import aioice.ice
import aioice.turn

from evio.tunnel.path.adopted_socket import AdoptedTransport
from evio.tunnel.path.aioice_patches import configure_aioice
from evio.tunnel.path.ice import IceConfig


class Recorder(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.lost = asyncio.Event()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()


def udp_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    return sock


async def test_a_lent_socket_stays_open_when_the_owner_closes_and_closes_when_given_back() -> None:
    protocol = Recorder()
    transport = AdoptedTransport(asyncio.get_running_loop(), udp_socket(), protocol)
    transport.resume_reading()
    transport.lend()
    assert not transport.is_reading()
    transport.close()
    await asyncio.wait_for(protocol.lost.wait(), 1.0)
    assert transport.sock.fileno() >= 0  # the data path still reads it
    transport.give_back()
    assert transport.sock.fileno() == -1
    assert not transport.is_reading()


async def test_an_unlent_socket_closes_at_once_and_a_given_back_one_is_read_again() -> None:
    loop = asyncio.get_running_loop()
    lent = AdoptedTransport(loop, udp_socket(), Recorder())
    lent.lend()
    lent.give_back()
    assert lent.is_reading()  # the owner reads again
    lent.close()
    assert lent.sock.fileno() == -1

    never_lent = AdoptedTransport(loop, udp_socket(), Recorder())
    never_lent.close()
    assert never_lent.sock.fileno() == -1


def test_consent_expiry_never_closes_a_connection() -> None:
    saved = aioice.ice.CONSENT_FAILURES
    try:
        configure_aioice(IceConfig().stun_rto)
        assert aioice.ice.CONSENT_FAILURES >= 2**31  # the tunnel's liveness decides
    finally:
        aioice.ice.CONSENT_FAILURES = saved


def test_consent_is_checked_rarely_yet_often_enough_to_carry_the_turn_channel_refresh() -> None:
    saved = aioice.ice.CONSENT_INTERVAL
    try:
        configure_aioice(IceConfig().stun_rto)
        # Not every 5 s: each check is two wake-ups at each end of every idle tunnel ...
        assert aioice.ice.CONSENT_INTERVAL >= 30
        # ... but a check (1.2 times the interval at most apart) falls twice at least between aioice's
        # channel refresh time and the channel's 600 s life: it is what sends the refresh.
        assert 2 * 1.2 * aioice.ice.CONSENT_INTERVAL <= 600 - aioice.turn.DEFAULT_CHANNEL_REFRESH_TIME
    finally:
        aioice.ice.CONSENT_INTERVAL = saved


async def test_lending_again_on_a_path_swap_needs_one_give_back() -> None:
    # A path move installs the side path as the main one (lent again) and the old main as the
    # side (lent again): one give-back each must still return the socket to its owner.
    transport = AdoptedTransport(asyncio.get_running_loop(), udp_socket(), Recorder())
    transport.lend()
    transport.lend()
    transport.give_back()
    assert transport.is_reading()
    transport.close()
    assert transport.sock.fileno() == -1
