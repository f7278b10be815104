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

Fixed (decision 0055, amended review21f F9): an announcement whose certificate was found the CA's here for the id
it names (`Certificates.found`, its hold run out too) costs one signature check (0.08-0.13 ms) and has a budget of
its own, per (port, id) twice what a switch passes on for one root by one port (`KNOWN_MEMBER_RATE`, 200/s), per
port twice a port's floods (800/s): junk rooted at V, passed on by the node past the attacker at V's share of the
attacker's port, is all checked, and V's page with it. The tests below: junk spread over many roots, passed on by
an honest switch at its most, never outruns V's page; what checks cost under junk at the most a port carries; junk
with spoiled certificates under V's id does not starve V once its certificate's hold ran out."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable

import pytest

from evio.node import host_claims as hcf
from evio.ratelimit import Rate
from evio.sdn.flood_shares import FloodShares
from evio.sdn.switch import FLOOD_BURST, FLOOD_RATE, PACKET_IN_RATE, PORT_FLOOD_BURST, PORT_FLOOD_RATE
from evio.signal import host_claims
from evio.testing.virtual_clock import VirtualClock
from tests.unit.node.test_host_claims_flood import OV, Wired, fleet


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


STEP = 0.01  # seconds of virtual time between two rounds of junk
HOST_V0, HOST_V1 = "02:00:00:00:01:01", "02:00:00:00:01:02"


def virtual_wall(nodes: list[Wired], clock: VirtualClock) -> float:
    base = time.time() - clock.now()
    for node in nodes:
        node._wall = lambda: base + clock.now()
    return base


def junk_maker(signer: Wired, member: Wired, node_id: int, issued_ms: int, bad_certificate: bool = False,
               ) -> Callable[[], bytes]:  # fmt: skip
    """Pages naming `node_id` under `member`'s public certificate, signed by `signer` (a refusal costs a check), dated
    ahead within the clock skew (newer than any list held): each call new bytes, so none is a free "refused again".
    `bad_certificate`: the certificate's own CA signature spoiled as well, each time anew (a chain check each)."""
    frame = host_claims.pack(signer._certificate.key, member._certificate.cert, OV, node_id, issued_ms, (HOST_V0,))
    der = host_claims.parse(OV, frame, issued_ms / 1000).der
    end = frame.index(der) + len(der)

    def junk() -> bytes:
        if bad_certificate:  # the last bytes of the certificate are its CA signature's
            return frame[: end - 4] + os.urandom(4) + frame[end:-8] + os.urandom(8)
        return frame[:-8] + os.urandom(8)

    return junk


def counting_checks(monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], list[float]]:
    """Checks done, by class ("chain": the certificate not known here for the id; "known": one signature) and by
    id, and the process time spent in them."""
    checks: Counter[str] = Counter()
    spent = [0.0]
    check = host_claims.check

    def counted(anchor, parsed, now, certificates=None):  # type: ignore[no-untyped-def]
        known = certificates is not None and certificates.key_for(parsed.der, parsed.node_id, now) is not None
        checks["known" if known else "chain"] += 1
        checks[f"id {parsed.node_id:x}"] += 1
        began = time.process_time()
        try:
            return check(anchor, parsed, now, certificates)
        finally:
            spent[0] += time.process_time() - began

    monkeypatch.setattr(host_claims, "check", counted)
    return checks, spent


def every_frame_counted(node: Wired) -> bool:
    outcomes = sum(n for reason, n in node.counts.items() if reason.startswith("refused_"))
    return node.counts["received"] == outcomes + node.counts["taken"] + node.counts["unchanged"] + node.counts["own"]


