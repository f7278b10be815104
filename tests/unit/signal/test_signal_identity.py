"""Node ids bound to their owner (issue 21, H2): a member cannot take over another member's node id.

The attack: hostile account A links to member M; a newer session of A announces M's node id (refused while M is
present, but held pending); A's own id "leaves", so M checks its membership by logging in again; while M is away
A's pending claim was the only one, so it won, and M coming back was refused (NODE_ID_CONFLICT) on every node.
"""

from __future__ import annotations

import datetime
import logging
import time

import pytest

from evio.signal import identity
from evio.signal.drops import DropReason
from evio.signal.endpoint import OverlayIdentity
from evio.signal.events import PeerRemoved, RemovalCause
from evio.signal.peers import PeerTable
from evio.signal.protocol import Announcement, Membership
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

D = "x.test"
M, A, X = f"m@{D}", f"a@{D}", f"x@{D}"
M_ID, A_ID, X_ID = 0x1 << 124, 0x2 << 124, 0x3 << 124


def ann(overlay: str, node_id: int) -> Announcement:
    return Announcement((Membership(overlay, node_id),))


def test_squatter_does_not_take_over_when_the_owner_logs_in_again() -> None:
    t = PeerTable(f"{X}/evio", {"ov1": X_ID})
    for bare in (M, A):
        t.set_membership(bare, {"ov1"})
    t.on_available(f"{M}/r1", ann("ov1", M_ID))
    t.on_available(f"{A}/r1", ann("ov1", A_ID))
    squat = t.on_available(f"{A}/r2", ann("ov1", M_ID))  # a newer session of A claims M's id
    assert [r.reason for r in squat.refused] == [DropReason.NODE_ID_CONFLICT]
    t.on_unavailable(f"{M}/r1", returning=True)  # M logs in again (triggered by A's id leaving)
    assert t.jid_of("ov1", M_ID) is None, "the squatter took M's id while M was away"
    back = t.on_available(f"{M}/r2", ann("ov1", M_ID))
    assert back.refused == []
    assert t.jid_of("ov1", M_ID) == f"{M}/r2"


async def test_squat_plus_triggered_relogin_over_the_fake_server() -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    hub.set_group("ov1", [M, A, X])
    m = hub.client(M, {"ov1": M_ID}, resource="evio-m")
    a = hub.client(A, {"ov1": A_ID}, resource="evio-a")
    x = hub.client(X, {"ov1": X_ID}, resource="evio-x")
    for c in (m, a, x):
        await c.start()
    await wait_until(lambda: len(x.peers("ov1")) == 2 and len(m.peers("ov1")) == 2, 5.0, clock=clock)
    squatter = hub.client(A, {"ov1": M_ID}, resource="evio-squat")  # the newer session, M's id
    await squatter.start()
    await wait_until(lambda: A_ID not in x.peers("ov1"), 5.0, what="A's own id leaves", clock=clock)
    hub.kick(m.full_jid)  # a membership check of M's (a linked peer left): it logs in again at once
    await wait_until(lambda: m.connected and m.sessions == 2, 5.0, clock=clock)
    await clock.advance(2.0)
    for observer in (x, a):
        assert observer.peers("ov1").get(M_ID) == m.full_jid, f"{observer.full_jid} gave M's id to the squatter"
    assert x.drops.count(DropReason.NODE_ID_CONFLICT) >= 1  # the squat is counted


def test_an_account_binds_one_id_per_overlay_and_bindings_outlive_our_reconnect() -> None:
    t = PeerTable(f"{X}/evio", {"ov1": X_ID})
    for bare in (M, A):
        t.set_membership(bare, {"ov1"})
    for n in range(5, 10):  # A cycles through ids: only the last stays bound to it
        t.on_available(f"{A}/r", ann("ov1", n))
    assert [t.bound_account("ov1", n) for n in range(5, 10)] == [None] * 4 + [A]
    t.on_available(f"{M}/r", ann("ov1", M_ID))
    t.clear()  # our own session ended
    assert t.bound_account("ov1", M_ID) == M
    for bare in (M, A):
        t.set_membership(bare, {"ov1"})
    squat = t.on_available(f"{A}/r2", ann("ov1", M_ID))
    assert squat.events == [] and [r.reason for r in squat.refused] == [DropReason.NODE_ID_CONFLICT]
    t.retain_bindings({A: frozenset({"ov1"})})  # the server's list after our login: M is gone
    assert t.bound_account("ov1", M_ID) is None


