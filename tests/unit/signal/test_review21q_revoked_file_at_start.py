"""Review21q Q3 (medium): a node with `revoked.json` beside its overlay CA cannot start: its signaling client
raises while it is being made.

Attack (no attacker: the documented revocation procedure): README and docs/operations.md ("To reach the overlay
without the XMPP server, copy that file into any one member's /etc/evio/<overlay>/: the node reads it within
2 s") have the operator drop the CA-signed `revoked.json` beside a node's CA. The running node takes it from its
file watcher; the file stays. At the node's next start (a reboot, an upgrade, or the restart that
`evio member renew` asks for every 30 days) `evio.node.plan.overlay_identity` reads it into
`OverlayIdentity.revocations`; `SignalEndpoint.__init__` adopts it (`_load_initial_lists` -> `_adopt_list`),
which calls `_announce_again` (the list did not come from the server host), and `SignalClient._announce_again`
reads `self._xmpp`, which `SignalClient.__init__` sets only after `super().__init__` returned:
AttributeError out of the constructor (`SystemPlatform.signal_client`), so `evio run` fails.

Impact: every node the operator handed a revocation list to in the documented way stays down from its next
start until someone removes the file: no signaling, no tunnels. The same happens with any list known at start.
Read from the code, not run: a config reload (`Node.reload`) after the file appeared sees the account's settings
changed (`OverlayIdentity.revocations` is compared, unlike its key and member list), stops the account
(`accounts_stopped`) and raises the same AttributeError in `_add_account`, leaving the node without signaling.

Measured: `SignalClient(SignalSettings(..., identities={"ov1": overlay_identity(...)}))` with a one-entry
revoked.json beside the CA raised "AttributeError: 'SignalClient' object has no attribute '_xmpp'". Broken since
the lists came (81cac40): no test builds the real client with a list known at start (the lab drops its file into
a running node; FakeSignalClient fails the same way for the same reason, which is why no fake test does either).

Suggested fix: adopt the initial lists without announcing (nothing was announced yet: the first presence carries
them), e.g. `_adopt_list(..., announce=False)` from `_load_initial_lists`, or set the transport's fields before
`super().__init__`; and a test that starts a node with the file there.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from evio.config.model import TrustConfig
from evio.node.plan import overlay_identity
from evio.server.members import REVOCATION_FILE
from evio.signal import identity
from evio.signal.client import SignalClient, SignalSettings
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca, write_certificate, write_private_key
from evio.tunnel.path.trust import TrustAnchor

NODE, REVOKED = 0x5 << 120, 0x7 << 120


@pytest.mark.xfail(strict=True, raises=AttributeError, reason="review21q Q3: SignalClient's _xmpp read before set")
def test_a_node_with_a_revocation_list_beside_its_ca_makes_its_signaling_client(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert = make_overlay_ca("ov1 CA", now, 3650)
    key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], NODE, now, 30)
    directory = tmp_path / "ov1"  # /etc/evio/ov1/ on a node
    directory.mkdir()
    write_certificate(directory / "ca.crt", ca_cert)
    write_certificate(directory / "node.crt", cert)
    write_private_key(directory / "node.key", key)
    listed = identity.sign_list(ca_key, "ov1", 1, int(now.timestamp()), {REVOKED: int(now.timestamp()) + 86400})
    (directory / REVOCATION_FILE).write_text(identity.list_to_text(listed))  # the operator's copy
    trust = TrustConfig(directory / "ca.crt", directory / "node.crt", directory / "node.key")
    anchor = TrustAnchor.from_file("ov1", trust.ca_file)
    ident = overlay_identity("ov1", anchor, TunnelCertificate.from_files(trust.cert_file, trust.key_file), trust)
    assert ident.revocations == listed
    client = SignalClient(SignalSettings(jid="n@x.test", server="127.0.0.1", password="pw", memberships={"ov1": NODE},
                                         identities={"ov1": ident}))  # fmt: skip
    assert client.revoked_nodes("ov1") == {REVOKED}
