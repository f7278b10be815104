"""review21v1 finding 1: a member that passes a named router's statement on first, with a narrow bound, keeps it from
everyone behind the node it sent it to, and the router's RAs are dropped there as unvouched.

Decision 0081 passes a statement on only once taken (`frb_receive._broadcast_in`), and `RouterAdverts.take` treats a
statement equal to the one held (same issue time) or one whose bytes it took lately as "a copy by another way, free":
neither checked nor passed on. The first copy to arrive decides where the statement goes from that node: its bound,
not the bound of the copy that came the flood's own way. A statement is signed by the router's node, but its FRB
(root, bound, hop count) is not, so any member that got it may pass it on to any neighbour with a bound of its
choosing.

Attack (trust mode, `ipv6_routers` names R = ids[3]; a 10-node ring with chords ids[3]-ids[6] and ids[4]-ids[8];
hostile A = ids[4], R's neighbour). R hands ids[4] the arc up to ids[6] and ids[6] the rest, so R's floods reach
ids[8] by ids[6] and ids[7] (hop 3), and ids[8] passes them on to ids[9], ids[0] and ids[1]. A lies on the arc from R
to ids[8], so a copy rooted at R from A is plausible there (`frb_receive._plausible`). A gets R's statement at hop 1
and sends a copy to ids[8] over its chord at once (unchecked: a hostile node does not verify), bound `ids[9]`, so
ids[8] passes it on to nobody. It arrives first: the honest copy still has two hops, two controller visits and two
ECDSA checks (0.4-0.6 ms each, 0081) to go. ids[8] takes A's copy (R's genuine signature), then counts the honest one
a copy and does not pass it on. R's RA follows the flood's way as always: vouched at ids[8] and passed on, but ids[9]
holds it for a statement that never comes and drops it after `HOLD` (`ROUTER_ADVERT_UNVOUCHED`); ids[0] and ids[1]
never see it.

Measured on main (fake network, real switch logic and flows, virtual clock): R's RA reached 6 of 9 other nodes (9 of
9 without A's copy), 1 `ROUTER_ADVERT_UNVOUCHED` (at ids[9]). A repeats this for every RA R sends, and towards every
node on R's far arcs it has a tunnel to (Symphony gives it several). The nodes behind stop getting R's RAs: their
kernels' default routes and SLAAC prefixes lapse at the end of their lifetimes, and R's lifetime-0 RA (its shutdown)
never reaches them. A's copies cost it nothing and A is not on the way from R to the victims (0081's relay, which can
drop anything, is another matter).

Severity: medium (one member silences a named router for other members, the issue's "crowding out" class). It needs
no place on the router's path: only a tunnel to a node farther along the arc from R than itself, which the flood
reaches later than it reaches A.

Fixed (decision 0081, amendment review21v1 finding 1): a copy of a statement held here is passed on too, the
statement as taken (no second check): the first copy as far as its bound, and the first copy wider than that once
more, as far as the statement's root, so no copy can be wider after (`RouterAdverts.to_pass`). At most two passes per
statement and node, whatever a member sends: ids[8] takes A's copy, then the flood's own copy sends it on to ids[9]
with the root as bound. The same holds when A's narrow copy comes by the flood's own way (through ids[7], which passes
it to ids[8] first), and when A replays the statement at a high rate.
"""

from __future__ import annotations

import time
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from evio.ids import RING_SIZE
from evio.sdn import frb
from evio.sdn.router_adverts import HOLD, RouterAdverts
from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import FakeNetwork, host_mac, ring_network, sign_router_adverts
from evio.testing.frames import arp_request
from evio.testing.host_claims import Announcer
from tests.unit.sdn.test_review21k_router_link_local_taken import _named, advert
from tests.unit.sdn.test_sdn_proactive_flows import certify


def chorded_ring(*chords: tuple[int, int]) -> tuple[FakeNetwork, list[int], dict[int, str]]:
    """A trusted 10-ring with chords ids[3]-ids[6] and ids[4]-ids[8] (and `chords`, by ring position), naming
    R = ids[3], statements signed and asked for. R hands ids[4] the arc up to ids[6], and ids[6] the rest: R's floods
    reach ids[8] by ids[6] and ids[7]."""
    net, ids = ring_network(10)
    for a, b in ((3, 6), (4, 8), *chords):
        net.connect(ids[a], ids[b])
    for nid in ids:
        net.inject(nid, 1, arp_request(host_mac(net, nid)))
    Announcer().announce(net, ids)
    macs = certify(net, ids)
    net.advance(0.5)
    _named(net, ids, ids[3])
    sign_router_adverts(net, ids)
    return net, ids, macs


