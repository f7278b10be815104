"""The lab plan and the commands derived from it: pure, no root."""

from __future__ import annotations

import ipaddress

import pytest

from evio.lab import nat, shaping, wiring
from evio.lab.errors import LabPlanError
from evio.lab.topology import (
    MAX_NAME_LENGTH,
    MAX_NODES,
    PUBLIC_ADDRESS,
    PUBLIC_NETWORK,
    LabPlan,
    lab_prefix,
    nat_kinds,
    owned_by,
    plan_lab,
    target_netns,
    validate_lab_name,
)


def all_names(plan: LabPlan) -> list[str]:
    names = list(plan.namespaces) + [plan.public.bridge, plan.public.sink_interface, plan.public.sink_peer]
    for n in plan.nodes:
        names += [n.lan_interface, n.router_lan_interface, n.router_wan_interface, n.public_port]
    return names


def test_default_lab_prefix_is_short_and_others_carry_their_name() -> None:
    assert lab_prefix("lab") == "evl-"
    assert lab_prefix("t1") == "evlt1-"
    plan = plan_lab("lab", ("eim",) * 2)
    assert plan.public.netns == "evl-pub"
    assert plan.nodes[1].netns == "evl-n2"
    assert plan.nodes[1].router_netns == "evl-r2"


@pytest.mark.parametrize("name", ["", "Lab", "a-b", "toolong", "1ab", "a b", "ab_c"])
def test_bad_lab_names_are_rejected(name: str) -> None:
    with pytest.raises(LabPlanError):
        validate_lab_name(name)


def test_prefixes_never_collide_with_other_helpers_or_labs() -> None:
    # Other users of this machine: evs* (signaling tests), evt* (tunnel tests), evbr-* bridges.
    for name in ("lab", "t1", "s", "t", "a1b2c", "lab2"):
        prefix = lab_prefix(name)
        assert prefix.startswith("evl")
        assert not prefix.startswith(("evs", "evt", "evbr"))
    # No lab's prefix starts another lab's names.
    big = plan_lab("lab", ("eim",) * 12)
    other = plan_lab("n1", ("eim",) * 12)
    assert not any(owned_by("lab", name) for name in all_names(other))
    assert not any(owned_by("n1", name) for name in all_names(big))
    assert all(owned_by("lab", name) for name in all_names(big))


def test_every_name_fits_linux_and_is_unique_at_the_largest_size() -> None:
    plan = plan_lab("abcde", nat_kinds("eim", MAX_NODES))
    names = all_names(plan)
    assert max(len(n) for n in names) <= MAX_NAME_LENGTH
    assert len(set(names)) == len(names)


def test_addresses_are_unique_and_in_their_networks() -> None:
    plan = plan_lab("t1", nat_kinds("mixed", 30))
    wan = [n.wan_address for n in plan.nodes]
    assert len(set(wan)) == len(wan)
    assert all(a in PUBLIC_NETWORK for a in wan)
    assert PUBLIC_ADDRESS not in wan and plan.public.alt_address not in wan
    lans = [n.lan_network for n in plan.nodes]
    assert len(set(lans)) == len(lans)
    for n in plan.nodes:
        assert n.lan_network.subnet_of(ipaddress.IPv4Network("10.0.0.0/8"))
        assert n.address in n.lan_network and n.gateway in n.lan_network and n.address != n.gateway
    overlay = [n.overlay_address for n in plan.nodes]
    assert len(set(overlay)) == len(overlay)
    assert all(not o.network.overlaps(PUBLIC_NETWORK) for o in overlay)
    assert all(not any(o.ip in lan for lan in lans) for o in overlay)


def test_nat_kinds_one_for_all_mixed_and_per_node() -> None:
    assert nat_kinds("symmetric", 3) == ("symmetric",) * 3
    assert nat_kinds("mixed", 4) == ("eim", "symmetric", "none", "eim")
    assert nat_kinds("mixed", 4) == nat_kinds("mixed", 4)  # deterministic
    assert nat_kinds(["none", "eim"], 2) == ("none", "eim")
    with pytest.raises(LabPlanError):
        nat_kinds("full-cone", 2)
    with pytest.raises(LabPlanError):
        nat_kinds(["eim"], 2)
    with pytest.raises(LabPlanError):
        nat_kinds("eim", 0)
    with pytest.raises(LabPlanError):
        nat_kinds("eim", MAX_NODES + 1)


