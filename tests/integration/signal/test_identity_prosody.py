"""Identity proofs and revocation lists through a real prosody (issue 21, H2 and M2).

Three real SignalClients in trust mode on a prosody of the test's own: the identity element survives the
server in presence (claims count as proven), a squatting session of one account cannot take another member's
id when that member logs in again, a revocation list handed to one member reaches the others in its presence,
and `ProsodyAdmin.deliver` (what `evio member remove` calls) carries a list to every online member. Run with -s
for the times.
"""

from __future__ import annotations

import datetime
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from evio.server.xmpp_admin import ProsodyAdmin
from evio.signal import identity
from evio.signal.client import SignalClient, SignalSettings
from evio.signal.drops import DropReason
from evio.signal.endpoint import OverlayIdentity
from evio.testing.prosody import DOMAIN, LocalProsody, local_prosody
from evio.testing.waiting import wait_until
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

pytestmark = pytest.mark.integration

OV = "ov1"
USERS = ["n1", "n2", "n3"]
IDS = {u: (i + 1) << 120 for i, u in enumerate(USERS)}
NOW = datetime.datetime.now(datetime.UTC)
CA_KEY, CA_CERT = make_overlay_ca("ov1 CA", NOW, 3650)
ANCHOR = TrustAnchor(OV, (CA_CERT,))
BOUND = 5.0


def client(server: LocalProsody, name: str, node_id: int, resource: str | None = None,
           cert_of: str | None = None) -> SignalClient:  # fmt: skip
    key, cert = issue_node_certificate(CA_KEY, CA_CERT, [OV], IDS[cert_of or name], NOW, 30)
    settings = SignalSettings(
        jid=f"{name}@{DOMAIN}", server="127.0.0.1", port=server.port, memberships={OV: node_id},
        password=f"pw-{name}", insecure_plaintext=True, reconnect_base=0.2, reconnect_cap=2.0, resource=resource,
        identities={OV: OverlayIdentity(ANCHOR, cert, key)},
    )  # fmt: skip
    return SignalClient(settings, rng=random.Random(node_id))


@pytest.fixture
async def overlay(tmp_path: Path) -> AsyncIterator[tuple[LocalProsody, dict[str, SignalClient]]]:
    with local_prosody(tmp_path / "prosody", USERS, {OV: [f"{u}@{DOMAIN}" for u in USERS]}) as server:
        clients = {u: client(server, u, IDS[u]) for u in USERS}
        try:
            for c in clients.values():
                await c.start()
            await wait_until(lambda: all(len(c.peers(OV)) == 2 for c in clients.values()), 30.0, what="presence")
            yield server, clients
        finally:
            for c in clients.values():
                await c.stop()


def revocation(serial: int, *names: str) -> identity.RevocationList:
    until = int(time.time()) + 30 * 86400
    return identity.sign_list(CA_KEY, OV, serial, int(time.time()), {IDS[n]: until for n in names})


async def test_claims_are_proven_through_prosody_and_a_squatter_gets_nothing(overlay: tuple) -> None:
    server, clients = overlay
    n1 = clients["n1"]
    assert all(claims[OV].proven for claims in n1._table._claims.values())  # the element crossed the server
    squat = client(server, "n3", IDS["n2"], resource="squat", cert_of="n3")  # n3's account, n2's id, n3's cert
    await squat.start()
    try:
        await wait_until(lambda: n1.drops.count(DropReason.UNPROVEN) >= 1, 10.0, what="squat counted")
        n2 = clients["n2"]
        n2.check_membership()  # n2 logs in again, as after a linked peer vanished
        await wait_until(lambda: n2.membership_checks == 1 and n2.connected, 10.0, what="n2 back")
        await wait_until(lambda: n1.peers(OV).get(IDS["n2"], "").startswith("n2@"), 10.0, what="n2 holds its id")
        assert clients["n1"].peers(OV)[IDS["n2"]].startswith(f"n2@{DOMAIN}/")
    finally:
        await squat.stop()


async def test_a_list_spreads_through_presence_and_the_server_host_delivers_one(overlay: tuple) -> None:
    server, clients = overlay
    start = time.monotonic()
    assert clients["n1"].receive_revocation_list(identity.list_to_text(revocation(1, "n3")), "operator")
    await wait_until(lambda: IDS["n3"] in clients["n2"].revoked_nodes(OV), BOUND, what="list at n2")
    print(f"revocation list from one member to another through prosody presence: {time.monotonic() - start:.3f} s")
    assert IDS["n3"] not in clients["n2"].peers(OV)
    admin = ProsodyAdmin(DOMAIN, server.config, server.groups_file, prosodyctl=("prosodyctl",))
    second = revocation(2, "n3", "n2")
    start = time.monotonic()
    reached = admin.deliver(OV, identity.NAMESPACE, identity.ELEMENT,
                            identity.encode(identity.IdentityDocument((), (second,))))  # fmt: skip
    assert reached == 3
    await wait_until(lambda: all(c.revocation_list(OV) == second for c in clients.values()), BOUND,
                     what="the server host's list at every member")  # fmt: skip
    print(f"revocation list delivered by the server host (prosody admin shell): {time.monotonic() - start:.3f} s")
    assert IDS["n2"] not in clients["n1"].peers(OV)
