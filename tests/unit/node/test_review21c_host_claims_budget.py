"""review21c C2: the host announcements' signature budget was one bucket for all senders, taken by anything from
any sender MAC before it was checked: 50 junk frames a second from invented sender MACs kept every other node
from checking a single honest announcement, and after host_claims.LIFETIME (30 min) every claim had expired:
every MAC fell back to 0034's rules, overlay-wide. Now junk costs nothing, and what costs a check is shared
fairly among the node ids it names (evio/node/host_claims.py). Fleet and medium of test_host_claims_flood.py."""

from __future__ import annotations

import os
import time

import pytest

from evio.node import host_claims as hcf
from evio.signal import host_claims
from tests.unit.node.test_host_claims_flood import fleet

HOST = "02:00:00:00:01:01"


async def test_junk_from_invented_sender_macs_costs_no_check_and_an_honest_announcement_is_taken() -> None:
    medium, nodes, clock = fleet(3)
    victim, honest = nodes[0], nodes[1]
    junk = b"\x00" * 64  # not even an announcement: refused before any budget
    sender = 0

    def storm(seconds: float) -> None:
        nonlocal sender
        for _ in range(int(seconds * hcf.VERIFY_RATE.per_second)):
            sender += 1
            victim.receive(junk, (0x026600000000 + sender).to_bytes(6, "big"))

    storm(hcf.VERIFY_RATE.burst / hcf.VERIFY_RATE.per_second)  # the burst, once
    for step in range(10):  # 10 s of junk at the whole budget's rate; the honest node's host appears at 5 s
        await clock.advance(1.0)
        storm(1.0)
        if step == 5:
            honest.set_hosted((HOST,))
    print(f"victim's counts: {dict(victim.counts)}; told {victim.told[-1] if victim.told else None}")
    assert victim.told and victim.told[-1] == {HOST: honest.node_id}
    assert victim.counts["refused_not_an_announcement"] == sender and victim.counts["refused_verify_rate"] == 0


async def test_an_honest_claim_is_checked_under_a_storm_of_well_formed_forgeries() -> None:
    """Worst case that reaches the budget: every forgery parses, is fresh and names no list held. Half name
    invented node ids (one key for all of them), half the hostile member's own id with its genuine certificate
    and a bad signature (its own key), each from an invented sender MAC, at twice the whole budget's rate."""
    medium, nodes, clock = fleet(3)
    victim, honest, hostile = nodes
    own = hostile._certificate
    sender = 0

    def forgery(node_id: int) -> bytes:
        data = host_claims.pack(own.key, own.cert, victim.overlay, node_id,
                                int(time.time() * 1000) + sender, (HOST,))
        return data[:-8] + os.urandom(8)  # a signature that does not verify (and bytes never seen before)

    def storm(seconds: float) -> None:
        nonlocal sender
        for _ in range(int(seconds * hcf.VERIFY_RATE.per_second)):
            sender += 1
            mac = (0x026600000000 + sender).to_bytes(6, "big")
            victim.receive(forgery(0x5A << 120 | sender), mac)  # an invented node id
            victim.receive(forgery(hostile.node_id), mac)  # the hostile member's own
    storm(2.0)
    for step in range(6):
        await clock.advance(1.0)
        storm(1.0)
        if step == 3:
            honest.set_hosted((HOST,))
    checked = victim.counts["refused_certificate_refused"] + victim.counts["refused_bad_signature"]
    print(f"{sender * 2} forgeries in 8 s: {checked} checked ({checked / 8:.0f}/s), "
          f"{victim.counts['refused_verify_rate']} refused unchecked; told {victim.told[-1] if victim.told else None}")
    assert victim.told and victim.told[-1] == {HOST: honest.node_id}
    # The two keys' shares, no more: the invented ids' (a chain each), the member's (its certificate known after the
    # first: one signature check each, its share of those; review21f F9).
    known = hcf.KNOWN_MEMBER_RATE
    assert checked <= hcf.VERIFY_RATE.burst + 8 * 2 * hcf.MEMBER_RATE.per_second + known.burst + 8 * known.per_second


async def test_forgeries_under_a_members_id_spend_its_share_but_its_claims_do_not_expire_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The residual of fair shares: forgeries naming a known member's id (its certificate is public) spend that
    member's share, so its refreshes may go unchecked. Its list then outlives LIFETIME while that goes on, so a
    member that named its host too (disputed, held by the first) does not come to hold it. The refreshes are
    lost here outright (the honest node's socket gone); without forgeries its list expires as a departed one's.
    The share of checks under a known certificate is cut here to 5/s (200/s since review21f F9), so that 10
    forgeries a second exceed it, as more than 200 would."""
    monkeypatch.setattr(hcf, "KNOWN_MEMBER_RATE", hcf.MEMBER_RATE)
    medium, nodes, clock = fleet(3)
    victim, honest, hostile = nodes
    base = time.time() - clock.now()
    for node in nodes:
        node._wall = lambda: base + clock.now()
    honest.set_hosted((HOST,))
    await clock.advance(hcf.MIN_INTERVAL)
    hostile.set_hosted((HOST,))  # names the honest node's host too: disputed, held by the honest node
    assert victim.told[-1] == {HOST: honest.node_id} and HOST in victim.claims.disputed
    honest._sock = None  # its refreshes from now on never arrive
    cert = honest._certificate
    seconds = int(host_claims.LIFETIME + host_claims.LIFETIME / 3) + 60
    for second in range(seconds):
        await clock.advance(1.0)
        for i in range(10):  # twice its share a second, each fresh, from an invented sender MAC
            data = host_claims.pack(cert.key, cert.cert, victim.overlay, honest.node_id,
                                    int((base + clock.now()) * 1000) + i, (HOST,))
            victim.receive(data[:-8] + os.urandom(8), (0x026600000000 + second * 10 + i).to_bytes(6, "big"))
    print(f"after {seconds} s of forgeries under its id: {dict(victim.counts)}; told {victim.told[-1]}")
    assert victim.told[-1] == {HOST: honest.node_id} and victim.counts["refused_verify_rate"] > 0
    await clock.advance(host_claims.LIFETIME)  # the forgeries stopped: its list expires, the other's holds
    assert victim.told[-1] == {HOST: hostile.node_id}
