"""Presence to linked peers only (decision 0059) through a real prosody: no roster group at all.

Real SignalClients in trust mode whose membership is the overlay CA's member list: each has the presence of
every contact it picked (its ring neighbours and fingers), the server tells the contacts of a member that
stops (it tracks directed presence), a member back is known again, a revocation list handed to one member
reaches its contacts in its directed presence, an account the CA's list does not name is refused even with a
certificate of the CA, and after a server restart every member knows its contacts again. Run with -s for the
times.
"""

from __future__ import annotations

import datetime
import random
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from evio.signal import identity, member_list
from evio.signal.client import SignalClient, SignalSettings
from evio.signal.drops import DropReason
from evio.signal.endpoint import OverlayIdentity
from evio.testing.prosody import DOMAIN, LocalProsody, local_prosody, running_prosody
from evio.testing.waiting import wait_until
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

pytestmark = pytest.mark.integration

OV = "ov1"
MEMBERS = [f"n{i}" for i in range(10)]
STRANGER = "stranger"
_rng = random.Random(59)
IDS = {u: _rng.getrandbits(128) for u in [*MEMBERS, STRANGER]}
NOW = datetime.datetime.now(datetime.UTC)
CA_KEY, CA_CERT = make_overlay_ca("ov1 CA", NOW, 3650)
ANCHOR = TrustAnchor(OV, (CA_CERT,))
LISTED = member_list.sign_members(CA_KEY, OV, 1, int(time.time()), {IDS[u]: f"{u}@{DOMAIN}" for u in MEMBERS})
BOUND = 15.0  # seconds: generous on a loaded 2-core machine (they take well under one)


def client(server: LocalProsody, name: str) -> SignalClient:
    key, cert = issue_node_certificate(CA_KEY, CA_CERT, [OV], IDS[name], NOW, 30)
    settings = SignalSettings(
        jid=f"{name}@{DOMAIN}", server="127.0.0.1", port=server.port, memberships={OV: IDS[name]},
        password=f"pw-{name}", insecure_plaintext=True, reconnect_base=0.2, reconnect_cap=2.0,
        identities={OV: OverlayIdentity(ANCHOR, cert, key, members=LISTED)},
    )  # fmt: skip
    return SignalClient(settings, rng=random.Random(IDS[name]))


def know_contacts(clients: list[SignalClient]) -> bool:
    return all(c.contacts(OV) and c.contacts(OV) <= c.peers(OV).keys() for c in clients)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocalProsody]:
    with local_prosody(tmp_path / "prosody", [*MEMBERS, STRANGER], {}) as prosody:  # no group: no roster
        yield prosody


async def test_members_with_no_roster_know_their_contacts_and_see_one_leave_and_return(server: LocalProsody) -> None:
    clients = [client(server, u) for u in MEMBERS]
    try:
        start = time.monotonic()
        for c in clients:
            await c.start()
        await wait_until(lambda: know_contacts(clients), BOUND, what="every member knows its contacts")
        print(f"{len(clients)} members know their contacts through prosody: {time.monotonic() - start:.2f} s")
        assert all(c.last_error(OV) is None for c in clients)  # no roster group is no failure here
        assert all(c.drop_counts() == {} for c in clients)

        leaver = clients[3]
        watchers = [c for c in clients if leaver.node_id(OV) in c.peers(OV)]
        assert watchers
        await leaver.stop()
        start = time.monotonic()
        await wait_until(lambda: all(leaver.node_id(OV) not in c.peers(OV) for c in watchers), BOUND,
                         what="the server told the leaver's contacts")  # fmt: skip
        print(f"a member that stopped is gone at its {len(watchers)} contacts: {time.monotonic() - start:.2f} s")
        clients[3] = client(server, MEMBERS[3])
        await clients[3].start()
        await wait_until(lambda: know_contacts(clients), BOUND, what="the member known again")

        held = clients[0]
        until = int(time.time()) + 30 * 86400
        rl = identity.sign_list(CA_KEY, OV, 1, int(time.time()), {IDS[STRANGER]: until})
        assert held.receive_revocation_list(identity.list_to_text(rl), "operator")
        told = [c for c in clients if held.node_id(OV) in c.peers(OV) and c is not held]
        await wait_until(lambda: all(c.revocation_list(OV) == rl for c in told), BOUND,
                         what="the list in the member's directed presence")  # fmt: skip
    finally:
        for c in clients:
            await c.stop()


async def test_a_certified_account_the_list_does_not_name_is_refused(server: LocalProsody) -> None:
    clients = [client(server, u) for u in MEMBERS]
    stranger = client(server, STRANGER)  # a certificate of the CA, the same member list: not in it
    try:
        for c in [*clients, stranger]:
            await c.start()
        await wait_until(lambda: know_contacts(clients), BOUND, what="contacts known")
        for c in clients:
            stranger._send_directed(c.settings.jid, answer=False)  # it tells every member anyway
        await wait_until(lambda: sum(c.drops.count(DropReason.NOT_MEMBER) for c in clients) >= len(clients), BOUND,
                         what="the stranger's presence refused")  # fmt: skip
        assert all(IDS[STRANGER] not in c.peers(OV) for c in clients)
    finally:
        for c in [*clients, stranger]:
            await c.stop()


async def test_after_a_server_restart_every_member_knows_its_contacts_again(tmp_path: Path) -> None:
    with ExitStack() as stack:
        server = stack.enter_context(local_prosody(tmp_path / "prosody", MEMBERS, {}))
        clients = [client(server, u) for u in MEMBERS]
        try:
            for c in clients:
                await c.start()
            await wait_until(lambda: know_contacts(clients), BOUND, what="contacts known")
            sessions = [c.sessions for c in clients]
            stack.close()  # prosody stops: every session ends at once
            await wait_until(lambda: not any(c.connected for c in clients), BOUND, what="sessions ended")
            start = time.monotonic()
            with running_prosody(server.config, server.port):
                await wait_until(lambda: all(c.sessions > s for c, s in zip(clients, sessions, strict=True))
                                 and know_contacts(clients), 60, what="contacts known after the restart")  # fmt: skip
                print(f"{len(clients)} members know their contacts again after a restart: "
                      f"{time.monotonic() - start:.2f} s")  # fmt: skip
        finally:
            for c in clients:
                await c.stop()
