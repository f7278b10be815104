"""review21c: N1 again, against decision 0056 ("the attacker can take the local answering away, never the address").

0056 confirms an address for the MAC of any reply that comes within ASK_WINDOW of a flooded local request. The
attacker sees that request too (it is flooded overlay-wide), so it answers *after* the owner, inside the window:
it has the last word, its claim is marked confirmed, and the address is contested for max_age. It then keeps
speaking for the address (replies nobody asked for, which refresh the entry and never contest it, as its MAC
does not change), while the owner is quiet (its hosts refresh ARP by unicast, over flows: no packet-in). When
the contest ends, every local host's request for the victim's address is answered with the attacker's MAC and
no longer reaches the owner: the original N1, with one extra step. Real BoundedFloodSwitch, as in
test_review21_neighbor_poisoning.py (local host H1; victim's node 200 with H3 at IP3; attacker's node 300).
"""

from __future__ import annotations

import ipaddress

from evio.sdn import frb
from evio.sdn.neighbor_answers import arp_reply
from evio.sdn.switch import BoundedFloodSwitch
from tests.unit.sdn.test_review21_neighbor_poisoning import H1, H3, HA, IP1, IP3, answered_with, switch

IP7 = ipaddress.IPv4Address("10.9.0.7")  # some other address the attacker's unasked replies are "to"


def unasked_reply(sw: BoundedFloodSwitch, now: float) -> None:
    """The attacker's ARP reply for IP3, broadcast in an FRB rooted at itself: not an announcement (sender and
    target addresses differ), not an answer to anything asked here."""
    wire = frb.pack(frb.broadcast(arp_reply(HA, IP3, "ff:ff:ff:ff:ff:ff", IP7), root_nid=300, bound_nid=300,
                                  hop_count=1))  # fmt: skip
    sw.packet_in(11, wire, now=now)


def test_the_attacker_with_the_last_word_in_the_window_is_answered_for_once_the_contest_ends() -> None:
    sw = switch()
    assert answered_with(sw, 1.0) is None  # H1 asks for IP3: flooded
    sw.packet_in(10, arp_reply(H3, IP3, H1, IP1), now=1.01)  # the owner answers: confirmed for H3
    assert answered_with(sw, 1.1) == H3
    assert answered_with(sw, 2.0) == H3  # answered here
    # H1's first request was flooded at 1.0; the attacker answers it at 1.9, inside ASK_WINDOW, after the owner.
    sw.packet_in(11, arp_reply(HA, IP3, H1, IP1), now=1.9)
    assert sw.neighbors.contested == 1
    assert answered_with(sw, 5.0) is None  # contested: flooded, as 0056 says
    # The owner's host answers the flooded request again (it would), and the attacker again has the last word.
    sw.packet_in(10, arp_reply(H3, IP3, H1, IP1), now=5.01)
    sw.packet_in(11, arp_reply(HA, IP3, H1, IP1), now=5.02)
    # Then nobody here asks for a while; the attacker keeps its claim fresh, the owner is quiet.
    t = 5.02
    while t < 5.02 + sw.neighbors.max_age + 50:
        t += 60
        unasked_reply(sw, t)
        sw.expire(t)
    got = answered_with(sw, t + 1)
    assert got != HA, (f"{t + 1 - 5.02:.0f} s after the owner last answered, H1 is answered {got} (the attacker) "
                       "for the owner's address, and the request no longer reaches the owner")
    assert got is None  # flooded: the owner answers, and contests the attacker again


def test_after_a_contest_a_lone_answer_to_the_next_flooded_request_confirms_again() -> None:
    """The fix's cost: an address that changed MAC (a host replaced) floods while contested, then is answered
    for again after one flooded request that only the new MAC answers."""
    sw = switch()
    assert answered_with(sw, 1.0) is None
    sw.packet_in(10, arp_reply(H3, IP3, H1, IP1), now=1.01)
    new_mac = "02:00:00:00:00:3b"
    assert answered_with(sw, 10.0) == H3
    sw.packet_in(10, arp_reply(new_mac, IP3, H1, IP1), now=10.5)  # the replacement answers a retry: contested
    assert sw.neighbors.contested == 1
    assert answered_with(sw, 20.0) is None
    sw.packet_in(10, arp_reply(new_mac, IP3, H1, IP1), now=20.01)  # answered while contested: not confirmed
    after = 20.01 + sw.neighbors.max_age + 1
    sw.packet_in(10, arp_reply(new_mac, IP3, H1, IP1), now=after - 0.5)  # still speaking (an unasked reply)
    assert answered_with(sw, after) is None  # the first request after the contest floods
    sw.packet_in(10, arp_reply(new_mac, IP3, H1, IP1), now=after + 0.01)
    assert answered_with(sw, after + 1) == new_mac
