"""review21d: forgeries under a known member's id (0055 amended, 2.) starve the check of that member's *changed*
list at a node, while the hostile member's own list, naming the same new host, has a share of its own and is
checked. The new host then has one claimant at that node, the hostile member: not disputed, owned by it, so
one forged flood takes its stream there (the attack of review21c C1, with "first claimant" bypassed). The
decision says the change "may wait"; what it does not say is that the attacker holds the host meanwhile, for
as long as it spends a few forgeries a second per node (here 50/s, 10 x the member's share).

Closed: announcements are checked by the port they came in by (decision 0055, amended review21d). The forgeries
come by the hostile member's own tunnel (flooded, naming the honest member as root: the worst a forger can, a
plausible root) or straight to the victim's bridge MAC (unicast): either way they spend that port's checks,
and the honest member's flood, by its own tunnel, is checked."""

from __future__ import annotations

import os
import time

import pytest

from evio.node import host_claims as hcf
from evio.ratelimit import Rate
from evio.signal import host_claims
from tests.unit.node.test_host_claims_flood import fleet

HOST = "02:00:00:00:01:01"
NEW_HOST = "02:00:00:00:01:02"  # a VM the honest member starts later; the hostile one sees its ARP and names it


@pytest.mark.parametrize("by", ["flood", "unicast"])
async def test_forgeries_under_a_members_id_hand_its_new_host_to_the_member_that_names_it(
    by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A known certificate's share of checks (200/s since review21f F9) cut to 20/s, so that 50 forgeries a second
    # exceed it as 300 would: the honest member's share on the forger's port is starved, its own port's is not.
    monkeypatch.setattr(hcf, "KNOWN_MEMBER_RATE", Rate(20.0, 40))
    medium, nodes, clock = fleet(3)
    victim, honest, hostile = nodes
    base = time.time() - clock.now()
    for node in nodes:
        node._wall = lambda: base + clock.now()
    honest.set_hosted((HOST,))
    assert victim.told[-1] == {HOST: honest.node_id}
    cert = honest._certificate
    step, per_step = 0.1, 5  # 50 forgeries a second under the honest member's id

    def forge() -> None:
        # One signing a step (fresh issued_ms, newer than the list held), then garbage signatures: bytes never seen.
        data = host_claims.pack(cert.key, cert.cert, victim.overlay, honest.node_id,
                                int((base + clock.now()) * 1000) + 1, (HOST,))
        for _ in range(per_step):
            if by == "flood":  # by the hostile member's tunnel, rooted at the member it names
                victim.receive(data[:-8] + os.urandom(8), b"\x02\x66" + os.urandom(4), hostile.node_id, honest.node_id)
            else:
                victim.receive(data[:-8] + os.urandom(8), b"\x02\x66" + os.urandom(4))

    for _ in range(30):  # the storm runs
        await clock.advance(step)
        forge()
    honest.set_hosted((HOST, NEW_HOST))  # the honest member's new host: its announcement meets an empty share
    hostile.set_hosted((NEW_HOST,))  # the hostile member names it too: its own key, checked
    seconds = host_claims.LIFETIME / 3 + 60  # past the honest member's next refresh
    for _ in range(int(seconds / step)):
        await clock.advance(step)
        forge()
    owners = victim.told[-1]
    print(f"after {seconds:.0f} s: owners at the victim {owners}; counts {dict(victim.counts)}")
    assert victim.counts["refused_verify_rate"] > 0
    assert owners.get(HOST) == honest.node_id
    # What should hold: the new host is the honest member's, or at least not the hostile one's alone.
    assert owners.get(NEW_HOST) != hostile.node_id, "the hostile member owns the honest member's new host"
