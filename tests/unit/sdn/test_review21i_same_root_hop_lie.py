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

Fixed (decision 0033, amended: "a root's certified MACs stay on the way its floods come by"): a MAC its owner
certified does not move, by a copy under that owner's root, off a port that is still the way held for one of the
root's flood directions (`frb_receive._keeps_its_way`); A lies on the other direction's arc and cannot bring copies
of the direction the MAC came by, and a copy no shorter than the MAC's path no longer moves it, however long ago that
path was confirmed. After: V (two hops away, silent a minute) got 600 of 600, A dropped 0 (before: 0 of 600).
Residual (strict xfail below): a V three or more hops away is still taken at once by the raised hop count of 2;
holding against shorter ways made forwarding loops where an honest tree moved. The honest moves (chords churn, a
link on the path goes) are in tests/unit/sdn/test_sdn_contested_root.py.
"""

from __future__ import annotations

import pytest

from evio.sdn import frb
from evio.testing.frames import eth
from tests.unit.sdn.test_sdn_port_bounds import forged, gratuitous_arp
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring


def _attack(v_index: int, quiet: float) -> tuple[int, int, bool]:
    """u = ids[0] of a trusted ring of 8 sends V = ids[v_index] 600 frames while A = ids[7] (u's other neighbour, on
    the arc from V to u the other way round) forges V's broadcast under V's root every 4 s after V's interface was
    silent `quiet` seconds, and drops what comes to it: (frames V got, frames A dropped, V's MAC on A's port at u)."""
    net, ids, macs, _ = trusted_ring(8)
    u, v, a = ids[0], ids[v_index], ids[7]
    to_a = net.port_towards(u, a)
    placed = net.nodes[u].switch.learning.lookup(macs[v], net.now)
    assert placed is not None and placed.port == net.port_towards(u, ids[1])
    dropped_at_a = 0
    output = net._output

    def a_drops_what_it_gets(node: object, port: int, frame: bytes) -> list[tuple[int, int, bytes]]:
        nonlocal dropped_at_a
        if getattr(node, "node_id", None) == u and port == to_a and frame[:6] == frb.parse_mac(macs[v]):
            dropped_at_a += 1
            return []
        return output(node, port, frame)  # type: ignore[arg-type]

    net._output = a_drops_what_it_gets  # type: ignore[method-assign]
    net.advance(quiet)
    heard = len(net.nodes[v].received[1])
    # V's own certified address (10.7.0.<index+1>): a claim in V's name, not another member's address, which the
    # ARP guard drops whatever the hop count (decision 0068).
    lie = forged(gratuitous_arp(macs[v], f"10.7.0.{v_index + 1}"), v, u, hops=1)
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
    on_a = entry is not None and entry.port == to_a
    print(f"of 600 frames u -> V: V got {got}, A dropped {dropped_at_a}; u places V's MAC on "
          f"{'A' if on_a else 'its real path'}")
    return got, dropped_at_a, on_a


def test_a_member_cannot_take_a_quiet_members_certified_mac_with_copies_under_its_own_root() -> None:
    got, dropped_at_a, _ = _attack(2, quiet=61.0)  # V two hops from u by ids[1]; silent a minute (the common case)
    assert got == 600 and dropped_at_a == 0


@pytest.mark.xfail(strict=True, reason="review21i I4 residual: a hop count shorter than the real path's is taken (holding "
                   "against shorter ways made forwarding loops where an honest tree moved; decision 0033)")
def test_a_member_cannot_take_a_farther_members_certified_mac_at_once_with_a_shorter_lie() -> None:
    got, dropped_at_a, _ = _attack(3, quiet=0.0)  # V three hops from u by ids[1], ids[2]; it just spoke
    assert got == 600 and dropped_at_a == 0
