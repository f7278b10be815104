"""Review21i I4: a member takes another member's certified MAC at its neighbour with one forged flood naming the
MAC's own root and a short hop count, every few seconds; in trust mode, with the owners told.

Attack (a hostile member, attacker a): decision 0034 keeps a MAC whose place spoke lately from moving "to another
root, or to another port except by its own root's copies (the shortest-path rule)", and 0055 lets a flood place an
owned MAC only under its owner's root. A forged copy naming the owner as its root passes both: `_may_speak_for`
(root == owner), `LearningTable._contested` (same root: never contested), and `_holds` holds it back only while the
real path was confirmed by a copy within `PATH_HOLD` (60 s) *and* the forged hop count is not smaller. A member's
interface broadcasts rarely (its ARP cache refreshes by unicast; its host claims go every 10 minutes), so at
node u, 60 s after V's last broadcast, one forged broadcast from neighbour A rooted at V (A lies on an arc from V
to u, so it is plausible; bound u, hop count 1, which `_hops` raises to 2) moves V's MAC to A's port (a V three
or more hops away by its real path is taken at once, 2 being shorter). Once there its hop count (2) is as short as
the truth, the copies V's real floods bring are HELD, and V's own unicast frames cannot move it back: they come by a
port that is not V's own link while the table places V's MAC under V elsewhere (`_may_speak_for`: NOT_ANNOUNCER).
One forged frame every 50 s keeps it (measured: V's MAC on A's port at u 240 of 240 half-seconds, V talking to u
every 0.5 s). Since 0066 the flows installed ahead follow the entry too
(root V, owner V: "learned under its owner"), with no idle timeout.

Measured (fake network, 8-node trust-mode ring, real switch logic): u's interface sends V 5 frames every 0.5 s for
60 s, V answering every second, A forging one copy every 4 s and dropping what comes to it: V got 0 of 600 (A
black-holed them all; before the first forged copy V got everything).

Suggested fix: in trust mode an owned MAC moves under its owner's root to another port only by a copy of the
owner's own broadcast that the owner could have sent that way (e.g. only from the owner's own link when adjacent,
else require the copy's hop count to be plausible for the ingress, ring distance included), and a hop count is
never taken below the ring distance from the root to the ingress peer plus one; or let the proven place (flows
from the MAC on its port: 0034's vouching, which same-root copies bypass) hold against same-root copies too.
"""

from __future__ import annotations

import pytest

from evio.sdn import frb
from evio.testing.frames import eth
from tests.unit.sdn.test_sdn_port_bounds import forged, gratuitous_arp
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring


@pytest.mark.xfail(strict=True, reason="review21i I4: a forged flood under a MAC's own root with a short hop count takes an owned MAC at the neighbour")
def test_a_member_cannot_take_a_quiet_members_certified_mac_with_copies_under_its_own_root() -> None:
    net, ids, macs, _ = trusted_ring(8)
    u, v, a = ids[0], ids[2], ids[7]  # V two hops from u by ids[1]; A, u's other neighbour, on the far arc
    to_a = net.port_towards(u, a)
    assert net.nodes[u].switch.learning.lookup(macs[v], net.now).port == net.port_towards(u, ids[1])
    dropped_at_a = 0
    output = net._output

    def a_drops_what_it_gets(node: object, port: int, frame: bytes) -> list[tuple[int, int, bytes]]:
        nonlocal dropped_at_a
        if getattr(node, "node_id", None) == u and port == to_a and frame[:6] == frb.parse_mac(macs[v]):
            dropped_at_a += 1
            return []
        return output(node, port, frame)  # type: ignore[arg-type]

    net._output = a_drops_what_it_gets  # type: ignore[method-assign]
    net.advance(61.0)  # V's interface broadcast nothing for a minute (the common case)
    heard = len(net.nodes[v].received[1])
    lie = forged(gratuitous_arp(macs[v], "10.7.0.3"), v, u, hops=1)
    for step in range(120):
        net.advance(0.5)
        if step % 8 == 0:
            net.from_neighbour(u, a, lie)
        for i in range(5):
            net.inject(u, 1, eth(macs[v], macs[u], payload=b"x" * 40 + bytes([step & 255, i])))
        if step % 2 == 0:
            net.inject(v, 1, eth(macs[u], macs[v], payload=b"y" * 40 + bytes([step & 255])))  # V talks back
    got = sum(1 for f in net.nodes[v].received[1][heard:] if f[6:12] == frb.parse_mac(macs[u]))
    entry = net.nodes[u].switch.learning.lookup(macs[v], net.now)
    print(f"of 600 frames u -> V: V got {got}, A dropped {dropped_at_a}; u places V's MAC on "
          f"{'A' if entry is not None and entry.port == to_a else 'its real path'}")
    assert got == 600 and dropped_at_a == 0
