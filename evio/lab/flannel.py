"""Flannel over a lab overlay with real parts (the paper's E10): etcd, flanneld, CNI bridge/host-local, pods.

    with Lab.up("fl", nodes=3, nat="mixed", daemons=True) as lab:
        flannel = FlannelLab(lab)
        flannel.start_etcd()
        flannel.start("vxlan")                  # flanneld on every node, --iface the evio bridge
        report = flannel.connectivity()         # pod-to-pod ping and TCP, every ordered pair
        flannel.stop()

etcd runs in node 1's namespace on its overlay address, so every node reaches
its store across the NATs through evio. flanneld (built from its Go module by
scripts/build-go-tools) runs in every node's namespace with its own subnet file;
each node has one "pod": a namespace attached by the real CNI `bridge` and
`host-local` plugins with the config Flannel's CNI plugin would delegate
(evio/lab/flannel_plan.py). Every process, namespace and interface lives in the
lab's namespaces or directory, so `Lab.down` removes it all, also after a crash.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from evio.lab.errors import LabError
from evio.lab.flannel_plan import (
    ETCD_PEER_PORT,
    ETCD_PREFIX,
    FLANNEL_VERSION,
    POD_NETWORK,
    Backend,
    CaptureVerdict,
    SubnetEnv,
    SubnetEnvError,
    capture_verdict,
    cni_environment,
    delegate_config,
    etcd_endpoint,
    network_config,
    parse_subnet_env,
    parse_tcpdump,
    pod_address,
    pod_netns,
)
from evio.lab.lab import Lab
from evio.lab.netns import NETNS_DIR, LinuxHost
from evio.lab.node_config import bridge_name
from evio.lab.state import ProcessRecord

T = TypeVar("T")
log = logging.getLogger(__name__)

CNI_PLUGIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
FLANNELD_CACHE = Path("/var/cache/evio")
IPERF_PORT = 5201
VXLAN_DEVICE = "flannel.1"
# The checksum of a VXLAN packet's inner TCP is left to the device by default. The evio bridge's
# internal port on the userspace datapath (a TAP with offloads, userspace TSO on) hands such packets
# to Open vSwitch 3.1, which does not complete an inner checksum: the outer UDP checksum, computed
# on the assumption that it will be, is then wrong and the receiver drops every TCP segment (ping
# still works). Checksumming on flannel.1 itself, as deployments with the same symptom do
# (docs/kubernetes.md), fixes it; host-gw has no such device.
VXLAN_CSUM_OFF = ("tx-checksum-ip-generic", "off")
Interface = Literal["overlay", "lan"]


class FlannelLabError(LabError):
    """A Flannel lab step failed (with what to look at)."""


def flanneld_binary() -> Path:
    """The flanneld to run: $EVIO_FLANNELD, else the one scripts/build-go-tools caches."""
    path = Path(os.environ.get("EVIO_FLANNELD") or FLANNELD_CACHE / f"flannel-{FLANNEL_VERSION}" / "flanneld")
    if not os.access(path, os.X_OK):
        raise FlannelLabError(f"no flanneld at {path}: run scripts/build-go-tools (builds {FLANNEL_VERSION} once)")
    return path


def check_tools() -> None:
    """Raise FlannelLabError naming whatever the Flannel lab needs and this machine lacks."""
    missing = [tool for tool in ("etcd", "etcdctl", "iperf3", "tcpdump", "iptables", "ethtool")
               if shutil.which(tool) is None]
    missing += [f"{CNI_PLUGIN_DIR}/{p}" for p in ("bridge", "host-local") if not os.access(f"{CNI_PLUGIN_DIR}/{p}", os.X_OK)]
    if missing:
        raise FlannelLabError(f"missing {', '.join(missing)}: run scripts/bootstrap")
    flanneld_binary()


def wait_until(get: Callable[[], T], good: Callable[[T], bool], timeout: float, what: str,
               poll: float = 0.2) -> T:
    deadline = time.monotonic() + timeout
    value = get()
    while not good(value):
        if time.monotonic() > deadline:
            raise FlannelLabError(f"{what}: not reached in {timeout:.0f} s (last: {value})")
        time.sleep(poll)
        value = get()
    return value


@dataclass
class Pod:
    node: int
    netns: str
    address: ipaddress.IPv4Interface


@dataclass(frozen=True)
class PairResult:
    src: int
    dst: int
    ping_ms: float | None  # None: no answer
    tcp_mbit: float | None  # None: no TCP transfer

    @property
    def ok(self) -> bool:
        return self.ping_ms is not None and self.tcp_mbit is not None


@dataclass(frozen=True)
class Connectivity:
    backend: Backend
    interface: Interface
    pairs: tuple[PairResult, ...]
    captures: dict[str, CaptureVerdict] = field(default_factory=dict)  # router name -> verdict

    @property
    def answered(self) -> int:
        return sum(1 for p in self.pairs if p.ok)

    @property
    def none_answered(self) -> bool:
        return all(p.ping_ms is None and p.tcp_mbit is None for p in self.pairs)


class FlannelLab:
    """Flannel, etcd and pods on a lab of full nodes. `stop` (and `Lab.down`) undo everything."""

    def __init__(self, lab: Lab, *, flanneld: Path | None = None, host: LinuxHost | None = None) -> None:
        self.lab = lab
        self.flanneld = flanneld or flanneld_binary()
        self._host = host or LinuxHost()
        self.directory = lab.directory / "flannel"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.etcd_node = lab.node(1)
        self.endpoint = etcd_endpoint(self.etcd_node.overlay_address.ip)
        self.pods: dict[int, Pod] = {}
        self._flanneld: list[ProcessRecord] = []
        self.backend: Backend | None = None
        self.interface: Interface = "overlay"
        self.last_iperf_error = ""

    # -- etcd ----------------------------------------------------------------------------------

    def start_etcd(self, timeout: float = 30.0) -> None:
        """etcd in node 1's namespace, clients on its overlay address only."""
        address = self.etcd_node.overlay_address.ip
        peer = f"http://127.0.0.1:{ETCD_PEER_PORT}"
        self.lab.exec(1, ["ip", "link", "set", "lo", "up"])
        self.lab.spawn(1, [
            "etcd", "--name", "lab", "--data-dir", str(self.directory / "etcd"),
            "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"lab={peer}", "--initial-cluster-state", "new",
        ], role="flannel-etcd")
        # Healthy from the farthest node: the store is reached across the NATs through evio.
        far = self.lab.nodes[-1].index
        wait_until(lambda: self.etcdctl(far, "endpoint", "health", check=False).returncode, lambda rc: rc == 0,
                   timeout, f"etcd on {address} answering node{far} over the overlay", poll=0.5)

    def etcdctl(self, node: int, *args: str, check: bool = True, input: str | None = None
                ) -> subprocess.CompletedProcess[str]:
        env_argv = ["env", "ETCDCTL_API=3", "etcdctl", "--endpoints", self.endpoint, "--dial-timeout", "2s", *args]
        return self.lab.exec(node, env_argv, check=check, input=input, timeout=20)

    # -- flanneld and pods ---------------------------------------------------------------------

    def iface(self, node: int, interface: Interface) -> str:
        return bridge_name(self.lab.plan) if interface == "overlay" else self.lab.plan.node(node).lan_interface

    def subnet_file(self, node: int) -> Path:
        return self.directory / f"node{node}" / "subnet.env"

    def start(self, backend: Backend, interface: Interface = "overlay", timeout: float = 60.0) -> None:
        """Network config into etcd, flanneld on every node bound to `interface`, one pod per node."""
        if self._flanneld:
            raise FlannelLabError("flanneld is already running: stop() first")
        self.etcdctl(1, "put", f"{ETCD_PREFIX}/config", json.dumps(network_config(backend)))
        self.backend, self.interface = backend, interface
        # One node at a time, each once its lease is in etcd: flanneld v0.26 does not retry its own
        # race (two nodes picking the same free subnet at once), the loser exits with
        # "failed to acquire lease: subnet already exists".
        for node in self.lab.nodes:
            self.subnet_file(node.index).parent.mkdir(parents=True, exist_ok=True)
            self.subnet_file(node.index).unlink(missing_ok=True)
            self._host.sysctl(node.netns, {"net/ipv4/ip_forward": "1"})
            record = self.lab.spawn(node.index, [
                str(self.flanneld), f"--etcd-endpoints={self.endpoint}", f"--etcd-prefix={ETCD_PREFIX}",
                f"--iface={self.iface(node.index, interface)}", f"--subnet-file={self.subnet_file(node.index)}",
                "--ip-masq",
            ], role="flanneld", log_path=self.flanneld_log(node.index))
            self._flanneld.append(record)

            def written(n: int = node.index, record: ProcessRecord = record) -> SubnetEnv | None:
                if not self.lab.is_running(record):
                    raise FlannelLabError(f"node{n}'s flanneld exited\n{self.log_tail(n)}")
                return self._subnet_env(n)

            try:
                wait_until(written, lambda env: env is not None, timeout,
                           f"node{node.index}'s flanneld writing its subnet file")
            except FlannelLabError as error:
                if not self.lab.is_running(record):  # `written` already quoted its log
                    raise
                raise FlannelLabError(f"{error}\n{self.log_tail(node.index)}") from None
        if backend == "vxlan":
            for node in self.lab.nodes:
                self.lab.exec(node.index, ["ethtool", "-K", VXLAN_DEVICE, *VXLAN_CSUM_OFF])
        for node in self.lab.nodes:
            self.pods[node.index] = self._attach_pod(node.index)
        self._wait_routes(timeout)

    def flanneld_log(self, node: int) -> Path:
        return self.directory / f"flanneld-node{node}-{self.backend}-{self.interface}.log"

    def log_tail(self, node: int, lines: int = 15) -> str:
        try:
            tail = self.flanneld_log(node).read_text(errors="replace").splitlines()[-lines:]
        except FileNotFoundError:
            tail = ["(no log)"]
        return f"--- {self.flanneld_log(node)}\n" + "\n".join(tail)

    def _subnet_env(self, node: int) -> SubnetEnv | None:
        try:
            return parse_subnet_env(self.subnet_file(node).read_text())
        except (FileNotFoundError, SubnetEnvError):
            return None

    def subnet_env(self, node: int) -> SubnetEnv:
        env = self._subnet_env(node)
        if env is None:
            raise FlannelLabError(f"node{node} has no subnet file")
        return env

    def _wait_routes(self, timeout: float) -> None:
        """Each node has a route to every other node's pod subnet (flanneld learned them from etcd)."""
        for node in self.lab.nodes:
            others = [self.subnet_env(o.index).subnet.network for o in self.lab.nodes if o.index != node.index]

            def routed(n: int = node.index, want: list[ipaddress.IPv4Network] = others) -> list[str]:
                table = self.lab.exec(n, ["ip", "-4", "route", "show", "root", str(POD_NETWORK)]).stdout
                return [str(net) for net in want if f"{net} " not in table]

            wait_until(routed, lambda missing: not missing, timeout, f"node{node.index}'s routes to the other pods")

    def _cni(self, node: int, command: Literal["ADD", "DEL"], pod: str) -> str:
        env = self.subnet_env(node)
        conf = delegate_config(env, data_dir=str(self.directory / f"node{node}" / "ipam"))
        netns_path = str(Path(NETNS_DIR) / pod)
        done = subprocess.run(
            ["ip", "netns", "exec", self.lab.node(node).netns, f"{CNI_PLUGIN_DIR}/{conf['type']}"],
            input=json.dumps(conf), capture_output=True, text=True, timeout=30,
            env={**os.environ, **cni_environment(command, pod, netns_path, CNI_PLUGIN_DIR)},
        )
        if done.returncode != 0:
            raise FlannelLabError(f"CNI {command} of {pod} on node{node}: {done.stdout}{done.stderr}".strip())
        return done.stdout

    def _attach_pod(self, node: int) -> Pod:
        name = pod_netns(self.lab.plan.prefix, node)
        self._host.run(None, ["ip", "netns", "add", name])
        self._host.run(name, ["ip", "link", "set", "lo", "up"])
        return Pod(node, name, pod_address(self._cni(node, "ADD", name)))

    def stop(self) -> None:
        """Pods out (CNI DEL), flanneld stopped, its devices, routes, rules and leases gone."""
        for index, pod in list(self.pods.items()):
            try:
                self._cni(index, "DEL", pod.netns)
            except FlannelLabError as error:  # the namespace goes anyway, and its veth with it
                log.warning("%s", error)
            finally:
                self._host.run(None, ["ip", "netns", "del", pod.netns], check=False)
                del self.pods[index]
        for record in self._flanneld:
            self.lab.stop(record)
        self._flanneld.clear()
        for node in self.lab.nodes:
            for argv in (["ip", "link", "del", "flannel.1"], ["ip", "link", "del", "cni0"],
                         ["ip", "route", "flush", "root", str(POD_NETWORK)],
                         ["iptables", "-t", "nat", "-F"], ["iptables", "-t", "nat", "-X"],
                         ["iptables", "-F"], ["iptables", "-X"]):
                self.lab.exec(node.index, argv, check=False)
            self.subnet_file(node.index).unlink(missing_ok=True)
            shutil.rmtree(self.directory / f"node{node.index}" / "ipam", ignore_errors=True)
        self.etcdctl(1, "del", "--prefix", f"{ETCD_PREFIX}/subnets/", check=False)
        self.backend = None

    # -- traffic -------------------------------------------------------------------------------

    def ping(self, src: int, dst: int, count: int = 2, timeout: float = 2.0) -> float | None:
        """Mean RTT (ms) from src's pod to dst's pod, None without an answer."""
        done = self._host.run(self.pods[src].netns, ["ping", "-c", str(count), "-i", "0.2", "-W", f"{timeout:g}",
                                                      "-q", str(self.pods[dst].address.ip)], check=False,
                              timeout=10 + count * timeout)
        if done.returncode != 0:
            return None
        for line in done.stdout.splitlines():
            if "min/avg/max" in line:
                return float(line.split("=")[1].split("/")[1])
        return None

    @contextmanager
    def iperf_server(self, netns: str, address: str) -> Iterator[None]:
        record = self._host.spawn("flannel-iperf", netns, ["iperf3", "-s", "-B", address, "-p", str(IPERF_PORT)],
                                  self.directory / f"iperf-{netns}.log")
        try:
            wait_until(lambda: self._host.listening(record.pid, "tcp", IPERF_PORT), bool, 10.0,
                       f"iperf3 listening in {netns}", poll=0.05)
            yield
        finally:
            self._host.stop([record], 2.0)

    def _iperf(self, netns: str, address: str, seconds: int | None, timeout: float, size: str = "1M") -> float | None:
        """Mbit/s received of one TCP stream for `seconds` (whole: iperf3 reads -t as an integer), or of
        `size` bytes when seconds is None; None if it failed (the reason in last_iperf_error)."""
        amount = ["-n", size] if seconds is None else ["-t", str(seconds)]
        done = self._host.run(netns, ["iperf3", "-c", address, "-p", str(IPERF_PORT), *amount,
                                      "--connect-timeout", f"{int(timeout * 1000)}", "-J"],
                              check=False, timeout=(seconds or 10) + timeout + 20)
        try:
            report = json.loads(done.stdout)
            if done.returncode == 0:
                return float(report["end"]["sum_received"]["bits_per_second"]) / 1e6
            self.last_iperf_error = str(report.get("error", done.stderr.strip()))
        except (ValueError, KeyError, TypeError):
            self.last_iperf_error = (done.stdout + done.stderr).strip()[-300:]
        return None

    def connectivity(self, *, tcp_bytes: str = "1M", ping_count: int = 2, capture: bool = True) -> Connectivity:
        """Ping and a TCP transfer of `tcp_bytes` between the pods of every ordered pair of nodes.

        With `capture`, tcpdump runs on every NAT router's WAN side meanwhile and
        each capture's verdict is kept (evio/lab/flannel_plan.capture_verdict).
        """
        if self.backend is None:
            raise FlannelLabError("Flannel is not started")
        nodes = [n.index for n in self.lab.nodes]
        results: list[PairResult] = []
        with self.captures(enabled=capture) as verdicts:
            for dst in nodes:
                pod = self.pods[dst]
                with self.iperf_server(pod.netns, str(pod.address.ip)):
                    for src in nodes:
                        if src == dst:
                            continue
                        rtt = self.ping(src, dst, count=ping_count)
                        mbit = self._iperf(self.pods[src].netns, str(pod.address.ip), None, 3.0, tcp_bytes)
                        results.append(PairResult(src, dst, rtt, mbit))
        return Connectivity(self.backend, self.interface, tuple(results), verdicts)

    @contextmanager
    def captures(self, *, enabled: bool = True) -> Iterator[dict[str, CaptureVerdict]]:
        """tcpdump on each router's WAN interface while the body runs; verdicts filled in on exit."""
        verdicts: dict[str, CaptureVerdict] = {}
        if not enabled:
            yield verdicts
            return
        records: list[tuple[str, Path, ProcessRecord]] = []
        tag = f"{self.backend}-{self.interface}"
        try:
            for node in self.lab.plan.nodes:
                path = self.directory / f"wan-router{node.index}-{tag}.pcap"
                path.unlink(missing_ok=True)
                log = self.directory / f"tcpdump-router{node.index}-{tag}.log"
                log.unlink(missing_ok=True)
                record = self.lab.spawn(f"router{node.index}", [
                    "tcpdump", "-i", node.router_wan_interface, "-nn", "-U", "-s", "128", "-w", str(path),
                ], role="flannel-tcpdump", log_path=log)
                records.append((f"router{node.index}", path, record))
                def capturing(log: Path = log) -> bool:
                    return log.exists() and "listening on" in log.read_text()

                wait_until(capturing, bool, 10.0, f"tcpdump capturing on router{node.index}", poll=0.05)
            yield verdicts
        finally:
            for _, _, record in records:
                self.lab.stop(record)
        public = self.lab.public
        for router, path, _ in records:
            text = self._host.run(None, ["tcpdump", "-nn", "-q", "-r", str(path)], check=False).stdout
            verdicts[router] = capture_verdict(parse_tcpdump(text.splitlines()), signal_server=public.address,
                                               signal_port=public.xmpp_port)

    def throughput(self, src: int, dst: int, *, seconds: int = 3, rounds: int = 3) -> tuple[float, float]:
        """(pod-to-pod, node-to-node) TCP Mbit/s from src to dst, medians of `rounds` alternated runs."""
        pod, node = self.pods[dst], self.lab.node(dst)
        pods: list[float] = []
        nodes: list[float] = []
        with self.iperf_server(pod.netns, str(pod.address.ip)), \
                self.iperf_server(node.netns, str(node.overlay_address.ip)):
            for _ in range(rounds):
                for target, into, netns in ((str(node.overlay_address.ip), nodes, self.lab.node(src).netns),
                                            (str(pod.address.ip), pods, self.pods[src].netns)):
                    mbit = self._iperf(netns, target, seconds, timeout=5.0)
                    if mbit is None:
                        raise FlannelLabError(f"iperf3 {netns} -> {target} failed: {self.last_iperf_error}")
                    into.append(mbit)
        return statistics.median(pods), statistics.median(nodes)

    def vxlan_on_bridge(self, node: int) -> bool:
        """flannel.1 exists on `node` and sends through the evio bridge."""
        done = self.lab.exec(node, ["ip", "-d", "link", "show", "flannel.1"], check=False)
        return done.returncode == 0 and f"dev {bridge_name(self.lab.plan)}" in done.stdout

    def encapsulating(self, node: int) -> bool:
        """True if `node` has any VXLAN device (host-gw must have none: no double encapsulation)."""
        done = self.lab.exec(node, ["ip", "-d", "link", "show", "type", "vxlan"], check=False)
        return bool(done.stdout.strip())


def pair_label(lab: Lab, src: int, dst: int) -> str:
    return f"node{src}({lab.node(src).nat})->node{dst}({lab.node(dst).nat})"


def describe(verdicts: dict[str, CaptureVerdict]) -> Sequence[str]:
    return [f"{r}: {v.packets} packets, {v.udp} UDP, {v.signaling} signaling TCP, {v.arp} ARP, "
            f"{v.icmp_control} ICMP errors/redirects, {v.vxlan} VXLAN, {v.pod_addressed} with a pod address"
            f"{', other: ' + '; '.join(v.other) if v.other else ''}"
            for r, v in sorted(verdicts.items())]