def test_status_says_when_an_overlay_has_no_trust_anchor() -> None:
    import datetime

    from evio.cli.status_cmd import _trust_line
    from evio.node.status import trust_document
    from evio.tunnel.path.dtls import TunnelCertificate
    from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca

    now = datetime.datetime.now(datetime.UTC)
    bare = trust_document(None, now)
    assert bare["mode"] == "fingerprint-only" and "XMPP server can stand in" in bare["risk"]
    assert _trust_line(bare).startswith("trust: FINGERPRINT ONLY")
    ca_key, ca_cert = make_overlay_ca("ov1 CA", now, 3650)
    key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], M_ID, now, 30)
    doc = trust_document(TunnelCertificate(key, cert), now, revoked=2)
    assert doc["mode"] == "ca" and doc["cert_days_left"] in (29, 30) and doc["revoked_nodes"] == 2
    assert "overlay CA" in _trust_line(doc)


async def test_a_node_without_trust_warns_once_per_overlay_and_shows_it(caplog: pytest.LogCaptureFixture) -> None:
    from evio.testing.node_fleet import Fleet

    fleet = Fleet(2, overlays=("ov1", "ov2"), clock=VirtualClock())
    with caplog.at_level(logging.WARNING, logger="evio.node.overlay_stack"):
        await fleet.start()
    try:
        warnings = [r.getMessage() for r in caplog.records if "XMPP server can stand in" in r.getMessage()]
        assert sorted(w.split(":")[0] for w in warnings) == ["overlay ov1", "overlay ov1", "overlay ov2", "overlay ov2"]
        status = fleet.nodes[1].status()
        assert {ov: doc["trust"]["mode"] for ov, doc in status["overlays"].items()} == {
            "ov1": "fingerprint-only", "ov2": "fingerprint-only"}
        assert status["overlays"]["ov1"]["signal"]["drops"] == {}  # refused signaling input, by reason
    finally:
        await fleet.stop_all()


# ---------------------------------------------------------------------------- trust mode


def _pki(names: dict[str, int], days: int = 30) -> tuple[object, dict[str, OverlayIdentity]]:
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert = make_overlay_ca("ov1 CA", now, 3650)
    anchor = TrustAnchor("ov1", (ca_cert,))
    out = {}
    for bare, node_id in names.items():
        key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], node_id, now, days)
        out[bare] = OverlayIdentity(anchor, cert, key)
    return ca_key, out


async def _trust_fleet(clock: VirtualClock, ids: dict[str, OverlayIdentity]) -> tuple[FakeSignalHub, dict]:
    hub = FakeSignalHub(clock)
    hub.set_group("ov1", [M, A, X])
    clients = {bare: hub.client(bare, {"ov1": nid}, resource=f"evio-{bare[0]}", identities={"ov1": ids[bare]})
               for bare, nid in ((M, M_ID), (A, A_ID), (X, X_ID))}  # fmt: skip
    return hub, clients


async def test_trust_mode_a_proven_owner_takes_its_id_back_from_an_unproven_squatter() -> None:
    clock = VirtualClock()
    _, ids = _pki({M: M_ID, A: A_ID, X: X_ID})
    hub, c = await _trust_fleet(clock, ids)
    await c[X].start()
    await c[A].start()
    # A squats M's id before M ever logged in, with a session that sends no proof (as an old node would) ...
    old_style = hub.client(A, {"ov1": M_ID}, resource="evio-squat")
    await old_style.start()
    await wait_until(lambda: c[X].peers("ov1").get(M_ID) == old_style.full_jid, 5.0, clock=clock)
    # ... and with A's own certificate, which names A's id, not M's: not proven
    forged = hub.client(A, {"ov1": M_ID}, resource="evio-forged", identities={"ov1": ids[A]})
    await forged.start()
    await clock.advance(1.0)
    assert c[X].drops.count(DropReason.UNPROVEN) >= 1
    # M arrives with a proof: the id is M's, on every node, for good
    await c[M].start()
    await wait_until(lambda: c[X].peers("ov1").get(M_ID) == c[M].full_jid, 5.0, clock=clock)
    assert c[X]._table.bound_account("ov1", M_ID) == M
    hub.kick(c[M].full_jid, status_relogin=True)
    await wait_until(lambda: c[M].sessions == 2, 5.0, clock=clock)
    await clock.advance(2.0)
    assert c[X].peers("ov1").get(M_ID) == c[M].full_jid


