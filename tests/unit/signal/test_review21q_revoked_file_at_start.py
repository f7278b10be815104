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

Fixed: the lists known at start are adopted without announcing them (the first presence carries them), and
`OverlayIdentity.revocations` is not compared (as `members`): a reload after the file appeared keeps the account,
whose watcher took the list. `tests/unit/node/test_revocation_cases.py` restarts and reloads a node with the file in
place over the fake signaling; the tests below make the real client, at start and through a reload.

Suggested fix: adopt the initial lists without announcing (nothing was announced yet: the first presence carries
them), e.g. `_adopt_list(..., announce=False)` from `_load_initial_lists`, or set the transport's fields before
`super().__init__`; and a test that starts a node with the file there.
"""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

from evio.config.model import Config, TrustConfig
from evio.node.plan import NodePlan, overlay_identity, plan_node
from evio.node.platform import SystemPlatform
from evio.node.reload import plan_reload
from evio.server.members import REVOCATION_FILE
from evio.signal import identity
from evio.signal.client import SignalClient, SignalSettings
from evio.testing.node_fleet import fleet_config
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca, write_certificate, write_private_key
from evio.tunnel.path.trust import TrustAnchor

NODE, REVOKED = 0x5 << 120, 0x7 << 120


def _node_files(directory: Path, now: datetime.datetime) -> tuple[identity.CaKey, TrustConfig]:
    """/etc/evio/ov1/ on a node: the overlay CA, the node's certificate and key. The CA's key, and the config's."""
    ca_key, ca_cert = make_overlay_ca("ov1 CA", now, 3650)
    key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], NODE, now, 30)
    directory.mkdir()
    write_certificate(directory / "ca.crt", ca_cert)
    write_certificate(directory / "node.crt", cert)
    write_private_key(directory / "node.key", key)
    return ca_key, TrustConfig(directory / "ca.crt", directory / "node.crt", directory / "node.key")


def test_a_node_with_a_revocation_list_beside_its_ca_makes_its_signaling_client(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    directory = tmp_path / "ov1"  # /etc/evio/ov1/ on a node
    ca_key, trust = _node_files(directory, now)
    listed = identity.sign_list(ca_key, "ov1", 1, int(now.timestamp()), {REVOKED: int(now.timestamp()) + 86400})
    (directory / REVOCATION_FILE).write_text(identity.list_to_text(listed))  # the operator's copy
    anchor = TrustAnchor.from_file("ov1", trust.ca_file)
    ident = overlay_identity("ov1", anchor, TunnelCertificate.from_files(trust.cert_file, trust.key_file), trust)
    assert ident.revocations == listed
    client = SignalClient(SignalSettings(jid="n@x.test", server="127.0.0.1", password="pw", memberships={"ov1": NODE},
                                         identities={"ov1": ident}))  # fmt: skip
    assert client.revoked_nodes("ov1") == {REVOKED}


def test_a_reload_after_the_file_appeared_keeps_the_account_or_makes_its_real_client(tmp_path: Path) -> None:
    """`Node.reload` with the operator's file in place: the same account is kept (its watcher adopts the file);
    an account changed for another reason is made again, as `evio run` makes it (`SystemPlatform`)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, trust = _node_files(tmp_path / "ov1", now)
    base = fleet_config(1)

    def plan(password: str = "pw") -> NodePlan:
        ov1 = dataclasses.replace(base.overlays["ov1"], trust=trust)
        config: Config = dataclasses.replace(base, overlays={"ov1": ov1},  # lists kept in the test's directory
                                             node=dataclasses.replace(base.node, state_dir=tmp_path / "state"))
        return plan_node(config, NODE, controller_port=6653, kernel_module_loaded=False,
                         read_password=lambda _: password)  # fmt: skip

    running = plan()
    assert running.accounts[0].settings.identities["ov1"].revocations is None
    listed = identity.sign_list(ca_key, "ov1", 1, int(now.timestamp()), {REVOKED: int(now.timestamp()) + 86400})
    (tmp_path / "ov1" / REVOCATION_FILE).write_text(identity.list_to_text(listed))  # the operator's copy
    kept = plan_reload(running, plan())
    assert kept.changes_nothing, kept.summary()
    relogin = plan_reload(running, plan("new password"))
    assert relogin.accounts_started == (running.accounts[0].jid,)
    platform = SystemPlatform(tmp_path / "controller.sock")
    for account in relogin.plan.accounts:
        client = platform.signal_client(account.settings)
        assert client.revoked_nodes("ov1") == {REVOKED}
