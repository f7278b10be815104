"""Review21h H4: presences from invented resources of one account grow the peer table without bound, O(n^2).

Attack: the XMPP server (hostile or compromised; or a member, where the server does not cap resources per
account) sends `available` presences from `b@x.test/r0`, `/r1`, ... each carrying an
announcement. `SignalEndpoint._presence_available` hands every one to `PeerTable.on_available`, which keeps a
claim per full JID (`_claims`, `_entered`, `_sessions[bare]`, `_session_seq`, `_features`) whether or not it is
proven or the account listed (here it is dropped as `not_member`, and kept all the same), with no cap per account
or overall, and settles the account over all its sessions: a presence costs O(sessions of the account).

Measured (trust mode, FakeSignalHub client, this machine, load ~2.3): per presence 2.1 ms at 3,000 sessions of
one account, 5.0 ms at 6,000, 7.7 ms at 9,000, 10.7 ms at 12,000; the table held 12,000 claims. A server
sending a few hundred such presences a second keeps the node's event loop busy for good (every tunnel's
keepalives late, signaling answers stall) and its memory grows with every presence.

Fixed: `PeerTable` keeps at most `MAX_SESSIONS_PER_ACCOUNT` (4) sessions of an account, the newest (the oldest
forgotten, counted `too_many_sessions`), and `MAX_SESSIONS` (65,536) overall (a new session past it refused, counted
alike): a presence costs O(4) whatever the server invents.
"""

from __future__ import annotations

import datetime

from evio.signal import protocol
from evio.signal.endpoint import OverlayIdentity
from evio.signal.protocol import Announcement, Membership
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

NOW = datetime.datetime.now(datetime.UTC)


def test_presences_from_invented_resources_do_not_grow_the_peer_table_without_bound() -> None:
    ca_key, ca_cert = make_overlay_ca("ov1 CA", NOW, 3650)
    key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], 5, NOW, 30)
    ident = OverlayIdentity(TrustAnchor("ov1", (ca_cert,)), cert, key)
    client = FakeSignalHub(VirtualClock()).client("a@x.test", {"ov1": 5}, identities={"ov1": ident})
    announcement = protocol.encode_announcement(Announcement((Membership("ov1", 6),), protocol.FEATURES))
    for i in range(1500):  # the server invents resources of one account, each with the same announcement
        client._presence_available(f"b@x.test/r{i}", announcement)
    sessions = len(client._table._claims)
    assert sessions <= 64, f"{sessions} sessions of b@x.test kept, each presence settled over all of them"
