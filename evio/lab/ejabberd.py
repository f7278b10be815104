"""ejabberd in the lab's public namespace instead of prosody: one server, or a cluster of three.

    Lab.up("t1", nodes=6, daemons=True, xmpp="ejabberd-cluster")   # evio lab up --xmpp ejabberd-cluster

Cluster node 1 listens for clients where prosody would (the public address, port 5222); nodes 2 and 3 on
addresses of their own in the public namespace (198.51.100.3 and .4), the same port: a member lists them as
it lists the hosts of a real cluster. Lab node i lists the servers from cluster node ((i - 1) mod 3) + 1 on
(`signal.servers`, decision 0051), so the members are spread over the cluster and each fails over in its own
order. The Erlang nodes talk over distribution on one port of their own addresses, no epmd (the shape of
evio/testing/ejabberd_cluster.py, which this package may not import: evio.testing is the layer above), with
the cookie of the ejabberd user; nodes 2 and 3 join node 1 with `ejabberdctl join_cluster`. Accounts and the
overlay's shared roster group go through node 1's HTTP API on the namespace's loopback: one ejabberdctl call
is an Erlang start (about a second), an API call a few milliseconds, and Mnesia holds them for the cluster.

The config is what `evio server init --xmpp ejabberd` writes (evio/server/configs.py; evio.server is a
sibling this package may not import, so tests/unit/lab/test_lab_ejabberd.py holds the two together), with
TLS from the lab's CA, the listener on the node's own address and the HTTP API on node 1. It is written as
JSON, which YAML reads as it is.

ejabberdctl runs ejabberd as the ejabberd user, so its files are that user's, and the lab directory lets
the ejabberd group through (mode 0710), nothing more.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import os
import pwd
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from evio.lab.errors import LabCommandError, LabPermissionError, LabPlanError, LabServiceError
from evio.lab.netns import Host, run_in
from evio.lab.state import ProcessRecord
from evio.lab.topology import PUBLIC_NETWORK, LabPlan
from evio.lab.wiring import IpBatch

log = logging.getLogger(__name__)

XmppKind = Literal["prosody", "ejabberd", "ejabberd-cluster"]
XMPP_KINDS: tuple[XmppKind, ...] = get_args(XmppKind)
CLUSTER_SIZE = {"ejabberd": 1, "ejabberd-cluster": 3}
CTL = "/usr/sbin/ejabberdctl"
DIST_PORT = 4370  # Erlang distribution, on each node's own address (epmd's is 4369; none runs)
API_PORT = 5280  # node 1's HTTP API, on the public namespace's loopback only
_EXTRA_ADDRESSES = (3, 4)  # host parts of nodes 2 and 3 (.1 is prosody's and node 1's, .2 coturn's second)
_START_TIMEOUT = 120.0  # an Erlang VM and Mnesia on a loaded host


def xmpp_kind(name: str) -> XmppKind:
    for kind in XMPP_KINDS:
        if name == kind:
            return kind
    raise LabPlanError(f"unknown XMPP server {name!r} (choose from {', '.join(XMPP_KINDS)})")


@dataclass(frozen=True)
class EjabberdNodePlan:
    index: int  # 1-based, in the cluster
    address: ipaddress.IPv4Address
    port: int
    directory: Path

    @property
    def role(self) -> str:
        return f"ejabberd{self.index}"

    @property
    def erlang_node(self) -> str:
        return f"ejabberd{self.index}@{self.address}"

    @property
    def server(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def conf(self) -> Path:
        return self.directory / "conf"

    def ctl_argv(self, *args: str) -> list[str]:
        return [CTL, "--config-dir", str(self.conf), "--logs", str(self.directory / "logs"),
                "--spool", str(self.directory / "spool"), *args]  # fmt: skip


def plan_servers(plan: LabPlan, kind: XmppKind, lab_dir: Path) -> tuple[EjabberdNodePlan, ...]:
    """The ejabberd nodes of a lab whose signaling is `kind` (none for prosody)."""
    size = CLUSTER_SIZE.get(kind, 0)
    addresses = [plan.public.address] + [PUBLIC_NETWORK.network_address + host for host in _EXTRA_ADDRESSES]
    return tuple(EjabberdNodePlan(index, addresses[index - 1], plan.public.xmpp_port, lab_dir / "ejabberd" / f"node{index}")
                 for index in range(1, size + 1))  # fmt: skip


def server_order(node_index: int, size: int) -> list[int]:
    """The cluster nodes (from 1) lab node `node_index` tries, in order: from its own on, round the cluster."""
    first = (node_index - 1) % size
    return [(first + k) % size + 1 for k in range(size)]


def node_servers(servers: Sequence[EjabberdNodePlan], node_index: int) -> list[str]:
    """`signal.servers` of lab node `node_index`: every cluster node, its own first."""
    return [servers[i - 1].server for i in server_order(node_index, len(servers))]


def extra_addresses(plan: LabPlan, servers: Sequence[EjabberdNodePlan]) -> IpBatch:
    """The public bridge's addresses for the cluster nodes past the first (which has the public address)."""
    prefix = PUBLIC_NETWORK.prefixlen
    return IpBatch(plan.public.netns, tuple(f"addr add {s.address}/{prefix} dev {plan.public.bridge}"
                                            for s in servers if s.address != plan.public.address))  # fmt: skip


