"""``evio lab tunnel A B``: one tunnel between two nodes of a running lab, with addresses on its TAPs.

Starts a tunnel endpoint process (evio.lab.tunnel_endpoint) in each node's
namespace, with the lab's coturn as STUN and TURN server (REST secret), and
the nodes' overlay addresses on the TAPs. B waits for the offer, A sends it;
offers travel over Unix sockets in the lab directory, so this needs no XMPP
and no daemon. Reports path kind and setup time, checks the tunnel with a
ping, then keeps it up (or closes it at once with ``duration=0``).

The endpoint processes live in lab namespaces, so ``evio lab down`` stops
them even if this tool dies.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from evio.lab.lab import Lab, NodeInfo
from evio.lab.tunnel_testbed import EndpointProcess, run
from evio.tunnel.path.ice import RelayPolicy


@dataclass
class LabTunnelResult:
    a: NodeInfo
    b: NodeInfo
    up_a: dict[str, Any]
    up_b: dict[str, Any]
    ping_received: int = 0
    ping_sent: int = 0
    ping_avg_ms: float | None = None
    closed: list[str] = field(default_factory=list)
    settled: dict[str, Any] = field(default_factory=dict)
    """A's stats after the ping: the path then (a tunnel up on the relay moves to a direct path found later)."""

    @property
    def path(self) -> str:
        return str(self.settled.get("path") or self.up_a.get("path"))

    def lines(self) -> list[str]:
        a, b = self.a, self.b
        now = self.settled if self.settled.get("path") else self.up_a
        moved = f", up on the {self.up_a.get('path')} first" if now.get("path") != self.up_a.get("path") else ""
        out = [
            f"tunnel {a.name} <-> {b.name}: {self.path} path, {now.get('local')} -> {now.get('remote')} "
            f"({self.up_a.get('cipher')}{moved})",
            f"  setup: {self.up_a['setup']:.3f} s on {a.name} (initiator), {self.up_b['setup']:.3f} s on {b.name}",
            f"  TAPs: {self.up_a.get('tap')} {a.overlay_address} on {a.name}, {self.up_b.get('tap')} {b.overlay_address} on {b.name}",
        ]
        if self.ping_sent:
            avg = f", avg {self.ping_avg_ms:.3f} ms" if self.ping_avg_ms is not None else ""
            out.append(f"  ping {a.name} -> {b.name} through the tunnel: {self.ping_received}/{self.ping_sent}{avg}")
        return out


class LabTunnel:
    """The two endpoint processes of one lab tunnel; ``close`` stops both."""

    def __init__(self, lab: Lab, a: int, b: int, relay: RelayPolicy = RelayPolicy.FALLBACK, verbose: bool = False) -> None:
        if a == b:
            raise ValueError("a tunnel needs two different nodes")
        self.lab = lab
        self.node_a = lab.node(a)
        self.node_b = lab.node(b)
        self.directory = lab.directory / "tunnels" / f"{self.node_a.name}-{self.node_b.name}"
        self._relay = relay
        self._verbose = verbose
        self.a: EndpointProcess | None = None
        self.b: EndpointProcess | None = None

    def open(self, timeout: float = 15.0) -> LabTunnelResult:
        self.directory.mkdir(parents=True, exist_ok=True)
        pub = self.lab.public
        common = [
            "--signal-dir", str(self.directory),
            "--stun", f"{pub.address}:{pub.stun_port}",
            "--turn", f"{pub.address}:{pub.stun_port}",
            "--turn-secret", pub.turn_secret,
            "--relay", self._relay.value,
            "--exit-on-down",
        ]
        if self._verbose:
            common.append("-v")
        na, nb = self.node_a, self.node_b
        self.b = EndpointProcess(
            nb.netns,
            ["--node", nb.node_id, "--peer", na.node_id, "--address", str(nb.overlay_address), *common],
            self.directory / f"{nb.name}.log",
        )
        self.b.wait_event("ready", timeout=timeout)
        self.a = EndpointProcess(
            na.netns,
            ["--node", na.node_id, "--peer", nb.node_id, "--connect", "--address", str(na.overlay_address), *common],
            self.directory / f"{na.name}.log",
        )
        up_a = self.a.wait_event("up", "error", timeout=timeout)
        if up_a["event"] == "error":
            raise RuntimeError(f"tunnel setup failed: {up_a.get('reason')}")
        up_b = self.b.wait_event("up", timeout=timeout)
        return LabTunnelResult(na, nb, up_a, up_b)

    def ping(self, result: LabTunnelResult, count: int = 3) -> None:
        out = run(
            ["ping", "-c", str(count), "-i", "0.2", "-W", "2", str(self.node_b.overlay_address.ip)],
            self.node_a.netns,
            check=False,
        ).stdout
        result.ping_sent = count
        for line in out.splitlines():
            if "received" in line:
                result.ping_received = int(line.split(",")[1].split()[0])
            if line.startswith("rtt"):
                result.ping_avg_ms = float(line.split("=")[1].split("/")[1])
        if self.a is not None:
            result.settled = self.a.stats()

    def wait_down(self, duration: float | None) -> str | None:
        """Wait until either side reports the tunnel down, or ``duration`` passes (None: forever)."""
        assert self.a is not None and self.b is not None
        deadline = None if duration is None else time.monotonic() + duration
        while deadline is None or time.monotonic() < deadline:
            for proc in (self.a, self.b):
                if proc.proc.poll() is not None:
                    return f"{proc.log_path.stem} exited"
            time.sleep(0.2)
        return None

    def close(self) -> None:
        for proc in (self.a, self.b):
            if proc is not None:
                proc.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def open_lab_tunnel(lab: Lab, a: int, b: int, relay: RelayPolicy = RelayPolicy.FALLBACK) -> tuple[LabTunnel, LabTunnelResult]:
    """Bring the tunnel up and ping through it; the caller closes the returned LabTunnel."""
    tunnel = LabTunnel(lab, a, b, relay)
    try:
        result = tunnel.open()
        tunnel.ping(result)
    except BaseException:
        tunnel.close()
        raise
    return tunnel, result


def parse_node(text: str) -> int:
    """"3", "node3" or "n3" -> 3."""
    digits = text.removeprefix("node").removeprefix("n")
    if not digits.isdigit():
        raise ValueError(f"not a node: {text!r} (use 3, node3 or n3)")
    return int(digits)