@pytest.mark.parametrize("roots", [1, 4, 16])
async def test_junk_an_honest_switch_passes_on_at_its_most_never_outruns_the_members_page(
    roots: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A, adjacent to n, sends n junk rooted at `roots` members behind it (V among them) at its packet-in rate
    (1000/s); n, honest, passes on what its switch allows (its real flood shares: by A's port 400/s in all, each
    root its share, at most 100/s); u, past n, hears it all by its port to n, and V's page naming its new host
    by the same port (a chord from V to n), then A's page naming it too. V holds it at u, and u checked every
    frame n passed on: its share of each root's checks is twice what n can pass on of that root."""
    medium, nodes, clock = fleet(roots + 2)
    u, a, named = nodes[0], nodes[1], nodes[2:]
    v = named[0]
    base = virtual_wall(nodes, clock)
    for i, member in enumerate(named):  # u knows each named member's certificate (and list)
        member.set_hosted((HOST_V0,) if member is v else (f"02:00:00:00:02:{i:02x}",))
    medium.nodes.remove(u)
    checks, spent = counting_checks(monkeypatch)
    n_switch = FloodShares[int](Rate(PORT_FLOOD_RATE, PORT_FLOOD_BURST), Rate(FLOOD_RATE, FLOOD_BURST))
    from_a, from_v, port_to_n = a.node_id, v.node_id, 0x4E << 120  # n's ports, and u's port to n
    ahead = int((base + clock.now() + 200) * 1000)  # dated 200 s ahead, within the skew: newer than any list held
    junk = {m.node_id: junk_maker(a, m, m.node_id, ahead) for m in named}
    seconds, offered, passed = 10.0, int(PACKET_IN_RATE * STEP), 0
    for step in range(int(seconds / STEP)):
        await clock.advance(STEP)
        now = clock.now()
        for j in range(offered):
            root = named[(step * offered + j) % roots].node_id
            if n_switch.allow(from_a, root, now):
                passed += 1
                u.receive(junk[root](), b"\x02\x66\0\0\0\1", ingress=port_to_n, root=root)
        if step == int(seconds / STEP) // 2:  # V's host h1 comes up; A, which sees every broadcast, names it too
            wall_ms = int((base + now) * 1000)
            assert n_switch.allow(from_v, v.node_id, now)
            u.receive(host_claims.pack(v._certificate.key, v._certificate.cert, OV, v.node_id, wall_ms,
                                       (HOST_V0, HOST_V1)), v.mac, ingress=port_to_n, root=v.node_id)
            assert n_switch.allow(from_a, a.node_id, now)
            u.receive(host_claims.pack(a._certificate.key, a._certificate.cert, OV, a.node_id, wall_ms, (HOST_V1,)),
                      a.mac, ingress=port_to_n, root=a.node_id)  # fmt: skip
    owner = u.told[-1].get(HOST_V1)
    print(f"{roots} roots: n passed on {passed / seconds:.0f} junk/s of 1000 offered; u checked "
          f"{checks['known'] / seconds:.0f}/s ({spent[0] / seconds * 1000:.1f} ms of CPU a second), refused "
          f"unchecked {u.counts['refused_verify_rate']}; owner of V's new host: "
          f"{'V' if owner == v.node_id else 'A' if owner == a.node_id else None}")
    assert owner == v.node_id
    assert u.counts["refused_verify_rate"] == 0 and u.counts["refused_bad_signature"] == passed
    assert every_frame_counted(u)


async def test_what_checks_cost_under_junk_at_the_most_a_port_carries_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A, adjacent to u, sends u junk at its port's packet-in rate (1000/s) for 10 s, a mix that fills every budget:
    500/s of pages whose certificate is spoiled anew each time (a chain check each, if a cheap one: the CA's
    signature fails) under 100 ids the CA's member list names (each a key of its own), 300/s under V's known
    certificate, 200/s under 4 other members'. The checks stay under each budget (per port: 200 chains, 800
    signatures a second, and their bursts; per id: 5 chains, 200 signatures), every frame is counted, and V's page
    by its own port is taken meanwhile."""
    medium, nodes, clock = fleet(7)
    u, a, v, others = nodes[0], nodes[1], nodes[2], nodes[3:]
    base = virtual_wall(nodes, clock)
    for i, member in enumerate((v, *others)):
        member.set_hosted((f"02:00:00:00:02:{i:02x}",))
    listed = [(0x5A << 120) + i for i in range(100)]
    u.signaling.listed = set(listed)
    checks, spent = counting_checks(monkeypatch)
    ahead = int((base + clock.now() + 200) * 1000)
    chains = [junk_maker(a, v, node_id, ahead, bad_certificate=True) for node_id in listed]
    signed = [junk_maker(a, m, m.node_id, ahead) for m in (v, *others)]
    seconds, per_step = 10.0, int(PACKET_IN_RATE * STEP)  # 10 a step: 5 chains, 3 under V, 2 under the others
    sent = Counter[str]()
    for step in range(int(seconds / STEP)):
        await clock.advance(STEP)
        for j in range(per_step):
            k = step * per_step + j
            if k % 2 == 0:
                n = sent["chain"] % len(listed)
                node_id, frame = listed[n], chains[n]()
            elif k % 10 in (1, 3, 5):
                node_id, frame = v.node_id, signed[0]()
            else:
                member = others[k % 4]
                node_id, frame = member.node_id, signed[1 + k % 4]()
            sent["chain" if k % 2 == 0 else "known"] += 1
            u.receive(frame, a.mac, ingress=a.node_id, root=node_id)
        if step == 500:
            v.set_hosted((HOST_V0, HOST_V1))  # by V's own port: checked there
            assert u.told[-1].get(HOST_V1) == v.node_id
    under_v = checks[f"id {v.node_id:x}"] - 1  # less V's own page
    print(f"{sum(sent.values()) / seconds:.0f} junk/s by one port ({dict(sent)}): checked "
          f"{checks['chain'] / seconds:.0f} chains/s, {checks['known'] / seconds:.0f} signatures/s "
          f"(under V's id {under_v / seconds:.0f}/s): {spent[0] / seconds * 1000:.0f} ms of CPU a virtual second; "
          f"refused unchecked {u.counts['refused_verify_rate']}")
    chain, known, share = hcf.VERIFY_RATE, hcf.KNOWN_VERIFY_RATE, hcf.KNOWN_MEMBER_RATE
    assert seconds * chain.per_second * 0.9 <= checks["chain"] <= chain.burst + seconds * chain.per_second
    assert checks["known"] <= known.burst + seconds * known.per_second
    assert seconds * share.per_second * 0.9 <= under_v <= share.burst + seconds * share.per_second
    assert sum(checks[f"id {m.node_id:x}"] for m in others) == sent["known"] - seconds / STEP * 3  # under their shares
    assert all(checks[f"id {n:x}"] <= hcf.MEMBER_RATE.burst + seconds * hcf.MEMBER_RATE.per_second for n in listed)
    assert u.counts["refused_verify_rate"] > 0 and every_frame_counted(u)


async def test_spoiled_certificates_under_a_members_id_do_not_starve_it_once_its_certificates_hold_ran_out() -> None:
    """u takes V's certificate on trust for `Certificates.HOLD` (an hour), then checks its chain again. Junk under
    V's id with a certificate spoiled anew each time (a chain check each, refused: V's certificate never comes with
    it) at 10/s, twice the chain's share, by the port V's floods come by, would starve V's page there once the hour
    ran out; V's certificate, found the CA's before, still has the signature checks' share."""
    medium, nodes, clock = fleet(3)
    u, v, a = nodes
    base = virtual_wall(nodes, clock)
    v.set_hosted((HOST_V0,))
    medium.nodes.remove(u)
    port, step = a.node_id, 0.1
    spoiled = junk_maker(a, v, v.node_id, int((base + clock.now() + 200) * 1000), bad_certificate=True)
    ahead = clock.now() + 200
    seconds = host_claims.Certificates.HOLD + 60
    for _ in range(int(seconds / step)):
        await clock.advance(step)
        if clock.now() > ahead - 100:  # dated ahead within the skew, anew as time passes
            spoiled = junk_maker(a, v, v.node_id, int((base + clock.now() + 200) * 1000), bad_certificate=True)
            ahead = clock.now() + 200
        u.receive(spoiled(), b"\x02\x66\0\0\0\1", ingress=port, root=v.node_id)
    wall_ms = int((base + clock.now()) * 1000)
    u.receive(host_claims.pack(v._certificate.key, v._certificate.cert, OV, v.node_id, wall_ms, (HOST_V0, HOST_V1)),
              v.mac, ingress=port, root=v.node_id)  # fmt: skip
    u.receive(host_claims.pack(a._certificate.key, a._certificate.cert, OV, a.node_id, wall_ms, (HOST_V1,)),
              a.mac, ingress=port, root=a.node_id)  # fmt: skip
    owner = u.told[-1].get(HOST_V1)
    print(f"after {seconds:.0f} s of spoiled certificates under V's id at 10/s: owner of V's new host "
          f"{'V' if owner == v.node_id else 'A' if owner == a.node_id else None}; {dict(u.counts)}")
    assert u.counts["refused_verify_rate"] > 0  # the junk exceeded the chain's share
    assert owner == v.node_id
