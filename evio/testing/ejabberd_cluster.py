"""A three-node ejabberd cluster on loopback: one XMPP domain, Mnesia, Erlang distribution between the nodes.

    with EjabberdCluster(tmp_path, "cl1234") as cluster:   # nodes 1..3 up and clustered
        cluster.add_members("ov1", {"node1": "pw1", ...})   # accounts and the overlay's shared roster group
        cluster.servers()                                   # ["127.77.x.1:port", ...]: signal.servers
        cluster.kill(2)                                     # SIGKILL of node 2's Erlang VM, as a crash

Each node is ejabberd 23.01 as `evio server init --xmpp ejabberd` configures it (evio.server.configs), with
the client listener made plaintext on its own loopback address, 127.77.x.N, the same port on each: a member
lists the three as it lists the hosts of a real cluster. The Erlang nodes are `<name>N@127.77.x.N`, all
on one distribution port on their own address and no epmd (ejabberdctl's ERL_DIST_PORT: every node is
reached on that port), with the cookie of the ejabberd user. Nodes 2 and 3 join node 1 with
`ejabberdctl join_cluster`, the command an operator types (docs/decisions/0051-several-xmpp-servers.md).
Accounts and the group are made through node 1's HTTP API (one ejabberdctl call is an Erlang start, about a
second): Mnesia holds them for the whole cluster.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from evio.server.configs import ejabberd_config
from evio.testing.waiting import wait_until_blocking

DOMAIN = "cluster.test"
CTL = "/usr/sbin/ejabberdctl"


class ClusterError(RuntimeError):
    pass


def _free_port(addresses: list[str]) -> int:
    """A TCP port free on every address (bound on the first by the kernel, then tried on the others)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((addresses[0], 0))
            port = int(probe.getsockname()[1])
        try:
            for address in addresses[1:]:
                with socket.socket() as other:
                    other.bind((address, port))
        except OSError:
            continue
        return port
    raise ClusterError(f"no TCP port free on all of {addresses}")


def listening(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), 0.2).close()
    except OSError:
        return False
    return True