def ejabberd_config(plan: LabPlan, server: EjabberdNodePlan, pem: Path, *, api: bool) -> dict[str, Any]:
    """ejabberd.yml of one node: `evio server init`'s settings (see the module's doc), TLS from the lab's CA."""
    config: dict[str, Any] = {
        "hosts": [plan.public.domain],
        "loglevel": "info",
        "auth_password_format": "scram",
        "log_rotate_count": 0,
        "certfiles": [str(pem)],
        "c2s_protocol_options": ["no_sslv3", "no_tlsv1", "no_tlsv1_1", "cipher_server_preference", "no_compression"],
        "listen": [{
            "port": server.port, "ip": str(server.address), "module": "ejabberd_c2s", "backlog": 1024,
            "max_stanza_size": 262144, "shaper": "c2s_shaper", "access": "c2s", "starttls_required": True,
        }],
        "s2s_access": "none",
        "cache_size": 10000,
        "cache_life_time": 3600,
        "max_fsm_queue": 20000,
        "acl": {"loopback": {"ip": ["127.0.0.0/8", "::1/128"]}, "evio_server_host": {"user_regexp": "^$"}},
        "access_rules": {"c2s": {"allow": "all"}, "evio_multicast": {"allow": "evio_server_host"}},
        "shaper": {"evio_fast": 1000000},
        "shaper_rules": {"max_user_sessions": 10, "c2s_shaper": "evio_fast"},
        "api_permissions": {"console commands": {"from": ["ejabberd_ctl"], "who": "all", "what": "*"}},
        "modules": {
            "mod_admin_extra": {},
            "mod_disco": {},
            "mod_ping": {},
            "mod_roster": {"versioning": False},
            "mod_shared_roster": {},
            "mod_register": {"access": "none"},  # a member changes its own password, nobody registers (0083)
            "mod_multicast": {"access": "evio_multicast", "limits": {"local": {"message": "infinite", "presence": 0}}},
        },
    }  # fmt: skip
    if api:
        config["listen"].append({"port": API_PORT, "ip": "127.0.0.1", "module": "ejabberd_http",
                                 "request_handlers": {"/api": "mod_http_api"}})  # fmt: skip
        config["api_permissions"]["lab http api"] = {"from": ["mod_http_api"], "who": "all", "what": "*"}
        config["modules"]["mod_http_api"] = {}
    return config


def ctl_config(server: EjabberdNodePlan) -> str:
    """ejabberdctl.cfg: the Erlang node's name, and distribution on DIST_PORT of its own address (no epmd)."""
    return "\n".join([
        f"ERLANG_NODE={server.erlang_node}",
        f"ERL_DIST_PORT={DIST_PORT}",
        f"INET_DIST_INTERFACE={server.address}",
        "EJABBERD_BYPASS_WARNINGS=true",
        "",
    ])  # fmt: skip


# -- I/O -----------------------------------------------------------------------------------------


def check_installed() -> None:
    if not os.path.exists(CTL):
        raise LabPermissionError(f"the lab's ejabberd signaling needs ejabberd ({CTL}); run scripts/bootstrap")


def write_files(plan: LabPlan, servers: Sequence[EjabberdNodePlan], lab_dir: Path, cert: Path, key: Path) -> None:
    """Each node's config, ejabberdctl.cfg and certificate, owned by the ejabberd user; the lab directory
    opened to the ejabberd group for traversal only."""
    user = pwd.getpwnam("ejabberd")
    os.chown(lab_dir, 0, user.pw_gid)
    lab_dir.chmod(0o710)
    top = lab_dir / "ejabberd"
    for server in servers:
        for sub in ("conf", "logs", "spool"):
            (server.directory / sub).mkdir(parents=True, mode=0o700)
        pem = server.conf / "server.pem"
        pem.write_text(cert.read_text() + key.read_text())
        pem.chmod(0o600)
        (server.conf / "ejabberd.yml").write_text(json.dumps(ejabberd_config(plan, server, pem, api=server.index == 1), indent=1) + "\n")
        (server.conf / "ejabberdctl.cfg").write_text(ctl_config(server))
        shutil.copy("/etc/ejabberd/inetrc", server.conf / "inetrc")
    for path in [top, *top.rglob("*")]:
        os.chown(path, user.pw_uid, user.pw_gid)


