"""The first packet's messages packed by hand are byte for byte what os-ken serializes for the same actions."""

from __future__ import annotations

import pytest
from os_ken.ofproto import ofproto_v1_3

from evio.sdn import openflow_wire
from evio.sdn.flow_actions import AddFlow, DeleteFlow, DeleteFlowsToMac, FlowMatch, PacketOut
from evio.sdn.openflow_messages import to_ofp_messages
from evio.testing.fake_ofapp import FakeDatapath
from evio.testing.frames import H1, H2, eth

MATCHES = [FlowMatch(1, H1, H2), FlowMatch(ofproto_v1_3.OFPP_LOCAL, "02:ff:00:00:00:01", "ff:ff:ff:ff:ff:fe")]


def osken_bytes(action: object, xid: int) -> bytes:
    (msg,) = to_ofp_messages(FakeDatapath(), action)  # type: ignore[arg-type]
    msg.set_xid(xid)
    msg.serialize()
    return bytes(msg.buf)


@pytest.mark.parametrize("action", [
    PacketOut(2, eth(H2, H1)),
    PacketOut(ofproto_v1_3.OFPP_LOCAL, eth(H1, H2, payload=b"z" * 1400)),
    *[AddFlow(m, 7, 30) for m in MATCHES],
    AddFlow(MATCHES[0], ofproto_v1_3.OFPP_LOCAL, 0, priority=11, hard_timeout=600, counted=True),
    *[DeleteFlow(m) for m in MATCHES],
])
def test_each_packed_message_is_what_os_ken_serializes(action: object) -> None:
    for xid in (1, 0xFFFF_FFFF):
        assert openflow_wire.encode(action, xid) == osken_bytes(action, xid)  # type: ignore[arg-type]


def test_other_actions_are_left_to_os_ken() -> None:
    assert openflow_wire.encode(DeleteFlowsToMac(H1), 1) is None
