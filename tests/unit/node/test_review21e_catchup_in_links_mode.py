"""review21e E5: the join gap's catch-up (decision 0055, j21) passes a newcomer every list its neighbours hold, and the
newcomer checks them under its budget shared among node ids: a member it *knows* gets a key of its own (5 checks/s),
every other id shares one key (5/s, burst 20) with invented ids. A node knows a member by a list or certificate
already held, or by signaling's present peers. In the member-list mode of decision 0059 (the mode for overlays past a
few hundred members) signaling holds presence of its contacts only, about 20: a newcomer then knows almost nobody,
and the hundreds of lists passed on in its first second share that one key. What is over it is refused, and the
catch-up sends each list once: the newcomer lacks most lists until their owners' refresh (10 minutes), the gap the
catch-up was made to close, in which the hosts of those members keep no claim at the newcomer. In-memory medium,
real flood code and codec. Fixed: a member the CA's list names is a known member, with a key of its own."""

from __future__ import annotations

from evio.node import host_claims as hcf
from tests.unit.node.test_host_claims_flood import fleet, link


async def test_a_newcomer_knowing_only_its_contacts_takes_every_list_its_neighbours_pass_on() -> None:
    medium, nodes, clock = fleet(61)
    newcomer, old = nodes[-1], nodes[:-1]
    newcomer.signaling.members = {n.node_id for n in old[:10]}  # presence to contacts only: about 20 at 1,000 members
    newcomer.signaling.listed = {n.node_id for n in old}  # the CA's member list names them all
    medium.nodes.remove(newcomer)
    for i, node in enumerate(old):
        node.set_hosted((f"02:00:00:00:{i // 256:02x}:{i % 256:02x}",))
    await clock.advance(hcf.MIN_INTERVAL)
    medium.nodes.append(newcomer)
    newcomer.set_hosted(("02:00:00:01:00:01",))
    link(newcomer, old[30])
    link(newcomer, old[50])
    for _ in range(100):  # 10 s
        await clock.advance(hcf.CATCHUP_TICK)
    print(f"newcomer holds {len(newcomer.claims) - 1} of 60 members' lists 10 s after linking; "
          f"refused over budget: {newcomer.counts['refused_verify_rate']}")
    assert len(newcomer.claims) == 61
