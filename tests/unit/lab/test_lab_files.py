"""What the lab writes: server configs, node configs, certificates, the state file. No root."""

from __future__ import annotations

import datetime
import json
import ssl
from pathlib import Path

import pytest

from evio.config.loader import loads_config
from evio.lab import node_config, pki, services
from evio.lab.errors import LabStateError
from evio.lab.state import LabSecrets, LabState, ProcessRecord, load_state, save_state
from evio.lab.topology import plan_lab

PLAN = plan_lab("t1", ("eim", "symmetric", "none"), overlay="ov1", domain="overlay.test")


def test_prosody_config_has_tls_groups_muc_and_turn() -> None:
    paths = services.ServicePaths(Path("/run/evio-lab/t1"))
    text = services.prosody_config(PLAN, paths, "sekrit")
    assert 'interfaces = { "198.51.100.1", "127.0.0.1" }' in text
    assert "c2s_require_encryption = true" in text
    assert "allow_unencrypted_plain_auth = false" in text
    assert 'groups_file = "/run/evio-lab/t1/prosody/groups.txt"' in text
    assert 'Component "conference.overlay.test" "muc"' in text
    assert "muc_room_locking = false" in text  # the MUC race (recipes 1.5)
    assert 'turn_external_secret = "sekrit"' in text
    assert "s2s_ports = {}" in text
    plain = services.prosody_config(PLAN, paths, "sekrit", plaintext=True)
    assert "c2s_require_encryption = false" in plain


def test_lua_strings_are_escaped() -> None:
    assert services.lua_string('a"b\\c\n') == '"a\\"b\\\\c\\n"'


def test_groups_file_lists_every_node_in_the_overlay_group() -> None:
    assert services.groups_file(PLAN) == "[ov1]\nnode1@overlay.test\nnode2@overlay.test\nnode3@overlay.test\n"


def test_coturn_config_uses_rest_secret_and_denies_private_peers() -> None:
    text = services.coturn_config(PLAN, services.ServicePaths(Path("/x")), "sekrit").splitlines()
    assert "use-auth-secret" in text and "static-auth-secret=sekrit" in text
    assert "listening-ip=198.51.100.1" in text and "listening-ip=198.51.100.2" in text
    assert "listening-port=3478" in text
    assert "min-port=49152" in text and "max-port=65535" in text
    for denied in ("10.0.0.0-10.255.255.255", "172.16.0.0-172.31.255.255", "192.168.0.0-192.168.255.255"):
        assert f"denied-peer-ip={denied}" in text
    assert "userdb=/x/coturn/turndb" in text  # never the system's /var/lib/turn


def test_node_config_shape() -> None:
    node = PLAN.node(2)
    doc = node_config.node_config(
        PLAN, node, lab_dir=Path("/run/evio-lab/t1"), node_id="ab" * 16, password="pw",
        turn_secret="sekrit", ca_file=Path("/run/evio-lab/t1/pki/ca.crt"),
    )
    assert doc["node"] == {"id": "ab" * 16, "state_dir": "/run/evio-lab/t1/nodes/node2/state"}
    ov = doc["overlays"]["ov1"]
    assert ov["signal"] == {
        "server": "198.51.100.1", "port": 5222, "jid": "node2@overlay.test", "password": "pw",
        "ca_file": "/run/evio-lab/t1/pki/ca.crt", "tls": "starttls",
    }
    assert ov["nat_traversal"]["stun"] == ["198.51.100.1:3478"]
    assert ov["nat_traversal"]["turn"] == [{"server": "198.51.100.1:3478", "rest_secret": "sekrit", "ttl": 86400}]
    assert ov["bridge"] == {"name": "evbr-ov1", "address": "10.254.0.2/16", "datapath": "netdev"}


