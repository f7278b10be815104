"""The os-ken adapter (`evio.sdn.ofapp.BoundedFloodApp`) driven without a switch or os-ken's loop.

`make_app` builds the app on a `ControllerChannel` whose commands and events the test holds, with a
`ManualTime` clock; `connect` hands it a `FakeDatapath` as os-ken would (features, then port
descriptions); the datapath keeps every message the app sends, encoded once to prove it encodes.
"""

from __future__ import annotations

from typing import Any

from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

from evio.sdn.boundary import CollectingSink, CommandQueue, ControllerChannel
from evio.sdn.ofapp import BoundedFloodApp, ControllerConfig
from evio.testing.virtual_clock import ManualTime


class FakeDatapath:
    """What the adapter needs of an os-ken Datapath: the OF 1.3 codec, an id, and send_msg."""

    def __init__(self, dpid: int = 0x1234) -> None:
        self.ofproto = ofproto_v1_3
        self.ofproto_parser = ofproto_v1_3_parser
        self.id = dpid
        self.sent: list[Any] = []
        self.xid = 0

    def send_msg(self, msg: Any) -> None:
        self.set_xid(msg)
        msg.serialize()  # proves the message encodes
        self.sent.append(msg)

    def set_xid(self, msg: Any) -> None:
        self.xid += 1
        msg.set_xid(self.xid)

    def packet_outs(self) -> list[Any]:
        return [m for m in self.sent if isinstance(m, ofproto_v1_3_parser.OFPPacketOut)]


class FakeMsg:
    """An OpenFlow message as a handler reads it: just the attributes given."""

    def __init__(self, **kw: object) -> None:
        self.__dict__.update(kw)


class FakeEvent:
    """An os-ken event around `msg`, with any other attributes given."""

    def __init__(self, msg: object = None, **kw: object) -> None:
        self.msg = msg
        self.__dict__.update(kw)


def port_desc(no: int, name: str, mac: str) -> Any:
    """A port description as the switch reports it in its port-desc reply."""
    return ofproto_v1_3_parser.OFPPort(no, mac, name.encode(), 0, 0, 0, 0, 0, 0, 0, 0)


def make_app(**kw: Any) -> tuple[BoundedFloodApp, CommandQueue, CollectingSink, ManualTime]:
    """The app with `kw` as more `ControllerConfig` settings: (app, its commands, its events, its clock)."""
    sink = CollectingSink()
    channel = ControllerChannel(sink)
    clock = ManualTime()
    app = BoundedFloodApp(evio_controller=ControllerConfig(channel, clock=clock, **kw))
    return app, channel.commands, sink, clock


def connect(app: BoundedFloodApp, dp: FakeDatapath, ports: list[Any]) -> None:
    """The switch connects: its features, then its ports (`port_desc`s)."""
    app.switch_features(FakeEvent(FakeMsg(datapath=dp)))
    app.port_desc_reply(FakeEvent(FakeMsg(datapath=dp, body=ports)))
