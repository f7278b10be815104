"""Node ids bound to their owner (issue 21, H2): a member cannot take over another member's node id.

The attack: hostile account A links to member M; a newer session of A announces M's node id (refused while M is
present, but held pending); A's own id "leaves", so M checks its membership by logging in again; while M is away
A's pending claim was the only one, so it won, and M coming back was refused (NODE_ID_CONFLICT) on every node.
"""

from __future__ import annotations

import logging

import pytest

from evio.signal.drops import DropReason
from evio.signal.peers import PeerTable
from evio.signal.protocol import Announcement, Membership
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until

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
    from evio.tunnel.dtls import TunnelCertificate
    from evio.tunnel.overlay_ca import issue_node_certificate, make_overlay_ca

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
    finally:
        await fleet.stop_all()
