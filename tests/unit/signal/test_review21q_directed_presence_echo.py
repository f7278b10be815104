"""Review21q Q2 (low): a listed member makes a node answer every presence of its with a directed presence.

Attack: presence to linked peers only (decision 0059): `SignalEndpoint._presence_available` answers a member's
presence with our own directed presence (`_send_directed(sender, answer=True)`) when the sender was not told yet
*or its member-list hint changed* (`changed`: it took a newer list and may have refused ours). Nothing bounds how
often: a listed member (its claim proven once, then cached per session) sends presences from one session whose
`evio_members` hint alternates between two serials ({"ov1": 3}, {"ov1": 4}, ...), and every one is answered with
our presence, identity element and all (our proofs and every revocation list we hold: up to 13 KB with one full
list, against the member's ~0.9 KB presence).

Impact: the node sends, and the XMPP server carries, one presence per presence the member sends (up to ~15 times
its bytes when the node holds long revocation lists), for as long as the member keeps at it; the server's own
stanza shaper is the only bound. Low: the member pays the presence it sends, and the node's cost per answer is small.

Measured (FakeSignalHub client in links mode, the member listed and proven): 1,000 presences from `b@x.test/r1`
with the hint alternating, 1,000 directed presences sent back (754 bytes of identity element each here); no drop
counted.

Fixed (decision 0080): a changed hint is answered again at most once per `HINT_ANSWER_INTERVAL` (10 s) per session
(`SignalEndpoint._answer_presence`); one held back is counted `hint_answer_rate` and owed: the sender's next presence
after the interval whose hint differs from the one we answered is answered (an honest member that took a newer
list and still misses us tells us again within a recontact round).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path

from evio.signal import identity, member_list, protocol
from evio.signal.endpoint import HINT_ANSWER_INTERVAL, OverlayIdentity
from evio.signal.protocol import Announcement, Membership
from evio.testing.fake_signal import FakeSignalClient, FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

NOW = datetime.datetime.now(datetime.UTC)
PRESENCES = 1000


async def test_a_member_toggling_its_hint_is_not_answered_every_presence(tmp_path: Path) -> None:
    clock = VirtualClock()
    node, presence = await _node_and_member(tmp_path, clock)
    answered: list[str] = []
    node._send_directed = lambda to, answer: answered.append(to)  # type: ignore[method-assign]
    for i in range(PRESENCES):
        presence({"ov1": 3 + i % 2})
    print(f"{PRESENCES} presences from one session, hint alternating: {len(answered)} directed presences back")
    assert len(answered) <= 10
    # Held back and counted: those whose hint differs from the one answered (every other one).
    assert node.drop_counts().get("hint_answer_rate", 0) == PRESENCES // 2


async def test_a_hint_change_held_back_is_answered_at_the_next_presence_after_the_interval(tmp_path: Path) -> None:
    clock = VirtualClock()
    node, presence = await _node_and_member(tmp_path, clock)
    answered: list[str] = []
    node._send_directed = lambda to, answer: answered.append(to)  # type: ignore[method-assign]
    presence({"ov1": 3})  # the session's first: answered
    presence({"ov1": 3})  # nothing changed: not answered
    await clock.advance(HINT_ANSWER_INTERVAL)
    presence({"ov1": 4})  # took a newer list: answered
    presence({"ov1": 5})  # and another, at once: held back
    assert answered == ["b@x.test/r1"] * 2
    await clock.advance(HINT_ANSWER_INTERVAL)
    presence({"ov1": 5})  # told us again (its recontact round): what was owed is answered
    presence({"ov1": 5})
    assert answered == ["b@x.test/r1"] * 3
    node._presence_unavailable("b@x.test/r1")
    presence({"ov1": 5})  # a new session of it a moment after its last answer: owed (review21s finding 2)
    assert answered == ["b@x.test/r1"] * 3
    await clock.advance(HINT_ANSWER_INTERVAL)  # and answered when the interval ends
    assert answered == ["b@x.test/r1"] * 4


async def test_a_member_that_just_took_our_list_is_answered_at_once_and_once(tmp_path: Path) -> None:
    """A newcomer's presence under an older list, then under ours (it took our list and may have refused our
    presence under the older one): both answered at once, or its first links wait for the next recontact round
    (the UDP-blocked site's lab: 21 s). A member toggling back and forth gets no more for it."""
    clock = VirtualClock()
    node, presence = await _node_and_member(tmp_path, clock)
    answered: list[str] = []
    node._send_directed = lambda to, answer: answered.append(to)  # type: ignore[method-assign]
    presence({"ov1": 2})  # the session's first: answered
    presence({"ov1": 3})  # took our serial 3 a moment later: answered at once
    assert answered == ["b@x.test/r1"] * 2
    for i in range(PRESENCES):
        presence({"ov1": 2 + (i + 1) % 2})  # 2, 3, 2, 3, ...: our serial again, but never above the one answered
    assert answered == ["b@x.test/r1"] * 2
    assert node.drop_counts().get("hint_answer_rate", 0) == PRESENCES // 2


Presence = Callable[[dict[str, int]], None]


async def _node_and_member(tmp_path: Path, clock: VirtualClock) -> tuple[FakeSignalClient, Presence]:
    """Node a (links mode, member list serial 3), and a presence of listed, proven member b saying `hint`."""
    ca_key, ca_cert = make_overlay_ca("ov1 CA", NOW, 3650)
    key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], 5, NOW, 30)
    b_key, b_cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], 6, NOW, 30)
    listed = member_list.sign_members(ca_key, "ov1", 3, int(NOW.timestamp()), {5: "a@x.test", 6: "b@x.test"})
    member_file = tmp_path / "member-list.json"
    member_file.write_text(member_list.to_text(listed))
    ident = OverlayIdentity(TrustAnchor("ov1", (ca_cert,)), cert, key, member_file=member_file, members=listed)
    node = FakeSignalHub(clock).client("a@x.test", {"ov1": 5}, identities={"ov1": ident})
    await node.start()
    announcement = protocol.encode_announcement(Announcement((Membership("ov1", 6),), protocol.FEATURES))
    proof = identity.make_proof(b_key, b_cert, "b@x.test/r1", "ov1", 6)
    document = identity.encode(identity.IdentityDocument((proof,)))

    def presence(hint: dict[str, int]) -> None:
        node._presence_available("b@x.test/r1", announcement, document, members_json=json.dumps(hint))

    return node, presence
