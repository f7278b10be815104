"""overlays.<id>.ipv6_routers (decision 0068): node ids, validated with their JSON path, and on to the switch."""

from __future__ import annotations

import json

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
