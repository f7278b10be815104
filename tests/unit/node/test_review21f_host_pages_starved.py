"""Review21f F9: a member starves, at nodes past it, the signature checks of a member behind it, and so becomes the
first claimant of that member's new hosts there.

A host announcement's check is budgeted per (port, node id it names) (`MEMBER_RATE`, 5/s, burst 20; review21c C2),
and a flood may name as its root any member behind its sender on the ring (`frb_receive._plausible`). Junk pages
naming member V (V's public certificate, any signature: a refusal costs a check) rooted at V, sent by hostile
member A at 10/s, drain V's key at every node u where V's own floods come in by the same port (a chord from V to the
node past A): V's page naming its new host is refused there unchecked (`refused_verify_rate`; its older list is
kept), while A's own page naming that host is checked under A's key. A is the host's first claimant, its owner at u,
and one forged flood takes its traffic there (decision 0055, E4's last step). In-memory fleet of
tests/unit/node/test_host_claims_flood.py, real flood code and codec; u hears by one port what A's junk and V's
floods bring.

Not fixed: the budget bounds checking CPU, and nothing cheaper than the check tells V's page from junk naming V.
Proposed: a page whose certificate is known (key cached: 0.13 ms) checked above the per-root flood rate a switch
passes on for one root (100/s), so junk under V's root cannot outrun V's key; or a page refused unchecked holding
its MACs' claim order for V until it is checked."""

from __future__ import annotations

import time

import pytest

from evio.signal import host_claims
from evio.testing.virtual_clock import VirtualClock
from tests.unit.node.test_host_claims_flood import OV, fleet


async def test_f9_junk_pages_naming_a_member_do_not_hand_its_new_host_to_the_attacker() -> None:
    medium, nodes, clock = fleet(3)
    assert isinstance(clock, VirtualClock)
    u, v, a = nodes
    h0, h1 = "02:00:00:00:01:01", "02:00:00:00:01:02"
    v.set_hosted((h0,))
    assert u.told[-1] == {h0: v.node_id}
    medium.nodes.remove(u)  # from now on u hears only what comes by its port towards A's side
    port = a.node_id
    vc, ac = v._certificate, a._certificate
    base = int(time.time() * 1000)
    for i in range(200):  # 20 s of junk at 10/s
        await clock.advance(0.1)
        junk = host_claims.pack(ac.key, vc.cert, OV, v.node_id, base + 1 + i, (h0,))  # V's certificate, A's signature
        u.receive(junk, b"\x02\x66\0\0\0\1", ingress=port, root=v.node_id)
        if i == 150:  # V's host h1 comes up; A, which sees every broadcast, names it too
            u.receive(host_claims.pack(vc.key, vc.cert, OV, v.node_id, base + 1000, (h0, h1)), v.mac,
                      ingress=port, root=v.node_id)  # fmt: skip
            u.receive(host_claims.pack(ac.key, ac.cert, OV, a.node_id, base + 1000, (h1,)), a.mac,
                      ingress=port, root=a.node_id)  # fmt: skip
    print(f"u's owner of V's new host after 20 s of junk naming V: "
          f"{'V' if u.told[-1].get(h1) == v.node_id else 'A' if u.told[-1].get(h1) == a.node_id else None}; "
          f"{dict(u.counts)}")
    assert u.told[-1].get(h1) == v.node_id
