"""Config schema, loader, node id persistence and `evio config`."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import ipaddress
import json
import random
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from evio.cli import main
from evio.config import ConfigError, ConfigFileError, FileStateDir, load_config, loads_config, resolve_node_id
from evio.config.loader import load_schema, parse_json, signal_password, strip_line_comments, turn_password
from evio.config.model import (
    BridgeConfig,
    Config,
    LimitsConfig,
    LoggingConfig,
    MetricsConfig,
    NatTraversalConfig,
    NodeConfig,
    OnDemandConfig,
    SignalConfig,
    TopologyConfig,
    TunnelConfig,
    TurnServer,
    split_host_port,
)
from evio.testing.state_dir import MemoryStateDir

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "evio" / "config" / "example.jsonc"  # the one example, packaged: `evio config example`


def minimal() -> dict[str, Any]:
    return {"overlays": {"ov1": {"signal": {"jid": "node1@overlay.test", "password": "pw"}}}}


def problems_of(document: Any, base_dir: Path | None = None) -> dict[str, str]:
    """path -> reason(s) joined, for a document that must be invalid."""
    with pytest.raises(ConfigError) as caught:
        loads_config(json.dumps(document), base_dir)
    found: dict[str, str] = {}
    for problem in caught.value.problems:
        found[problem.path] = (found.get(problem.path, "") + " | " + problem.reason).strip(" |")
    return found


def private(path: Path) -> Path:
    """`path` made 0600: a config with an inline password is refused otherwise (as `evio run` refuses it)."""
    path.chmod(0o600)
    return path


def with_changes(path: str, value: Any) -> dict[str, Any]:
    """minimal() with value set at a dotted path (creating objects on the way)."""
    document = minimal()
    *parents, last = path.split(".")
    node = document
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return document


# --- the shipped example and the schema itself --------------------------------------


def test_example_passes_and_is_fully_commented() -> None:
    config = load_config(EXAMPLE)
    assert list(config.overlays) == ["ov1"]
    assert config.overlays["ov1"].bridge.address == ipaddress.ip_interface("10.254.0.1/16")
    comment_lines = [line for line in EXAMPLE.read_text().splitlines() if line.strip().startswith("//")]
    assert len(comment_lines) > 80


def _schema_keys(schema: Any) -> set[str]:
    keys: set[str] = set()
    if isinstance(schema, dict):
        keys.update(schema.get("properties", {}))
        for value in schema.values():
            keys |= _schema_keys(value)
    elif isinstance(schema, list):
        for value in schema:
            keys |= _schema_keys(value)
    return keys


def test_example_shows_every_key_of_the_schema() -> None:
    text = EXAMPLE.read_text()
    missing = sorted(key for key in _schema_keys(load_schema()) if f'"{key}":' not in text)
    assert missing == []


def test_schema_is_valid_draft_2020_12_and_closed_everywhere() -> None:
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    objects = list(_subschemas_with_properties(schema))
    assert len(objects) == 15  # the root and the fourteen sections (a policy rule the last)
    assert all(s.get("additionalProperties") is False for s in objects)


def _subschemas_with_properties(schema: Any) -> Any:
    """Every object definition, skipping `if` conditions (which only test a value)."""
    if isinstance(schema, dict):
        if "properties" in schema:
            yield schema
            for value in schema["properties"].values():
                yield from _subschemas_with_properties(value)
        for key, value in schema.items():
            if key not in ("if", "properties"):
                yield from _subschemas_with_properties(value)


@pytest.mark.parametrize(
    ("definition", "model"),
    [
        ("node", NodeConfig),
        ("logging", LoggingConfig),
        ("metrics", MetricsConfig),
        ("signal", SignalConfig),
        ("natTraversal", NatTraversalConfig),
        ("turnServer", TurnServer),
        ("topology", TopologyConfig),
        ("onDemand", OnDemandConfig),
        ("bridge", BridgeConfig),
        ("tunnel", TunnelConfig),
        ("limits", LimitsConfig),
    ],
)
def test_model_defaults_equal_schema_defaults(definition: str, model: type) -> None:
    properties = load_schema()["$defs"][definition]["properties"]
    fields = {f.name: f for f in dataclasses.fields(model)}
    with_default = {key: spec["default"] for key, spec in properties.items() if "default" in spec}
    assert with_default, definition
    for key, default in with_default.items():
        model_default = fields[key].default
        if isinstance(model_default, tuple):
            model_default = list(model_default)
        assert model_default == (Path(default) if isinstance(model_default, Path) else default), key



def _schema_defaults(schema: Any, into: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """key -> every default the schema gives a property of that name."""
    if isinstance(schema, dict):
        for key, spec in schema.get("properties", {}).items():
            if isinstance(spec, dict) and "default" in spec:
                into.setdefault(key, []).append(spec["default"])
        for value in schema.values():
            _schema_defaults(value, into)
    elif isinstance(schema, list):
        for value in schema:
            _schema_defaults(value, into)
    return into


def test_example_comments_state_the_schema_defaults() -> None:
    # Each key's comment ends with "Default: <value>."; where that value is a plain literal it must be
    # the schema's (and so the model's) default, or the documentation lies about what an omitted key does.
    defaults = _schema_defaults(load_schema(), {})
    comment: list[str] = []
    checked = []
    for line in EXAMPLE.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("//"):
            comment.append(stripped.lstrip("/ "))
            continue
        key = re.match(r'"(\w+)":', stripped)
        stated = re.search(r"Default: (\S+?)[.,]?(?: |$)", " ".join(comment))
        comment = []
        if key is None or stated is None or len(defaults.get(key.group(1), [])) != 1:
            continue
        try:
            value = json.loads(stated.group(1))
        except json.JSONDecodeError:
            continue  # prose ("absent", "the domain of jid", ...)
        assert value == defaults[key.group(1)][0], key.group(1)
        checked.append(key.group(1))
    assert {"direct_timeout", "keepalive", "dead_after", "successors"} <= set(checked)


# --- a valid config and its defaults ----------------------------------------------------


def test_minimal_config_gets_every_default(tmp_path: Path) -> None:
    config = loads_config(json.dumps(minimal()), tmp_path)
    overlay = config.overlays["ov1"]
    assert config.node == NodeConfig()
    assert config.logging == LoggingConfig()
    assert overlay.signal.server == "overlay.test"  # the JID's domain
    assert overlay.signal.port == 5222 and overlay.signal.tls == "starttls"
    assert overlay.bridge == BridgeConfig(name="evbr-ov1")
    assert overlay.topology == TopologyConfig()
    assert overlay.topology.long_distance_for(128) == 7
    assert overlay.topology.incoming_long_distance_cap(100) == 12
    assert overlay.nat_traversal == NatTraversalConfig() and overlay.tunnel == TunnelConfig()
    assert signal_password(overlay.signal) == "pw"


def test_values_are_typed_and_relative_paths_follow_the_file(tmp_path: Path) -> None:
    (tmp_path / "pw.txt").write_text("s3cret\nignored\n")
    document = minimal()
    del document["overlays"]["ov1"]["signal"]["password"]
    document["overlays"]["ov1"]["signal"]["password_file"] = "pw.txt"
    document["overlays"]["ov1"]["topology"] = {"long_distance": 3.0, "successors": 4}
    document["node"] = {"id": "0123456789ABCDEF0123456789abcdef", "state_dir": "state"}
    config_file = tmp_path / "evio.json"
    config_file.write_text(json.dumps(document))
    config = load_config(config_file)
    assert config.node.id == 0x0123456789ABCDEF0123456789ABCDEF
    assert config.node.state_dir == tmp_path / "state"
    signal = config.overlays["ov1"].signal
    assert signal.password_file == tmp_path / "pw.txt"
    assert signal_password(signal) == "s3cret"
    topology = config.overlays["ov1"].topology
    assert topology.long_distance == 3 and type(topology.long_distance) is int
    assert topology.long_distance_for(1000) == 3 and topology.successors == 4


def test_config_is_immutable() -> None:
    config = loads_config(json.dumps(minimal()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.node = NodeConfig()  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.overlays["ov2"] = config.overlays["ov1"]  # type: ignore[index]


def test_secrets_are_not_in_reprs_or_problems() -> None:
    config = loads_config(json.dumps(with_changes("overlays.ov1.nat_traversal", {"turn": [{"server": "t:1", "rest_secret": "TOPSECRET"}]})))
    text = repr(config)
    assert "TOPSECRET" not in text and "'pw'" not in text
    document = minimal()
    document["overlays"]["ov1"]["signal"]["password"] = 123456789
    assert "123456789" not in problems_of(document)["$.overlays.ov1.signal.password"]


def test_split_host_port() -> None:
    assert split_host_port("198.51.100.1:3478") == ("198.51.100.1", 3478)
    assert split_host_port("[2001:db8::1]:5349") == ("2001:db8::1", 5349)
    assert TurnServer(server="turn.example.net:3478").host_port == ("turn.example.net", 3478)
    with pytest.raises(ValueError):
        split_host_port("stun:1.2.3.4")


# --- rejected documents: unknown keys, wrong types, bad values ----------------------------


@pytest.mark.parametrize(
    ("where", "key"),
    [
        ("", "overlay"),
        ("node.", "ID"),
        ("logging.", "lvl"),
        ("overlays.ov1.", "sginal"),
        ("overlays.ov1.signal.", "passwd"),
        ("overlays.ov1.topology.on_demand.", "max_link"),
        ("overlays.ov1.bridge.", "mtu_"),
        ("overlays.ov1.tunnel.", "ciphers"),
    ],
)
def test_unknown_key_is_rejected_at_its_path(where: str, key: str) -> None:
    document = with_changes(where + key, 1)
    found = problems_of(document)
    path = "$." + where + key
    assert path in found, found
    assert found[path].startswith("unknown key")


def test_unknown_key_suggests_the_near_one() -> None:
    found = problems_of(with_changes("overlays.ov1.bridge.mtu_", 1400))
    assert "did you mean 'mtu'?" in found["$.overlays.ov1.bridge.mtu_"]


def test_unknown_key_inside_a_turn_entry() -> None:
    found = problems_of(with_changes("overlays.ov1.nat_traversal", {"turn": [{"server": "t:1", "rest_secret": "x", "realm": "r"}]}))
    assert found["$.overlays.ov1.nat_traversal.turn[0].realm"].startswith("unknown key")


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        ("overlays.ov1.signal.port", "5222", "expected integer, got string"),
        ("overlays.ov1.bridge.mtu", 1400.5, "expected integer or null, got number 1400.5"),
        ("overlays.ov1.topology.successors", True, "expected integer, got boolean"),
        ("overlays.ov1.topology.long_distance", "3", "expected integer or null"),
        ("overlays.ov1.nat_traversal.stun", "1.2.3.4:3478", "expected array, got string"),
        ("overlays.ov1.topology.on_demand.enabled", "yes", "expected boolean"),
        ("node", [], "expected object, got array"),
    ],
)
def test_wrong_type_is_rejected(path: str, value: Any, reason: str) -> None:
    found = problems_of(with_changes(path, value))
    assert reason in found["$." + path]


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        ("node.id", "0123", "is not a node id (32 hexadecimal digits)"),
        ("node.id", "g" * 32, "is not a node id"),
        ("overlays.ov1.signal.jid", "node1@overlay.test/res", "is not a bare JID"),
        ("overlays.ov1.signal.jid", "overlay.test", "is not a bare JID"),
        ("overlays.ov1.signal.port", 70000, "out of range: must be <= 65535"),
        ("overlays.ov1.signal.server", "bad host!", "is not a host name or IP address"),
        ("overlays.ov1.signal.tls", "ssl", 'is not one of "starttls", "direct"'),
        ("overlays.ov1.bridge.address", "10.254.0.1/33", "is not an address with its prefix length"),
        ("overlays.ov1.bridge.address", "10.254.0.1", "is not an address with its prefix length"),
        ("overlays.ov1.bridge.address", "fd00::zz/64", "is not an address with its prefix length"),
        ("overlays.ov1.bridge.name", "a" * 16, "is not an interface name"),
        ("overlays.ov1.bridge.name", "br/0", "is not an interface name"),
        ("overlays.ov1.bridge.mtu", 575, "must be >= 576"),
        ("overlays.ov1.bridge.mtu", 9001, "must be <= 9000"),
        ("overlays.ov1.bridge.datapath", "kernel", "is not one of"),
        ("overlays.ov1.bridge.flow_idle_timeout", 0, "must be >= 1"),
        ("overlays.ov1.topology.successors", 0, "must be >= 1"),
        ("overlays.ov1.topology.long_distance", -1, "must be >= 0"),
        ("overlays.ov1.topology.max_incoming_long_distance", -2, "must be >= 0"),
        ("overlays.ov1.topology.log_form", "log2", "is not one of"),
        ("overlays.ov1.topology.on_demand.threshold_bytes_per_s", 0, "must be > 0"),
        ("overlays.ov1.nat_traversal.direct_timeout", 0, "must be > 0"),
        ("overlays.ov1.nat_traversal.stun", ["stun:1.2.3.4"], "is not host:port"),
        ("overlays.ov1.tunnel.keepalive", 30, "must be <= 25"),
        ("overlays.ov1.tunnel.dead_after", 0, "must be > 0"),
        ("overlays.ov1.tunnel.cipher", "aes-128-cbc", "is not one of"),
        ("logging.level", "loud", "is not one of"),
    ],
)
def test_bad_value_is_rejected_with_reason(path: str, value: Any, reason: str) -> None:
    found = problems_of(with_changes(path, value))
    full = "$." + re.sub(r"\.stun$", ".stun[0]", path) if isinstance(value, list) else "$." + path
    assert reason in found[full], found


@pytest.mark.parametrize("value", [None, 0, 3])
def test_long_distance_accepts_null_and_non_negative(value: int | None) -> None:
    config = loads_config(json.dumps(with_changes("overlays.ov1.topology.long_distance", value)))
    assert config.overlays["ov1"].topology.long_distance == value


def test_deny_candidates_are_networks_with_a_default_and_reach_the_tunnels() -> None:
    from evio.tunnel.config import from_overlay_config

    default = loads_config(json.dumps(minimal())).overlays["ov1"]
    assert "169.254.0.0/16" in default.nat_traversal.deny_candidates
    assert from_overlay_config(default).ice.deny_candidates == default.nat_traversal.deny_candidates
    mine = ["10.20.0.0/16", "fd12::/16", "198.51.100.7"]
    config = loads_config(json.dumps(with_changes("overlays.ov1.nat_traversal.deny_candidates", mine))).overlays["ov1"]
    assert config.nat_traversal.deny_candidates == tuple(mine)
    found = problems_of(with_changes("overlays.ov1.nat_traversal.deny_candidates", ["10.0.0.0/8", "10.1.2.3/8", "lan"]))
    assert set(found) == {"$.overlays.ov1.nat_traversal.deny_candidates[1]", "$.overlays.ov1.nat_traversal.deny_candidates[2]"}
    assert "host bits set" in found["$.overlays.ov1.nat_traversal.deny_candidates[1]"]


def test_stun_port_range_is_checked() -> None:
    found = problems_of(with_changes("overlays.ov1.nat_traversal.stun", ["a:3478", "b:65536", "[::1]:0"]))
    assert set(found) == {"$.overlays.ov1.nat_traversal.stun[1]", "$.overlays.ov1.nat_traversal.stun[2]"}


def test_overlays_must_be_present_non_empty_and_well_named() -> None:
    assert problems_of({}) == {"$.overlays": "required key is missing"}
    assert "at least 1" in problems_of({"overlays": {}})["$.overlays"]
    document = minimal()
    document["overlays"]["bad id!"] = document["overlays"]["ov1"]
    document["overlays"]["x" * 33] = document["overlays"]["ov1"]
    found = problems_of(document)
    assert "is not an overlay id" in found['$.overlays["bad id!"]']
    assert "is not an overlay id" in found["$.overlays." + "x" * 33]


def test_every_problem_is_reported_not_just_the_first() -> None:
    document = minimal()
    document["node"] = {"id": "nope"}
    document["overlays"]["ov1"]["bridge"] = {"mtu": 1, "colour": "blue"}
    document["overlays"]["ov1"]["tunnel"] = {"keepalive": -1}
    document["overlays"]["ov2"] = {"signal": {"jid": "x@y"}}
    found = problems_of(document)
    assert set(found) == {
        "$.node.id",
        "$.overlays.ov1.bridge.mtu",
        "$.overlays.ov1.bridge.colour",
        "$.overlays.ov1.tunnel.keepalive",
        "$.overlays.ov2.signal",
    }


# --- rules beyond the schema ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("signal", "reason"),
    [
        ({"jid": "a@b"}, "(got none)"),
        ({"jid": "a@b", "password": "x", "password_file": "/etc/hostname"}, "(got password, password_file)"),
    ],
)
def test_exactly_one_credential(signal: dict[str, Any], reason: str) -> None:
    found = problems_of({"overlays": {"ov1": {"signal": signal}}})
    assert "needs exactly one of password, password_file, client_cert " + reason in found["$.overlays.ov1.signal"]


def test_client_key_and_cert_go_together() -> None:
    found = problems_of({"overlays": {"ov1": {"signal": {"jid": "a@b", "password": "x", "client_key": "k.pem"}}}})
    assert found["$.overlays.ov1.signal.client_cert"] == "required together with 'client_key'"


def test_referenced_files_must_exist_and_be_files(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("\nsecond line\n")
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    signal = {"jid": "a@b", "password_file": "empty.txt", "ca_file": "junk.pem"}
    found = problems_of({"overlays": {"ov1": {"signal": signal}}}, tmp_path)
    assert found["$.overlays.ov1.signal.password_file"] == f"{tmp_path / 'empty.txt'}: first line is empty"
    assert "not a PEM CA certificate file" in found["$.overlays.ov1.signal.ca_file"]

    signal = {"jid": "a@b", "client_cert": "missing.crt", "client_key": ".", "ca_file": "/nonexistent/ca.pem"}
    found = problems_of({"overlays": {"ov1": {"signal": signal}}}, tmp_path)
    assert found["$.overlays.ov1.signal.client_cert"] == f"{tmp_path / 'missing.crt'}: no such file"
    assert "is a directory" in found["$.overlays.ov1.signal.client_key"]
    assert found["$.overlays.ov1.signal.ca_file"] == "/nonexistent/ca.pem: no such file"


def _write_cert(directory: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / f"{name}.crt", directory / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    key_file.write_bytes(key_pem)
    return cert_file, key_file


def test_client_certificate_must_match_its_key(tmp_path: Path) -> None:
    cert_a, key_a = _write_cert(tmp_path, "a")
    _cert_b, key_b = _write_cert(tmp_path, "b")
    signal: dict[str, Any] = {"jid": "a@b", "client_cert": "a.crt", "client_key": "a.key", "ca_file": "b.crt"}
    config = loads_config(json.dumps({"overlays": {"ov1": {"signal": signal}}}), tmp_path)
    assert config.overlays["ov1"].signal.client_key == key_a
    assert config.overlays["ov1"].signal.ca_file == tmp_path / "b.crt"
    assert signal_password(config.overlays["ov1"].signal) is None

    signal["client_key"] = str(key_b)
    found = problems_of({"overlays": {"ov1": {"signal": signal}}}, tmp_path)
    assert "not a PEM certificate and matching key" in found["$.overlays.ov1.signal.client_key"]
    assert cert_a.exists()


def test_insecure_plaintext_only_with_starttls() -> None:
    document = with_changes("overlays.ov1.signal.insecure_plaintext", True)
    assert loads_config(json.dumps(document)).overlays["ov1"].signal.insecure_plaintext is True
    document["overlays"]["ov1"]["signal"]["tls"] = "direct"
    assert 'only allowed with tls "starttls"' in problems_of(document)["$.overlays.ov1.signal.insecure_plaintext"]


def test_insecure_plaintext_excludes_client_certificate(tmp_path: Path) -> None:
    _write_cert(tmp_path, "a")
    signal = {"jid": "a@b", "client_cert": "a.crt", "client_key": "a.key", "insecure_plaintext": True}
    found = problems_of({"overlays": {"ov1": {"signal": signal}}}, tmp_path)
    assert found == {"$.overlays.ov1.signal.insecure_plaintext": "a client certificate login needs TLS"}


@pytest.mark.parametrize(
    ("turn", "reason"),
    [
        ({"server": "t:3478"}, "(got none)"),
        ({"server": "t:3478", "username": "u"}, "(got none)"),
        ({"server": "t:3478", "username": "u", "password": "p", "rest_secret": "s"}, "(got password, rest_secret)"),
        ({"server": "t:3478", "username": "u", "password": "p", "password_file": "/etc/hostname"},
         "(got password, password_file)"),
    ],
)
def test_turn_needs_exactly_one_credential(turn: dict[str, Any], reason: str) -> None:
    found = problems_of(with_changes("overlays.ov1.nat_traversal", {"turn": [turn]}))
    assert found["$.overlays.ov1.nat_traversal.turn[0]"] == (
        f"needs exactly one of password, password_file (each with username), rest_secret {reason}")


def test_turn_password_without_username_and_ttl_without_secret() -> None:
    turn = [{"server": "t:1", "password_file": "/etc/hostname"}, {"server": "t:2", "username": "u", "password": "p",
                                                                  "ttl": 600}]
    found = problems_of(with_changes("overlays.ov1.nat_traversal", {"turn": turn}))
    assert found["$.overlays.ov1.nat_traversal.turn[0].username"] == "required together with 'password_file'"
    assert found["$.overlays.ov1.nat_traversal.turn[1].rest_secret"] == "required together with 'ttl'"
    rest = [{"server": "t:1", "username": "u", "rest_secret": "s"}]
    found = problems_of(with_changes("overlays.ov1.nat_traversal", {"turn": rest}))
    assert found["$.overlays.ov1.nat_traversal.turn[0].username"].startswith("not used with rest_secret")


def test_turn_password_file_is_read_and_checked_like_the_signal_one(tmp_path: Path) -> None:
    (tmp_path / "turn.password").write_text("turn-pass\nignored\n")
    (tmp_path / "empty").write_text("\n")
    turn = [{"server": "t:3478", "username": "evio", "password_file": "turn.password"}]
    config = loads_config(json.dumps(with_changes("overlays.ov1.nat_traversal", {"turn": turn})), tmp_path)
    (server,) = config.overlays["ov1"].nat_traversal.turn
    assert server == TurnServer(server="t:3478", username="evio", password_file=tmp_path / "turn.password")
    assert turn_password(server) == "turn-pass"
    assert turn_password(TurnServer(server="t:1", username="u", password="inline")) == "inline"
    bad = [{"server": "t:1", "username": "u", "password_file": "empty"},
           {"server": "t:2", "username": "u", "password_file": "missing"}]
    found = problems_of(with_changes("overlays.ov1.nat_traversal", {"turn": bad}), tmp_path)
    assert found["$.overlays.ov1.nat_traversal.turn[0].password_file"] == f"{tmp_path / 'empty'}: first line is empty"
    assert found["$.overlays.ov1.nat_traversal.turn[1].password_file"] == f"{tmp_path / 'missing'}: no such file"


def _two_overlays(bridge1: dict[str, Any], bridge2: dict[str, Any], second_id: str = "ov2") -> dict[str, Any]:
    signal = {"jid": "a@b", "password": "x"}
    return {"overlays": {"ov1": {"signal": signal, "bridge": bridge1}, second_id: {"signal": signal, "bridge": bridge2}}}


def test_bridge_names_are_unique_including_defaults() -> None:
    found = problems_of(_two_overlays({"name": "evbr-ov2"}, {}))
    assert found["$.overlays.ov2.bridge.name"] == "bridge 'evbr-ov2' is already used by overlay 'ov1'"
    found = problems_of(_two_overlays({"name": "br0"}, {"name": "br0"}))
    assert "already used by overlay 'ov1'" in found["$.overlays.ov2.bridge.name"]


def test_default_bridge_name_must_fit() -> None:
    found = problems_of(_two_overlays({}, {}, second_id="eleven-char"))
    assert "'evbr-eleven-char' is longer than 15 characters" in found["$.overlays.eleven-char.bridge.name"]
    config = loads_config(json.dumps(_two_overlays({}, {"name": "br-long"}, second_id="eleven-char")))
    assert config.overlays["eleven-char"].bridge.name == "br-long"


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("10.254.0.0/16", "is the network address of 10.254.0.0/16"),
        ("10.254.255.255/16", "is the broadcast address of 10.254.0.0/16"),
        ("224.0.0.1/24", "is not a unicast host address"),
        ("0.0.0.0/8", "is not a unicast host address"),
        ("fd00::/64", "is the network address of fd00::/64"),
        ("fd00::1:2:3:4:5:6:7/64", "is not an address with prefix length"),
    ],
)
def test_bridge_address_must_be_a_host_address(address: str, reason: str) -> None:
    found = problems_of(with_changes("overlays.ov1.bridge.address", address))
    assert reason in found["$.overlays.ov1.bridge.address"]


@pytest.mark.parametrize("address", ["10.0.0.0/31", "10.0.0.1/31", "192.168.7.9/32", "10.254.0.1/16", "fd00::1/64"])
def test_bridge_host_addresses_accepted(address: str) -> None:
    config = loads_config(json.dumps(with_changes("overlays.ov1.bridge.address", address)))
    assert config.overlays["ov1"].bridge.address == ipaddress.ip_interface(address)


def test_overlay_prefixes_must_not_overlap() -> None:
    found = problems_of(_two_overlays({"address": "10.254.0.1/16"}, {"address": "10.254.9.1/24"}))
    assert found["$.overlays.ov2.bridge.address"] == "10.254.9.0/24 overlaps 10.254.0.0/16 of overlay 'ov1'"
    loads_config(json.dumps(_two_overlays({"address": "10.254.0.1/16"}, {"address": "10.253.0.1/16"})))


def test_ipv6_address_needs_ipv6_mtu() -> None:
    document = with_changes("overlays.ov1.bridge", {"address": "fd00::1/64", "mtu": 1200})
    assert "below 1280" in problems_of(document)["$.overlays.ov1.bridge.mtu"]


def test_switching_is_bounded_flood_unless_stp_is_asked_for() -> None:
    assert loads_config(json.dumps(minimal())).overlays["ov1"].bridge.switching == "bounded-flood"
    document = with_changes("overlays.ov1.bridge", {"switching": "stp"})
    assert loads_config(json.dumps(document)).overlays["ov1"].bridge.switching == "stp"
    reason = problems_of(with_changes("overlays.ov1.bridge", {"switching": "spanning-tree"}))["$.overlays.ov1.bridge.switching"]
    assert reason == '"spanning-tree" is not one of "bounded-flood", "stp"'


def test_stp_switching_refuses_on_demand_links_asked_for_explicitly() -> None:
    document = with_changes("overlays.ov1.bridge", {"switching": "stp"})
    document["overlays"]["ov1"]["topology"] = {"on_demand": {"enabled": True}}
    assert "bounded-flood" in problems_of(document)["$.overlays.ov1.topology.on_demand.enabled"]
    document["overlays"]["ov1"]["topology"] = {"on_demand": {"enabled": False}}
    assert loads_config(json.dumps(document)).overlays["ov1"].topology.on_demand.enabled is False


def test_cli_check_says_how_the_bridge_switches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_file = tmp_path / "stp.json"
    config_file.write_text(json.dumps(with_changes("overlays.ov1.bridge", {"switching": "stp"})))
    assert main(["config", "check", str(private(config_file))]) == 0
    out = capsys.readouterr().out
    assert "switching: STP (Open vSwitch RSTP and MAC learning, no controller)" in out
    assert "on-demand off" in out  # no controller asks for them


def test_logging_file_rules(tmp_path: Path) -> None:
    found = problems_of(with_changes("logging", {"destination": "file"}))
    assert found["$.logging.file"] == "required key is missing"
    found = problems_of(with_changes("logging", {"file": "x.log"}))
    assert found["$.logging.file"] == 'only allowed with destination "file"'
    found = problems_of(with_changes("logging", {"destination": "file", "file": "no/such/dir/x.log"}), tmp_path)
    assert "does not exist" in found["$.logging.file"]
    config = loads_config(json.dumps(with_changes("logging", {"destination": "file", "file": "x.log"})), tmp_path)
    assert config.logging.file == tmp_path / "x.log"


def test_state_dir_must_not_be_a_file(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("")
    found = problems_of(with_changes("node.state_dir", "state"), tmp_path)
    assert "is not a directory" in found["$.node.state_dir"]


# --- JSON text: comments, syntax, duplicates -------------------------------------------------


def test_comment_stripping_keeps_slashes_inside_strings() -> None:
    text = (
        '{ // leading comment\n'
        '  "url": "https://example.net/a//b", // trailing comment\n'
        '  "quoted": "say \\"hi\\" // not a comment",\n'
        '  "stun": "stun://198.51.100.1:3478"\n'
        '} // last line without newline'
    )
    assert parse_json(text) == {"url": "https://example.net/a//b", "quoted": 'say "hi" // not a comment', "stun": "stun://198.51.100.1:3478"}
    stripped = strip_line_comments(text)
    assert stripped.count("\n") == text.count("\n")
    assert "comment" not in stripped.replace("not a comment", "")


def test_password_with_slashes_survives() -> None:
    text = '{"overlays": {"ov1": {"signal": {"jid": "a@b", "password": "p//w" // the password\n}}}}'
    assert loads_config(text).overlays["ov1"].signal.password == "p//w"


def test_syntax_error_has_line_and_column_after_comments() -> None:
    text = '// header\n{\n  "overlays": { // open\n    "ov1": {,}\n  }\n}\n'
    with pytest.raises(ConfigFileError) as caught:
        parse_json(text)
    assert (caught.value.line, caught.value.column) == (4, 13)
    assert caught.value.reason.startswith("invalid JSON")


def test_trailing_comma_gets_a_hint() -> None:
    with pytest.raises(ConfigFileError) as caught:
        parse_json('{"a": 1,\n}')
    assert "(trailing comma?)" in caught.value.reason and caught.value.location == "2:1"


def test_duplicate_keys_and_non_finite_numbers_are_problems() -> None:
    text = '{"overlays": {"ov1": {"signal": {"jid": "a@b", "password": "x", "password": "y"}, "tunnel": {"keepalive": NaN}}}}'
    with pytest.raises(ConfigError) as caught:
        loads_config(text)
    found = {p.path: p.reason for p in caught.value.problems}
    assert "more than once" in found["$.overlays.ov1.signal.password"]
    assert "not a JSON number" in found["$.overlays.ov1.tunnel.keepalive"]


# --- node id persistence ---------------------------------------------------------------------


def _config(node_id: str | None = None) -> Config:
    document = minimal()
    if node_id is not None:
        document["node"] = {"id": node_id}
    return loads_config(json.dumps(document))


def test_node_id_from_config_wins_and_nothing_is_written() -> None:
    state = MemoryStateDir({"node_id": "f" * 32 + "\n"})
    assert resolve_node_id(_config("0" * 31 + "7"), state) == 7
    assert state.writes == 0


def test_node_id_generated_once_then_reused() -> None:
    state = MemoryStateDir()
    first = resolve_node_id(_config(), state, random.Random(1))
    assert state.files["node_id"] == f"{first:032x}\n"
    assert resolve_node_id(_config(), state, random.Random(2)) == first
    assert state.writes == 1
    assert first != resolve_node_id(_config(), MemoryStateDir(), random.Random(2))


def test_corrupt_stored_node_id_is_an_error_not_replaced() -> None:
    state = MemoryStateDir({"node_id": "garbage\n"})
    with pytest.raises(ConfigError) as caught:
        resolve_node_id(_config(), state)
    assert caught.value.problems[0].path == "$.node.id"
    assert state.files["node_id"] == "garbage\n"


def test_file_state_dir_round_trip(tmp_path: Path) -> None:
    state = FileStateDir(tmp_path / "state" / "evio")
    assert state.read("node_id") is None
    node_id = resolve_node_id(_config(), state)
    assert (tmp_path / "state" / "evio" / "node_id").read_text() == f"{node_id:032x}\n"
    assert resolve_node_id(_config(), FileStateDir(tmp_path / "state" / "evio")) == node_id
    assert (tmp_path / "state" / "evio").stat().st_mode & 0o777 == 0o700
    assert [p.name for p in (tmp_path / "state" / "evio").iterdir()] == ["node_id"]


# --- the command line ------------------------------------------------------------------------


def test_cli_check_example_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The example holds an inline password: checked as a deployed copy would be, private.
    example = tmp_path / "evio.jsonc"
    example.write_text(EXAMPLE.read_text())
    assert main(["config", "check", str(private(example))]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok: 1 overlay (ov1)\n")
    assert "bridge: evbr-ov1 10.254.0.1/16 mtu 1428 (the tunnels’)" in out


def test_cli_check_invalid_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = copy.deepcopy(minimal())
    document["overlays"]["ov1"]["bridge"] = {"mtu": 100, "nmae": "x"}
    config_file = tmp_path / "bad.json"
    config_file.write_text(json.dumps(document))
    assert main(["config", "check", str(config_file)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert f"{config_file}: $.overlays.ov1.bridge.mtu: 100 out of range: must be >= 576" in lines
    assert any(line.startswith(f"{config_file}: $.overlays.ov1.bridge.nmae: unknown key; did you mean 'name'?") for line in lines)
    assert lines[-1] == f"{config_file}: invalid (2 problems)"


def test_cli_check_refuses_a_bridge_mtu_no_tunnel_can_carry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = copy.deepcopy(minimal())
    document["overlays"]["ov1"]["bridge"] = {"mtu": 1429}
    config_file = tmp_path / "big.json"
    config_file.write_text(json.dumps(document))
    assert main(["config", "check", str(config_file)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"{config_file}: $.overlays.ov1.bridge.mtu: 1429 is above the tunnels' MTU 1428")
    document["overlays"]["ov1"]["bridge"] = {"mtu": 1428}
    config_file.write_text(json.dumps(document))
    assert main(["config", "check", str(private(config_file))]) == 0
    assert "mtu 1428 datapath" in capsys.readouterr().out


def test_cli_check_syntax_error_and_unreadable_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_file = tmp_path / "syntax.json"
    config_file.write_text('{\n  "overlays": {\n    "ov1" {}\n  }\n}\n')
    assert main(["config", "check", str(config_file)]) == 2
    assert capsys.readouterr().err.startswith(f"{config_file}:3:11: invalid JSON: Expecting ':' delimiter")
    assert main(["config", "check", str(tmp_path / "missing.json")]) == 2
    assert "cannot read: No such file or directory" in capsys.readouterr().err
    (tmp_path / "latin1.json").write_bytes(b'{"a": "\xe9"}')
    assert main(["config", "check", str(tmp_path / "latin1.json")]) == 2
    assert "not UTF-8" in capsys.readouterr().err


def test_cli_example_prints_a_checkable_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "example"]) == 0
    printed = capsys.readouterr().out
    assert printed == EXAMPLE.read_text()
    (tmp_path / "printed.jsonc").write_text(printed)
    assert main(["config", "check", str(private(tmp_path / "printed.jsonc"))]) == 0


def test_cli_check_refuses_what_run_refuses_with_the_same_lines(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    config_file = tmp_path / "evio.json"
    config_file.write_text(json.dumps(minimal()))  # an inline password
    config_file.chmod(0o644)
    assert main(["config", "check", str(config_file)]) == 2
    captured = capsys.readouterr()
    refusal = (f"{config_file}: permissions 0644 are too open: it holds passwords or TURN secrets inline and must "
               f"not be accessible by group or others; fix: chmod 600 {config_file} (or move them to password_file)")
    assert captured.out == ""
    assert captured.err.splitlines() == [refusal, f"{config_file}: refused: `evio run` would not start with it "
                                                  "(1 problem)"]
    assert main(["run", "--config", str(config_file)]) == 2  # refused before anything needs root
    assert capsys.readouterr().err.splitlines() == [f"evio run: {refusal}"]
    assert main(["config", "check", str(private(config_file))]) == 0


def test_metrics_are_off_by_default_on_loopback_and_listen_must_be_an_address(tmp_path: Path) -> None:
    from evio.config.loader import ConfigError, load_config

    base = {"overlays": {"ov1": {"signal": {"jid": "a@x.test", "password": "pw"}, "bridge": {"name": "evbr-ov1"}}}}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(base))
    config = load_config(path)
    assert config.metrics == MetricsConfig(enabled=False, listen="127.0.0.1:9470")
    path.write_text(json.dumps({**base, "metrics": {"enabled": True, "listen": "[::1]:9100"}}))
    assert load_config(path).metrics.host_port == ("::1", 9100)
    for bad, where in (({"listen": "localhost:9100"}, "$.metrics.listen"), ({"port": 1}, "$.metrics"),
                       ({"enabled": "yes"}, "$.metrics.enabled")):
        path.write_text(json.dumps({**base, "metrics": bad}))
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        assert any(where in str(problem) for problem in caught.value.problems), (bad, caught.value.problems)


# --- several XMPP servers (decision 0051) ---------------------------------------------------------------


def test_several_servers_in_order_and_the_single_server_unchanged() -> None:
    signal = loads_config(json.dumps(with_changes("overlays.ov1.signal.servers", ["x1.test:5222", "[2001:db8::3]:5223"]))
                          ).overlays["ov1"].signal  # fmt: skip
    assert signal.endpoints == (("x1.test", 5222), ("2001:db8::3", 5223))
    assert (signal.server, signal.port) == ("x1.test", 5222)  # what reads one server sees the first
    single = loads_config(json.dumps(with_changes("overlays.ov1.signal.server", "198.51.100.1"))).overlays["ov1"].signal
    assert single.servers == () and single.endpoints == (("198.51.100.1", 5222),)
    assert loads_config(json.dumps(minimal())).overlays["ov1"].signal.endpoints == (("overlay.test", 5222),)


@pytest.mark.parametrize(
    ("servers", "path", "reason"),
    [
        (["x1.test"], "$.overlays.ov1.signal.servers[0]", "host:port"),
        (["x1.test:5222", "x1.test:5222"], "$.overlays.ov1.signal.servers", "unique"),
        ([], "$.overlays.ov1.signal.servers", "at least one"),
        ("x1.test:5222", "$.overlays.ov1.signal.servers", "array"),
    ],
)
def test_bad_servers_are_rejected_at_their_path(servers: Any, path: str, reason: str) -> None:
    found = problems_of(with_changes("overlays.ov1.signal.servers", servers))
    assert reason in found[path], found


@pytest.mark.parametrize("key", ["server", "port"])
def test_servers_exclude_server_and_port(key: str) -> None:
    document = with_changes("overlays.ov1.signal.servers", ["x1.test:5222", "x2.test:5222"])
    document["overlays"]["ov1"]["signal"][key] = "x3.test" if key == "server" else 5222
    found = problems_of(document)
    assert found == {f"$.overlays.ov1.signal.{key}": "give servers (host:port each) or server and port, not both"}
