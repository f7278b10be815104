"""Review21i I5: a member naming another member's MAC makes every node log a warning for each of its announcements.

Attack (a hostile member, attacker a): `HostClaimsFlood._owners_changed` logs "MACs announced by more than one
member" at WARNING every time the owners change while any MAC is disputed, with no `LogLimiter`. Member A names
V's host (disputed: V keeps it, the first claimant) and changes the rest of its own list in each announcement;
each one A's floods carry (100/s per root per port at each switch, 200/s checked by the known-certificate
budget) changes the owners, and every node of the overlay logs one warning line for it.

Measured (in-memory fleet, real flood code): 201 announcements of A in 2 s gave 200 WARNING lines at u. At 100/s
that is 8.6 M lines (about 1.5 GB) a day per node, overlay-wide: under journald's default rate limit (10,000 per
30 s), so all kept, and the journal's size cap rotates the node's other history away.

Fixed: the warning names only the disputed MACs (with their claimants, first first) not logged in the last minute,
by a `LogLimiter` per MAC; a change with none new is counted (`disputed_log_suppressed`). Owners are also worked out
at most every 0.5 s now (I2). After: 201 announcements of A taken at u, 1 warning logged (200 before); V holds its
host.
"""

from __future__ import annotations

import logging
import time

import pytest

from evio.signal import host_claims
from evio.testing.virtual_clock import VirtualClock
from tests.unit.node.test_host_claims_flood import OV, fleet


async def test_a_member_naming_a_disputed_mac_does_not_make_each_announcement_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    medium, nodes, clock = fleet(3)
    assert isinstance(clock, VirtualClock)
    u, v, a = nodes
    host = "02:00:00:00:01:01"
    v.set_hosted((host,))
    assert u.told[-1] == {host: v.node_id}
    medium.nodes.remove(u)
    ac = a._certificate
    base = int(time.time() * 1000) - 60_000
    caplog.set_level(logging.WARNING, logger="evio.node.host_claims")
    caplog.clear()
    for i in range(200):  # 2 s at the rate one root passes one port (FLOOD_RATE, 100/s)
        await clock.advance(0.01)
        frame = host_claims.pack(ac.key, ac.cert, OV, a.node_id, base + i, (host, f"02:aa:00:00:{i >> 8:02x}:{i & 255:02x}"))
        u.receive(frame, a.mac, ingress=a.node_id, root=a.node_id)
    warnings = [r for r in caplog.records if "more than one member" in r.getMessage()]
    print(f"{u.counts['taken']} announcements of A taken at u, {len(warnings)} warnings logged; V holds its host: "
          f"{u.told[-1].get(host) == v.node_id}")
    assert len(warnings) <= 2
