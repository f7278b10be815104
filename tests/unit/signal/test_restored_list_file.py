"""Issue 21 (last review rounds, low): an older `member-list.json` or `revoked.json` put back beside the overlay CA
(an operator restoring a backup, or whoever can write there) set the node's serial back at its next start.

Attack: a node adopted the revocation list and the member list of serial 3 (member R removed and revoked) from the
overlay. The files beside its CA are then replaced by copies of serial 1, and the node restarts: `plan.overlay_identity`
reads them, `SignalEndpoint` starts from serial 1, and takes any CA-signed list above it, serial 2 among them, still
listing R and revoking nobody: R is a member at that node again until serial 3 reaches it.

Fixed (decision 0063, amended): the node keeps the newest list of each kind it adopted in its state directory
(`lists/<overlay>/`, `OverlayIdentity.kept_dir`), apart from the operator's files beside the CA. At start the kept list
goes first; a file beside the CA older than it is not taken, logged ("was a backup put back?") and counted
(`stale_list`), and an older member list file is written over with the kept one. Real files in a temporary directory,
the real client, made twice as `evio run` makes it.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from evio.config.model import Config, TrustConfig
from evio.node.plan import KEPT_LISTS, MEMBER_FILE, REVOCATION_FILE, plan_node
from evio.signal import identity, member_list
from evio.signal.client import SignalClient
from evio.testing.node_fleet import DOMAIN, fleet_config, nid
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca, write_certificate, write_private_key

OV = "ov1"
R, M = 0x7 << 120, 0x9 << 120  # a member removed (and revoked) in serial 3; one that stays
NOW = datetime.datetime.now(datetime.UTC)


def _lists(ca_key: identity.CaKey, serial: int) -> tuple[str, str]:
    """The revocation list and member list of `serial`: R listed, and not revoked, up to serial 2."""
    issued, until = int(time.time()), int(time.time()) + 86400
    members = {nid(1): f"node1@{DOMAIN}", M: f"m@{DOMAIN}"} | ({} if serial >= 3 else {R: f"r@{DOMAIN}"})
    revoked = {R: until} if serial >= 3 else {0x1 << 100: until}
    return (identity.list_to_text(identity.sign_list(ca_key, OV, serial, issued, revoked)),
            member_list.to_text(member_list.sign_members(ca_key, OV, serial, issued, members)))  # fmt: skip


def _node_files(tmp_path: Path) -> tuple[Path, Path, ed25519.Ed25519PrivateKey, Config]:
    """A trust-mode node's files: /etc/evio/ov1/ (the CA, its certificate and key) and /var/lib/evio, and its config."""
    etc, state = tmp_path / "etc" / OV, tmp_path / "state"
    etc.mkdir(parents=True)
    ca_key, ca_cert = make_overlay_ca("ov1 CA", NOW, 3650)
    key, cert = issue_node_certificate(ca_key, ca_cert, [OV], nid(1), NOW, 30)
    write_certificate(etc / "ca.crt", ca_cert)
    write_certificate(etc / "node.crt", cert)
    write_private_key(etc / "node.key", key)
    base = fleet_config(1)
    config = dataclasses.replace(
        base, node=dataclasses.replace(base.node, state_dir=state),
        overlays={OV: dataclasses.replace(base.overlays[OV], trust=TrustConfig(etc / "ca.crt", etc / "node.crt",
                                                                               etc / "node.key"))})  # fmt: skip
    return etc, state, ca_key, config


def _start(config: Config) -> SignalClient:
    """What `evio run` makes: the plan (which reads the files beside the CA), then the account's client."""
    plan = plan_node(config, nid(1), controller_port=6653, kernel_module_loaded=False)
    return SignalClient(plan.accounts[0].settings)


def test_a_list_file_put_back_from_a_backup_does_not_set_the_serial_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    etc, state, ca_key, config = _node_files(tmp_path)
    backup = _lists(ca_key, 1)
    (etc / REVOCATION_FILE).write_text(backup[0])  # the operator's copies, backed up as they are
    (etc / MEMBER_FILE).write_text(backup[1])

    client = _start(config)
    assert (client.revocation_list(OV).serial, client.listed_members(OV).serial) == (1, 1)  # type: ignore[union-attr]
    revocations, members = _lists(ca_key, 3)
    assert client.receive_revocation_list(revocations, "overlay 02:00:00:00:00:02")
    assert client.receive_member_list(members, "overlay 02:00:00:00:00:02")
    assert R in client.revoked_nodes(OV) and not client.is_listed(OV, R)
    assert (state / KEPT_LISTS / OV / REVOCATION_FILE).exists()
    assert {d.stat().st_mode & 0o777 for d in (state, state / KEPT_LISTS, state / KEPT_LISTS / OV)} == {
        0o700}, "the state directory, made here first, is not private"

    (etc / REVOCATION_FILE).write_text(backup[0])  # the backup put back; the node restarts
    (etc / MEMBER_FILE).write_text(backup[1])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="evio.signal.endpoint"):
        client = _start(config)
    held = (client.revocation_list(OV).serial, client.listed_members(OV).serial)  # type: ignore[union-attr]
    print(f"after the restart with serial 1 put back: revocation list {held[0]}, member list {held[1]}; "
          f"drops {client.drop_counts()}")
    assert held == (3, 3), "the node started from the older files"
    assert R in client.revoked_nodes(OV) and not client.is_listed(OV, R)
    assert client.drop_counts().get("stale_list") == 2
    rolled_back = [r.getMessage() for r in caplog.records if "was a backup put back?" in r.getMessage()]
    assert len(rolled_back) == 2 and str(etc / MEMBER_FILE) in rolled_back[1] and "serial 1" in rolled_back[0]
    assert member_list.load((etc / MEMBER_FILE).read_text()).serial == 3, "the older member file was kept"

    older = _lists(ca_key, 2)  # still listing R, revoking nobody: replayed over the overlay
    assert not client.receive_revocation_list(older[0], "overlay 02:00:00:00:00:03")
    assert not client.receive_member_list(older[1], "overlay 02:00:00:00:00:03")
    assert R in client.revoked_nodes(OV) and not client.is_listed(OV, R)


def test_a_newer_file_beside_the_ca_still_wins_and_a_kept_list_of_another_ca_is_ignored(tmp_path: Path) -> None:
    """The operator's newer file (copied while the node was down) is taken over the kept list, and becomes the kept
    one; a kept list the overlay's CA did not sign (the CA replaced) is ignored, and the file taken."""
    etc, state, ca_key, config = _node_files(tmp_path)
    (etc / REVOCATION_FILE).write_text(_lists(ca_key, 2)[0])
    client = _start(config)
    assert client.revocation_list(OV).serial == 2  # type: ignore[union-attr]
    kept = state / KEPT_LISTS / OV / REVOCATION_FILE
    assert identity.load_list(kept.read_text()).serial == 2
    (etc / REVOCATION_FILE).write_text(_lists(ca_key, 3)[0])
    client = _start(config)
    assert client.revocation_list(OV).serial == 3 and identity.load_list(kept.read_text()).serial == 3  # type: ignore[union-attr]
    other_key, _ = make_overlay_ca("another CA", NOW, 3650)
    kept.write_text(_lists(other_key, 9)[0])
    client = _start(config)
    assert client.revocation_list(OV).serial == 3 and client.drop_counts() == {}  # type: ignore[union-attr]
