"""Review21h H6: every roster push from the server costs a pass over the whole roster (O(n) each, O(n^2) in all).

Attack: `SignalClient` handles slixmpp's `roster_update` (one per roster push, each one IQ from the server) with
`_sync_membership`, which walks every contact of the roster, recomputes every contact's overlays and hands the
whole map to `_membership_changed`. Nothing bounds the roster's size or the pushes' rate. A hostile or compromised
XMPP server (trust mode is meant not to rely on it) pushes tens of thousands of contacts, then keeps pushing one
item at a time: each push costs the node's event loop a pass over all of them. Severity medium.

Measured (the client's own ClientXMPP and `_sync_membership`, `_membership_changed` stubbed, this machine, load
~2.3): one push costs 2.9 ms at 2,000 contacts, 12.4 ms at 8,000, 41.6 ms at 20,000; 25 pushes a second of one
item each at 20,000 contacts keep the loop busy (every tunnel's keepalives late). Below: the roster lookups one
push of one item costs at 3,000 contacts.

Fixed: a push (`roster_update` of an iq of type set) reads the items it names only
(`SignalClient._on_roster_update`, `_sync_membership(xmpp, pushed)`), the endpoint applies the changed accounts
only (`SignalEndpoint._roster_changed`), the contacts taken are capped at `member_list.MAX_MEMBERS` (the rest dropped
as `oversized`), and with every overlay in member-list mode the roster is not read at all.
"""

from __future__ import annotations

from typing import Any

import pytest

from evio.signal.client import SignalClient, SignalSettings


async def test_a_roster_push_of_one_item_does_not_walk_the_whole_roster(monkeypatch: pytest.MonkeyPatch) -> None:
    client = SignalClient(SignalSettings(jid="a@x.test", server="127.0.0.1", password="pw", memberships={"ov1": 1}))
    xmpp = client._make_xmpp()
    monkeypatch.setattr(client, "_membership_changed", lambda current: None)
    roster = xmpp.client_roster
    for i in range(3000):
        roster.add(f"u{i}@x.test", groups=["ov1"], afrom=True, ato=True, save=False)
    client._sync_membership(xmpp)  # the login reads the whole roster once
    node_type = type(roster[xmpp.boundjid.bare])  # the RosterNode whose items _sync_membership reads
    lookups = 0
    real = node_type.__getitem__

    def counting(self: Any, key: Any) -> Any:
        nonlocal lookups
        lookups += 1
        return real(self, key)

    monkeypatch.setattr(node_type, "__getitem__", counting)
    roster.add("u3000@x.test", groups=["ov1"], afrom=True, ato=True, save=False)  # one pushed item
    lookups = 0
    push = xmpp.Iq(stype="set")
    push["roster"]["items"] = {"u3000@x.test": {"subscription": "both", "groups": ["ov1"]}}
    client._on_roster_update(xmpp, push)  # what the roster_update of that push runs (slixmpp applied it first)
    assert lookups <= 100, f"{lookups} roster lookups for a push of one item among 3,001 contacts"
    assert client._roster_membership["u3000@x.test"] == frozenset({"ov1"})


async def test_pushes_applied_one_by_one_give_what_a_whole_read_gives() -> None:
    client = SignalClient(SignalSettings(jid="a@x.test", server="127.0.0.1", password="pw", memberships={"ov1": 1}))
    xmpp = client._make_xmpp()
    roster = xmpp.client_roster
    for i in range(4):
        roster.add(f"u{i}@x.test", groups=["ov1"], afrom=True, ato=True, save=False)
    client._sync_membership(xmpp)
    assert client._membership_failures == {}

    def push(jid: str, subscription: str, groups: list[str]) -> None:
        iq = xmpp.Iq(stype="set")
        iq["roster"]["items"] = {jid: {"subscription": subscription, "groups": groups}}
        if subscription == "remove":  # what slixmpp's own handler did before ours
            del roster[jid]
        else:
            roster.add(jid, groups=groups, afrom=subscription == "both", ato=subscription == "both", save=False)
        client._on_roster_update(xmpp, iq)

    push("u0@x.test", "remove", [])
    push("u1@x.test", "both", ["other"])
    push("u2@x.test", "from", ["ov1"])
    push("u9@x.test", "both", ["ov1"])
    pushed = dict(client._membership)
    assert pushed == {"u3@x.test": frozenset({"ov1"}), "u9@x.test": frozenset({"ov1"})}
    client._sync_membership(xmpp)
    assert client._membership == pushed
    for jid in ("u2@x.test", "u3@x.test", "u9@x.test"):
        push(jid, "remove", [])
    assert client._membership == {} and set(client._membership_failures) == {"ov1"}  # no group left
