"""review21d C2: announcements are checked by the port they came in by (decision 0055, amended review21d).

A neighbour forging announcements under a member's id (its certificate is public) spends the checks of its own
port only: the member's announcements coming by another tunnel are checked at once, what one port can cost is
still bounded, and a flood must be rooted at the id it names. Fleet and medium of test_host_claims_flood.py
(every node adjacent to every other: a node's flood comes by the tunnel to it)."""

from __future__ import annotations

import os
import time

import pytest

from evio.node import host_claims as hcf
from evio.ratelimit import Rate
from evio.signal import host_claims
from tests.unit.node.test_host_claims_flood import Wired, fleet

STEP = 0.1  # seconds


def forgery(victim: Wired, member: Wired, wall_ms: int, macs: tuple[str, ...]) -> bytes:
    """Fresh, under `member`'s id with its public certificate, and a signature that does not verify."""
    cert = member._certificate
    data = host_claims.pack(cert.key, cert.cert, victim.overlay, member.node_id, wall_ms, macs)
    return data[:-8] + os.urandom(8)


def virtual_wall(nodes: list[Wired], clock: object) -> float:
    base = time.time() - clock.now()  # type: ignore[attr-defined]
    for node in nodes:
        node._wall = lambda: base + clock.now()  # type: ignore[attr-defined]
    return base


async def test_a_forger_starves_only_what_comes_by_its_own_port() -> None:
    medium, nodes, clock = fleet(3)
    victim, member, hostile = nodes
    base = virtual_wall(nodes, clock)
    per_step = 30  # 300 forgeries a second under the member's id, 1.5 x its share, by the hostile member's tunnel
    seconds = 20
    for i in range(int(seconds / STEP)):
        await clock.advance(STEP)
        ms = int((base + clock.now()) * 1000) + 1
        for _ in range(per_step):
            victim.receive(forgery(victim, member, ms, ("02:00:00:00:01:01",)), b"\x02\x66" + os.urandom(4),
                           ingress=hostile.node_id, root=member.node_id)
        if i % 20 == 10:  # the member's list changes every 2 s: each change comes by its own tunnel
            macs = tuple(f"02:00:00:00:02:{n:02x}" for n in range(i // 20 + 1))
            member.set_hosted(macs)
            assert victim.told[-1] == dict.fromkeys(macs, member.node_id), f"change {i // 20} not taken at once"
    checked = victim.counts["refused_bad_signature"]
    print(f"{seconds} s, {per_step / STEP:.0f} forgeries/s by one port: {checked} checked, "
          f"{victim.counts['refused_verify_rate']} refused unchecked; the member's 10 changes taken at once")
    assert victim.counts["refused_verify_rate"] > 0
    # That port's share for that id: the first forgery's chain, then one signature check each (review21f F9).
    assert checked <= 1 + hcf.KNOWN_MEMBER_RATE.burst + seconds * hcf.KNOWN_MEMBER_RATE.per_second
    # What the forger's own port brings of the member's is starved with its forgeries (as the forger could drop
    # it anyway, being on its way): the bound is per port.
    refused = victim.counts["refused_verify_rate"]
    cert = member._certificate
    genuine = host_claims.pack(cert.key, cert.cert, victim.overlay, member.node_id,
                               int((base + clock.now()) * 1000) + 5, ("02:00:00:00:03:03",))
    victim.receive(genuine, member.mac, ingress=hostile.node_id, root=member.node_id)
    assert victim.counts["refused_verify_rate"] == refused + 1
    victim.receive(genuine, member.mac, ingress=member.node_id, root=member.node_id)  # by its own tunnel: taken
    assert victim.told[-1] == {"02:00:00:00:03:03": member.node_id}


async def test_what_one_port_can_cost_stays_bounded_and_other_ports_keep_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A port's total, made small here (20 checks/s, burst 40) so that a few members' ids exceed it, as 5 and more
    would at the real 800/s (their certificates known: review21f F9): one port's forgeries naming all of them cost
    that total, no more (and one chain each, the first), and a member's announcement by another port is checked
    meanwhile."""
    monkeypatch.setattr(hcf, "VERIFY_RATE", Rate(20.0, 40))
    monkeypatch.setattr(hcf, "KNOWN_VERIFY_RATE", Rate(20.0, 40))
    medium, nodes, clock = fleet(10)
    victim, member, hostile, named = nodes[0], nodes[1], nodes[2], nodes[1:]
    base = virtual_wall(nodes, clock)
    seconds = 10
    for i in range(int(seconds / STEP)):
        await clock.advance(STEP)
        ms = int((base + clock.now()) * 1000) + 1
        for other in named:  # 9 ids x 10 forgeries a second, each id's share 5/s: 45/s wanted, 20/s the port's
            victim.receive(forgery(victim, other, ms, ()), b"\x02\x66" + os.urandom(4),
                           ingress=hostile.node_id, root=other.node_id)
        if i == 50:
            member.set_hosted(("02:00:00:00:01:01",))
            assert victim.told[-1] == {"02:00:00:00:01:01": member.node_id}
    checked = victim.counts["refused_bad_signature"]
    print(f"{seconds} s of forgeries under 9 ids by one port: {checked} checked "
          f"(the port's bound {40 + seconds * 20}), {victim.counts['refused_verify_rate']} refused unchecked")
    assert 40 + seconds * 20 * 0.8 <= checked <= 40 + seconds * 20 + len(named)
    assert victim.counts["taken"] == 1


async def test_a_flood_must_be_rooted_at_the_id_it_names_and_the_interface_leaves_floods_to_the_switch() -> None:
    medium, nodes, clock = fleet(3)
    victim, member, hostile = nodes
    base = virtual_wall(nodes, clock)
    cert = member._certificate
    genuine = host_claims.pack(cert.key, cert.cert, victim.overlay, member.node_id,
                               int((base + clock.now()) * 1000), ("02:00:00:00:01:01",))
    # The member's own announcement, replayed by the hostile member as a flood of its own: not the member's flood.
    for _ in range(100):
        victim.receive(forgery(victim, member, int((base + clock.now()) * 1000), ()), hostile.mac,
                       ingress=hostile.node_id, root=hostile.node_id)
    victim.receive(genuine, hostile.mac, ingress=hostile.node_id, root=hostile.node_id)
    assert victim.counts["refused_not_its_flood"] == 101 and victim.told == []
    # A flood's copy read off the bridge's interface is left to the switch's word, which brings it with its port.
    victim._frame(genuine, member.mac, True)
    assert victim.told == [] and victim.counts["received"] == 101
    frame = b"\xff" * 6 + member.mac + hcf.ETHERTYPE.to_bytes(2, "big") + genuine
    victim.flooded(frame, member.node_id, member.node_id)
    assert victim.told[-1] == {"02:00:00:00:01:01": member.node_id}
    # Sent to this node alone (a neighbour passing lists on): read off the interface, a port of its own.
    victim._frame(genuine, member.mac, False)
    assert victim.counts["received_unicast"] == 1 and victim.counts["unchanged"] == 1
