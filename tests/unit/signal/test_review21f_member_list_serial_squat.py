"""Review21f F4: a member's presence claiming a huge member list serial keeps a node from asking honest
contacts for the real newer list (decision 0063's ask in signaling).

The node remembered one (serial, when) per overlay and asked nobody for a serial at or below it within
MEMBERS_ASK_INTERVAL: a hostile contact announcing 10**18 (never answering) every few seconds made every honest
presence with the real newer serial go unasked, and a presence is not sent again until its sender's list
changes. The node never caught up through signaling (in the deadlock case of tokens made one after another,
the only way it had).
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

from evio.signal import endpoint as mod
from evio.signal import member_list
from evio.tunnel.path.overlay_ca import make_overlay_ca
from tests.unit.signal.test_member_list_message import Recorder, _client

NOW = datetime.datetime.now(datetime.UTC)


async def test_f4_a_huge_serial_from_one_contact_does_not_stop_asking_the_others(tmp_path: Path) -> None:
    ca = make_overlay_ca("ov1 CA", NOW, 3650)
    held = member_list.sign_members(ca[0], "ov1", 4, int(time.time()), {5: "a@x.test", 6: "b@x.test"})
    newer = member_list.sign_members(ca[0], "ov1", 5, int(time.time()), {5: "a@x.test", 6: "b@x.test", 7: "c@x.test"})
    a = _client(tmp_path, held, "a@x.test", 5, ca)
    await a.start()
    sent = Recorder(a).sent
    for round_ in range(3):  # the hostile member says it again, higher, within every interval
        a._presence_available("h@x.test/evio", None, None, members_json=f'{{"ov1": {10**18 + round_}}}')
        await a.clock.advance(mod.MEMBERS_ASK_INTERVAL * 0.8)  # type: ignore[attr-defined]
    a._presence_available("b@x.test/evio", None, None, members_json='{"ov1": 5}')  # the real newer list
    assert ("b@x.test/evio", '{"ask": "ov1"}') in sent
    a._members_message("b@x.test/evio", member_list.to_text(newer))
    assert a.listed_members("ov1") == newer
    await a.stop()


async def test_f4_a_contact_saying_the_real_serial_and_never_answering_does_not_stop_asking_the_others(
    tmp_path: Path,
) -> None:
    """The variant: the hostile contact says the very serial the honest ones hold (it hears it in their
    presence), at each interval's end, and never answers: the honest contact's presence fell in its window."""
    ca = make_overlay_ca("ov1 CA", NOW, 3650)
    held = member_list.sign_members(ca[0], "ov1", 4, int(time.time()), {5: "a@x.test", 6: "b@x.test"})
    newer = member_list.sign_members(ca[0], "ov1", 5, int(time.time()), {5: "a@x.test", 6: "b@x.test", 7: "c@x.test"})
    a = _client(tmp_path, held, "a@x.test", 5, ca)
    await a.start()
    sent = Recorder(a).sent
    a._presence_available("h@x.test/evio", None, None, members_json='{"ov1": 5}')
    await a.clock.advance(1.0)  # type: ignore[attr-defined]
    a._presence_available("b@x.test/evio", None, None, members_json='{"ov1": 5}')  # held back: h was asked
    for _ in range(4):
        await a.clock.advance(mod.MEMBERS_ASK_INTERVAL + 0.01)  # type: ignore[attr-defined]
        a._presence_available("h@x.test/evio", None, None, members_json='{"ov1": 5}')
    assert ("b@x.test/evio", '{"ask": "ov1"}') in sent
    assert len(sent) <= 6  # one ask an interval at most
    a._members_message("b@x.test/evio", member_list.to_text(newer))
    assert a.listed_members("ov1") == newer
    await a.stop()
