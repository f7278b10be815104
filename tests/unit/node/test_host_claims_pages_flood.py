"""A node hosting more than one page of MACs (a site gateway) announces them all, paced (evio/node/host_claims.py,
review21e E1), on the in-memory medium of test_host_claims_flood (every node hears every frame, by the tunnel to
its sender, and checks it under the sender's share there)."""

from __future__ import annotations

from evio.node import host_claims as hcf
from evio.signal import host_claims
from tests.unit.node.test_host_claims_flood import fleet, link


def lan(n: int) -> tuple[str, ...]:
    return tuple(f"02:1a:00:00:{i >> 8:02x}:{i & 255:02x}" for i in range(n))


async def test_a_gateway_names_all_its_hosts_in_pages_paced_and_a_change_resends_only_its_page() -> None:
    medium, nodes, clock = fleet(4)
    gateway, others = nodes[0], nodes[1:]
    hosts = lan(200)
    gateway.set_hosted(hosts)
    assert medium.frames == 1  # page 0 at once, the rest one each PAGE_GAP
    await clock.advance(3 * hcf.PAGE_GAP)
    assert medium.frames == 4 and gateway.status()["pages"] == 4
    await clock.advance(hcf.OWNERS_INTERVAL)  # the last page's change told at most OWNERS_INTERVAL later (review21i I2)
    for node in others:
        assert node.told[-1] == dict.fromkeys(hosts, gateway.node_id)
        assert node.counts["taken"] == 4 and node.counts["refused_verify_rate"] == 0
    assert gateway.counts["macs_over_cap"] == 0
    await clock.advance(hcf.MIN_INTERVAL)
    gateway.set_hosted(tuple(m for m in hosts if m != hosts[150]))  # a host on page 2 left
    assert medium.frames == 5  # that page alone
    assert all(hosts[150] not in node.told[-1] and len(node.told[-1]) == 199 for node in others)
    await clock.advance(host_claims.LIFETIME / 3)  # the refresh: every page again but page 0
    await clock.advance(4 * hcf.PAGE_GAP)
    # Page 0 (the interface's, the keep-alive's) at each WAY_KEEPALIVE meanwhile (review21j J2): 240, 480 s; at 600 s
    # it went 120 s ago, so the refresh sends pages 1-3 only.
    keepalives = int(host_claims.LIFETIME / 3 // hcf.WAY_KEEPALIVE)
    assert medium.frames == 5 + keepalives + 3 and all(node.counts["refused_verify_rate"] == 0 for node in others)


async def test_a_gateway_past_the_bound_counts_the_rest_and_a_newcomer_gets_every_page_unrefused() -> None:
    medium, nodes, clock = fleet(4)
    gateway, neighbour, newcomer = nodes[0], nodes[1], nodes[3]
    medium.nodes.remove(newcomer)  # not linked yet
    bound = host_claims.MAX_PAGES * host_claims.MAX_MACS
    gateway.set_hosted(lan(bound + 10))
    await clock.advance(host_claims.MAX_PAGES * hcf.PAGE_GAP)
    assert gateway.counts["macs_over_cap"] > 0 and len(neighbour.told[-1]) == bound
    assert neighbour.counts["refused_verify_rate"] == 0
    medium.nodes.append(newcomer)
    await clock.advance(hcf.MIN_INTERVAL)
    newcomer.set_hosted(("02:00:00:00:02:01",))
    link(newcomer, neighbour)  # it hears the gateway only from its neighbour's catch-up, 16 pages
    await clock.advance(hcf.MIN_INTERVAL + host_claims.MAX_PAGES * hcf.PAGE_GAP + 1.0)
    print(f"catch-up: {neighbour.counts['catchup_sent']} frames, newcomer holds {len(newcomer.told[-1])} MACs, "
          f"refused over budget {newcomer.counts['refused_verify_rate']}")
    assert newcomer.counts["refused_verify_rate"] == 0
    assert len([m for m, n in newcomer.told[-1].items() if n == gateway.node_id]) == bound


async def test_the_page_naming_the_interface_goes_again_within_a_macs_max_age() -> None:
    """review21j J2: a switch holds a member's certified MAC on its floods' way only while it hears them within a
    MAC's max age (300 s); the page naming the interface's MAC goes every WAY_KEEPALIVE, one frame, that page only."""
    from dataclasses import fields

    from evio.sdn.boundary import AttachOverlay

    max_age = next(f.default for f in fields(AttachOverlay) if f.name == "mac_max_age")
    assert isinstance(max_age, float) and max_age > hcf.WAY_KEEPALIVE
    medium, nodes, clock = fleet(2)
    gateway = nodes[0]
    gateway.set_hosted(lan(100))  # two pages
    await clock.advance(2 * hcf.PAGE_GAP)
    assert medium.frames == 2
    await clock.advance(hcf.WAY_KEEPALIVE)
    assert medium.frames == 3
    await clock.advance(hcf.WAY_KEEPALIVE)
    assert medium.frames == 4


async def test_an_idle_overlays_keepalive_and_refresh_start_a_quarter_frame_per_node_a_minute() -> None:
    """Issue 23's bound for an idle overlay (at most 1 multicast started per node a minute, IPv6 on) against the
    keep-alive of review21j J2. Each frame a node starts crosses the tunnels to the n - 1 others once (the medium
    stands in for the flood), so across the tunnels the keep-alive costs 0.25 (n - 1) frames a node a minute.
    The refresh leaves the keep-alive's page to it, and that page sent for any reason (a change, a link-up, the
    refresh) restarts its keep-alive: a node of one page starts 0.25 a minute (it was 0.35 with the keep-alive on
    its own clock beside the refresh), one of p pages 0.25 + 0.1 (p - 1); none goes quiet for a MAC's max age."""
    import time

    n = 16
    medium, nodes, clock = fleet(n)
    sent: list[tuple[float, int, int]] = []  # (when, sender, page) of every flooded announcement
    send = medium.send

    def recording(sender: hcf.HostClaimsFlood, frame: bytes, to: bytes = hcf.BROADCAST) -> None:
        if to == hcf.BROADCAST:
            sent.append((clock.now(), sender.node_id, host_claims.parse(sender.overlay, frame, time.time()).page))
        send(sender, frame, to)  # type: ignore[arg-type]

    medium.send = recording  # type: ignore[method-assign]
    for i, node in enumerate(nodes):
        node.set_hosted(lan(100) if i == 0 else (f"02:1b:00:00:00:{i:02x}",))  # node 0: a gateway of two pages
    await clock.advance(host_claims.LIFETIME)  # settled: refreshes and keep-alives came
    start, hour = clock.now(), 3600.0
    del sent[:]
    await clock.advance(hour)
    per_minute = [len([1 for _, by, _ in sent if by == node.node_id]) * 60 / hour for node in nodes]
    crossing = len(sent) * (n - 1) * 60 / hour
    print(f"idle, n = {n}: started a minute by a node of one page {per_minute[1]:.2f}, of two {per_minute[0]:.2f};"
          f" frames crossing tunnels a minute, all nodes {crossing:.0f} ({crossing / n:.2f} a node)")
    assert per_minute[1:] == [60 / hcf.WAY_KEEPALIVE] * (n - 1)  # 0.25: the refresh adds none
    assert per_minute[0] == 60 / hcf.WAY_KEEPALIVE + 60 / (host_claims.LIFETIME / 3)  # + page 1's refresh: 0.35
    assert max(per_minute) <= 0.5  # well under issue 23's 1 (the hosts' own IPv6 upkeep shares that 1)
    for node in nodes:  # the interface's page (page 0 here) keeps the ways: never a MAC's max age (300 s) without
        times = [at for at, by, page in sent if by == node.node_id and page == 0]
        assert max(b - a for a, b in zip([start, *times], [*times, start + hour])) <= hcf.WAY_KEEPALIVE + 1e-6
