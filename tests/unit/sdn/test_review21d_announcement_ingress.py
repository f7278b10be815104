"""review21d C2: the switch tells the daemon which tunnel a flooded host announcement came in by, and from which
root, so the daemon checks it against that port's budget (decision 0055, amended review21d): forgeries one
neighbour floods under a member's id then cannot starve that member's announcements coming by other tunnels."""

from __future__ import annotations

import json

from evio.sdn import frb
from evio.sdn.boundary import HostAnnouncementFlooded, event_as_dict
from evio.sdn.switch_terms import HOST_CLAIMS_ETHERTYPE
from evio.testing.fake_ofapp import FakeDatapath, FakeEvent, FakeMsg, connect, make_app, port_desc
from evio.testing.frames import BROADCAST, H1, H3, arp_request, eth

LOCAL = 0xFFFFFFFE  # the bridge's own interface, where the daemon reads announcements sent to it


def test_a_flooded_announcement_reaches_the_daemon_with_its_peer_and_root_and_the_leaves_as_before() -> None:
    app, commands, sink, _ = make_app()
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100)
    commands.peer_up("red", "evot200", 200)
    commands.peer_up("red", "evot300", 300)
    connect(app, dp, [port_desc(LOCAL, "evbr", "02:00:00:00:00:aa"), port_desc(5, "evot200", "02:00:00:00:00:05"),
                      port_desc(6, "evot300", "02:00:00:00:00:06")])
    announcement = eth(BROADCAST, H3, HOST_CLAIMS_ETHERTYPE, b"signed bytes" * 20)
    sent = len(dp.packet_outs())
    # Rooted at 150 (200 lies between it and us on the ring, so the copy is plausible), by the tunnel to 200.
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 5},
                                    data=frb.pack(frb.broadcast(announcement, root_nid=150, bound_nid=150, hop_count=2)))))
    flooded = [e for e in sink.events if isinstance(e, HostAnnouncementFlooded)]
    assert flooded == [HostAnnouncementFlooded("red", announcement, 200, 150)]
    # Still delivered to the bridge's interface (and passed on): the switch's work is unchanged.
    assert any(bytes(m.data) == announcement for m in dp.packet_outs()[sent:])
    json.dumps(event_as_dict(flooded[0]))  # the lab's standalone controller writes events as JSON lines
    assert event_as_dict(flooded[0])["frame"] == announcement.hex()
    # Not an announcement (an ARP), or one to a single MAC (a flooded unicast: the interface reads it as
    # sent to it): nothing for the daemon from the switch.
    for inner in (arp_request(H1), eth("02:00:00:00:00:aa", H3, HOST_CLAIMS_ETHERTYPE, b"x" * 60)):
        app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 5},
                                        data=frb.pack(frb.broadcast(inner, root_nid=150, bound_nid=150, hop_count=2)))))
    assert app.overlays["red"].switch.broadcasts_seen == 3  # both came through the switch
    assert [e for e in sink.events if isinstance(e, HostAnnouncementFlooded)] == flooded
    assert not app.overlays["red"].switch.flooded_announcements  # taken after every packet-in