def start_cluster(host: Host, plan: LabPlan, servers: Sequence[EjabberdNodePlan], nice: Sequence[str],
                  on_record: Callable[[ProcessRecord], None]) -> None:  # fmt: skip
    """Start every node, join nodes 2.. to node 1, return once the cluster runs and every listener listens.

    `on_record(record)` is called with each node's process as soon as it is started (the lab's state
    file names it, so a failure from here on stops it)."""
    netns = plan.public.netns
    records = {}
    for server in servers:  # all at once: each start is mostly an Erlang VM booting
        record = host.spawn(server.role, netns, [*nice, *server.ctl_argv("foreground")], server.directory / "ejabberd.out")
        on_record(record)
        records[server.index] = record
    for server in servers:
        _wait_listening(host, server, records[server.index])
    first = servers[0]
    for server in servers[1:]:
        _ctl(host, netns, server, "join_cluster", first.erlang_node)
        _wait_listening(host, server, records[server.index])  # join_cluster restarts ejabberd on the joining node
    if len(servers) > 1:
        deadline = time.monotonic() + _START_TIMEOUT
        wanted = {s.erlang_node for s in servers}
        while {n.strip("'") for n in _ctl(host, netns, first, "list_cluster").split()} != wanted:
            if time.monotonic() > deadline:
                raise LabServiceError(f"the ejabberd cluster did not form: {_tail(first)}")
            time.sleep(0.5)
    log.info("ejabberd: %d node(s) up: %s", len(servers), " ".join(s.server for s in servers))


def _ctl(host: Host, netns: str, server: EjabberdNodePlan, *args: str) -> str:
    try:
        return host.run(netns, server.ctl_argv(*args), timeout=_START_TIMEOUT).stdout
    except LabCommandError as exc:
        raise LabServiceError(f"{server.erlang_node}: {exc}; {_tail(server)}") from exc


def _wait_listening(host: Host, server: EjabberdNodePlan, record: ProcessRecord) -> None:
    """Until the node's client listener listens on its own address (the others listen on the same port)."""
    deadline = time.monotonic() + _START_TIMEOUT
    argv = ["ss", "-Hltn", f"src {server.address}:{server.port}"]
    while not host.run(record.netns, argv, check=False).stdout.strip():
        if not host.is_running(record):
            raise LabServiceError(f"{server.role} exited during startup; {_tail(server)}")
        if time.monotonic() > deadline:
            raise LabServiceError(f"{server.role} not listening after {_START_TIMEOUT:.0f} s; {_tail(server)}")
        time.sleep(0.1)


def api(netns: str, calls: Sequence[tuple[str, dict[str, str]]]) -> None:
    """Node 1's HTTP API, one connection inside the public namespace: each (command, arguments) in turn."""

    def send() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=60)
        try:
            for command, arguments in calls:
                connection.request("POST", f"/api/{command}", json.dumps(arguments), {"Content-Type": "application/json"})
                reply = connection.getresponse()
                body = reply.read()
                if reply.status != 200:
                    raise LabServiceError(f"ejabberd API {command} {arguments}: {reply.status} {body[:200]!r}")
        finally:
            connection.close()

    run_in(netns, send)


def register_calls(domain: str, accounts: Sequence[tuple[str, str]]) -> list[tuple[str, dict[str, str]]]:
    return [("register", {"user": user, "host": domain, "password": password}) for user, password in accounts]


def group_calls(domain: str, group: str, users: Sequence[str]) -> list[tuple[str, dict[str, str]]]:
    """The overlay's shared roster group, displayed to its own members, with `users` in it (`evio member add`)."""
    calls = [("srg_create", {"group": group, "host": domain, "label": group, "description": f"evio overlay {group}",
                             "display": group})]  # fmt: skip
    calls += [("srg_user_add", {"user": user, "host": domain, "group": group, "grouphost": domain}) for user in users]
    return calls


def beam_pids(host: Host, plan: LabPlan) -> list[int]:
    """The Erlang VMs of the lab's ejabberd nodes (the spawned processes are ejabberdctl's shell and su)."""
    return [r.pid for r in host.processes_in([plan.public.netns]) if r.argv and r.argv[0].endswith("beam.smp")]


def _tail(server: EjabberdNodePlan, lines: int = 15) -> str:
    texts = []
    for path in (server.directory / "ejabberd.out", server.directory / "logs" / "error.log"):
        try:
            texts.append(f"end of {path}:\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        except OSError:
            pass
    return "\n".join(texts) or f"no log in {server.directory}"