def _adverts(net: FakeNetwork, node: int) -> RouterAdverts:
    found = net.nodes[node].switch.router_adverts
    assert found is not None
    return found


def routers_advert_reached(hostile_copy: bool, to: int = 8, bounds: tuple[int, ...] = (9,)) -> tuple[list[int], int]:
    """R's host sends an RA; R's node signs its statement and floods both. With `hostile_copy`, A = ids[4], which has
    the statement from R at hop 1, hands ids[`to`] a copy bounded at ids[bound] for each of `bounds` before the
    flood's own copy gets there. Returns (the ring positions of the nodes whose interface got the RA, unvouched drops overall)."""
    net, ids, macs = chorded_ring(*([(4, to)] if to != 8 else []))
    r, a = ids[3], ids[4]
    adverts = _adverts(net, r)
    signed = adverts.statement

    def signing(router: int, frame: bytes) -> bytes | None:
        statement = signed(router, frame)
        if hostile_copy and statement is not None:  # A's copy, sent the moment A has the statement
            for bound in bounds:
                copy = frb.broadcast(statement, root_nid=r, bound_nid=ids[bound], hop_count=2)
                net.from_neighbour(ids[to], a, frb.pack(copy))
        return statement

    adverts.statement = signing  # type: ignore[method-assign]
    ra = advert(macs[r], macs[r])
    heard = {n: len(net.nodes[n].received[1]) for n in ids}
    net.inject(r, 1, ra)
    net.advance(HOLD + 0.5)
    reached = [ids.index(n) for n in ids if n != r and ra in net.nodes[n].received[1][heard[n]:]]
    unvouched = sum(net.nodes[n].switch.drops[Drop.ROUTER_ADVERT_UNVOUCHED] for n in ids)
    return reached, unvouched


def test_the_routers_advert_reaches_every_node_by_the_chorded_ring() -> None:
    reached, unvouched = routers_advert_reached(hostile_copy=False)
    print(f"no hostile copy: R's RA reached {len(reached)} of 9 other nodes, {unvouched} unvouched")
    assert reached == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert unvouched == 0


def test_a_members_narrow_copy_of_the_statement_does_not_keep_it_from_the_nodes_behind() -> None:
    reached, unvouched = routers_advert_reached(hostile_copy=True)
    print(f"A's copy first: R's RA reached {len(reached)} of 9 other nodes ({reached}), {unvouched} unvouched")
    assert reached == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert unvouched == 0


def test_a_narrow_copy_passed_on_by_the_floods_own_way_does_not_keep_it_either() -> None:
    """A hands ids[7] (a chord ids[4]-ids[7]) a copy bounded at ids[9]: ids[7] takes it and passes it to ids[8] with
    bound ids[9], by the very port the flood's own copy takes later. Once per ingress port would not do here: ids[8]
    passes the flood's copy on because it is wider than what it passed, not because it came another way."""
    reached, unvouched = routers_advert_reached(hostile_copy=True, to=7, bounds=(9,))
    print(f"A's copy through ids[7]: R's RA reached {len(reached)} of 9 other nodes ({reached}), {unvouched} unvouched")
    assert reached == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert unvouched == 0


def test_two_narrow_copies_first_do_not_keep_it_either() -> None:
    """A hands ids[8] a copy bounded at ids[9], then one at ids[0], both narrower than the flood's own (ids[2]). Had
    the second pass gone only as far as the wider copy's bound, A's second copy would have spent it and ids[1] would
    miss R's RA; it goes to R."""
    reached, unvouched = routers_advert_reached(hostile_copy=True, bounds=(9, 0))
    print(f"A's two copies first: R's RA reached {len(reached)} of 9 other nodes ({reached}), {unvouched} unvouched")
    assert reached == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert unvouched == 0


