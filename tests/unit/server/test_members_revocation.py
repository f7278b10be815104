"""`evio member remove` signs a revocation list; `evio member renew` issues 30-day certificates (issue 21, M2)."""

from __future__ import annotations

import argparse
import datetime
import stat
from pathlib import Path

import pytest
from cryptography import x509

from evio.cli.member_cmd import renew_command
from evio.config.model import TrustConfig
from evio.node.plan import overlay_identity
from evio.server.members import (
    CERT_DAYS,
    MemberError,
    Registry,
    add_member,
    load_revocations,
    remove_member,
    renew_member,
    revocation_path,
)
from evio.server.settings import ServerSettings
from evio.signal import identity, member_list
from evio.testing.fake_server import FakeAccounts, FakeRelay, fake_server_host
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.overlay_ca import make_overlay_ca, write_certificate
from evio.tunnel.path.trust import TrustAnchor

NOW = datetime.datetime(2026, 11, 27, 20, 0, tzinfo=datetime.UTC)


@pytest.fixture
def server(tmp_path: Path) -> tuple[Registry, ServerSettings, FakeAccounts, FakeRelay]:
    return fake_server_host(tmp_path, NOW)


def anchor_of(registry: Registry) -> TrustAnchor:
    return TrustAnchor.from_file("ov1", registry.overlay_dir("ov1") / "ca.crt")


def test_certificates_live_30_days(server: tuple) -> None:
    registry, settings, accounts, relay = server
    added = add_member(registry, settings, accounts, relay, "ov1", "n1", NOW)
    from evio.server import token as join_token

    tok = join_token.decode(added.token, NOW)
    cert = x509.load_pem_x509_certificate(tok.cert_pem.encode())
    assert (cert.not_valid_after_utc - NOW).days == CERT_DAYS == 30
    assert registry.load("ov1").members["n1"].cert_expires == f"{cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"


def test_remove_signs_a_list_with_the_node_id_until_its_certificates_expire(server: tuple) -> None:
    registry, settings, accounts, relay = server
    ids = {}
    for name in ("n1", "n2", "n3"):
        ids[name] = add_member(registry, settings, accounts, relay, "ov1", name, NOW).member.node_id
    remove_member(registry, accounts, relay, "ov1", "n1", now=NOW)
    first = load_revocations(registry, "ov1")
    assert first is not None and first.serial == 1 and set(first.revoked) == {ids["n1"]}
    assert identity.list_refusal(anchor_of(registry), first) is None
    assert stat.S_IMODE(revocation_path(registry, "ov1").stat().st_mode) == 0o644
    # ... and handed to the XMPP server for the online members, who verify it against their CA
    ((group, namespace, element, text),) = [d for d in accounts.delivered if d[1] == identity.NAMESPACE]
    assert (group, namespace, element) == ("ov1", identity.NAMESPACE, identity.ELEMENT)
    assert identity.decode(text).revocations == (first,)
    later = NOW + datetime.timedelta(days=31)  # n1's certificate has expired: its entry goes
    remove_member(registry, accounts, relay, "ov1", "n2", now=later)
    second = load_revocations(registry, "ov1")
    assert second.serial == 2 and set(second.revoked) == {ids["n2"]}
    assert identity.list_refusal(anchor_of(registry), second) is None


def test_renew_issues_a_certificate_for_the_same_node_id(server: tuple, tmp_path: Path) -> None:
    registry, settings, accounts, relay = server
    member = add_member(registry, settings, accounts, relay, "ov1", "n1", NOW).member
    renewed = renew_member(registry, "ov1", "n1", NOW + datetime.timedelta(days=25))
    cert = x509.load_pem_x509_certificate(renewed.cert_pem.encode())
    assert anchor_of(registry).refusal(cert, member.node_id, NOW + datetime.timedelta(days=50)) is None
    assert registry.load("ov1").members["n1"].cert_expires == f"{renewed.expires:%Y-%m-%dT%H:%M:%SZ}"
    with pytest.raises(MemberError, match="not a member"):
        renew_member(registry, "ov1", "nobody", NOW)
    # the command writes node.crt and node.key (0600), ready for /etc/evio/<overlay>/
    out = tmp_path / "renewed"
    args = argparse.Namespace(state_dir=registry.state_dir, overlay="ov1", name="n1", days=30, out=out)
    assert renew_command(args) == 0
    assert stat.S_IMODE((out / "node.key").stat().st_mode) == 0o600
    fresh = TunnelCertificate.from_files(out / "node.crt", out / "node.key")
    assert anchor_of(registry).refusal(fresh.cert, member.node_id, datetime.datetime.now(datetime.UTC)) is None
    bad = argparse.Namespace(state_dir=registry.state_dir, overlay="ov1", name="n9", days=30, out=out)
    assert renew_command(bad) == 1


