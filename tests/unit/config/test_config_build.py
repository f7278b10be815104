"""The typed config is built from the model's fields: what the schema lets through, the model holds."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import typing
from pathlib import Path
from typing import Any

import pytest

from evio.config import loader, model
from evio.config.loader import loads_config


def _schema_node(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].split("/")[-1]]
    if "properties" not in node:
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                return _schema_node(schema, node[key])
    return node


def _sections(schema: dict[str, Any], node: dict[str, Any], cls: type, path: str) -> typing.Iterator[tuple[str, set[str], type]]:
    node = _schema_node(schema, node)
    keys = set(node.get("properties", {}))
    yield path, keys, cls
    hints = typing.get_type_hints(cls)
    for key in keys & {f.name for f in dataclasses.fields(cls)}:
        for kind in [a for a in typing.get_args(hints[key]) if a is not type(None)] or [hints[key]]:
            if typing.get_origin(kind) is tuple:
                kind = typing.get_args(kind)[0]
            if dataclasses.is_dataclass(kind):
                yield from _sections(schema, node["properties"][key], kind, f"{path}.{key}")  # type: ignore[arg-type]


def test_every_key_the_schema_allows_is_a_field_of_the_model() -> None:
    schema = loader.load_schema()
    sections = list(_sections(schema, schema, model.Config, "$"))
    assert len(sections) >= 13  # every section was reached
    for path, keys, cls in sections:
        assert keys <= {f.name for f in dataclasses.fields(cls)}, (path, cls.__name__)


def test_given_values_take_the_fields_types_and_left_out_ones_the_models_defaults(tmp_path: Path) -> None:
    document = {
        "node": {"id": "0123456789abcdef0123456789abcdef", "state_dir": "state"},
        "overlays": {"a": {
            "signal": {"jid": "n@x.test", "password": "pw", "port": 5223.0},
            "nat_traversal": {"turn": [{"server": "t.test:3478", "rest_secret": "s", "ttl": 60.0}], "direct_timeout": 2},
            "topology": {"long_distance": 2.0, "log_form": "log10", "on_demand": {"idle_timeout": 30}},
            "bridge": {"address": "fd00::1/64", "mtu": 1400.0},
            "tunnel": {"cipher": "chacha20-poly1305", "dead_after": 9},
        }},
    }  # fmt: skip
    config = loads_config(json.dumps(document), tmp_path)
    overlay = config.overlays["a"]
    assert config.node.id == 0x0123456789ABCDEF0123456789ABCDEF and config.node.state_dir == tmp_path / "state"
    assert type(overlay.signal.port) is int and overlay.signal.port == 5223
    assert overlay.nat_traversal.turn == (model.TurnServer("t.test:3478", rest_secret="s", ttl=60),)
    assert type(overlay.nat_traversal.direct_timeout) is float
    assert overlay.topology.long_distance == 2 and overlay.topology.log_form is model.LogForm.LOG10
    assert overlay.topology.on_demand == model.OnDemandConfig(idle_timeout=30.0)
    assert overlay.bridge == model.BridgeConfig("evbr-a", address=ipaddress.ip_interface("fd00::1/64"), mtu=1400)
    assert overlay.tunnel == model.TunnelConfig(cipher=model.Cipher.CHACHA20_POLY1305, dead_after=9.0)
    assert overlay.limits == model.LimitsConfig() and overlay.trust is None
    assert config.logging == model.LoggingConfig() and config.metrics == model.MetricsConfig()


def test_the_configs_tunnel_mtu_is_the_tunnels() -> None:
    from evio.tunnel.config import TunnelSettings, from_overlay_config
    from evio.tunnel.datapath.mtu import tap_mtu

    assert TunnelSettings().underlay_mtu == model.UNDERLAY_MTU
    assert tap_mtu(model.UNDERLAY_MTU) == model.TUNNEL_MTU
    config = loads_config(json.dumps({"overlays": {"ov1": {"signal": {"jid": "n@x.test", "password": "pw"}}}}))
    assert from_overlay_config(config.overlays["ov1"]).tap_mtu == model.TUNNEL_MTU == config.overlays["ov1"].bridge.effective_mtu


def test_a_bridge_built_in_code_is_held_to_the_same_mtu_rule() -> None:
    with pytest.raises(ValueError, match="1429 is above the tunnels' MTU 1428"):
        model.BridgeConfig("br0", mtu=1429)
    with pytest.raises(ValueError, match="1200 is below 1280"):
        model.BridgeConfig("br0", address_pool=ipaddress.ip_network("fd00::/64"), mtu=1200)
    assert model.BridgeConfig("br0", mtu=1200).effective_mtu == 1200
