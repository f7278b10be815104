"""Review21h H9: the XMPP server, asking in every member's name, makes a node serialize and send its whole member
list once per member every 10 s: cost O(members^2).

Attack: an ask for our member list (`{"ask": overlay}`, `SignalEndpoint._answer_members`) is answered when its
sender's bare JID is on the list, at most once per `MEMBERS_ANSWER_INTERVAL` (10 s) *per account*, with
`member_list.to_text(ml)` computed afresh each time; nothing bounds the answers overall. Messages through the XMPP
server carry whatever sender the server writes: a hostile or compromised server sends one ask in the name of every
listed account, every 10 s. The node serializes its list (size proportional to the members) once per member and
uploads it: n asks of O(n) each. (A member alone can ask once per 10 s, as designed.)

Measured (FakeSignalHub client in member-list mode, this machine, load ~2.3): asks in the names of the 2,000
members of a 2,000-member list, in one (virtual) second, drew 2,000 answers of the whole list: 262 MB to upload
and 9.0 s of the event loop (the test below uses 800 members to stay quick). At 20,000 members it would be 20,000
answers of about 1.3 MB each per 10 s. Severity medium (the server's sending effort is small, the node's cost
quadratic).

Fixed: answers over all askers are budgeted (`MEMBERS_ANSWER_RATE`, 8 per 10 s; askers without a proven claim
here, whose asks the server may write, 2 of them, `MEMBERS_ANSWER_UNPROVEN_RATE`), dropped as `overloaded` past
it; the list's text is made once per serial (`SignalEndpoint._member_text`).
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

from evio.signal import member_list
from evio.tunnel.path.overlay_ca import make_overlay_ca
from tests.unit.signal.test_member_list_message import Recorder, _client

NOW = datetime.datetime.now(datetime.UTC)
MEMBERS = 800


def test_asks_in_every_members_name_do_not_each_draw_the_whole_list(tmp_path: Path) -> None:
    ca = make_overlay_ca("ov1 CA", NOW, 3650)
    members = {n + 10: f"m{n}@x.test" for n in range(MEMBERS)} | {5: "a@x.test"}
    held = member_list.sign_members(ca[0], "ov1", 4, int(time.time()), members)
    client = _client(tmp_path, held, "a@x.test", 5, ca)
    sent = Recorder(client).sent
    started = time.perf_counter()
    for n in range(MEMBERS):  # the server writes one ask in each member's name
        client._members_message(f"m{n}@x.test/evio", '{"ask": "ov1"}')
    spent = time.perf_counter() - started
    size = sum(len(text) for _, text in sent)
    assert len(sent) <= 20, f"{len(sent)} answers of the whole list ({size / 1e6:.0f} MB), {spent:.2f} s of the loop"