def test_a_node_reads_the_list_beside_its_ca_file(server: tuple, tmp_path: Path) -> None:
    registry, settings, accounts, relay = server
    add_member(registry, settings, accounts, relay, "ov1", "n1", NOW)
    gone = add_member(registry, settings, accounts, relay, "ov1", "n2", NOW).member
    remove_member(registry, accounts, relay, "ov1", "n2", now=NOW)
    node_dir = tmp_path / "etc-evio-ov1"
    node_dir.mkdir()
    (node_dir / "ca.crt").write_bytes((registry.overlay_dir("ov1") / "ca.crt").read_bytes())
    (node_dir / "revoked.json").write_text(revocation_path(registry, "ov1").read_text())
    certificate = TunnelCertificate.generate("n1", NOW)
    trust = TrustConfig(node_dir / "ca.crt", node_dir / "node.crt", node_dir / "node.key")
    ident = overlay_identity("ov1", anchor_of(registry), certificate, trust)
    assert ident.revocations is not None and gone.node_id in ident.revocations.revoked
    (node_dir / "revoked.json").write_text("{not json")
    from evio.node.errors import NodeConfigError

    with pytest.raises(NodeConfigError, match="revoked.json"):
        overlay_identity("ov1", anchor_of(registry), certificate, trust)


def test_a_reload_with_the_same_trust_files_keeps_the_account(server: tuple, tmp_path: Path) -> None:
    """Signaling settings now hold the CA, certificate and key: loaded twice they must still compare equal."""
    from dataclasses import replace

    from evio.node.plan import plan_node
    from evio.node.reload import plan_reload
    from evio.testing.node_fleet import fleet_config
    from evio.tunnel.path.overlay_ca import issue_node_certificate, write_private_key

    registry, settings, accounts, relay = server
    add_member(registry, settings, accounts, relay, "ov1", "n1", NOW)
    ca_key, ca_cert = registry.ca("ov1")
    node_id = registry.load("ov1").members["n1"].node_id
    key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], node_id, datetime.datetime.now(datetime.UTC), 30)
    d = tmp_path / "etc"
    d.mkdir()
    write_certificate(d / "ca.crt", ca_cert)
    write_certificate(d / "node.crt", cert)
    write_private_key(d / "node.key", key)
    config = fleet_config(1)
    config = replace(config, overlays={"ov1": replace(config.overlays["ov1"],
                                                      trust=TrustConfig(d / "ca.crt", d / "node.crt", d / "node.key"))})

    def plan() -> object:
        return plan_node(config, node_id, controller_port=6653, kernel_module_loaded=False,
                         read_password=lambda _: "pw")  # fmt: skip

    first, second = plan(), plan()
    assert first.accounts == second.accounts  # type: ignore[attr-defined]
    assert plan_reload(first, second).changes_nothing  # type: ignore[arg-type]



def test_every_add_and_remove_writes_the_ca_signed_member_list(server: tuple) -> None:
    """member-list.json beside the overlay CA: what a node in presence-to-links mode takes membership from (0059)."""
    registry, settings, accounts, relay = server
    for name in ("n1", "n2", "n3"):
        add_member(registry, settings, accounts, relay, "ov1", name, NOW)
    path = registry.overlay_dir("ov1") / "member-list.json"
    first = member_list.load(path.read_text())
    assert member_list.refusal(anchor_of(registry), first) is None
    assert sorted(first.members.values()) == [f"{n}@{settings.domain}" for n in ("n1", "n2", "n3")]
    assert first.accounts()["n2@" + settings.domain] == registry.load("ov1").members["n2"].node_id
    remove_member(registry, accounts, relay, "ov1", "n2", now=NOW, domain=settings.domain)
    after = member_list.load(path.read_text())
    assert after.serial == first.serial + 1 and f"n2@{settings.domain}" not in after.members.values()
    assert member_list.refusal(anchor_of(registry), after) is None


def test_a_node_with_the_member_list_beside_its_ca_takes_membership_from_it(server: tuple, tmp_path: Path) -> None:
    registry, settings, accounts, relay = server
    add_member(registry, settings, accounts, relay, "ov1", "n1", NOW)
    node_dir = tmp_path / "node"
    node_dir.mkdir()
    (node_dir / "ca.crt").write_bytes((registry.overlay_dir("ov1") / "ca.crt").read_bytes())
    certificate = TunnelCertificate.generate("n1", NOW)
    trust = TrustConfig(node_dir / "ca.crt", node_dir / "node.crt", node_dir / "node.key")
    assert overlay_identity("ov1", anchor_of(registry), certificate, trust).member_file is None  # the roster's
    (node_dir / "member-list.json").write_text((registry.overlay_dir("ov1") / "member-list.json").read_text())
    ident = overlay_identity("ov1", anchor_of(registry), certificate, trust)
    assert ident.member_file == node_dir / "member-list.json" and ident.members is not None
    assert list(ident.members.members.values()) == [f"n1@{settings.domain}"]
    from evio.node.errors import NodeConfigError

    other_key, _ = make_overlay_ca("another", NOW, 10)
    forged = member_list.sign_members(other_key, "ov1", 9, 0, {1: f"x@{settings.domain}"})
    (node_dir / "member-list.json").write_text(member_list.to_text(forged))
    with pytest.raises(NodeConfigError, match="member-list.json: not signed by the overlay CA"):
        overlay_identity("ov1", anchor_of(registry), certificate, trust)