class EjabberdNode:
    """One ejabberd of the cluster: its config dir, Erlang node, listener; started with `ejabberdctl foreground`."""

    def __init__(self, directory: Path, name: str, address: str, port: int, dist_port: int,
                 http_port: int | None) -> None:  # fmt: skip
        self.directory = directory
        self.erlang_node = f"{name}@{address}"
        self.address, self.port, self.http_port = address, port, http_port
        self.conf = directory / "conf"
        self._proc: subprocess.Popen[bytes] | None = None
        for sub in ("conf", "logs", "spool"):
            (directory / sub).mkdir(parents=True)
        (self.conf / "ejabberd.yml").write_text(yaml.safe_dump(self._config(), sort_keys=False))
        (self.conf / "ejabberdctl.cfg").write_text("\n".join([
            f"ERLANG_NODE={self.erlang_node}",
            f"ERL_DIST_PORT={dist_port}",  # every node on this port of its own address: no epmd
            f"INET_DIST_INTERFACE={address}",
            "EJABBERD_BYPASS_WARNINGS=true",
            "",
        ]))  # fmt: skip
        shutil.copy("/etc/ejabberd/inetrc", self.conf / "inetrc")

    def _config(self) -> dict[str, Any]:
        """What `evio server init` writes, with the listener plaintext on our address (and the HTTP API on node 1)."""
        config = yaml.safe_load(ejabberd_config(domain=DOMAIN, certfile="/dev/null", port=self.port, ip=self.address))
        del config["certfiles"]
        config["auth_password_format"] = "plain"  # no SCRAM hashing per account: the test makes them fast
        config["listen"][0]["starttls_required"] = False
        if self.http_port is not None:
            config["listen"].append({"port": self.http_port, "ip": self.address, "module": "ejabberd_http",
                                     "request_handlers": {"/api": "mod_http_api"}})  # fmt: skip
            config["api_permissions"]["test http api"] = {"from": ["mod_http_api"], "who": "all", "what": "*"}
            config["modules"]["mod_http_api"] = {}
        return dict(config)

    def ctl_argv(self) -> list[str]:
        return [CTL, "--config-dir", str(self.conf), "--logs", str(self.directory / "logs"),
                "--spool", str(self.directory / "spool")]  # fmt: skip

    def ctl(self, *args: str, timeout: float = 120.0) -> str:
        done = subprocess.run([*self.ctl_argv(), *args], capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise ClusterError(f"{self.erlang_node}: ejabberdctl {' '.join(args)}: {done.stdout}{done.stderr}".strip())
        return done.stdout

    def start(self) -> None:
        with open(self.directory / "ejabberd.out", "ab") as out:
            self._proc = subprocess.Popen([*self.ctl_argv(), "foreground"], stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True)  # fmt: skip
        self.wait_listening()

    def wait_listening(self, timeout: float = 120.0) -> None:
        proc = self._proc
        assert proc is not None
        wait_until_blocking(lambda: listening(self.address, self.port) or proc.poll() is not None, timeout,
                            what=f"{self.erlang_node} listening")  # fmt: skip
        if proc.poll() is not None:
            raise ClusterError(f"{self.erlang_node} did not start: {self.log_tail()}")

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def beam_pid(self) -> int | None:
        """The Erlang VM's pid (under su and sh): the process whose command line names our node."""
        marker = self.erlang_node.encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"beam.smp") and marker in argv:
                return int(entry.name)
        return None

    def kill(self) -> None:
        """A crash: SIGKILL to the VM, so its sockets are closed by the kernel and nothing is said to anyone."""
        pid = self.beam_pid()
        if pid is None:
            raise ClusterError(f"{self.erlang_node}: no Erlang VM running")
        os.kill(pid, signal.SIGKILL)
        proc = self._proc
        if proc is not None:
            proc.wait(30)
        wait_until_blocking(lambda: not listening(self.address, self.port), 30, what=f"{self.erlang_node} gone")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        subprocess.run([*self.ctl_argv(), "stop"], capture_output=True, timeout=60, check=False)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            pid = self.beam_pid()
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
            proc.wait(30)

    def log_tail(self, lines: int = 30) -> str:
        texts = []
        for path in (self.directory / "ejabberd.out", self.directory / "logs" / "error.log"):
            try:
                texts.append(f"--- {path}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
            except OSError:
                pass
        return "\n".join(texts)


class EjabberdCluster:
    def __init__(self, directory: Path, name: str, size: int = 3) -> None:
        if not os.path.exists(CTL):
            raise ClusterError("ejabberd is not installed (apt-get install ejabberd)")
        subnet = f"127.77.{random.randrange(1, 255)}"
        addresses = [f"{subnet}.{i}" for i in range(1, size + 1)]
        port, dist_port = _free_port(addresses), _free_port(addresses)
        http_port = _free_port(addresses[:1])
        self.directory = directory
        self.domain = DOMAIN
        self.nodes = [EjabberdNode(directory / f"node{i}", f"{name}{i}", address, port, dist_port,
                                   http_port if i == 1 else None)
                      for i, address in enumerate(addresses, start=1)]  # fmt: skip
        subprocess.run(["chown", "-R", "ejabberd:", str(directory)], check=True)

    def __enter__(self) -> EjabberdCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def node(self, index: int) -> EjabberdNode:
        """Node `index`, counted from 1."""
        return self.nodes[index - 1]

    def start(self) -> None:
        """Node 1, then each other node started and joined to it (Mnesia copies the tables to it)."""
        first = self.nodes[0]
        first.start()
        for node in self.nodes[1:]:
            node.start()
            node.ctl("join_cluster", first.erlang_node)
            node.wait_listening()  # join_cluster restarts ejabberd on the joining node
        wait_until_blocking(lambda: len(self.running_nodes()) == len(self.nodes), 60, what="every node in the cluster")

    def running_nodes(self, via: int = 1) -> list[str]:
        """The cluster's running Erlang nodes, as node `via` sees them."""
        return sorted(n.strip("'") for n in self.node(via).ctl("list_cluster").split())

    def servers(self, order: list[int] | None = None) -> list[str]:
        """host:port of the nodes' listeners, in `order` (node indexes from 1; default 1, 2, 3)."""
        return [f"{self.node(i).address}:{self.node(i).port}" for i in (order or range(1, len(self.nodes) + 1))]

    def api(self, command: str, **args: str) -> Any:
        first = self.nodes[0]
        request = urllib.request.Request(f"http://{first.address}:{first.http_port}/api/{command}",
                                         data=json.dumps(args).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            return json.loads(reply.read() or b"null")

    def add_members(self, group: str, passwords: dict[str, str]) -> None:
        """Accounts (localpart -> password) in the shared roster group `group`, as `evio member add` makes them."""
        self.api("srg_create", group=group, host=DOMAIN, label=group, description=f"evio overlay {group}",
                 display=group)  # fmt: skip
        for user, password in passwords.items():
            self.api("register", user=user, host=DOMAIN, password=password)
            self.api("srg_user_add", user=user, host=DOMAIN, group=group, grouphost=DOMAIN)

    def users_on(self, via: int = 1) -> dict[int, set[str]]:
        """Cluster node index -> the accounts (localparts) signed in to it, as node `via` sees the whole cluster."""
        index = {node.erlang_node: i for i, node in enumerate(self.nodes, start=1)}
        users: dict[int, set[str]] = {i: set() for i in index.values()}
        for line in self.node(via).ctl("connected_users_info").splitlines():
            fields = line.split("\t")  # jid, connection, ip, port, priority, node, uptime, status, resource, text
            if len(fields) > 5 and fields[5] in index:
                users[index[fields[5]]].add(fields[0].split("@", 1)[0])
        return users

    def kill(self, index: int) -> None:
        self.node(index).kill()

    def stop(self) -> None:
        # The joined nodes first: a node stopped last is the one whose Mnesia copy is newest.
        for node in reversed(self.nodes):
            try:
                node.stop()
            except (subprocess.TimeoutExpired, OSError):
                pass

    def diagnose(self) -> str:
        return "\n".join(f"===== {n.erlang_node} ({'alive' if n.alive() else 'down'})\n{n.log_tail()}" for n in self.nodes)
