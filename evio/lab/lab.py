"""`Lab`: bring a NATed multi-node deployment up on this machine, use it, take it down.

    with Lab.up("t1", nodes=4, nat="mixed") as lab:
        lab.exec(1, ["ping", "-c1", str(lab.public.address)])
        info = lab.node(2)          # namespace, addresses, NAT kind, JID, password, config path
    # everything is gone here, also after an exception or Ctrl-C

`Lab.up` cleans up after itself when any step fails or is interrupted.
`Lab.down(name)` removes a lab made by any earlier process, even one that
crashed half-way: it uses the state file when it can read it and, in any
case, every namespace carrying the lab's prefix and every process inside
those namespaces.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from evio.bridge.ovs_instance import OvsInstance
from evio.lab import daemons as full_nodes
from evio.lab import ejabberd, pki, services, shaping, wiring
from evio.lab import nat as nat_rules
from evio.lab import node_config as configs
from evio.lab.errors import LabDaemonsRunningError, LabError, LabExistsError, LabNotFoundError, LabStateError
from evio.lab.netns import Host, LinuxHost
from evio.lab.state import (
    DEFAULT_ROOT,
    LabSecrets,
    LabState,
    ProcessRecord,
    lab_dir,
    list_labs,
    load_state,
    save_state,
)
from evio.lab.topology import (
    DEFAULT_LAB_NAME,
    LabNodePlan,
    LabPlan,
    NatKind,
    lab_prefix,
    nat_kinds,
    plan_lab,
    target_netns,
)
from evio.node import control, control_client

log = logging.getLogger(__name__)

STOP_GRACE = 2.0  # seconds between SIGTERM and SIGKILL


@dataclass(frozen=True)
class Progress:
    """One step of `up`: `done` of `total` units of `step` finished, `elapsed` seconds since the start."""

    step: str
    done: int
    total: int
    elapsed: float


ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True)
class NodeInfo:
    index: int
    name: str
    netns: str
    nat: NatKind
    address: IPv4Address  # LAN address
    lan_network: IPv4Network
    gateway: IPv4Address
    router_netns: str
    wan_address: IPv4Address  # the router's public address (the NAT's outside address)
    overlay_address: IPv4Interface
    node_id: str
    jid: str
    password: str = field(repr=False)
    config_path: Path


_Info = TypeVar("_Info", "NodeInfo", "PublicInfo")


def _from_plan(info: type[_Info], plan: object, **given: Any) -> _Info:
    """What a lab user sees of a planned part: the `given` fields, the others as the plan has them."""
    return info(**{f.name: getattr(plan, f.name) for f in fields(info) if f.name not in given}, **given)


@dataclass(frozen=True)
class PublicInfo:
    netns: str
    address: IPv4Address  # prosody and coturn
    alt_address: IPv4Address  # coturn's second address
    domain: str
    muc_domain: str
    xmpp_port: int
    stun_port: int  # STUN and TURN, UDP and TCP
    relay_ports: tuple[int, int]
    turn_secret: str = field(repr=False)
    ca_file: Path
    overlay: str

    @property
    def muc_room(self) -> str:
        """The overlay's MUC room (membership by MUC)."""
        return f"{self.overlay}@{self.muc_domain}"

    @property
    def roster_group(self) -> str:
        """The shared roster group holding every node (membership by mod_groups)."""
        return self.overlay


@dataclass(frozen=True)
class ProcessStatus:
    role: str
    pid: int
    netns: str | None
    running: bool


@dataclass(frozen=True)
class LabStatus:
    name: str
    phase: str
    directory: Path
    nodes: tuple[NodeInfo, ...]
    public: PublicInfo
    processes: tuple[ProcessStatus, ...]
    missing_namespaces: tuple[str, ...]
    rate_mbit: float | None
    xmpp: str = "prosody"
    xmpp_servers: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return self.phase == "up" and not self.missing_namespaces and all(p.running for p in self.processes)


@dataclass(frozen=True)
class DownReport:
    name: str
    namespaces: tuple[str, ...]  # deleted
    processes: tuple[ProcessRecord, ...]  # stopped
    directory_removed: bool
    seconds: float

    @property
    def removed_anything(self) -> bool:
        return bool(self.namespaces or self.processes or self.directory_removed)