async def test_trust_mode_a_revocation_list_spreads_from_one_member_and_is_honoured() -> None:
    clock = VirtualClock()
    ca_key, ids = _pki({M: M_ID, A: A_ID, X: X_ID})
    hub, c = await _trust_fleet(clock, ids)
    for client in c.values():
        await client.start()
    await wait_until(lambda: all(len(cl.peers("ov1")) == 2 for cl in c.values()), 5.0, clock=clock)
    removed: list[PeerRemoved] = []
    c[X].subscribe(PeerRemoved, removed.append)
    until = int(time.time()) + 30 * 86400
    rl = identity.sign_list(ca_key, "ov1", 1, int(time.time()), {A_ID: until})
    forged = identity.sign_list(_pki({})[0], "ov1", 9, int(time.time()), {M_ID: until})
    assert not c[M].receive_revocation_list(identity.list_to_text(forged), "test")  # not our CA: refused, counted
    assert c[M].drops.count(DropReason.BAD_REVOCATION) == 1
    start = clock.now()
    assert c[M].receive_revocation_list(identity.list_to_text(rl), "test")  # one member has it ...
    await wait_until(lambda: A_ID in c[X].revoked_nodes("ov1"), 5.0, clock=clock)  # ... so X gets it from M
    print(f"revocation list from one member to the others: {clock.now() - start:.3f} s (virtual)")
    assert clock.now() - start < 5.0
    assert A_ID not in c[X].peers("ov1") and A_ID not in c[M].peers("ov1")
    assert [(e.node_id, e.cause) for e in removed] == [(A_ID, RemovalCause.MEMBERSHIP_REVOKED)]
    # A logging in again is refused; an older list does not undo the newer one
    hub.kick(c[A].full_jid)
    await clock.advance(2.0)
    assert A_ID not in c[X].peers("ov1") and c[X].drops.count(DropReason.REVOKED) >= 1
    older = identity.sign_list(ca_key, "ov1", 0, 0, {})
    assert not c[X].receive_revocation_list(identity.list_to_text(older))
    assert c[X].revocation_list("ov1") == rl


async def test_a_removed_members_id_is_revoked_even_when_a_waiting_claim_takes_it_at_once() -> None:
    """Found by the property test: M is removed while A's session waits for M's id; the id passes to A in the
    same membership update, which must not stop X from closing M's tunnels (remembered as M's, not A's)."""
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    hub.set_group("ov1", [M, A, X])
    m = hub.client(M, {"ov1": M_ID}, resource="evio-m")
    a = hub.client(A, {"ov1": A_ID}, resource="evio-a")
    x = hub.client(X, {"ov1": X_ID}, resource="evio-x")
    for c in (m, a, x):
        await c.start()
    await wait_until(lambda: len(x.peers("ov1")) == 2, 5.0, clock=clock)
    squatter = hub.client(A, {"ov1": M_ID}, resource="evio-squat")
    await squatter.start()
    await clock.advance(1.0)
    removed: list[PeerRemoved] = []
    x.subscribe(PeerRemoved, removed.append)
    hub.kick(m.full_jid, relogin=False, status_relogin=True)  # M away, saying it comes back
    await clock.advance(0.5)
    hub.set_group("ov1", [A, X])  # ... and removed meanwhile
    await clock.advance(1.0)
    assert (M_ID, RemovalCause.MEMBERSHIP_REVOKED) in [(e.node_id, e.cause) for e in removed]
    assert x.peers("ov1").get(M_ID) == squatter.full_jid  # the id is free now: the waiting claim has it


async def test_trust_mode_each_members_certificate_key_is_known_from_its_proven_presence() -> None:
    # Offers along the ring are sealed to the target's key (decision 0064): every member's comes with its presence,
    # checked against the overlay CA and its node id; an unproven claim gives none, a revoked member's is withheld.
    clock = VirtualClock()
    ca_key, ids = _pki({M: M_ID, A: A_ID, X: X_ID})
    hub, c = await _trust_fleet(clock, ids)
    for client in c.values():
        await client.start()
    await wait_until(lambda: all(len(cl.peers("ov1")) == 2 for cl in c.values()), 5.0, clock=clock)
    for node_id, bare in ((M_ID, M), (A_ID, A)):
        key = c[X].certificate_key("ov1", node_id)
        assert key is not None and key.public_numbers() == ids[bare].cert.public_key().public_numbers()
    assert c[X].certificate_key("ov1", X_ID + 1) is None and c[X].certificate_key("ov2", M_ID) is None
    forged = hub.client(A, {"ov1": X_ID + 1}, resource="evio-forged", identities={"ov1": ids[A]})  # A's cert, another id
    await forged.start()
    await clock.advance(1.0)
    assert c[M].drops.count(DropReason.UNPROVEN) >= 1 and c[M].certificate_key("ov1", X_ID + 1) is None
    rl = identity.sign_list(ca_key, "ov1", 1, int(time.time()), {A_ID: int(time.time()) + 86400})
    assert c[X].receive_revocation_list(identity.list_to_text(rl), "test")
    assert c[X].certificate_key("ov1", A_ID) is None
