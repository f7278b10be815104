"""The lab's ejabberd (evio.lab.ejabberd): its config against `evio server init`'s, the members' server orders,
the node configs that list the cluster, the state that remembers it. No root."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from evio.config.loader import loads_config
from evio.lab import ejabberd, node_config, pki
from evio.lab.errors import LabPlanError
from evio.lab.state import LabSecrets, LabState, load_state, save_state
from evio.lab.topology import plan_lab
from evio.server.configs import ejabberd_config as server_ejabberd_config

PLAN = plan_lab("t1", ("eim", "symmetric", "none", "eim"), overlay="ov1", domain="overlay.test")
LAB_DIR = Path("/run/evio-lab/t1")


def test_a_cluster_has_three_nodes_on_addresses_of_their_own_one_has_the_public_address() -> None:
    servers = ejabberd.plan_servers(PLAN, "ejabberd-cluster", LAB_DIR)
    assert [s.server for s in servers] == ["198.51.100.1:5222", "198.51.100.3:5222", "198.51.100.4:5222"]
    assert [s.erlang_node for s in servers] == ["ejabberd1@198.51.100.1", "ejabberd2@198.51.100.3",
                                                "ejabberd3@198.51.100.4"]  # fmt: skip
    assert servers[1].directory == LAB_DIR / "ejabberd" / "node2"
    assert [s.server for s in ejabberd.plan_servers(PLAN, "ejabberd", LAB_DIR)] == ["198.51.100.1:5222"]
    assert ejabberd.plan_servers(PLAN, "prosody", LAB_DIR) == ()
    batch = ejabberd.extra_addresses(PLAN, servers)
    assert batch.netns == "evlt1-pub"
    assert batch.lines == ("addr add 198.51.100.3/24 dev evlt1-br", "addr add 198.51.100.4/24 dev evlt1-br")


def test_members_are_spread_over_the_cluster_each_listing_every_node_from_its_own() -> None:
    assert [ejabberd.server_order(i, 3) for i in range(1, 5)] == [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 2, 3]]
    servers = ejabberd.plan_servers(PLAN, "ejabberd-cluster", LAB_DIR)
    assert ejabberd.node_servers(servers, 2) == ["198.51.100.3:5222", "198.51.100.4:5222", "198.51.100.1:5222"]
    assert ejabberd.server_order(7, 1) == [1]


def test_an_unknown_xmpp_server_is_a_plan_error() -> None:
    assert ejabberd.xmpp_kind("ejabberd-cluster") == "ejabberd-cluster"
    with pytest.raises(LabPlanError, match="prosody, ejabberd, ejabberd-cluster"):
        ejabberd.xmpp_kind("openfire")


def _without(config: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in keys}


def test_the_lab_config_is_what_evio_server_init_writes_with_the_labs_listener_and_api() -> None:
    """evio.lab may not import evio.server (siblings in the layers): the copy is held to the original here."""
    server = ejabberd.plan_servers(PLAN, "ejabberd-cluster", LAB_DIR)[1]
    lab = ejabberd.ejabberd_config(PLAN, server, Path("/x/server.pem"), api=False)
    operator = yaml.safe_load(server_ejabberd_config(domain="overlay.test", certfile="/x/server.pem", port=5222,
                                                     ip="198.51.100.3"))  # fmt: skip
    assert lab == operator
    assert yaml.safe_load(json.dumps(lab)) == lab  # JSON, read as YAML by ejabberd
    first = ejabberd.ejabberd_config(PLAN, ejabberd.plan_servers(PLAN, "ejabberd-cluster", LAB_DIR)[0],
                                     Path("/x/server.pem"), api=True)  # fmt: skip
    assert first["listen"][1] == {"port": ejabberd.API_PORT, "ip": "127.0.0.1", "module": "ejabberd_http",
                                  "request_handlers": {"/api": "mod_http_api"}}  # fmt: skip
    assert "mod_http_api" in first["modules"] and "lab http api" in first["api_permissions"]
    assert _without(first, "listen", "modules", "api_permissions") == _without(lab, "listen", "modules", "api_permissions")


def test_ejabberdctl_cfg_names_the_node_and_its_distribution_port() -> None:
    server = ejabberd.plan_servers(PLAN, "ejabberd-cluster", LAB_DIR)[2]
    assert ejabberd.ctl_config(server).splitlines() == [
        "ERLANG_NODE=ejabberd3@198.51.100.4", "ERL_DIST_PORT=4370", "INET_DIST_INTERFACE=198.51.100.4",
        "EJABBERD_BYPASS_WARNINGS=true",
    ]  # fmt: skip
    assert server.ctl_argv("status")[-1] == "status" and str(server.conf) in server.ctl_argv()


def test_the_api_calls_make_accounts_and_the_overlays_group_displayed_to_itself() -> None:
    calls = ejabberd.register_calls("overlay.test", [("node1", "pw1")]) + ejabberd.group_calls("overlay.test", "ov1", ["node1"])
    assert calls == [
        ("register", {"user": "node1", "host": "overlay.test", "password": "pw1"}),
        ("srg_create", {"group": "ov1", "host": "overlay.test", "label": "ov1", "description": "evio overlay ov1",
                        "display": "ov1"}),
        ("srg_user_add", {"user": "node1", "host": "overlay.test", "group": "ov1", "grouphost": "overlay.test"}),
    ]  # fmt: skip


def test_a_node_config_lists_the_cluster_and_the_daemon_loads_it(tmp_path: Path) -> None:
    node = PLAN.node(3)
    (node_config.node_dir(tmp_path, node) / "state").mkdir(parents=True)
    ca = pki.make_ca(tmp_path / "pki", "test CA", datetime.datetime.now(datetime.UTC))
    servers = ejabberd.node_servers(ejabberd.plan_servers(PLAN, "ejabberd-cluster", tmp_path), node.index)
    doc = node_config.node_config(PLAN, node, lab_dir=tmp_path, node_id=f"{3:032x}", password="pw", turn_secret="s",
                                  ca_file=ca.cert_path, servers=servers)  # fmt: skip
    assert "server" not in doc["overlays"]["ov1"]["signal"] and "port" not in doc["overlays"]["ov1"]["signal"]
    signal = loads_config(json.dumps(doc), tmp_path).overlays["ov1"].signal
    assert signal.endpoints == (("198.51.100.4", 5222), ("198.51.100.1", 5222), ("198.51.100.3", 5222))


def test_the_state_remembers_the_xmpp_server_and_reads_older_files_as_prosody(tmp_path: Path) -> None:
    (tmp_path / "t1").mkdir()
    state = LabState(name="t1", phase="up", nat=("eim",), overlay="ov1", domain="overlay.test",
                     secrets=LabSecrets(turn_secret="s", passwords=("a",), node_ids=("0" * 32,)),
                     namespaces=("evlt1-pub",), xmpp="ejabberd-cluster")  # fmt: skip
    save_state(tmp_path, state)
    assert load_state(tmp_path, "t1").xmpp == "ejabberd-cluster"
    path = tmp_path / "t1" / "state.json"
    document = json.loads(path.read_text())
    del document["xmpp"]
    path.write_text(json.dumps(document))
    assert load_state(tmp_path, "t1").xmpp == "prosody"
