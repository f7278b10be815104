#!/usr/bin/env python3
"""evio's tunnel beside the peer VPNs from apt, over the same veth pair, in one interleaved run.

    sudo .venv/bin/python benchmarks/peers_bench.py [--duration 5] [--rounds 2] [--udp-mbit 1000]
                                                    [--tools evio,evio-python,wireguard-go,nebula,...]

Two network namespaces joined by one veth (MTU 1500; the underlay
10.201.0.1 <-> .2). Every tool is brought up once, side by side, each with
an overlay subnet of its own (10.200.N.1 <-> .2, overlay MTU 1400, evio's TAP
1428 as the daemon sets it); idle tunnels cost next to nothing, so the tools
take turns. Each round measures every tool and the bare veth (in reverse order
on even rounds, so no tool always runs first): iperf3 TCP with one stream,
iperf3 UDP offered at --udp-mbit (the goodput the server received), and ping
RTT (100 x 10 ms), from which the RTT a tunnel adds over the bare veth (the
mean of the pings, and their median, which one late ping on a shared machine
does not move). CPU per GB is both ends' CPU during the TCP run over the bytes
the sender's tunnel device carried, per end: per byte, not per frame, because a tool reading TCP
super-frames from its device (TSO: evio, wireguard-go) has 40 times fewer
frames than one reading MTU-sized frames for the same bytes.
The 1-minute load average is printed beside every round and in the table: an
absolute figure means little without it; the ratios against the peers and the
bare veth, measured in the same run, are what to compare.

A result far below the others is a broken harness or data path, not a figure:
a TCP or UDP value under 5 % of its column's median (over the tools) or of the
same tool's other transport in the same round is printed as BROKEN (its value
in the notes under the table) and left out of every ratio; a tunnel that did
not come up, or gave no result, is broken too. The exit status is 1 when an
evio row is broken, so a run that measured nothing of evio cannot pass for one.

How each peer is configured (Debian 12 packages, but wireguard-go):
- fastd: `mode tap`, `method "salsa2012+umac"`, keys from `fastd --generate-key`, one static peer each side;
- tinc 1.0: `Mode = switch`, `Cipher = aes-256-cbc`, `Digest = sha256`, RSA 2048 from `tincd -K`, `tincd -D`;
- OpenVPN 2.6: p2p over UDP, `dev tap`, TLS with self-signed EC certificates and `--peer-fingerprint`,
  `--data-ciphers AES-256-GCM`, DCO off, `tun-mtu 1400`;
- wireguard-go: the current one, built from its Go module (`scripts/build-go-tools wireguard-go`, run here
  when its binary is not cached: UDP GSO/GRO and TUN offloads), `wireguard-go -f` and `wg set`
  (wireguard-tools), ChaCha20-Poly1305, layer 3; `wireguard-go-debian` is Debian 12's 2022 build (neither
  offload), an extra row only, left out of the "best peer" ratios;
- Nebula: `nebula-cert ca` / `sign`, `static_host_map`, no lighthouse, `cipher: aes`, layer 3.

A peer that is not installed is installed with apt-get (with a message);
one that cannot be (not packaged here) is skipped with the reason printed.
A benchmark, not a test: it asserts nothing. Root only; the namespaces and
every process in them are removed at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import profiling  # noqa: E402

from evio.lab.outliers import BROKEN_FRACTION  # noqa: E402
from evio.lab.tunnel_testbed import EndpointProcess, VethTestbed, ping_times, run, unique_prefix  # noqa: E402

ID_A, ID_B = "aa" * 16, "bb" * 16
MTU = 1400
OVERLAYS = "10.200.0.0/16"  # every tool's overlay subnet, 10.200.N.0/24
PACKAGES = {  # tool -> (executables it needs, Debian packages that provide them)
    "fastd": (["fastd"], ["fastd"]),
    "tinc": (["tincd"], ["tinc"]),
    "openvpn": (["openvpn", "openssl"], ["openvpn", "openssl"]),
    "wireguard-go": (["wg"], ["wireguard-tools"]),  # wireguard-go itself from its Go module (wireguard_go())
    "wireguard-go-debian": (["wg", "/usr/bin/wireguard-go"], ["wireguard-go", "wireguard-tools"]),
    "nebula": (["nebula", "nebula-cert"], ["nebula"]),
}
TOOLS = ["evio", "evio-python", *PACKAGES]
"""evio: tunnel.datapath auto (the native data path where scripts/build-native installed it); evio-python: the Python one."""
EXTRAS = {"wireguard-go-debian"}
"""Rows shown for reference only, never the "best peer"."""
WIREGUARD_GO_VERSION = "v0.0.0-20260522210424-ecfc5a8d5446"  # scripts/build-go-tools builds this one
"""What `go install golang.zx2c4.com/wireguard@latest` resolved to on 2026-11-27 (its version.go: 0.0.20250522)."""


@dataclass
class Tunnel:
    """One tool's two ends: their processes and the overlay address of B."""

    name: str
    subnet: int
    processes: list[subprocess.Popen[Any]] = field(default_factory=list)
    endpoints: list[EndpointProcess] = field(default_factory=list)
    device_a: str = ""

    def address(self, end: str) -> str:
        return f"10.200.{self.subnet}.{1 if end == 'a' else 2}"

    def pids(self) -> dict[str, int]:
        pids = {f"{self.name} {i}": p.pid for i, p in enumerate(self.processes)}
        pids.update({f"{self.name} {i}": e.pid for i, e in enumerate(self.endpoints)})
        return pids

    def stop(self) -> None:
        for endpoint in self.endpoints:
            endpoint.stop()
        for proc in self.processes:
            proc.terminate()
        for proc in self.processes:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def wireguard_go() -> Path:
    """The current wireguard-go, where scripts/build-go-tools caches it."""
    cache = Path(os.environ.get("EVIO_CACHE", "/var/cache/evio"))
    return cache / f"wireguard-go-{WIREGUARD_GO_VERSION}" / "wireguard-go"