def test_a_member_replaying_the_statement_makes_no_node_pass_it_on_more_than_twice() -> None:
    """After R's statement went round, A replays it to ids[8] 3,000 times: its genuine bytes with every bound it may
    write there (from ids[8] itself up to R, in steps), and with its signature's bytes replaced. ids[8] checks no
    signature again; it passes the statement on once more, to R, for the first copy wider than what it passed, and
    what it passes is the statement it checked; every node down the arc does the same at most once; then nothing."""
    net, ids, macs = chorded_ring()
    r, a, b = ids[3], ids[4], ids[8]
    statements: list[bytes] = []
    signed = _adverts(net, r).statement

    def signing(router: int, frame: bytes) -> bytes | None:
        statement = signed(router, frame)
        statements.extend([] if statement is None else [statement])
        return statement

    _adverts(net, r).statement = signing  # type: ignore[method-assign]
    net.inject(r, 1, advert(macs[r], macs[r]))
    statement = statements[0]
    garbled = statement[:-8] + bytes(8)  # the same body, a signature nobody checked
    before = {n: _adverts(net, n).counts.copy() for n in ids if n != r}
    assert all(before[n]["taken"] == 1 for n in before)
    frames = net.frames_on_tunnels
    # Every bound A may write at ids[8] (`_plausible`: at or past it, at R at the farthest), narrow to wide.
    span = (r - b) % RING_SIZE
    bounds = [(b + span * k // 1000) % RING_SIZE for k in range(1001)]
    replays = [frb.pack(frb.broadcast(body, root_nid=r, bound_nid=bound, hop_count=2))
               for bound in bounds for body in (statement, garbled)] + [
        frb.pack(frb.broadcast(statement, root_nid=r, bound_nid=r, hop_count=2))] * 998
    switch = net.nodes[b].switch
    packet_in = switch.packet_in
    spent = 0.0

    def timed(*args: Any, **kwargs: Any) -> Any:  # ids[8]'s controller's own time, not the fake network's
        nonlocal spent
        started = time.perf_counter()
        actions = packet_in(*args, **kwargs)
        spent += time.perf_counter() - started
        return actions

    switch.packet_in = timed  # type: ignore[method-assign]
    for wire in replays:
        net.from_neighbour(b, a, wire)
    after = {n: _adverts(net, n).counts for n in ids if n != r}
    copies = after[b]["copies"] - before[b]["copies"]  # the rest the packet-in budget of A's port stopped first
    signer = ec.generate_private_key(ec.SECP256R1())  # what one check of a statement costs here, now
    signature = signer.sign(statement, ec.ECDSA(hashes.SHA256()))
    started = time.perf_counter()
    for _ in range(50):
        signer.public_key().verify(signature, statement, ec.ECDSA(hashes.SHA256()))
    check = (time.perf_counter() - started) / 50
    passes_again = {ids.index(n): after[n]["widened"] for n in after if after[n]["widened"]}
    sent = net.frames_on_tunnels - frames
    print(f"{len(replays)} replays at ids[8], {copies} past its packet-in budget: {spent / len(replays) * 1e6:.0f} us "
          f"of its controller each (one signature check: {check * 1e6:.0f} us), {sent} frames sent, passed once more "
          f"at {passes_again}")
    assert all(after[n]["taken"] == 1 for n in after)  # no statement checked again
    assert all(after[n]["refused_signature"] == 0 for n in after)  # the garbled copies went nowhere
    assert all(after[n]["widened"] <= 1 for n in after)
    assert passes_again == {8: 1, 9: 1, 0: 1, 1: 1}  # down R's arc from ids[8], once each
    assert sent == 4  # ids[8] to ids[9], on to ids[2], each bounded at R; ids[2] got it from R with that bound
    assert copies >= 1000
    assert spent / len(replays) < check  # no signature check per replay, and less than one costs


def test_a_pass_the_flood_budget_stopped_does_not_stand_for_the_flood_s_own_copy() -> None:
    """A member could spend its port's flood share for R at a node, then send R's statement with the bound the
    flood's own copy will have: taken, but not passed. Only a pass that went is noted, so the flood's copy still goes.
    And what goes is the statement as checked, whatever signature bytes the copy came with."""
    router, mac = 0x3000, "02:00:00:00:00:33"
    key = ec.generate_private_key(ec.SECP256R1())
    statement = RouterAdverts("ov1", key, lambda _: None, lambda: 1.8e9).statement(router, advert(mac, mac))
    assert statement is not None
    here = RouterAdverts("ov1", None, {router: key.public_key()}.get, lambda: 1.8e9)
    assert here.take(statement, router, 2, frozenset({router}), {mac: router}, 0.0) == (router, None)
    garbled = statement[:-8] + bytes(8)

    def to_pass(copy: bytes, reach: int) -> tuple[bytes, int] | None:
        """What `here` would pass on for `copy` (the statement's bytes, how far), None for nothing."""
        passing = here.to_pass(copy, reach, 100)
        return None if passing is None else (passing[0].frame, passing[1])

    assert to_pass(garbled, 5) == (statement, 5)  # the flood budget stops it: `passed` not told
    assert to_pass(statement, 5) == (statement, 5)  # so the next copy still has the first pass
    first = here.to_pass(statement, 5, 100)
    assert first is not None
    here.passed(first[0], 5)
    assert to_pass(statement, 5) is None
    assert to_pass(garbled, 6) == (statement, 100)  # wider: once more, as far as the root
    here.passed(first[0], 100)
    assert to_pass(statement, 100) is None
    assert here.counts["widened"] == 1 and here.counts["taken"] == 1
