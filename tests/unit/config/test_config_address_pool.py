"""bridge.address_pool: a node's overlay address derived from its node id, the same on every start."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from evio.cli import main
from evio.config import ConfigError, loads_config
from evio.config.address_pool import conflicting_peers, derive_address, pool_problem, usable_hosts

POOL = ipaddress.IPv4Network("10.254.0.0/16")


def config_with(bridge: dict[str, object]) -> str:
    return json.dumps({"overlays": {"ov1": {"signal": {"jid": "n@overlay.test", "password": "pw"}, "bridge": bridge}}})


def test_small_ids_give_small_hosts_and_big_ids_wrap_inside_the_pool() -> None:
    assert derive_address(POOL, 0) == ipaddress.IPv4Interface("10.254.0.1/16")
    assert derive_address(POOL, 2) == ipaddress.IPv4Interface("10.254.0.3/16")
    assert derive_address(POOL, usable_hosts(POOL)) == derive_address(POOL, 0)
    for nid in (2**128 - 1, 0xDEADBEEF, 12345678901234567890):
        address = derive_address(POOL, nid)
        assert address.network == POOL
        assert address.ip not in (POOL.network_address, POOL.broadcast_address)
        assert derive_address(POOL, nid) == address  # deterministic


def test_ipv6_pools_keep_only_the_subnet_router_address_free() -> None:
    pool = ipaddress.IPv6Network("fd00:e:0:1::/64")
    assert derive_address(pool, 0) == ipaddress.IPv6Interface("fd00:e:0:1::1/64")
    assert derive_address(pool, 2**64 - 2) == ipaddress.IPv6Interface("fd00:e:0:1:ffff:ffff:ffff:ffff/64")


def test_a_collision_is_found_among_the_peers() -> None:
    small = ipaddress.IPv4Network("10.9.0.0/30")  # two hosts
    assert conflicting_peers(small, 1, [2, 3, 4, 5]) == [3, 5]
    assert conflicting_peers(POOL, 1, [2, 3, 1]) == []


@pytest.mark.parametrize("text", ["10.254.0.1/16", "10.254.0.0/31", "224.0.0.0/8", "pool"])
def test_bad_pools_are_named(text: str) -> None:
    assert pool_problem(text)


def test_the_config_derives_the_address_from_the_node_id() -> None:
    config = loads_config(config_with({"address_pool": "10.254.0.0/16"}))
    bridge = config.overlays["ov1"].bridge
    assert bridge.address is None and bridge.address_pool == POOL
    assert bridge.address_for(0x105) == ipaddress.IPv4Interface("10.254.1.6/16")


@pytest.mark.parametrize("bridge, reason", [
    ({"address": "10.254.0.1/16", "address_pool": "10.254.0.0/16"}, "not both"),
    ({"address_pool": "10.254.0.1/16"}, "host bits"),
    ({"address_pool": "fd00::/64", "mtu": 1200}, "1280"),
])
def test_the_config_refuses_a_bad_pool(bridge: dict[str, object], reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        loads_config(config_with(bridge))
    assert any(reason in p.reason for p in caught.value.problems), caught.value.problems


def test_pools_of_two_overlays_must_not_overlap() -> None:
    document = json.loads(config_with({"address_pool": "10.254.0.0/16"}))
    document["overlays"]["ov2"] = {"signal": {"jid": "n@overlay.test", "password": "pw"},
                                   "bridge": {"address": "10.254.3.1/24"}}
    with pytest.raises(ConfigError, match="overlaps"):
        loads_config(json.dumps(document))


def test_config_address_prints_the_address_the_daemon_will_set_and_keeps_the_node_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    document = json.loads(config_with({"address_pool": "10.254.0.0/16"}))
    document["node"] = {"state_dir": str(tmp_path / "state")}
    config.write_text(json.dumps(document))
    assert main(["config", "address", str(config)]) == 0
    first = capsys.readouterr().out
    node_id = int((tmp_path / "state" / "node_id").read_text().strip(), 16)  # made now, as the daemon would
    assert first == f"ov1 {derive_address(POOL, node_id)}\n"
    assert main(["config", "address", str(config), "--overlay", "ov1", "--ip"]) == 0
    assert capsys.readouterr().out == f"{derive_address(POOL, node_id).ip}\n"  # the same id again
    assert main(["config", "address", str(config), "--overlay", "nope"]) == 1


def test_config_address_of_a_set_address_and_a_node_id_from_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    document = json.loads(config_with({"address": "10.1.0.5/24"}))
    document["node"] = {"id": "00000000000000000000000000000002", "state_dir": str(tmp_path / "state")}
    config.write_text(json.dumps(document))
    assert main(["config", "address", str(config), "--ip"]) == 0
    assert capsys.readouterr().out == "10.1.0.5\n"
    assert not (tmp_path / "state").exists()
