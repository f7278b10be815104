"""review21c: the host announcements' shared signature budget (VERIFY_RATE, 50 a second for all senders) is taken
by anything from any sender MAC, before the check. A member sending 50 frames a second (any bytes; a sender MAC
of its choosing per frame, so SENDER_RATE never holds it: far below a port's flood budget of 400) keeps every
other node from checking a single honest announcement. A new host's claim then never lands (the receiving-host
attack of review21b works on it), and after host_claims.LIFETIME (30 min) every claim has expired here: every
MAC falls back to 0034's rules, overlay-wide. Fleet and medium of test_host_claims_flood.py."""

from __future__ import annotations

import pytest

from evio.node import host_claims as hcf
from tests.unit.node.test_host_claims_flood import fleet


@pytest.mark.xfail(strict=True, reason="review21c C2: 50 junk frames a second from invented sender MACs take the "
                   "shared signature budget, and no honest host claim is checked")  # fmt: skip
async def test_junk_from_invented_sender_macs_keeps_every_honest_announcement_unchecked() -> None:
    medium, nodes, clock = fleet(3)
    victim, honest = nodes[0], nodes[1]
    junk = b"\x00" * 64  # not even an announcement: refused only after it took a token
    sender = 0

    def storm(seconds: float) -> None:
        nonlocal sender
        for _ in range(int(seconds * hcf.VERIFY_RATE.per_second)):
            sender += 1
            victim.receive(junk, (0x026600000000 + sender).to_bytes(6, "big"))

    storm(hcf.VERIFY_RATE.burst / hcf.VERIFY_RATE.per_second)  # the burst, once
    for step in range(10):  # 10 s: 50 junk frames a second; the honest node's host appears at 5 s
        await clock.advance(1.0)
        storm(1.0)
        if step == 5:
            honest.set_hosted(("02:00:00:00:01:01",))
    print(f"victim's counts: {dict(victim.counts)}; told {victim.told[-1] if victim.told else None}")
    assert victim.told and victim.told[-1] == {"02:00:00:00:01:01": honest.node_id}
