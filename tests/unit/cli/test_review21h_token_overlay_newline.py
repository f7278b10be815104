"""Review21h H11 (low): G2's overlay id and node name checks let a trailing newline through.

Attack: review21g G2 made `token._from_payload` check a token's overlay against `OVERLAY_ID` and its node name
against `NODE_NAME` with `re.match`; both patterns end in `$`, which also matches before a final newline. A token
whose overlay is "ov1\n" (its issuer chooses every field) is taken: `evio join` writes `/etc/evio/ov1\n/` (node.key,
the CA, the passwords) and a config whose overlay id holds a newline, which the config loader accepts too
(its pattern is likewise anchored with `$`). No path leaves /etc/evio, but the id goes into log lines (a forged
second line), interface and bridge names (Linux refuses whitespace in them: the daemon fails at start) and
`evio status`.

Measured: `join_token.decode` of a token for overlay "ov1\n" returned it; `evio join` of it (CONFIG_DIR in a temp
directory, as tests/unit/cli/test_review21g_token_overlay_path.py runs it) exited 0 and wrote `ov1\n/node.key`,
`ov1\n/ca.crt`, ... and `config.json`.

Fixed: every such pattern anchored with \\Z, and the config schema's $ read as JSON Schema means it (the end of the text). Proposed at the review: `fullmatch` (or `\\Z`) for OVERLAY_ID and NODE_NAME, and in the config schema's overlay id and
name patterns, wherever `$` anchors an id. The same `re.match` with `$` is used on operator input in
evio/ids.py OVERLAY_ID (pki_cmd), evio/server/xmpp_admin.py `_LOCALPART` and `_GROUP` (arguments to the XMPP
server's admin tool) and evio/server/init.py `_DNS_LABEL`.
"""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from evio.server import token as join_token
from evio.server.members import add_member
from evio.testing.fake_server import fake_server_host
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca


def test_a_tokens_overlay_with_a_trailing_newline_is_refused(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    registry, settings, accounts, relay = fake_server_host(tmp_path / "server", now, address="203.0.113.10")
    honest = join_token.decode(add_member(registry, settings, accounts, relay, "ov1", "node1", now).token, now)
    overlay = "ov1\n"
    ca_key, ca = make_overlay_ca("hostile", now, 30)
    key, cert = issue_node_certificate(ca_key, ca, [overlay], honest.node_id, now, 30)
    pem = serialization.Encoding.PEM
    hostile = join_token.encode(dataclasses.replace(
        honest, overlay=overlay, member_list="", ca_pem=ca.public_bytes(pem).decode(),
        cert_pem=cert.public_bytes(pem).decode(),
        key_pem=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode(),
    ), ca_key)  # fmt: skip
    with pytest.raises(join_token.TokenError):
        join_token.decode(hostile, now)


def test_the_config_schema_reads_dollar_as_the_end_of_the_text() -> None:
    from evio.config.schema_check import _regex

    assert _regex("^[A-Za-z0-9_-]{1,32}$").search("ov1") is not None
    assert _regex("^[A-Za-z0-9_-]{1,32}$").search("ov1\n") is None
    assert _regex("^a[$]$").search("a$") is not None  # a $ in a class is the character
