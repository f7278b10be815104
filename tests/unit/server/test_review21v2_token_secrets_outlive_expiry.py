"""Review21v2 finding 2 (medium): a join token "expires" but the secrets in it did not; a used token found later in a
chat log still took the member's account, node id and certificate. Fixed by decision 0083: a join token is good for
one join.

Attack (`evio/server/token.py`, `evio/server/members.py`, `evio/server/join.py`): `evio member add` makes the
member's XMPP password, TURN password, node key and node certificate (30 days) and puts them, in the clear (zlib and
base64url under the CA's signature), in the token; `evio join` wrote exactly those to `/etc/evio/<overlay>/` and the
node ran on them. The token's `expires` (24 h) is checked only by `join_token.decode`, against the clock its caller
passes, and nothing on the server host or the node changed a secret after the join. A stranger who reads a used token
a day (or four weeks) later decodes it with an earlier clock (or reads the payload without `decode`) and held the
member's XMPP password (good until the member is removed), TURN password and node key (the certificate lives 30
days): it logged in as the member (the newest session speaks for the account), proved the member's node id to every
other member, and passed the DTLS check for the member's tunnels.

Measured before the fix (fakes of the server host): a token issued at T and used at T + 1 h; at T + 2 d (expired)
it decodes with the clock set back; its XMPP password was still the account's, and its key made a claim proof that
`identity.proof_refusal` accepts for the member's node id at T + 2 d (the certificate is valid 28 more days).

Fixed (decision 0083): `evio join` logs in with the token's password and changes it in-band (XEP-0077) to a fresh
one that only the node's `xmpp.password` (0600) holds, before the config takes its place; the token's password then
logs in nowhere (`tests/integration/server/test_server_membership.py` on real prosody and ejabberd), and a second
use of the token fails at that login with nothing written (`tests/unit/cli/test_join_cmd.py`). The token's key still
signs, but a claim proof names the session's full JID, which needs the account, and a claim from any other account
is refused by every node that holds the CA's member list (which every token of this release carries, so every
joined node runs in links mode): below, the finder, a member of its own, presents the victim's certificate and a
proof from its own session and is dropped as `not_member`.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from evio.cli import join_cmd, main
from evio.server import token as join_token
from evio.server.members import add_member
from evio.signal import identity, member_list
from evio.signal.client import SignalSettings
from evio.signal.drops import DropReason
from evio.signal.endpoint import OverlayIdentity
from evio.signal.errors import PasswordChangeError
from evio.testing.fake_server import FakeAccounts, fake_server_host
from evio.testing.fake_signal import FakeSignalClient, FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until
from evio.tunnel.path.trust import TrustAnchor

ISSUED = datetime.datetime.now(datetime.UTC).replace(microsecond=0)  # `evio join` checks the token on the real clock


def _joined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], FakeAccounts, Path]:
    """node1, node2 and node3 added; node1 joins with `evio join` (its files under tmp_path, the XMPP server faked)."""
    registry, settings, accounts, relay = fake_server_host(tmp_path / "server", ISSUED)
    tokens = [add_member(registry, settings, accounts, relay, "ov1", f"node{i}", ISSUED).token for i in (1, 2, 3)]
    etc = tmp_path / "etc-evio"
    monkeypatch.setattr(join_cmd, "CONFIG_DIR", etc)
    monkeypatch.setattr(join_cmd, "STATE_DIR", tmp_path / "var-lib-evio")
    monkeypatch.setattr(join_cmd, "_open_vswitch_problems", lambda: [])
    monkeypatch.setattr(join_cmd.os, "geteuid", lambda: 0)
    monkeypatch.setattr(join_cmd, "_change_password", accounts.change_password)
    assert main(["join", tokens[0], "--no-start"]) == 0
    return tokens, accounts, etc


def test_a_token_past_its_expiry_is_refused_by_evio_join(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [text, *_], _, _ = _joined(tmp_path, monkeypatch)
    with pytest.raises(join_token.TokenError, match="expired"):
        join_token.decode(text, ISSUED + datetime.timedelta(days=2))


def test_a_used_token_found_later_holds_no_live_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [text, *_], accounts, etc = _joined(tmp_path, monkeypatch)
    found = ISSUED + datetime.timedelta(days=2)  # in a chat log, a day after it expired
    stolen = join_token.decode(text, ISSUED)  # the finder's clock is its own
    assert found > stolen.expires
    kept = etc / "ov1" / "xmpp.password"
    assert accounts.accounts["node1"] == kept.read_text().strip() != stolen.xmpp_password
    assert kept.stat().st_mode & 0o077 == 0
    finder = SignalSettings(jid=stolen.jid, server=stolen.xmpp_server, memberships={"ov1": stolen.node_id},
                            password=stolen.xmpp_password)  # fmt: skip
    with pytest.raises(PasswordChangeError) as refused:
        accounts.change_password(finder, "the finder's")
    assert refused.value.refused


async def test_the_tokens_key_without_the_account_proves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    texts, _, _ = _joined(tmp_path, monkeypatch)
    victim, finder, observer = (join_token.decode(t, ISSUED) for t in texts)
    found = ISSUED + datetime.timedelta(days=2)
    anchor = TrustAnchor("ov1", (x509.load_pem_x509_certificate(victim.ca_pem.encode()),))
    listed = member_list.load(observer.member_list)  # the newest list: all three
    assert listed.members[victim.node_id] == victim.jid

    def own(token: join_token.JoinToken) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = serialization.load_pem_private_key(token.key_pem.encode(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return x509.load_pem_x509_certificate(token.cert_pem.encode()), key

    stolen_cert, stolen_key = own(victim)
    # The key still signs: a proof for the victim's own session verifies, but that session needs the account.
    session = f"{victim.jid}/evio-{victim.node_id:032x}"
    assert identity.proof_refusal(anchor, identity.make_proof(stolen_key, stolen_cert, session, "ov1", victim.node_id),
                                  session, found) is None  # fmt: skip
    # From the finder's own account, a member of the overlay holding the victim's key and certificate:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)

    def member(token: join_token.JoinToken, node_id: int, keys: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
               resource: str | None = None) -> FakeSignalClient:  # fmt: skip
        ident = OverlayIdentity(anchor, *keys, members=listed, member_file=tmp_path / f"{token.node_name}.json")
        return hub.client(token.jid, {"ov1": node_id}, resource=resource, identities={"ov1": ident})

    clients = [member(victim, victim.node_id, own(victim)), member(observer, observer.node_id, own(observer))]
    for c in clients:
        await c.start()
    seen = clients[1]
    await wait_until(lambda: victim.node_id in seen.peers("ov1"), 10, clock=clock, what="the observer sees the victim")
    thief = member(finder, victim.node_id, (stolen_cert, stolen_key), resource="finder")
    await thief.start()
    before = seen.drops.count(DropReason.NOT_MEMBER)
    thief._send_directed(observer.jid, answer=False)
    await clock.advance(1.0)
    holder = seen.peers("ov1").get(victim.node_id, "")
    print(f"token expired {victim.expires:%Y-%m-%d %H:%M}, found {found:%Y-%m-%d %H:%M}: the victim's id held by "
          f"{holder}, the finder's claim dropped as not_member "
          f"{seen.drops.count(DropReason.NOT_MEMBER) - before} time(s)")  # fmt: skip
    assert holder.startswith(victim.jid + "/"), "the token's key, from another account, took the member's node id"
    assert seen.drops.count(DropReason.NOT_MEMBER) > before
    for c in (*clients, thief):
        await c.stop()
