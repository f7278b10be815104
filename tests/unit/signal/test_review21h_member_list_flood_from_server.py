"""Review21h H2: the XMPP server (or a member we asked) makes a node parse 8 MB member lists without end.

Attack: a `<members>` message from the server's domain is always taken (`SignalEndpoint._members_message`), and
`receive_member_list` runs `member_list.load` on the whole text (up to `MAX_TEXT_BYTES`, 8 MB, 65,536 entries each
matched by a regex and parsed as a node id) before it looks at the serial or the CA's signature. Nothing bounds how
often: a hostile or compromised XMPP server sends the same junk list (any serial, a signature of zeros) back to back,
and every one costs the node's event loop a full parse. A member can do the same at a lower rate: each presence
hint with a new serial draws an ask (`_ask_members`: held back only for the *same* serial), and its answer is
parsed in full too.

Measured (this machine, load ~2.2): `member_list.load` of a 4.1 MB list of 65,536 entries costs 0.12 s; an 8 MB
one about 0.24 s. Below, 20 junk lists from the server domain within one (virtual) second are all parsed (20
loads, all refused as unsigned afterwards), i.e. 4-5 s of the loop per second at 8 MB each: every tunnel's
keepalives and every signaling answer of the node stall while the server keeps sending.

Fixed: a list's overlay and serial are read from its head first (`_LIST_HEAD_RE`): not newer than ours, it is
not parsed; the full parses of lists from messages share a budget (`MEMBERS_PARSE_RATE`: 2 at once, then one per
`MEMBERS_ASK_INTERVAL`), one more list (the highest serial) is held and parsed when the budget allows, the others
dropped as `peer_overloaded`; and the XMPP client bounds a stanza's size (H5).
"""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import pytest

from evio.signal import endpoint as mod
from evio.signal import member_list
from evio.signal.endpoint import OverlayIdentity
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

NOW = datetime.datetime.now(datetime.UTC)


def test_junk_member_lists_from_the_server_are_not_parsed_without_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca_key, ca_cert = make_overlay_ca("ov1 CA", NOW, 3650)
    key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], 5, NOW, 30)
    held = member_list.sign_members(ca_key, "ov1", 3, int(time.time()), {5: "a@x.test"})
    path = tmp_path / "member-list.json"
    path.write_text(member_list.to_text(held))
    ident = OverlayIdentity(TrustAnchor("ov1", (ca_cert,)), cert, key, members=held, member_file=path)
    clock = VirtualClock()
    client = FakeSignalHub(clock).client("a@x.test", {"ov1": 5}, identities={"ov1": ident})
    entries = [[f"{i + 1:032x}", f"user{i}@x.test"] for i in range(20_000)]  # smaller than the cap: a quick test
    junk = json.dumps({"overlay": "ov1", "serial": 99, "issued": 1, "members": entries, "sig": "AAAA"})
    loads = 0
    real_load = member_list.load

    def counting_load(text: str) -> member_list.MemberList:
        nonlocal loads
        loads += 1
        return real_load(text)

    monkeypatch.setattr(mod.member_list, "load", counting_load)
    started = time.perf_counter()
    for _ in range(20):  # one virtual second: the server sends back to back
        client._members_message("x.test", junk)
    spent = time.perf_counter() - started
    assert client.listed_members("ov1") == held  # refused: the CA did not sign it
    assert loads <= 2, f"{loads} junk lists of {len(junk)} bytes parsed in full, {spent:.2f} s of the loop"


async def test_a_good_list_past_the_parse_budget_is_held_and_taken_when_the_budget_allows(tmp_path: Path) -> None:
    ca_key, ca_cert = make_overlay_ca("ov1 CA", NOW, 3650)
    key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], 5, NOW, 30)
    held = member_list.sign_members(ca_key, "ov1", 3, int(time.time()), {5: "a@x.test"})
    good = member_list.sign_members(ca_key, "ov1", 7, int(time.time()), {5: "a@x.test", 6: "b@x.test"})
    path = tmp_path / "member-list.json"
    path.write_text(member_list.to_text(held))
    ident = OverlayIdentity(TrustAnchor("ov1", (ca_cert,)), cert, key, members=held, member_file=path)
    clock = VirtualClock()
    client = FakeSignalHub(clock).client("a@x.test", {"ov1": 5}, identities={"ov1": ident})
    junk = json.dumps({"overlay": "ov1", "serial": 99, "issued": 1, "members": [], "sig": "AAAA"})
    client._members_message("x.test", member_list.to_text(held))  # not newer: not parsed, no budget spent
    for _ in range(2):
        client._members_message("x.test", junk)  # the budget's burst
    client._members_message("x.test", junk.replace("99", "5"))  # held, then replaced by the higher serial
    client._members_message("x.test", member_list.to_text(good))
    assert client.listed_members("ov1") == held and client.drop_counts()["peer_overloaded"] == 1
    await clock.advance(mod.MEMBERS_ASK_INTERVAL)
    assert client.listed_members("ov1") == good