def test_node_configs_pass_the_daemon_config_loader(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    ca = pki.make_ca(tmp_path / "pki", "test CA", now)
    for node in PLAN.nodes:
        (node_config.node_dir(tmp_path, node) / "state").mkdir(parents=True)  # as Lab.up makes them
        for plaintext in (False, True):
            doc = node_config.node_config(
                PLAN, node, lab_dir=tmp_path, node_id=f"{node.index:032x}", password="pw", turn_secret="s",
                ca_file=ca.cert_path, plaintext=plaintext,
            )
            config = loads_config(json.dumps(doc), tmp_path)
            overlay = config.overlays["ov1"]
            assert config.node.id == node.index
            assert overlay.signal.jid == f"node{node.index}@overlay.test"
            assert overlay.signal.insecure_plaintext is plaintext
            assert str(overlay.bridge.address) == str(node.overlay_address)
            assert overlay.nat_traversal.turn[0].rest_secret == "s"
            assert overlay.bridge.switching == "bounded-flood"
    node = PLAN.node(1)
    doc = node_config.node_config(PLAN, node, lab_dir=tmp_path, node_id=f"{1:032x}", password="pw", turn_secret="s",
                                  ca_file=ca.cert_path, switching="stp")
    assert loads_config(json.dumps(doc), tmp_path).overlays["ov1"].bridge.switching == "stp"


def test_lab_ca_signs_a_server_cert_that_tls_accepts(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    ca = pki.make_ca(tmp_path / "pki", "test CA", now)
    server = pki.make_server_cert(tmp_path / "certs", ca, ["overlay.test", "conference.overlay.test"], now,
                                  file_stem="overlay.test")
    assert (server.key_path.stat().st_mode & 0o777) == 0o600
    # The server side loads it, the client side verifies it against the CA by name.
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(server.cert_path, server.key_path)
    client_ctx = ssl.create_default_context(cafile=str(ca.cert_path))
    import socket

    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        b.setblocking(False)
        client = client_ctx.wrap_socket(a, server_hostname="conference.overlay.test", do_handshake_on_connect=False)
        srv = server_ctx.wrap_socket(b, server_side=True, do_handshake_on_connect=False)
        done = {"c": False, "s": False}
        for _ in range(200):
            for key, sock in (("c", client), ("s", srv)):
                if not done[key]:
                    try:
                        sock.do_handshake()
                        done[key] = True
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        pass
            if all(done.values()):
                break
        assert all(done.values())
        peer = client.getpeercert()
        assert peer is not None and peer["subject"] == ((("commonName", "overlay.test"),),)


def _state() -> LabState:
    return LabState(
        name="t1", phase="creating", nat=("eim", "none"), overlay="ov1", domain="overlay.test",
        secrets=LabSecrets(turn_secret="s", passwords=("a", "b"), node_ids=("0" * 32, "1" * 32)),
        namespaces=("evlt1-pub", "evlt1-r1"), rate_mbit=5.0, created_at=1.5,
        processes=[ProcessRecord("prosody", 12, 345, "evlt1-pub", ("prosody", "-F"))],
        accounts={"outsider": "pw"},
    )


def test_state_round_trip_and_private_file(tmp_path: Path) -> None:
    (tmp_path / "t1").mkdir()
    state = _state()
    save_state(tmp_path, state)
    assert load_state(tmp_path, "t1") == state
    assert ((tmp_path / "t1" / "state.json").stat().st_mode & 0o777) == 0o600
    assert not list((tmp_path / "t1").glob(".*tmp"))


@pytest.mark.parametrize("text", ["", "{", "[]", '{"version": 99}', '{"version": 1, "name": "t1"}'])
def test_unreadable_state_is_a_state_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "t1").mkdir()
    (tmp_path / "t1" / "state.json").write_text(text)
    with pytest.raises(LabStateError):
        load_state(tmp_path, "t1")


def test_missing_state_is_a_state_error(tmp_path: Path) -> None:
    with pytest.raises(LabStateError):
        load_state(tmp_path, "t1")


def test_node_config_with_a_trust_anchor_loads(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    ca = pki.make_ca(tmp_path / "pki", "lab CA", now)
    overlay_ca = pki.make_overlay_ca(tmp_path / "pki" / "overlay", "lab overlay CA", now)
    node = PLAN.nodes[0]
    node_config.node_dir(tmp_path, node).mkdir(parents=True)
    section = pki.issue_overlay_member(overlay_ca, "ov1", node.index, tmp_path / "trust", now)
    doc = node_config.node_config(
        PLAN, node, lab_dir=tmp_path, node_id=f"{node.index:032x}", password="pw", turn_secret="s",
        ca_file=ca.cert_path, trust=section,
    )
    assert doc["overlays"]["ov1"]["trust"] == section
    trust = loads_config(json.dumps(doc), tmp_path).overlays["ov1"].trust
    assert trust is not None and trust.ca_file == tmp_path / "trust" / "ca.crt"  # the node's own copy
    assert trust.ca_file.read_bytes() == overlay_ca.cert_path.read_bytes()
    assert (tmp_path / "trust" / "node.key").stat().st_mode & 0o077 == 0

