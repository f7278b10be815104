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
The shorter lie (a V three or more hops away, taken at once by the raised hop count of 2: 0 of 600) is closed as far
as the wire format lets it be (decision 0033, amended "review21i I4 residual"): hop counts are written by whoever
passes a copy on, so a shorter way through A cannot be told from a chord V-A that came up, and holding against
shorter ways made forwarding loops where an honest tree moved. But A lies on one arc from V only, so it can send
copies of one flood direction only, and a broadcast V never sent comes to u without its twin (the same header's
copy of the other direction): a shorter copy moves V's certified MAC only with its twin, and only if no second copy
of its own direction came by another port (broadcast_twins.py). After: V three hops away, just spoken, got 600 of
600 (before: 0). What A keeps: shortening the copies of V's *real* broadcasts it passes on to u, which moves the MAC
as a chord V-A would; pinned below as the bound, with the honest chord and a forger off V's way.
The honest moves (chords churn, a link on the path goes) are in tests/unit/sdn/test_sdn_contested_root.py.
"""

from __future__ import annotations

from evio.sdn import frb
from evio.sdn.broadcast_twins import TWIN_WINDOW
from evio.testing.fake_flow_table import FakeNetwork, FakeNode
from evio.testing.frames import BROADCAST, eth
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


def test_a_member_cannot_take_a_farther_members_certified_mac_at_once_with_a_shorter_lie() -> None:
    got, dropped_at_a, _ = _attack(3, quiet=0.0)  # V three hops from u by ids[1], ids[2]; it just spoke
    assert got == 600 and dropped_at_a == 0


def test_a_lie_without_its_twin_moves_nothing_however_long_it_is_kept_up() -> None:
    """V's path confirmed long ago (61 s, past PATH_HOLD) and three hops away: the lie alone still moves nothing."""
    got, dropped_at_a, on_a = _attack(3, quiet=61.0)
    assert got == 600 and dropped_at_a == 0 and not on_a


def _ring_v_a() -> tuple[FakeNetwork, list[int], dict[int, str]]:
    net, ids, macs, _ = trusted_ring(8)
    return net, ids, macs


def test_a_shorter_way_is_taken_with_its_twin_whichever_copy_comes_first() -> None:
    """The honest case the lie looks like (a chord V-A came up): V's next broadcast comes to u by A in 2 hops and its
    reverse copy by ids[1] in 3. The MAC moves to A in either order of the two copies; the shorter copy alone, or
    with its twin past the window, does not move it."""
    for order in ("shorter first", "twin first", "twin too late", "alone"):
        net, ids, macs = _ring_v_a()
        u, v, a = ids[0], ids[3], ids[7]
        sw = net.nodes[u].switch
        frame = eth(BROADCAST, macs[v], 0x0806) + b"after the chord"
        shorter = (a, forged(frame, v, u, hops=2))
        twin = (ids[1], forged(frame[:14], v, u, hops=3, kind=frb.FrbType.BROADCAST_REVERSE))
        orders: dict[str, list[tuple[int, bytes] | None]] = {
            "shorter first": [shorter, twin], "twin first": [twin, shorter], "alone": [shorter],
            "twin too late": [shorter, None, twin]}  # None: the twin window passes
        copies = orders[order]
        for copy in copies:
            if copy is None:
                net.advance(TWIN_WINDOW)
                continue
            net.from_neighbour(u, *copy)
        entry = sw.learning.lookup(macs[v], net.now)
        assert entry is not None
        moved = entry.port == net.port_towards(u, a)
        print(f"{order}: V's MAC {'moved to A (2 hops)' if moved else f'stays by ids[1] ({entry.hops} hops)'}")
        assert moved == (order in ("shorter first", "twin first")), order
        assert (entry.hops == 2) == moved


def test_an_honest_chord_from_v_to_a_moves_vs_mac_at_vs_next_broadcast() -> None:
    net, ids, macs = _ring_v_a()
    u, v, a = ids[0], ids[3], ids[7]
    net.connect(v, a)
    net.inject(v, 1, eth(BROADCAST, macs[v], 0x0806) + b"with the chord")
    entry = net.nodes[u].switch.learning.lookup(macs[v], net.now)
    assert entry is not None and entry.port == net.port_towards(u, a) and entry.hops == 2


def _rewriting(net: FakeNetwork, relay: int, to: int, root: int) -> None:
    """`relay` writes hop count 1 into every copy of `root`'s broadcasts it passes on to `to` (which no relay can
    check: a chord relay-root would make it 2 at `to`)."""
    output = net._output
    port = net.port_towards(relay, to)

    def rewrite(node: FakeNode, out: int, frame: bytes) -> list[tuple[int, int, bytes]]:
        if node.node_id == relay and out == port and frame[12:14] == b"\xc0\xc0":
            parsed = frb.parse(frame)
            if parsed.header.root_nid == root and parsed.header.frb_type is frb.FrbType.BROADCAST:
                frame = forged(parsed.payload, root, parsed.header.bound_nid, hops=1)
        return output(node, out, frame)

    net._output = rewrite  # type: ignore[method-assign,assignment]


def test_the_bound_a_member_on_vs_way_shortens_only_vs_real_broadcasts_it_passes_on() -> None:
    """What is left to A (decision 0033, amended): it is u's way for V's clockwise floods, so it may shorten the hop
    count of V's real broadcasts as it passes them on, and u cannot tell that from a chord V-A (the test above). Its
    own lies move nothing; V's MAC moves at V's next real broadcast through A, never before."""
    net, ids, macs = _ring_v_a()
    u, v, a = ids[0], ids[3], ids[7]
    sw = net.nodes[u].switch
    _rewriting(net, a, u, v)
    lie = forged(gratuitous_arp(macs[v], "10.7.0.4"), v, u, hops=1)
    for _ in range(30):
        net.advance(4.0)
        net.from_neighbour(u, a, lie)
        entry = sw.learning.lookup(macs[v], net.now)
        assert entry is not None and entry.port == net.port_towards(u, ids[1])
    net.inject(v, 1, eth(BROADCAST, macs[v], 0x0806) + b"a real one")
    entry = sw.learning.lookup(macs[v], net.now)
    assert entry is not None and entry.port == net.port_towards(u, a) and entry.hops == 2


def test_a_forger_off_vs_way_gains_nothing_from_vs_real_broadcasts() -> None:
    """A chord u-ids[5] makes ids[5] u's way for V's clockwise floods; A (ids[7], still u's neighbour on that arc)
    copies V's real broadcast with a shorter hop count: a second copy of that direction by another port moves
    nothing, its lone lies neither."""
    net, ids, macs = _ring_v_a()
    u, v, a = ids[0], ids[3], ids[7]
    sw = net.nodes[u].switch
    net.connect(u, ids[5])
    frame = eth(BROADCAST, macs[v], 0x0806) + b"a real one"
    net.inject(v, 1, frame)
    before = sw.learning.lookup(macs[v], net.now)
    assert before is not None and before.port != net.port_towards(u, a)
    net.from_neighbour(u, a, forged(frame, v, u, hops=1))
    net.from_neighbour(u, a, forged(gratuitous_arp(macs[v], "10.7.0.4"), v, u, hops=1))
    after = sw.learning.lookup(macs[v], net.now)
    assert after is not None and (after.port, after.hops) == (before.port, before.hops)
