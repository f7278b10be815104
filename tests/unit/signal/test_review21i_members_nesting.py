"""Review21i I8: a deeply nested `<members>` message from anyone, or member list hint in a presence, raises
RecursionError out of the signal endpoint into slixmpp.

Attack (any XMPP account that can send to the node, a stranger included; attacker b/d): `_members_message` parses a
short text (at most `MAX_MEMBERS_HINT_BYTES`, 4,096) with `json.loads` before looking at the sender, catching
ValueError only; `_read_hint` does the same with a presence's member list serials. 2,048 `[` and as many `]` (4,096
bytes) make CPython's decoder raise RecursionError, which is no ValueError (identity._loads catches both). It leaves
the endpoint; slixmpp's handler wrapper then logs a traceback at ERROR and sends the sender an error stanza, for
each such message. The project's rule: nothing from outside is raised into a loop; dropped and counted instead.

Suggested fix: catch RecursionError with ValueError at both places (or parse with identity._loads), counted
`malformed`.

Fixed: both places catch RecursionError and count the message `malformed` (after: 0 raised, 2 `malformed` for the
message and the presence hint). The same pattern fixed in `token.decode` (evio join), the control socket's
`parse_request` and the config loader (tests/unit/cli/test_review21i_token_nesting.py,
tests/unit/node/test_review21i_control_nesting.py, tests/unit/config/test_review21i_config_nesting.py), and in the
server host's own state files and `evio join`'s look at an existing config.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

from evio.signal import member_list
from evio.signal.endpoint import OverlayIdentity
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

NOW = datetime.datetime.now(datetime.UTC)
NESTED = "[" * 2048 + "]" * 2048


def test_a_deeply_nested_members_message_is_dropped_not_raised(tmp_path: Path) -> None:
    ca_key, ca_cert = make_overlay_ca("ov1 CA", NOW, 3650)
    key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], 5, NOW, 30)
    held = member_list.sign_members(ca_key, "ov1", 3, int(time.time()), {5: "a@x.test"})
    path = tmp_path / "member-list.json"
    path.write_text(member_list.to_text(held))
    ident = OverlayIdentity(TrustAnchor("ov1", (ca_cert,)), cert, key, members=held, member_file=path)
    client = FakeSignalHub(VirtualClock()).client("a@x.test", {"ov1": 5}, identities={"ov1": ident})
    assert len(NESTED) <= 4096
    client._members_message("stranger@elsewhere.test/x", NESTED)  # raised RecursionError before the fix
    assert client.listed_members("ov1") == held
    assert client.drop_counts().get("malformed") == 1
    assert client._read_hint("a@x.test/evio", NESTED) == {}
    assert client.drop_counts().get("malformed") == 2
