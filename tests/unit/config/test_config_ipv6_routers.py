"""overlays.<id>.ipv6_routers (decision 0068): node ids, validated with their JSON path, and on to the switch."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from evio.config import loads_config
from tests.unit.config.test_config import problems_of, with_changes

ROUTER = "0123456789abcdef0123456789abcdef"


def test_named_routers_are_node_ids_and_default_to_none() -> None:
    assert loads_config(json.dumps(with_changes("overlays.ov1.policy", []))).overlays["ov1"].ipv6_routers == ()
    config = loads_config(json.dumps(with_changes("overlays.ov1.ipv6_routers", [ROUTER])))
    assert config.overlays["ov1"].ipv6_routers == (int(ROUTER, 16),)


def test_a_bad_router_id_is_named_by_its_path() -> None:
    found = problems_of(with_changes("overlays.ov1.ipv6_routers", [ROUTER, "node1"]))
    assert set(found) == {"$.overlays.ov1.ipv6_routers[1]"}
    assert set(problems_of(with_changes("overlays.ov1.ipv6_routers", [ROUTER, ROUTER]))) == {"$.overlays.ov1.ipv6_routers"}


def _with_addresses(addresses: object, routers: list[str] | None = None) -> dict[str, object]:
    document = with_changes("overlays.ov1.ipv6_routers", [ROUTER] if routers is None else routers)
    document["overlays"]["ov1"]["ipv6_router_addresses"] = addresses
    return document


def test_a_named_routers_addresses_are_pairs_for_the_switch() -> None:
    # review21p: a router whose link-local address is not made from its MAC names it, so no member squats it first.
    config = loads_config(json.dumps(_with_addresses({ROUTER: ["fe80::1", "FE80::66"]})))
    assert config.overlays["ov1"].ipv6_router_addresses == (
        (int(ROUTER, 16), ipaddress.IPv6Address("fe80::1")), (int(ROUTER, 16), ipaddress.IPv6Address("fe80::66")))
    assert loads_config(json.dumps(with_changes("overlays.ov1.policy", []))).overlays["ov1"].ipv6_router_addresses == ()


def test_a_bad_router_address_is_named_by_its_path() -> None:
    at = f"$.overlays.ov1.ipv6_router_addresses.{ROUTER}"
    assert set(problems_of(_with_addresses({ROUTER: ["fe80::1", "2001:db8::1"]}))) == {f"{at}[1]"}
    assert set(problems_of(_with_addresses({ROUTER: ["router"]}))) == {f"{at}[0]"}
    assert set(problems_of(_with_addresses({ROUTER: ["fe80::1"]}, routers=[]))) == {at}
    other = "f" * 32
    both = problems_of(_with_addresses({ROUTER: ["fe80::1"], other: ["fe80::1"]}, routers=[ROUTER, other]))
    assert set(both) == {f"$.overlays.ov1.ipv6_router_addresses.{other}[0]"}
    assert problems_of(_with_addresses({"node1": ["fe80::1"]}))  # not a node id: the schema's
    assert set(problems_of(_with_addresses({ROUTER: []}))) == {at}
    assert set(problems_of(_with_addresses({ROUTER: [f"fe80::{i}" for i in range(1, 6)]}))) == {at}


def test_the_operators_guides_router_snippets_load() -> None:
    """docs/operations.md's `ipv6_routers` snippets, as typed into an overlay's config, load as they say."""
    guide = (Path(__file__).parents[3] / "docs" / "operations.md").read_text()
    blocks = [b.split("```", 1)[0] for b in guide.split("```json\n")[1:] if '"ipv6_routers"' in b.split("```", 1)[0]]
    assert len(blocks) >= 2, "the guide shows the router alone and with its address"
    for block in blocks:
        document = with_changes("overlays.ov1.policy", [])
        document["overlays"]["ov1"].update(json.loads("{" + block.strip().rstrip(",") + "}"))
        overlay = loads_config(json.dumps(document)).overlays["ov1"]
        assert overlay.ipv6_routers == (int(ROUTER, 16),)
    assert overlay.ipv6_router_addresses == ((int(ROUTER, 16), ipaddress.IPv6Address("fe80::1")),)