def test_plan_rejects_bad_overlay_and_domain() -> None:
    with pytest.raises(LabPlanError):
        plan_lab("t1", ("eim",), overlay="way-too-long-overlay")
    with pytest.raises(LabPlanError):
        plan_lab("t1", ("eim",), domain="not a domain")


def test_targets() -> None:
    plan = plan_lab("t1", ("eim",) * 3)
    assert target_netns(plan, 2) == "evlt1-n2"
    assert target_netns(plan, "2") == "evlt1-n2"
    assert target_netns(plan, "node3") == "evlt1-n3"
    assert target_netns(plan, "n1") == "evlt1-n1"
    assert target_netns(plan, "router2") == "evlt1-r2"
    assert target_netns(plan, "r3") == "evlt1-r3"
    assert target_netns(plan, "pub") == "evlt1-pub"
    for bad in ("node4", "0", "x1", "evlt1-n1"):
        with pytest.raises(LabPlanError):
            target_netns(plan, bad)


def test_wiring_creates_veths_in_place_and_routes_unnated_lans() -> None:
    plan = plan_lab("t1", ("eim", "none"))
    links = wiring.create_links(plan)
    assert links.netns is None
    assert links.lines[0] == "link add evlt1-e1 netns evlt1-n1 type veth peer name evlt1-l1 netns evlt1-r1"
    assert links.lines[1] == "link add evlt1-w1 netns evlt1-r1 type veth peer name evlt1-p1 netns evlt1-pub"
    public = wiring.configure_public(plan)
    assert "route add 10.10.2.0/24 via 198.51.100.12" in public.lines
    assert not any(line.startswith("route add 10.10.1.") for line in public.lines)  # NATed LAN: not routed
    assert "route add default via 192.0.2.2 dev evlt1-sk0" in public.lines
    router = wiring.configure_router(plan, plan.nodes[0])
    assert router.netns == "evlt1-r1"
    assert "route add default via 198.51.100.1" in router.lines
    node = wiring.configure_node(plan.nodes[0])
    assert "route add default via 10.10.1.1" in node.lines
    settings = wiring.sysctls(plan)
    assert settings["evlt1-r1"]["net/ipv4/ip_forward"] == "1"
    assert settings["evlt1-pub"]["net/ipv4/ip_forward"] == "1"
    assert "net/ipv4/ip_forward" not in settings["evlt1-n1"]
    assert set(settings) == set(plan.namespaces)


def test_neighbour_table_floors_grow_with_the_square_of_the_nodes() -> None:
    floors = {n: wiring.neighbour_table_floors(plan_lab("t1", nat_kinds("mixed", n))) for n in (2, 32, 64)}
    assert set(floors[32]) == {f"net/{f}/neigh/default/gc_thresh{t}" for f in ("ipv4", "ipv6") for t in (2, 3)}
    assert floors[2]["net/ipv4/neigh/default/gc_thresh3"] <= 1024  # small labs fit the kernel's defaults
    for n in (32, 64):
        soft, hard = floors[n]["net/ipv4/neigh/default/gc_thresh2"], floors[n]["net/ipv4/neigh/default/gc_thresh3"]
        assert soft >= 2 * n * (n - 1) and hard == 2 * soft


def test_nat_rulesets() -> None:
    eim = nat.nat_ruleset("eim", "evl-w1")
    sym = nat.nat_ruleset("symmetric", "evl-w1")
    assert eim is not None and sym is not None
    assert 'oifname "evl-w1" masquerade\n' in eim
    assert 'oifname "evl-w1" masquerade random\n' in sym
    for ruleset in (eim, sym):
        # The stateful inbound drop in both input and forward (recipes 4.4, pitfall 1).
        assert ruleset.count('iifname "evl-w1" ct state new drop') == 2
    assert nat.nat_ruleset("none", "evl-w1") is None
    with pytest.raises(ValueError):
        nat.nat_ruleset("eim", 'x" accept')


def test_shaping_lines() -> None:
    assert shaping.shape_lines("evl-w1", 10) == ["qdisc replace dev evl-w1 root tbf rate 10mbit burst 32768 latency 50ms"]
    assert shaping.burst_bytes(1000) == 1_250_000
    htb = shaping.shape_lines("evl-w1", 2.5, "htb")
    assert htb[0] == "qdisc replace dev evl-w1 root handle 1: htb default 1"
    assert "rate 2.5mbit ceil 2.5mbit" in htb[1]
    assert shaping.unshape_lines("evl-w1") == ["qdisc del dev evl-w1 root"]
    with pytest.raises(ValueError):
        shaping.shape_lines("evl-w1", 0)