class Lab:
    """A lab that is up. Make one with `Lab.up` or find a running one with `Lab.attach`."""

    def __init__(self, plan: LabPlan, state: LabState, root: Path, host: Host) -> None:
        self.plan = plan
        self._state = state
        self._root = root
        self._host = host
        self._lock = threading.Lock()  # guards the state file against concurrent spawn()

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def up(
        cls,
        name: str = DEFAULT_LAB_NAME,
        nodes: int = 3,
        nat: str | Sequence[str] = "eim",
        *,
        overlay: str = "ov1",
        domain: str = "overlay.test",
        rate_mbit: float | None = None,
        plaintext: bool = False,
        topology: Mapping[str, Any] | None = None,
        node_topology: Mapping[int, Mapping[str, Any]] | None = None,
        tunnel: Mapping[str, Any] | None = None,
        daemons: bool = False,
        daemon_timeout: float | None = None,
        trust: bool = False,
        switching: str = "bounded-flood",
        node_evio: Mapping[int, Sequence[str]] | None = None,
        trust_options: Mapping[str, Any] | None = None,
        xmpp: str = "prosody",
        progress: ProgressCallback | None = None,
        root: Path = DEFAULT_ROOT,
        host: Host | None = None,
    ) -> Lab:
        """Build lab `name` with `nodes` nodes behind NATs of kind `nat` (a kind, "mixed", or one per node).

        `topology` goes into every node config's overlay `topology` section (e.g.
        {"successors": 2, "long_distance": 3}); `node_topology` {index: {...}}
        overrides keys of it for single nodes (a mixed overlay, as E5); `tunnel` is every node's
        overlay `tunnel` section (e.g. {"offload": False}). With `daemons`, every node also
        runs its own Open vSwitch and an `evio run` daemon, and `up` returns
        once each daemon's bridge is connected to its SDN controller (each
        within `daemon_timeout` of its own start, default 30 s + 2 s per node;
        the daemons start `DAEMON_START_WINDOW` at a time, more on a loaded host: `start_window`). With `trust`, the lab
        also makes an overlay CA and gives each node a certificate issued for its
        node id (the config's `trust` section), so tunnels check more than the
        fingerprint the XMPP server carries; `trust_options` adds keys to that section (e.g.
        {"offers_over_overlay": False}). `switching` is every bridge's switching mode
        ("stp": Open vSwitch's RSTP over the same tunnels, no SDN controller; E9). `node_evio`
        {index: argv} runs those nodes' daemons with another evio than this one (the argv that runs
        its CLI, e.g. the previous release's `python -I -m evio`: a rolling upgrade's mixed overlay);
        the others run this one's. `xmpp` is the signaling server: "prosody", "ejabberd" (one node) or
        "ejabberd-cluster" (three, the members spread over them: evio.lab.ejabberd).

        On any failure or interruption (KeyboardInterrupt included) everything
        made so far is removed before the exception propagates.
        """
        host = host or LinuxHost()
        host.check_ready()
        if ejabberd.xmpp_kind(xmpp) != "prosody":
            ejabberd.check_installed()
        kinds = nat_kinds(nat, nodes)
        plan = plan_lab(name, kinds, overlay=overlay, domain=domain)
        _refuse_existing(plan, root, host)
        state = LabState(
            name=name,
            phase="creating",
            nat=kinds,
            overlay=overlay,
            domain=domain,
            secrets=LabSecrets(
                turn_secret=secrets.token_hex(16),
                passwords=tuple(secrets.token_urlsafe(12) for _ in kinds),
                node_ids=tuple(secrets.token_hex(16) for _ in kinds),
            ),
            namespaces=plan.namespaces,
            rate_mbit=rate_mbit,
            created_at=time.time(),
            evio_commands={index: tuple(argv) for index, argv in (node_evio or {}).items()},
            xmpp=xmpp,
        )
        _make_lab_dir(root, name)
        lab = cls(plan, state, root, host)
        try:
            save_state(root, state)  # before anything exists, so a crash from here on is recoverable
            report = progress or (lambda p: None)
            began = time.monotonic()
            lab._build(report, began, plaintext=plaintext, topology=topology, node_topology=node_topology or {}, trust=trust,
                       switching=switching, tunnel=tunnel, trust_options=trust_options)
            if daemons:
                lab._start_full_nodes(report, began, daemon_timeout or 30.0 + 2.0 * nodes)
            state.phase = "up"
            save_state(root, state)
        except BaseException:
            log.warning("lab %s: up failed, removing what was made", name)
            with _sigint_ignored():
                try:
                    cls.down(name, root=root, host=host)
                except Exception:
                    log.exception("lab %s: cleanup after the failed up also failed", name)
            raise
        return lab

    @classmethod
    def attach(cls, name: str = DEFAULT_LAB_NAME, *, root: Path = DEFAULT_ROOT, host: Host | None = None) -> Lab:
        """The running lab `name`, as recorded by the `up` that made it (possibly in another process)."""
        host = host or LinuxHost()
        lab_prefix(name)  # validates the name
        try:
            state = load_state(root, name)
        except LabStateError as exc:
            raise LabNotFoundError(f"lab {name!r} is not up ({exc})") from exc
        if state.phase != "up":
            raise LabNotFoundError(f"lab {name!r} is not fully up (phase {state.phase}); run `evio lab down`")
        plan = plan_lab(state.name, state.nat, overlay=state.overlay, domain=state.domain)
        return cls(plan, state, root, host)

    @classmethod
    def down(
        cls,
        name: str = DEFAULT_LAB_NAME,
        *,
        root: Path = DEFAULT_ROOT,
        host: Host | None = None,
        grace: float = STOP_GRACE,
    ) -> DownReport:
        """Remove lab `name`: its processes, namespaces (with all their links, rules, qdiscs) and files.

        Works from the state file when it is readable and from a scan by
        prefix in every case, so a crashed or half-written `up` is removed too.
        Removing a lab that does not exist is not an error.
        """
        started = time.monotonic()
        host = host or LinuxHost()
        host.check_ready()
        prefix = lab_prefix(name)
        directory = lab_dir(root, name)
        namespaces: set[str] = set()
        records: list[ProcessRecord] = []
        try:
            state = load_state(root, name)
            namespaces.update(state.namespaces)
            records += state.processes
        except LabStateError as exc:
            if directory.exists():
                log.warning("lab %s: %s; removing by name prefix %s", name, exc, prefix)
        existing = {ns for ns in host.netns_list() if ns.startswith(prefix)}
        namespaces = (namespaces & set(host.netns_list())) | existing
        # Processes first: a process keeps its namespace alive after `ip netns del`.
        records += host.processes_in(sorted(namespaces))
        stopped = tuple(r for r in _unique(records) if host.is_running(r))
        # Daemons first, while their Open vSwitch still runs: they take their bridges down themselves.
        daemons = [r for r in stopped if full_nodes.is_daemon_role(r.role)]
        survivors = host.stop(daemons, max(grace, full_nodes.DAEMON_STOP_GRACE)) if daemons else []
        survivors += host.stop([r for r in stopped if r not in daemons], grace)
        host.ip_batch(wiring.delete_namespaces(sorted(namespaces)), force=True)
        stray_links = [link for link in host.root_links() if link.startswith(prefix)]
        if stray_links:
            host.ip_batch(wiring.IpBatch(None, tuple(f"link del {link}" for link in stray_links)), force=True)
        removed_dir = directory.exists()
        shutil.rmtree(directory, ignore_errors=True)
        _remove_if_empty(root)
        left = [ns for ns in host.netns_list() if ns.startswith(prefix)]
        left += [link for link in host.root_links() if link.startswith(prefix)]
        if survivors or left or directory.exists():
            raise LabError(
                f"lab {name}: could not remove everything: processes {[r.pid for r in survivors]}, "
                f"names {left}, directory {directory if directory.exists() else 'removed'}"
            )
        report = DownReport(
            name=name,
            namespaces=tuple(sorted(namespaces)),
            processes=stopped,
            directory_removed=removed_dir,
            seconds=time.monotonic() - started,
        )
        log.info(
            "lab %s down: %d namespaces, %d processes, %.2f s", name, len(namespaces), len(stopped), report.seconds
        )
        return report

    @classmethod
    def status(cls, name: str = DEFAULT_LAB_NAME, *, root: Path = DEFAULT_ROOT, host: Host | None = None) -> LabStatus:
        host = host or LinuxHost()
        lab_prefix(name)
        try:
            state = load_state(root, name)
        except LabStateError as exc:
            raise LabNotFoundError(f"lab {name!r}: {exc}") from exc
        plan = plan_lab(state.name, state.nat, overlay=state.overlay, domain=state.domain)
        lab = cls(plan, state, root, host)
        present = set(host.netns_list())
        return LabStatus(
            name=name,
            phase=state.phase,
            directory=lab.directory,
            nodes=lab.nodes,
            public=lab.public,
            processes=tuple(ProcessStatus(r.role, r.pid, r.netns, host.is_running(r)) for r in state.processes),
            missing_namespaces=tuple(ns for ns in plan.namespaces if ns not in present),
            rate_mbit=state.rate_mbit,
            xmpp=state.xmpp,
            xmpp_servers=lab.xmpp_servers,
        )

    @staticmethod
    def names(root: Path = DEFAULT_ROOT) -> list[str]:
        """Names of the labs with a directory under `root` (up, or left by a crash)."""
        return list_labs(root)

    def close(self) -> DownReport:
        return Lab.down(self.name, root=self._root, host=self._host)

    def __enter__(self) -> Lab:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with _sigint_ignored():
            try:
                self.close()
            except Exception:
                if exc is None:
                    raise
                log.exception("lab %s: teardown failed", self.name)

    # -- what tests and tools use --------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def directory(self) -> Path:
        return lab_dir(self._root, self.name)

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        return tuple(self._node_info(n) for n in self.plan.nodes)

    def node(self, index: int) -> NodeInfo:
        """Node `index` (1-based)."""
        return self._node_info(self.plan.node(index))

    @property
    def public(self) -> PublicInfo:
        return _from_plan(PublicInfo, self.plan.public, turn_secret=self._state.secrets.turn_secret,
                          ca_file=self._paths.ca_cert, overlay=self.plan.overlay)

    @property
    def xmpp_servers(self) -> tuple[str, ...]:
        """host:port of the XMPP servers (one prosody or ejabberd, or the cluster's nodes)."""
        if self.ejabberd_servers:
            return tuple(server.server for server in self.ejabberd_servers)
        return (f"{self.plan.public.address}:{self.plan.public.xmpp_port}",)

    @property
    def ejabberd_servers(self) -> tuple[ejabberd.EjabberdNodePlan, ...]:
        """The ejabberd nodes of a lab `up(xmpp="ejabberd...")`, none on prosody."""
        return ejabberd.plan_servers(self.plan, ejabberd.xmpp_kind(self._state.xmpp), self.directory)

    @property
    def processes(self) -> tuple[ProcessRecord, ...]:
        return tuple(self._state.processes)

    def netns(self, target: int | str) -> str:
        """The namespace of a node (3, "node3", "n3"), a router ("router3", "r3") or "pub"."""
        return target_netns(self.plan, target)

    def exec(
        self,
        target: int | str,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` to completion in a lab namespace; output is captured as text."""
        return self._host.run(self.netns(target), argv, input=input, timeout=timeout, check=check)

    def spawn(self, target: int | str, argv: Sequence[str], *, role: str, log_path: Path | None = None) -> ProcessRecord:
        """Start a long-running process in a lab namespace; `down` stops it (output in the lab dir by default)."""
        netns = self.netns(target)
        path = log_path or self.directory / "logs" / f"{role}-{netns}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        record = self._host.spawn(role, netns, argv, path)
        with self._lock:
            self._state.processes.append(record)
            save_state(self._root, self._state)
        return record

    def stop(self, record: ProcessRecord, grace: float = STOP_GRACE) -> None:
        """Stop a process started by `spawn` (SIGTERM, SIGKILL after `grace`)."""
        survivors = self._host.stop([record], grace)
        if survivors:
            raise LabError(f"{record.role} pid {record.pid} did not stop")
        with self._lock:
            self._state.processes = [p for p in self._state.processes if p != record]
            save_state(self._root, self._state)

    def is_running(self, record: ProcessRecord) -> bool:
        return self._host.is_running(record)

    def stop_service(self, role: str, grace: float = STOP_GRACE) -> None:
        """Stop "prosody" or "coturn" (e.g. to test how nodes cope with the server going away)."""
        for record in [p for p in self._state.processes if p.role == role]:
            self.stop(record, grace)

    def start_service(self, role: str) -> ProcessRecord:
        """Start "prosody" or "coturn" again with the lab's config; returns once it listens."""
        starters = {"prosody": services.start_prosody, "coturn": services.start_coturn}
        if role not in starters:
            raise LabError(f"unknown lab service {role!r} (prosody or coturn)")
        if any(p.role == role and self._host.is_running(p) for p in self._state.processes):
            raise LabError(f"{role} is already running in lab {self.name}")
        record = starters[role](self._host, self.plan, self._paths)
        with self._lock:
            self._state.processes.append(record)
            save_state(self._root, self._state)
        return record

    def shape(self, index: int, rate_mbit: float, shaper: shaping.Shaper = "tbf") -> None:
        """Limit node `index`'s link to `rate_mbit` in each direction."""
        node = self.plan.node(index)
        for interface in (node.router_wan_interface, node.router_lan_interface):
            self._host.tc_batch(node.router_netns, shaping.shape_lines(interface, rate_mbit, shaper))

    def unshape(self, index: int) -> None:
        node = self.plan.node(index)
        for interface in (node.router_wan_interface, node.router_lan_interface):
            self._host.tc_batch(node.router_netns, shaping.unshape_lines(interface))

    def register_account(self, localpart: str, password: str | None = None) -> tuple[str, str]:
        """Add an XMPP account that is in no overlay group (e.g. to test rejection of non-members)."""
        password = password or secrets.token_urlsafe(12)
        if self.ejabberd_servers:
            ejabberd.api(self.plan.public.netns, ejabberd.register_calls(self.plan.public.domain, [(localpart, password)]))
        else:
            services.register_accounts(self._host, self._paths, self.plan.public.domain, [(localpart, password)])
        with self._lock:
            self._state.accounts[localpart] = password
            save_state(self._root, self._state)
        return f"{localpart}@{self.plan.public.domain}", password

    def add_overlay_group(self, overlay: str, jids: Sequence[str]) -> None:
        """Give the running prosody (or ejabberd) one more shared-roster group (another overlay and its members)."""
        if self.ejabberd_servers:
            users = [jid.partition("@")[0] for jid in jids]
            ejabberd.api(self.plan.public.netns, ejabberd.group_calls(self.plan.public.domain, overlay, users))
            return
        path = self._paths.groups_file
        path.write_text(path.read_text() + f"[{overlay}]\n" + "".join(f"{jid}\n" for jid in jids))
        domain = self.plan.public.domain
        self._host.run(None, ["prosodyctl", "--config", str(self._paths.prosody_config), "shell",
                              f"module:reload('groups', '{domain}')"])

    # -- full nodes (OVS + daemon per node) ------------------------------------------------------

    def ovs(self, index: int) -> OvsInstance:
        """Node `index`'s private Open vSwitch (whether or not it runs)."""
        return full_nodes.ovs_instance(self.directory, self.plan.node(index))

    def start_ovs(self, index: int) -> OvsInstance:
        ovs = self.ovs(index)
        ovs.start()
        return ovs

    def start_daemon(self, index: int, evio: Sequence[str] | None = None) -> ProcessRecord:
        """Start `evio run` in node `index` (its OVS must run); `down` stops it.

        `evio`: the argv that runs the evio CLI the node is to run from now on (its later starts
        too), e.g. `full_nodes.evio_command()` to upgrade a node that ran the previous release;
        by default the one it ran before (`node_evio` of `up`), or this one."""
        node = self.plan.node(index)
        if self.daemon(index) is not None:
            raise LabError(f"the daemon of {node.name} is already running")
        if evio is not None:
            with self._lock:
                self._state.evio_commands[index] = tuple(evio)
                save_state(self._root, self._state)
        argv = full_nodes.daemon_argv(self.directory, node, evio=self.evio_command(index))
        return self.spawn(index, argv, role=full_nodes.daemon_role(node))

    def evio_command(self, index: int) -> tuple[str, ...]:
        """The argv that runs the evio CLI of node `index`'s daemon (this evio's unless `node_evio` said otherwise)."""
        return self._state.evio_commands.get(index) or full_nodes.evio_command()

    def daemon(self, index: int) -> ProcessRecord | None:
        """The running daemon of node `index`, if any."""
        role = full_nodes.daemon_role(self.plan.node(index))
        for record in self._state.processes:
            if record.role == role and self._host.is_running(record):
                return record
        return None

    def require_no_daemons(self, indices: Iterable[int] | None = None) -> None:
        """Raise LabDaemonsRunningError if the daemon of any of these nodes (default: all) runs.

        For tools that log in with the nodes' own accounts or put their own TAPs
        and overlay addresses in the nodes: beside a daemon, both would break.
        """
        wanted = [n.index for n in self.nodes] if indices is None else list(indices)
        running = [self.plan.node(i).name for i in wanted if self.daemon(i) is not None]
        if running:
            numbers = " ".join(name.removeprefix("node") for name in running)
            lab = "" if self.name == DEFAULT_LAB_NAME else f" --name {self.name}"
            raise LabDaemonsRunningError(
                f"evio daemons run in {', '.join(running)}, and this tool would take over their accounts and TAPs; "
                f"stop the daemons first: evio lab daemon stop N{lab} (N = {numbers}), or evio lab up --no-daemons"
            )

    def stop_daemon(self, index: int, grace: float = full_nodes.DAEMON_STOP_GRACE) -> None:
        """SIGTERM the daemon of node `index` and wait until it has exited (SIGKILL after `grace`)."""
        record = self.daemon(index)
        if record is not None:
            self.stop(record, grace)

    def kill_daemon(self, index: int) -> None:
        """SIGKILL the daemon of node `index` (a crash: it cleans nothing up; its TAPs die with it)."""
        record = self.daemon(index)
        if record is None:
            return
        try:
            os.kill(record.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 5.0
        while self._host.is_running(record):
            if time.monotonic() > deadline:
                raise LabError(f"{record.role} pid {record.pid} survived SIGKILL")
            time.sleep(0.01)
        with self._lock:
            self._state.processes = [p for p in self._state.processes if p != record]
            save_state(self._root, self._state)

    def daemon_usage(self, index: int) -> full_nodes.Usage | None:
        """Memory and CPU time of the daemon of node `index`, if it runs."""
        record = self.daemon(index)
        return full_nodes.process_usage(record.pid) if record is not None else None

    def daemon_status(self, index: int, timeout: float = 5.0) -> dict[str, Any]:
        """The daemon's status document, from its control API (raises ControlError if it does not answer)."""
        return control_client.fetch_status(full_nodes.control_socket(self.directory, self.plan.node(index)), timeout)

    def reload_configs(self, edit: Callable[[dict[str, Any]], None], timeout: float = 30.0) -> None:
        """Apply `edit` to every node's config file, reload each daemon (SIGHUP) and wait until each has."""
        before = {n.index: int(self.daemon_status(n.index)["reloads"]) for n in self.nodes}
        for node in self.nodes:
            _rewrite_config(node.config_path, edit)
            record = self.daemon(node.index)
            if record is None:
                raise LabError(f"{node.name}'s daemon is not running")
            os.kill(record.pid, signal.SIGHUP)
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            while int(self.daemon_status(node.index)["reloads"]) <= before[node.index]:
                if time.monotonic() > deadline:
                    raise LabError(f"{node.name} did not reload its config in {timeout:.0f} s")
                time.sleep(0.1)

    def renumber(self, index: int) -> str:
        """Give node `index` a new node id (its daemon must be stopped): it joins the ring elsewhere when started.

        The paper's E11 replaces a node this way ("stopped, reconfigured with a new NID and
        started"). A lab with overlay certificates is refused: the certificate names the old id.
        """
        node = self.node(index)
        if self.daemon(index) is not None:
            raise LabError(f"stop {node.name}'s daemon before giving it a new node id")
        config = json.loads(node.config_path.read_text())
        if any("trust" in overlay for overlay in config.get("overlays", {}).values()):
            raise LabError(f"{node.name} has an overlay certificate issued for its node id; renumbering it is not supported")
        new_id = secrets.token_hex(16)
        _rewrite_config(node.config_path, lambda doc: doc["node"].update(id=new_id))
        with self._lock:
            ids = list(self._state.secrets.node_ids)
            ids[index - 1] = new_id
            self._state.secrets = dataclasses.replace(self._state.secrets, node_ids=tuple(ids))
            save_state(self._root, self._state)
        return new_id

    def daemon_log(self, index: int) -> Path:
        return full_nodes.daemon_log(self.directory, self.plan.node(index))

    def wait_daemons(
        self, indices: Sequence[int], timeout: float, report: Callable[[int], None] | None = None
    ) -> None:
        """Wait until each daemon in `indices` answers and its bridges are connected to its controller."""
        try:
            # Already started: the windowed start's wait, with nothing left to start.
            full_nodes.start_windowed(indices, lambda index: None, self._daemon_ready, max(len(indices), 1),
                                      timeout, report)  # fmt: skip
        except full_nodes.DaemonsNotReady as exc:
            raise LabError(f"{exc}; {self._not_ready(exc.late[0])}") from None

    def _daemon_ready(self, index: int) -> bool:
        """Whether node `index`'s daemon answers with its bridges connected; LabError if it exited."""
        if self.daemon(index) is None:
            raise LabError(f"the daemon of node{index} exited; its log:\n{self._log_tail(index)}")
        try:
            status = self.daemon_status(index, timeout=2.0)
        except control.ControlError:
            return False
        return full_nodes.is_ready(status)

    def topology(self, indices: Iterable[int] | None = None) -> full_nodes.Topology:
        """Each node's links, as its daemon reports them; with `indices`, only those nodes' views
        (quicker to poll while watching one pair; the ring's gaps mean nothing in such a view)."""
        statuses: dict[str, dict[str, Any] | str] = {}
        read_at: dict[str, float] = {}
        wanted = None if indices is None else set(indices)
        for node in self.nodes:
            if wanted is not None and node.index not in wanted:
                continue
            try:
                statuses[node.name] = self.daemon_status(node.index)
                read_at[node.name] = time.time()  # link ages count back from here (up_since)
            except control.ControlError as exc:
                statuses[node.name] = str(exc)
        return full_nodes.topology(statuses, {n.node_id: n.name for n in self.nodes}, self.plan.overlay, read_at)

    def _not_ready(self, index: int) -> str:
        """A daemon that is not ready: what it reports of its bridges and controller, its last warnings and
        errors (which its routine lines may have pushed out of the tail), and its log's tail."""
        try:
            overlays = self.daemon_status(index, timeout=2.0).get("overlays") or {}
            fields = ("switch_connected", "bridge_ready", "switching", "datapath")
            state = "; ".join(f"{name}: " + ", ".join(f"{f}={ov.get(f)}" for f in fields)
                              for name, ov in overlays.items()) or "no overlay"
        except control.ControlError as exc:
            state = f"no status: {exc}"
        try:
            text = self.daemon_log(index).read_text(errors="replace")
        except OSError:
            text = ""
        warnings = [line for line in text.splitlines() if " WARNING " in line or " ERROR " in line or "Traceback" in line]
        return (f"first one's state: {state}; its warnings and errors:\n" + ("\n".join(warnings[-20:]) or "(none)")
                + f"\nits log:\n{self._log_tail(index)}")

    def _log_tail(self, index: int, lines: int = 20) -> str:
        node = self.plan.node(index)
        texts = []
        for path in (self.daemon_log(index), self.directory / "logs" / f"{full_nodes.daemon_role(node)}-{node.netns}.log"):
            try:
                texts += path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
        return "\n".join(texts[-lines:]) or "(no log)"

    def _start_full_nodes(self, progress: ProgressCallback, started: float, timeout: float) -> None:
        count = len(self.plan.nodes)

        def report(step: str, done: int) -> None:
            progress(Progress(step, done, count, time.monotonic() - started))

        # ovsdb-server and vswitchd mostly wait on each other: a few at a time is faster.
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="ovs") as pool:
            futures = [pool.submit(self.start_ovs, node.index) for node in self.plan.nodes]
            for done, future in enumerate(as_completed(futures), start=1):
                future.result()
                report("ovs", done)
        launched = 0

        def start(index: int) -> None:
            nonlocal launched
            self.start_daemon(index)
            launched += 1
            report("daemons", launched)

        try:
            full_nodes.start_windowed([n.index for n in self.plan.nodes], start, self._daemon_ready,
                                      full_nodes.host_start_window, timeout, lambda done: report("ready", done))
        except full_nodes.DaemonsNotReady as exc:
            raise LabError(f"{exc}; {self._not_ready(exc.late[0])}") from None

    # -- internals -----------------------------------------------------------------------------

    @property
    def _paths(self) -> services.ServicePaths:
        return services.ServicePaths(self.directory)

    def _node_info(self, node: LabNodePlan) -> NodeInfo:
        i = node.index - 1
        return _from_plan(
            NodeInfo, node,
            node_id=self._state.secrets.node_ids[i],
            jid=f"{node.localpart}@{self.plan.public.domain}",
            password=self._state.secrets.passwords[i],
            config_path=configs.node_config_path(self.directory, node),
        )  # fmt: skip

    def _build(
        self,
        progress: ProgressCallback,
        started: float,
        *,
        plaintext: bool,
        topology: Mapping[str, Any] | None,
        node_topology: Mapping[int, Mapping[str, Any]],
        trust: bool = False,
        switching: str = "bounded-flood",
        tunnel: Mapping[str, Any] | None = None,
        trust_options: Mapping[str, Any] | None = None,
    ) -> None:
        plan, host, state = self.plan, self._host, self._state
        count = len(plan.nodes)

        def report(step: str, done: int, total: int) -> None:
            progress(Progress(step, done, total, time.monotonic() - started))

        paths = self._paths
        now = datetime.datetime.now(datetime.UTC)
        ca = pki.make_ca(paths.pki_dir, f"evio lab {plan.name} CA", now)
        pki.make_server_cert(
            paths.prosody_certs, ca, [plan.public.domain, plan.public.muc_domain], now, file_stem=plan.public.domain
        )
        overlay_ca = pki.make_overlay_ca(paths.pki_dir / "overlay", f"evio lab {plan.name} overlay {plan.overlay} CA", now) if trust else None
        services.write_service_files(plan, paths, state.secrets.turn_secret, plaintext=plaintext)
        report("certificates", 1, 1)

        # prosodyctl costs ~0.1 s of CPU per account: register while the network is built.
        accounts = [(n.localpart, pw) for n, pw in zip(plan.nodes, state.secrets.passwords)]
        servers = self.ejabberd_servers
        pool = ThreadPoolExecutor(max_workers=services.REGISTER_WORKERS, thread_name_prefix="register")
        try:
            registered = [
                pool.submit(services.register_accounts, host, paths, plan.public.domain, [account])
                for account in (accounts if not servers else [])
            ]
            self._build_network(report)
            for done, future in enumerate(as_completed(registered), start=1):
                future.result()
                report("accounts", done, count)
        finally:
            # Never leave prosodyctl writing into a lab directory that cleanup is about to remove.
            pool.shutdown(wait=True, cancel_futures=True)

        starters = [("coturn", services.start_coturn)] + ([] if servers else [("prosody", services.start_prosody)])
        for role, start in starters:
            record = start(host, plan, paths)
            self._record(record)
            report(role, 1, 1)
        if servers:
            self._start_ejabberd(servers, accounts, report)

        for node, node_id, password in zip(plan.nodes, state.secrets.node_ids, state.secrets.passwords):
            home = configs.node_dir(self.directory, node)
            (home / "state").mkdir(parents=True, exist_ok=True)
            document = configs.node_config(
                plan,
                node,
                lab_dir=self.directory,
                node_id=node_id,
                password=password,
                turn_secret=state.secrets.turn_secret,
                ca_file=paths.ca_cert,
                plaintext=plaintext,
                topology={**(topology or {}), **node_topology.get(node.index, {})} or None,
                switching=switching,
                trust={**pki.issue_overlay_member(overlay_ca, plan.overlay, int(node_id, 16), home / "trust", now,
                                                  node.overlay_address.ip),
                       **(trust_options or {})} if overlay_ca else None,
                tunnel=dict(tunnel) if tunnel else None,
                servers=ejabberd.node_servers(servers, node.index) if len(servers) > 1 else None,
            )
            path = configs.node_config_path(self.directory, node)
            path.write_text(json.dumps(document, indent=2) + "\n")
            path.chmod(0o600)
        report("configs", count, count)

    def _record(self, record: ProcessRecord) -> None:
        with self._lock:
            self._state.processes.append(record)
            save_state(self._root, self._state)

    def _start_ejabberd(self, servers: Sequence[ejabberd.EjabberdNodePlan], accounts: Sequence[tuple[str, str]],
                        report: Callable[[str, int, int], None]) -> None:  # fmt: skip
        """ejabberd instead of prosody: its node(s) started and clustered, the accounts and the group made."""
        plan, domain = self.plan, self.plan.public.domain
        self._host.ip_batch(ejabberd.extra_addresses(plan, servers))
        certs = self._paths.prosody_certs  # the lab's server certificate (_build), for prosody or ejabberd
        ejabberd.write_files(plan, servers, self.directory, certs / f"{domain}.crt", certs / f"{domain}.key")
        ejabberd.start_cluster(self._host, plan, servers, services.SERVICE_NICE, self._record)
        report("ejabberd", len(servers), len(servers))
        ejabberd.api(plan.public.netns, ejabberd.register_calls(domain, accounts)
                     + ejabberd.group_calls(domain, plan.overlay, [user for user, _ in accounts]))  # fmt: skip
        report("accounts", len(accounts), len(accounts))

    def _build_network(self, report: Callable[[str, int, int], None]) -> None:
        plan, host = self.plan, self._host
        raised = host.raise_host_sysctls(wiring.neighbour_table_floors(plan))
        if raised:
            log.info("lab %s: the host's neighbour tables raised to fit it: %s", plan.name, raised)
        host.ip_batch(wiring.create_namespaces(plan))
        report("namespaces", 1, 1)
        host.ip_batch(wiring.create_links(plan))
        for netns, settings in wiring.sysctls(plan).items():
            host.sysctl(netns, settings)
        host.ip_batch(wiring.configure_public(plan))
        report("links", 1, 1)
        for node in plan.nodes:
            host.ip_batch(wiring.configure_router(plan, node))
            host.ip_batch(wiring.configure_node(node))
            ruleset = nat_rules.nat_ruleset(node.nat, node.router_wan_interface)
            if ruleset is not None:
                host.nft(node.router_netns, ruleset)
            if self._state.rate_mbit is not None:
                self.shape(node.index, self._state.rate_mbit)
            report("routers", node.index, len(plan.nodes))


def _refuse_existing(plan: LabPlan, root: Path, host: Host) -> None:
    leftovers = [ns for ns in host.netns_list() if ns.startswith(plan.prefix)]
    leftovers += [link for link in host.root_links() if link.startswith(plan.prefix)]
    directory = lab_dir(root, plan.name)
    if directory.exists() or leftovers:
        found = f"{len(leftovers)} namespaces/links named {plan.prefix}*" if leftovers else str(directory)
        raise LabExistsError(
            f"lab {plan.name!r} already exists ({found}); remove it with `evio lab down --name {plan.name}`"
        )


def _make_lab_dir(root: Path, name: str) -> None:
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    try:
        lab_dir(root, name).mkdir(mode=0o700)
    except FileNotFoundError:  # another lab's `down` removed the empty root in between
        root.mkdir(mode=0o755, parents=True, exist_ok=True)
        lab_dir(root, name).mkdir(mode=0o700)
    except FileExistsError as exc:
        raise LabExistsError(f"lab {name!r} is being created by another process") from exc


def _remove_if_empty(root: Path) -> None:
    try:
        root.rmdir()
    except OSError:
        pass  # other labs live there, or it is already gone


def _unique(records: list[ProcessRecord]) -> list[ProcessRecord]:
    seen: set[tuple[int, int]] = set()
    result = []
    for record in records:
        key = (record.pid, record.starttime)
        if key not in seen:
            seen.add(key)
            result.append(record)
    return result


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Let a teardown finish although the user presses Ctrl-C again (only the main thread handles signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _rewrite_config(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Apply `edit` to the node config at `path`, in place (the file keeps its owner-only mode)."""
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config, indent=2) + "\n")
