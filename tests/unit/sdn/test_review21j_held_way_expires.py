"""review21j J2: review21i I4's fix (a root's certified MAC stays on the way its floods come by) holds only while
that root flooded within a MAC's max age: a member waits until then and takes the MAC as before.

`frb_receive._keeps_its_way` keeps V's certified MAC at u on the port held as V's flood way only while
`now - way[1] < learning.max_age`, i.e. while one of V's broadcasts came by it within the max age (300 s). A
member's interface broadcasts rarely (its ARP cache refreshes by unicast, its host claims go every 10 minutes:
the I4 docstring's own premise), and two members of an overlay that exchanged nothing for five minutes are the
common case. Then V's ways and V's MAC lapse at u; A's first forged copy under V's root takes the lapsed ways
for A's port (`_contested`: a stale way goes to whoever comes first) and places V's MAC there, and V's real
copies, as short as A's hop count of 2, are HELD by the shortest-path hold that A keeps confirming every 4 s; V's
unicast frames by its real way are refused (NOT_ANNOUNCER). Unicast between u and V during the quiet time keeps
the MAC where it is (second test, passes: sound).

Measured with review21i's own attack (`_attack`, 8-node trusted ring, V two hops from u, A forging every 4 s and
dropping what comes to it): silent 61 s and 200 s, V got 600 of 600; silent 299 s (the attack lasts 60 s more),
301 s, 400 s: V got 0 of 600, A dropped 600.

Fixed (decision 0033, amended review21j): in trust mode a member's daemon sends the page of its signed host claims
naming its interface's MAC every `evio.node.host_claims.WAY_KEEPALIVE` (240 s, below the max age), one broadcast
frame from that MAC: every switch hears V's interface by V's floods' ways within the max age, so neither V's ways
nor V's MAC lapse at u while V is up, and `_keeps_its_way` holds the MAC against A's copies. A member's interface
is no longer quiet for five minutes on the overlay whatever its hosts do. After (V's daemon modelled, nothing else
from V): silent 301 s and 700 s, V got 600 of 600, A dropped 0 (before: 0 of 600, A 600). Were the keep-alive lost
(V's daemon down), the ways lapse as before; A then holds them only until V's interface floods again by its old
way (the J4 fix), though V's MAC stays with A's hop count until A stops (pinned in the report, not here)."""

from __future__ import annotations

import pytest

from evio.sdn import frb
from evio.testing.fake_flow_table import FakeNetwork
from evio.testing.frames import eth
from tests.unit.sdn.test_review21i_same_root_hop_lie import _attack
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST


def _daemon_keeps_its_ways(monkeypatch: pytest.MonkeyPatch, quiet: float) -> tuple[int, int, bool]:
    """`_attack`, with V's daemon sending its host claims' interface page every WAY_KEEPALIVE through V's quiet time:
    a broadcast from V's interface MAC of the claims' ethertype (its content is the daemon's business, not the
    switch's), and nothing else from V."""
    from evio.node.host_claims import WAY_KEEPALIVE
    from evio.sdn.switch_terms import HOST_CLAIMS_ETHERTYPE
    from tests.unit.sdn import test_sdn_proactive_flows

    made = test_sdn_proactive_flows.trusted_ring

    def ring(n: int) -> tuple[FakeNetwork, list[int], dict[int, str], object]:
        net, ids, macs, rest = made(n)
        advance = net.advance
        last = [net.now]  # the daemon's last sending (the ring was just made: its links' announcements)

        def keeping(seconds: float) -> None:
            end = net.now + seconds
            v = ids[2]
            while last[0] + WAY_KEEPALIVE <= end:
                advance(last[0] + WAY_KEEPALIVE - net.now)
                last[0] = net.now
                net.inject(v, 1, eth(BROADCAST, macs[v], HOST_CLAIMS_ETHERTYPE, payload=b"claims" + bytes(40)))
            advance(end - net.now)

        net.advance = keeping  # type: ignore[method-assign]
        return net, ids, macs, rest

    monkeypatch.setattr("tests.unit.sdn.test_review21i_same_root_hop_lie.trusted_ring", ring)
    return _attack(2, quiet=quiet)