def ensure_wireguard_go() -> str | None:
    """None when the current wireguard-go is built (now if need be, from the Go module proxy); else why not."""
    if wireguard_go().exists():
        return None
    print(f"wireguard-go: building {WIREGUARD_GO_VERSION} with scripts/build-go-tools wireguard-go", flush=True)
    done = subprocess.run([str(REPO / "scripts" / "build-go-tools"), "wireguard-go"], capture_output=True, text=True,
                          check=False, timeout=900)
    if done.returncode != 0 or not wireguard_go().exists():
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"scripts/build-go-tools wireguard-go failed: {last[0]}"
    return None


def ensure_installed(tool: str) -> str | None:
    """None when the tool is there (installed now if need be); otherwise why it is skipped."""
    executables, packages = PACKAGES[tool]
    if all(shutil.which(e) for e in executables):
        return ensure_wireguard_go() if tool == "wireguard-go" else None
    print(f"{tool}: not installed; installing with apt-get install -y {' '.join(packages)}", flush=True)
    done = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *packages],
                          capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0 or not all(shutil.which(e) for e in executables):
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"apt-get install {' '.join(packages)} failed: {last[0]}"
    return ensure_wireguard_go() if tool == "wireguard-go" else None


def spawn(netns: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[Any]:
    with log.open("ab") as out:
        return subprocess.Popen(["ip", "netns", "exec", netns, *argv], stdout=out, stderr=out,
                                stdin=subprocess.DEVNULL, env=env)


def address_device(netns: str, name: str, address: str) -> None:
    run(["ip", "-n", netns, "link", "set", name, "mtu", str(MTU), "up"])
    run(["ip", "-n", netns, "addr", "replace", f"{address}/24", "dev", name])


# ---------------------------------------------------------------------- the tools


def start_evio(tb: VethTestbed, t: Tunnel, d: Path, datapath: str = "auto", tso: bool | None = None) -> None:
    # A TAP prefix of its own per data path: both tunnels run side by side with the same node ids.
    # Every tool's overlay (10.200.N.0/24) is left out of ICE gathering: a pair nominated on another
    # tunnel's address would run this tunnel inside that one.
    # tso: the TAP's TSO (tunnel.tso) forced on or off; None: the endpoint's default.
    prefix = "evq" if datapath == "python" else {None: "evt", True: "evs", False: "evn"}[tso]
    common = ["--signal-dir", str(d), "--cipher", "aes-256-gcm", "--datapath", datapath,
              "--tap-prefix", prefix, "--exclude-network", OVERLAYS, *([] if tso is None else ["--tso" if tso else "--no-tso"])]
    b = EndpointProcess(tb.b.netns, ["--node", ID_B, "--peer", ID_A, "--address", f"{t.address('b')}/24", *common],
                        d / "b.log")
    t.endpoints.append(b)
    b.wait_event("ready")
    a = EndpointProcess(tb.a.netns, ["--node", ID_A, "--peer", ID_B, "--connect", "--address", f"{t.address('a')}/24",
                                     *common], d / "a.log")
    t.endpoints.append(a)
    a.wait_event("up", timeout=20)
    b.wait_event("up", timeout=20)


def start_fastd(tb: VethTestbed, t: Tunnel, d: Path) -> None:
    keys = {}
    for end in "ab":
        secret = run(["fastd", "--generate-key", "--machine-readable"]).stdout.strip()
        (d / f"{end}.secret.conf").write_text(f'secret "{secret}";\n')
        public = run(["fastd", "-c", str(d / f"{end}.secret.conf"), "--show-key", "--machine-readable"]).stdout.strip()
        keys[end] = (secret, public)
    ends = {"a": tb.a, "b": tb.b}
    for end, other in (("a", "b"), ("b", "a")):
        device = f"{tb.prefix}fd{end}"
        conf = d / f"{end}.conf"
        conf.write_text(
            f'interface "{device}";\nmode tap;\nmethod "salsa2012+umac";\nsecret "{keys[end][0]}";\n'
            f"bind {ends[end].address}:10001;\nmtu {MTU};\nlog level warn;\n"
            f'peer "{other}" {{ key "{keys[other][1]}"; remote {ends[other].address}:10001; }}\n'
        )
        t.processes.append(spawn(ends[end].netns, ["fastd", "-c", str(conf)], d / f"{end}.log"))
        wait_device(ends[end].netns, device)
        address_device(ends[end].netns, device, t.address(end))
        if end == "a":
            t.device_a = device


def start_tinc(tb: VethTestbed, t: Tunnel, d: Path) -> None:
    ends = {"a": tb.a, "b": tb.b}
    for end in "ab":
        root = d / end
        (root / "hosts").mkdir(parents=True)
        device = f"{tb.prefix}tc{end}"
        (root / "tinc.conf").write_text(
            f"Name = {end}\nMode = switch\nInterface = {device}\nAddressFamily = ipv4\n"
            f"BindToAddress = {ends[end].address}\nPort = 10002\n" + ("ConnectTo = b\n" if end == "a" else "")
        )
        (root / "hosts" / end).write_text(
            f"Address = {ends[end].address}\nPort = 10002\nCipher = aes-256-cbc\nDigest = sha256\n"
        )
        up = root / "tinc-up"
        up.write_text(f"#!/bin/sh\nip link set $INTERFACE mtu {MTU} up\nip addr add {t.address(end)}/24 dev $INTERFACE\n")
        up.chmod(0o755)
        subprocess.run(["tincd", "-c", str(root), "-K2048"], stdin=subprocess.DEVNULL, capture_output=True, check=True)
    for end, other in (("a", "b"), ("b", "a")):
        shutil.copy(d / other / "hosts" / other, d / end / "hosts" / other)
    for end in "ba":
        root = d / end
        t.processes.append(spawn(ends[end].netns, ["tincd", "-c", str(root), "-D", f"--pidfile={root / 'pid'}",
                                                   f"--logfile={root / 'log'}"], d / f"{end}.log"))
    t.device_a = f"{tb.prefix}tca"


def start_openvpn(tb: VethTestbed, t: Tunnel, d: Path) -> None:
    ends = {"a": tb.a, "b": tb.b}
    prints = {}
    for end in "ab":
        run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-days", "2", "-subj", f"/CN={end}", "-keyout", str(d / f"{end}.key"), "-out", str(d / f"{end}.crt")])
        out = run(["openssl", "x509", "-in", str(d / f"{end}.crt"), "-noout", "-fingerprint", "-sha256"]).stdout
        prints[end] = out.strip().split("=", 1)[1]
    for end, other in (("b", "a"), ("a", "b")):
        device = f"{tb.prefix}ov{end}"
        argv = ["openvpn", "--dev", device, "--dev-type", "tap", "--proto", "udp",
                "--local", ends[end].address, "--lport", "10003", "--remote", ends[other].address, "--rport", "10003",
                "--tls-server" if end == "a" else "--tls-client", "--dh", "none",
                "--cert", str(d / f"{end}.crt"), "--key", str(d / f"{end}.key"), "--peer-fingerprint", prints[other],
                "--data-ciphers", "AES-256-GCM", "--disable-dco", "--tun-mtu", str(MTU),
                "--ifconfig", t.address(end), "255.255.255.0", "--verb", "1"]
        t.processes.append(spawn(ends[end].netns, argv, d / f"{end}.log"))
    t.device_a = f"{tb.prefix}ova"


def start_wireguard(tb: VethTestbed, t: Tunnel, d: Path, binary: str = "") -> None:
    ends = {"a": tb.a, "b": tb.b}
    keys = {}
    for end in "ab":
        private = run(["wg", "genkey"]).stdout.strip()
        (d / f"{end}.key").write_text(private + "\n")
        public = subprocess.run(["wg", "pubkey"], input=private, capture_output=True, text=True, check=True).stdout
        keys[end] = public.strip()
    env = dict(os.environ, WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD="1")  # Debian's guard against the kernel module
    for end, other in (("a", "b"), ("b", "a")):
        device = f"{tb.prefix}w{'d' if binary else 'g'}{end}"
        t.processes.append(spawn(ends[end].netns, [binary or str(wireguard_go()), "-f", device], d / f"{end}.log", env))
        wait_device(ends[end].netns, device)
        port = "10006" if binary else "10004"
        run(["wg", "set", device, "private-key", str(d / f"{end}.key"), "listen-port", port, "peer", keys[other],
             "endpoint", f"{ends[other].address}:{port}", "allowed-ips", f"10.200.{t.subnet}.0/24"], ends[end].netns)
        address_device(ends[end].netns, device, t.address(end))
    t.device_a = f"{tb.prefix}w{'d' if binary else 'g'}a"


def start_nebula(tb: VethTestbed, t: Tunnel, d: Path) -> None:
    ends = {"a": tb.a, "b": tb.b}
    run(["nebula-cert", "ca", "-name", "bench", "-out-crt", str(d / "ca.crt"), "-out-key", str(d / "ca.key")])
    for end, other in (("a", "b"), ("b", "a")):
        run(["nebula-cert", "sign", "-name", end, "-ip", f"{t.address(end)}/24", "-ca-crt", str(d / "ca.crt"),
             "-ca-key", str(d / "ca.key"), "-out-crt", str(d / f"{end}.crt"), "-out-key", str(d / f"{end}.key")])
        device = f"{tb.prefix}nb{end}"
        config = {
            "pki": {"ca": str(d / "ca.crt"), "cert": str(d / f"{end}.crt"), "key": str(d / f"{end}.key")},
            "static_host_map": {t.address(other): [f"{ends[other].address}:10005"]},
            "lighthouse": {"am_lighthouse": False, "hosts": []},
            "listen": {"host": ends[end].address, "port": 10005},
            "punchy": {"punch": False},
            "tun": {"dev": device, "mtu": MTU},
            "cipher": "aes",
            "logging": {"level": "warning"},
            "firewall": {"outbound": [{"port": "any", "proto": "any", "host": "any"}],
                         "inbound": [{"port": "any", "proto": "any", "host": "any"}]},
        }
        (d / f"{end}.yml").write_text(json.dumps(config))  # YAML is a superset of JSON
        t.processes.append(spawn(ends[end].netns, ["nebula", "-config", str(d / f"{end}.yml")], d / f"{end}.log"))
    t.device_a = f"{tb.prefix}nba"


STARTERS: dict[str, Callable[[VethTestbed, Tunnel, Path], None]] = {
    "evio": start_evio, "evio-python": partial(start_evio, datapath="python"),
    "evio-tso": partial(start_evio, tso=True), "evio-no-tso": partial(start_evio, tso=False), "fastd": start_fastd, "tinc": start_tinc, "openvpn": start_openvpn,
    "wireguard-go": start_wireguard, "wireguard-go-debian": partial(start_wireguard, binary="/usr/bin/wireguard-go"),
    "nebula": start_nebula,
}


def wait_device(netns: str, device: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while run(["ip", "-n", netns, "link", "show", device], check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{device} did not appear in {netns}")
        time.sleep(0.05)


def device_with(netns: str, address: str) -> str | None:
    """The interface in `netns` that holds `address`."""
    rows = json.loads(run(["ip", "-j", "addr", "show"], netns, check=False).stdout or "[]")
    for row in rows:
        if any(info.get("local") == address for info in row.get("addr_info", [])):
            return str(row["ifname"])
    return None


def wait_reachable(netns: str, address: str, timeout: float = 45.0) -> bool:
    """Pings until one answers: handshakes (fastd retries for ~20 s when the other end was late)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if run(["ping", "-c", "1", "-W", "1", address], netns, check=False).returncode == 0:
            return True
    return False


# ---------------------------------------------------------------------- measuring


def iperf3(tb: VethTestbed, address: str, seconds: float, udp_mbit: int | None = None) -> float | None:
    """Mbit/s received by the server: one TCP stream, or UDP offered at `udp_mbit` (the goodput)."""
    argv = ["iperf3", "-c", address, "-t", f"{seconds:g}", "-J", "--connect-timeout", "3000"]
    if udp_mbit:
        argv += ["-u", "-b", f"{udp_mbit}M", "-l", "1300"]
    for _ in range(3):
        server = subprocess.Popen(["ip", "netns", "exec", tb.b.netns, "iperf3", "-s", "-1", "-B", address],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 5
            while "5201" not in run(["ss", "-Hlnp", "sport = :5201"], tb.b.netns, check=False).stdout:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            done = run(argv, tb.a.netns, check=False, timeout=seconds + 60)
            try:
                end = json.loads(done.stdout or "{}").get("end", {})
            except ValueError:
                end = {}
            if udp_mbit and "sum" in end:
                s = end["sum"]
                return float(s["bits_per_second"]) * (1 - float(s["lost_percent"]) / 100) / 1e6
            if not udp_mbit and "sum_received" in end:
                return float(end["sum_received"]["bits_per_second"]) / 1e6
        finally:
            server.kill()
            server.wait(5)
    return None


def tx_bytes(netns: str, device: str) -> int:
    return profiling.links(netns).get(device, {}).get("tx_bytes", 0)


def measure(tb: VethTestbed, name: str, address: str, tunnel: Tunnel | None, args: argparse.Namespace) -> dict[str, float]:
    out: dict[str, float] = {}
    times = ping_times(tb.a.netns, address, 100, 0.01)
    if times:
        out["rtt"] = statistics.mean(times)
        out["rtt_median"] = statistics.median(times)
    pids = tunnel.pids() if tunnel else {}
    before = profiling.snapshot(pids, [])
    carried = tx_bytes(tb.a.netns, tunnel.device_a) if tunnel and tunnel.device_a else 0
    tcp = iperf3(tb, address, args.duration)
    if tcp is not None:
        out["tcp"] = tcp
    if tunnel and tunnel.device_a:
        delta = profiling.diff(before, profiling.snapshot(pids, []))
        carried = tx_bytes(tb.a.netns, tunnel.device_a) - carried
        cpu = sum(delta.process(label).cpu for label in pids)
        if carried > 0:
            out["cpu_gb"] = cpu / 2 / carried * 1e9
    udp = iperf3(tb, address, args.duration, args.udp_mbit)
    if udp is not None:
        out["udp"] = udp
    out["load"] = os.getloadavg()[0]  # the last minute: this tool's runs, mostly
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per iperf3 run (default 5)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over every tool, interleaved (default 2)")
    ap.add_argument("--udp-mbit", type=int, default=1000, help="UDP offered rate, Mbit/s (default 1000)")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated (default {','.join(TOOLS)})")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("peers_bench: needs root (network namespaces, TAP and TUN devices, apt-get)", file=sys.stderr)
        return 2
    wanted = [t for t in args.tools.split(",") if t]
    unknown = [t for t in wanted if t not in STARTERS]
    if unknown:
        ap.error(f"unknown tools {unknown}; known: {TOOLS}")
    skipped: dict[str, str] = {}
    for tool in wanted:
        if tool in PACKAGES:
            reason = ensure_installed(tool)
            if reason is not None:
                skipped[tool] = reason
                print(f"{tool}: skipped: {reason}", flush=True)
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores shared with everything else)", flush=True)
    results: dict[str, list[dict[str, float]]] = {}
    tunnels: dict[str, Tunnel] = {}
    with VethTestbed(unique_prefix("evp")) as tb, tempfile.TemporaryDirectory(prefix="evio-peers-") as tmp:
        try:
            for subnet, tool in enumerate(wanted, start=1):
                if tool in skipped:
                    continue
                tunnel = Tunnel(tool, subnet)
                tunnels[tool] = tunnel
                workdir = Path(tmp) / tool
                workdir.mkdir()
                try:
                    STARTERS[tool](tb, tunnel, workdir)
                    if not wait_reachable(tb.a.netns, tunnel.address("b")):
                        raise RuntimeError("no answer over the tunnel in 45 s")
                except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                    logs = " | ".join(p.read_text(errors="replace")[-200:] for p in workdir.glob("*.log"))
                    skipped[tool] = f"did not come up: {exc} ({logs.strip()})"
                    print(f"{tool}: skipped: {skipped[tool]}", flush=True)
                    tunnel.stop()
                    del tunnels[tool]
                    continue
                tunnel.device_a = device_with(tb.a.netns, tunnel.address("a")) or tunnel.device_a
                print(f"{tool}: up ({tunnel.address('a')} <-> {tunnel.address('b')}, {tunnel.device_a})", flush=True)
            order = ["veth", *tunnels]
            for round_no in range(1, args.rounds + 1):
                for name in order if round_no % 2 else order[::-1]:
                    address = tb.b.address if name == "veth" else tunnels[name].address("b")
                    result = measure(tb, name, address, tunnels.get(name), args)
                    results.setdefault(name, []).append(result)
                    print(f"  round {round_no} {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in result.items()
                                                                        if k != "load")
                          + f" (load average {result['load']:.2f})", flush=True)
        finally:
            for tunnel in tunnels.values():
                tunnel.stop()
    broken = broken_cells(results)
    print_table(results, broken, args)
    for tool, reason in skipped.items():
        print(f"skipped {tool}: {reason}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    broken_evio = sorted({name for name, _, _ in broken if name.startswith("evio")} |
                         {tool for tool in skipped if tool.startswith("evio")})
    if broken_evio:
        print(f"peers_bench: BROKEN evio rows: {', '.join(broken_evio)} (see above)", file=sys.stderr)
        return 1
    return 0


THROUGHPUT = ("tcp", "udp")


def broken_cells(results: dict[str, list[dict[str, float]]]) -> dict[tuple[str, str, int], str]:
    """(tool, "tcp" or "udp", round index) -> why that figure is no result: missing, under BROKEN_FRACTION
    of its column's median over the tools (their means), or of the same tool's other transport that round."""
    tools = [n for n in results if n != "veth"]
    broken: dict[tuple[str, str, int], str] = {}
    for key in THROUGHPUT:
        means = {n: statistics.mean(v) for n in tools if (v := _values(results, n, key))}
        for name in tools:
            median = statistics.median(means.values()) if len(means) > 1 else None
            for index, result in enumerate(results[name]):
                other = "udp" if key == "tcp" else "tcp"
                if key not in result:
                    broken[name, key, index] = "no result"
                elif median is not None and result[key] < BROKEN_FRACTION * median:
                    broken[name, key, index] = f"{result[key]:.3f} < {BROKEN_FRACTION:.0%} of the column's median {median:.0f}"
                elif other in result and result[key] < BROKEN_FRACTION * result[other]:
                    broken[name, key, index] = f"{result[key]:.3f} < {BROKEN_FRACTION:.0%} of its {other.upper()} {result[other]:.0f}"
    return broken


def _values(results: dict[str, list[dict[str, float]]], name: str, key: str,
            broken: dict[tuple[str, str, int], str] | None = None) -> list[float]:
    """The figures of `name` for `key`, round by round, without those in `broken`."""
    return [r[key] for i, r in enumerate(results.get(name, [])) if key in r and (name, key, i) not in (broken or {})]


def print_table(results: dict[str, list[dict[str, float]]], broken: dict[tuple[str, str, int], str],
                args: argparse.Namespace) -> None:
    veth_rtt = _values(results, "veth", "rtt")
    base_rtt = statistics.mean(veth_rtt) if veth_rtt else None
    veth_median = _values(results, "veth", "rtt_median")
    base_median = statistics.mean(veth_median) if veth_median else None
    peers = [n for n in results if n != "veth" and not n.startswith("evio") and n not in EXTRAS]

    def values(name: str, key: str) -> list[float]:
        if key == "rtt_added":
            return [v - base_rtt for v in _values(results, name, "rtt")] if base_rtt is not None else []
        if key == "rtt_median_added":
            return [v - base_median for v in _values(results, name, "rtt_median")] if base_median is not None else []
        return _values(results, name, key, broken)

    def mean(name: str, key: str) -> float | None:
        found = values(name, key)
        return statistics.mean(found) if found else None

    def best(key: str, higher: bool) -> tuple[str, float] | None:
        found = [(n, v) for n in peers if (v := mean(n, key)) is not None]
        if not found:
            return None
        return max(found, key=lambda x: x[1]) if higher else min(found, key=lambda x: x[1])

    def cell(name: str, key: str) -> str:
        if key == "load":
            return " / ".join(f"{v:.2f}" for v in values(name, key))
        if key not in THROUGHPUT:
            return _each(values(name, key))
        rounds = results[name]
        return " / ".join("BROKEN" if (name, key, i) in broken else _each([r[key]]) for i, r in enumerate(rounds))

    metrics = [("tcp", "TCP 1 stream, Mbit/s", True), ("udp", f"UDP offered {args.udp_mbit} Mbit/s: goodput", True),
               ("rtt_added", "RTT added over the veth, ms", False),
               ("rtt_median_added", "RTT added, median ping, ms", False), ("cpu_gb", "CPU s per GB per end", False),
               ("load", "load average (1 min)", False)]
    print(f"\n{args.rounds} round(s), iperf3 {args.duration:g} s, veth MTU 1500, overlay MTU {MTU}; "
          f"bare veth: TCP {_each(_values(results, 'veth', 'tcp'))} Mbit/s, RTT {_each(veth_rtt)} ms, "
          f"load {' / '.join(f'{v:.2f}' for v in _values(results, 'veth', 'load'))}\n")
    print("| tool | " + " | ".join(title for _, title, _ in metrics) + " |")
    print("|---|" + "---|" * len(metrics))
    for name in [n for n in results if n != "veth"]:
        label = f"{name} (extra)" if name in EXTRAS else name
        print(f"| {label} | " + " | ".join(cell(name, key) for key, _, _ in metrics) + " |")
    compared = metrics[:-1]  # not the load
    ratios = []
    for key, _, higher in compared:
        own, top = mean("evio", key), best(key, higher)
        ratios.append("-" if own is None or top is None or top[1] == 0 else f"{own / top[1]:.2f}x {top[0]}")
    print("| evio / best peer (means) | " + " | ".join(ratios) + " | |")
    if "evio-python" in results:
        own_ratios = []
        for key, _, _ in compared:
            own, python = mean("evio", key), mean("evio-python", key)
            own_ratios.append("-" if own is None or not python else f"{own / python:.2f}x")
        print("| evio / evio-python (means) | " + " | ".join(own_ratios) + " | |")
    print()
    for (name, key, index), why in broken.items():
        print(f"BROKEN: {name} {key.upper()} round {index + 1}: {why} (left out of every ratio)")
    for key, title, higher in compared:
        own, top = mean("evio", key), best(key, higher)
        if own is None or top is None or top[1] == 0:
            continue
        ratio = own / top[1]
        better = "higher is better" if higher else "lower is better"
        print(f"evio / best peer, {title}: {own:.3f} / {top[1]:.3f} ({top[0]}) = {ratio:.2f} ({better})")


def _each(values: list[float]) -> str:
    if not values:
        return "-"
    return " / ".join(f"{v:.3f}" if abs(v) < 10 else f"{v:.0f}" for v in values)


if __name__ == "__main__":
    sys.exit(main())