def _talking_while_quiet(monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, bool]:
    """`_attack`, with u and V exchanging unicast frames every 10 s through V's quiet time (no broadcast)."""

    from tests.unit.sdn import test_sdn_proactive_flows

    made = test_sdn_proactive_flows.trusted_ring

    def ring(n: int) -> tuple[FakeNetwork, list[int], dict[int, str], object]:
        net, ids, macs, rest = made(n)
        advance = net.advance

        def talking(seconds: float) -> None:
            if seconds <= 1.0:
                advance(seconds)
                return
            u, v = ids[0], ids[2]
            for i in range(int(seconds // 10)):
                advance(10.0)
                net.inject(u, 1, eth(macs[v], macs[u], payload=b"q" * 40 + bytes([i & 255])))
                net.inject(v, 1, eth(macs[u], macs[v], payload=b"r" * 40 + bytes([i & 255])))
            advance(seconds % 10)

        net.advance = talking  # type: ignore[method-assign]
        return net, ids, macs, rest

    monkeypatch.setattr("tests.unit.sdn.test_review21i_same_root_hop_lie.trusted_ring", ring)
    return _attack(2, quiet=301.0)


@pytest.mark.parametrize("quiet", [301.0, 700.0])
def test_a_member_cannot_take_a_certified_mac_of_a_member_that_has_not_broadcast_for_five_minutes(
    monkeypatch: pytest.MonkeyPatch, quiet: float
) -> None:
    # V two hops from u by ids[1]; no broadcast from V's interface for `quiet` s but its daemon's keep-alive
    got, dropped_at_a, on_a = _daemon_keeps_its_ways(monkeypatch, quiet)
    assert (got, dropped_at_a, on_a) == (600, 0, False)


def test_unicast_between_them_keeps_the_certified_mac_where_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    got, dropped_at_a, on_a = _talking_while_quiet(monkeypatch)
    assert (got, dropped_at_a, on_a) == (600, 0, False)


def test_with_only_the_keepalive_a_certified_mac_follows_its_root_within_max_age_and_one_keepalive() -> None:
    """The honest bound: u places V's certified MAC by ids[1]; the link V-ids[1] goes and V's interface says
    nothing but its daemon's keep-alive. V's MAC follows to ids[7] at the first keep-alive once the way by ids[1]
    brought nothing for the max age: within max age + WAY_KEEPALIVE (540 s) of the link going."""
    from evio.node.host_claims import WAY_KEEPALIVE
    from evio.sdn.switch_terms import HOST_CLAIMS_ETHERTYPE
    from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

    net, ids, macs, _ = trusted_ring(8)
    u, v = ids[0], ids[2]
    sw = net.nodes[u].switch
    net.inject(v, 1, eth(BROADCAST, macs[v], HOST_CLAIMS_ETHERTYPE, payload=b"claims" + bytes(40)))
    gone = net.now
    net.disconnect(v, ids[1])
    followed_at = None
    for i in range(4):
        net.advance(WAY_KEEPALIVE)
        net.inject(v, 1, eth(BROADCAST, macs[v], HOST_CLAIMS_ETHERTYPE, payload=b"claims" + bytes([i]) * 40))
        entry = sw.learning.lookup(macs[v], net.now)
        if entry is not None and entry.port == net.port_towards(u, ids[7]):
            followed_at = net.now - gone
            break
    print(f"V's MAC followed {followed_at} s after the link went")
    assert followed_at is not None and followed_at <= sw.learning.max_age + WAY_KEEPALIVE
    heard = len(net.nodes[v].received[1])
    for i in range(10):
        net.inject(u, 1, eth(macs[v], macs[u], payload=b"x" * 40 + bytes([i])))
    assert sum(1 for f in net.nodes[v].received[1][heard:] if f[6:12] == frb.parse_mac(macs[u])) == 10
