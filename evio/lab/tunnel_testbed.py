"""Running tunnel endpoints in network namespaces: the tests', the benchmark's and the lab tool's harness.

``EndpointProcess`` starts ``python -m evio.lab.tunnel_endpoint`` inside a
namespace and collects its JSON events. ``VethTestbed`` is the smallest
underlay: two namespaces joined by one veth pair, no NAT (the data path
benchmark's setup). NATed setups come from evio.lab.

Needs root; nothing here is used by the daemon.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import secrets
import signal
import string
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

logger = logging.getLogger(__name__)


class EndpointProcess:
    """One tunnel endpoint process in a namespace, with its events as dicts."""

    def __init__(self, netns: str | None, args: Sequence[str], log_path: Path, env: dict[str, str] | None = None,
                 python: Sequence[str] = (sys.executable,)) -> None:  # fmt: skip
        """``env``: set in the process's environment (PYTHONPATH: run another checkout's evio, say);
        ``python``: the interpreter's argv (another release's virtualenv, ``-I`` so that it imports its own)."""
        prefix = ["ip", "netns", "exec", netns] if netns else []
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self.proc = subprocess.Popen(
            [*prefix, *python, "-m", "evio.lab.tunnel_endpoint", *args],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
        )
        self.events: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self._queue.put(event)
        self._queue.put(None)

    def wait_event(self, *names: str, timeout: float = 10.0) -> dict[str, Any]:
        """The next event with one of ``names`` (earlier others are kept in ``events``)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {names} event in {timeout} s; log: {self.log_tail()}")
            try:
                event = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if event is None:
                self._queue.put(None)
                raise EOFError(f"endpoint exited (status {self.proc.poll()}) before {names}; log: {self.log_tail()}")
            self.events.append(event)
            if event["event"] in names:
                return event

    def stats(self, timeout: float = 5.0) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGUSR1)
        return self.wait_event("stats", timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up (the kernel closes its TAP and sockets)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        return self.proc.returncode

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def run(argv: Sequence[str], netns: str | None = None, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run([*prefix, *argv], check=check, capture_output=True, text=True, timeout=timeout)


def _wait_listening(netns: str, port: int, timeout: float = 5.0) -> None:
    """Until something listens on TCP ``port`` in ``netns`` (or the deadline passes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = run(["ss", "-Hltn", f"sport = :{port}"], netns, check=False, timeout=5).stdout
        if out.strip():
            return
        time.sleep(0.02)


def iperf(client_ns: str, server_ns: str, address: str, seconds: float, streams: int = 1, udp_mbit: int | None = None) -> dict[str, float]:
    """One iperf3 run from ``client_ns`` to a one-off server in ``server_ns``.

    TCP: {"mbit", "retransmits"}; UDP at ``udp_mbit``: {"mbit", "loss", "jitter"}.
    A run that reports an error (a server not yet listening) is retried.
    """
    argv = ["iperf3", "-c", address, "-t", f"{seconds:g}", "-J", "-P", str(streams), "--connect-timeout", "3000"]
    if udp_mbit:
        argv += ["-u", "-b", f"{udp_mbit}M", "-l", "1300"]
    problem = ""
    for _ in range(5):
        server = subprocess.Popen(
            ["ip", "netns", "exec", server_ns, "iperf3", "-s", "-1", "-B", address],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_listening(server_ns, 5201)
            result = run(argv, client_ns, check=False, timeout=seconds + 60)
            try:
                report = json.loads(result.stdout or "{}")
            except ValueError:
                report = {}
            end = report.get("end", {})
            if udp_mbit and "sum" in end:
                s = end["sum"]
                return {"mbit": s["bits_per_second"] / 1e6, "loss": s["lost_percent"], "jitter": s["jitter_ms"]}
            if not udp_mbit and "sum_received" in end:
                return {"mbit": end["sum_received"]["bits_per_second"] / 1e6, "retransmits": end["sum_sent"].get("retransmits", 0)}
            problem = report.get("error") or result.stderr or result.stdout[-300:]
            logger.warning("iperf3 %s -> %s failed, retrying: %s", client_ns, address, problem)
        finally:
            server.kill()
            server.wait(5)
    raise RuntimeError(f"iperf3 failed: {problem}")


def ping_rtt(netns: str, address: str, count: int = 100, interval: float = 0.01) -> tuple[float, int]:
    """(average RTT in ms, replies received)."""
    out = run(["ping", "-q", "-c", str(count), "-i", f"{interval:g}", "-W", "2", address], netns, check=False, timeout=60).stdout
    received = 0
    avg = float("nan")
    for line in out.splitlines():
        if "received" in line:
            received = int(line.split(",")[1].split()[0])
        if line.startswith("rtt"):
            avg = float(line.split("=")[1].split("/")[1])
    return avg, received


def ping_times(netns: str, address: str, count: int = 100, interval: float = 0.01) -> list[float]:
    """Every reply's RTT in ms, in order (lost pings are missing). A median of these is what one late
    ping on a shared machine does not move, where ``ping_rtt``'s mean does."""
    out = run(["ping", "-c", str(count), "-i", f"{interval:g}", "-W", "2", address], netns, check=False, timeout=60).stdout
    return [float(m) for m in re.findall(r" time=([0-9.]+) ms", out)]


def unique_prefix(base: str = "evt") -> str:
    """``base`` plus 3 random characters: parallel runs never share names."""
    alphabet = string.ascii_lowercase + string.digits
    return base + "".join(secrets.choice(alphabet) for _ in range(3))


@dataclass(frozen=True)
class VethEnd:
    netns: str
    interface: str
    address: str


class VethTestbed:
    """Two namespaces ``<prefix>a`` and ``<prefix>b`` joined by a veth pair (the bare underlay)."""

    def __init__(self, prefix: str, subnet: str = "10.201.0", mtu: int = 1500) -> None:
        if len(prefix) > 12:
            raise ValueError("prefix too long for interface names")
        self.prefix = prefix
        self.a = VethEnd(f"{prefix}a", f"{prefix}va", f"{subnet}.1")
        self.b = VethEnd(f"{prefix}b", f"{prefix}vb", f"{subnet}.2")
        self.mtu = mtu

    def __enter__(self) -> VethTestbed:
        self.up()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.down()

    def up(self) -> None:
        try:
            for end in (self.a, self.b):
                run(["ip", "netns", "add", end.netns])
                run(["ip", "-n", end.netns, "link", "set", "lo", "up"])
            run(["ip", "link", "add", self.a.interface, "netns", self.a.netns, "mtu", str(self.mtu), "type", "veth",
                 "peer", "name", self.b.interface, "netns", self.b.netns, "mtu", str(self.mtu)])
            for end in (self.a, self.b):
                run(["ip", "-n", end.netns, "addr", "add", f"{end.address}/24", "dev", end.interface])
                run(["ip", "-n", end.netns, "link", "set", end.interface, "up"])
        except BaseException:
            self.down()
            raise

    def down(self) -> None:
        """Kill what runs inside, delete both namespaces (the veth goes with them)."""
        for end in (self.a, self.b):
            pids = run(["ip", "netns", "pids", end.netns], check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            run(["ip", "netns", "del", end.netns], check=False)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(n in self.namespaces_present() for n in (self.a.netns, self.b.netns)):
            time.sleep(0.05)

    def namespaces_present(self) -> list[str]:
        out = run(["ip", "netns", "list"], check=False).stdout
        return [line.split()[0] for line in out.splitlines() if line.strip()]


def bulk_tcp(server_ns: str, client_ns: str, address: str, nbytes: int, deadline: float, port: int) -> dict[str, Any]:
    """``nbytes`` of TCP each way at once between two namespaces (evio.lab.tcp_bulk); asserts every byte
    arrived intact (SHA-256 of each direction); returns both ends' reports and the Mbit/s of both
    directions together (``mbit``)."""
    tool = [sys.executable, "-m", "evio.lab.tcp_bulk"]
    size = ["--bytes", str(nbytes), "--deadline", str(deadline)]
    server = subprocess.Popen(["ip", "netns", "exec", server_ns, *tool, "serve", "--bind", address, "--port", str(port), *size],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert server.stdout is not None
        assert "listening" in server.stdout.readline()
        client = run([*tool, "send", "--connect", f"{address}:{port}", *size], client_ns, check=False, timeout=deadline + 30)
        served = server.communicate(timeout=deadline + 30)[0]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(5)
    sent, received = json.loads(client.stdout.splitlines()[-1]), json.loads(served.splitlines()[-1])
    reports = {"client": sent, "server": received}
    assert sent["error"] is None and received["error"] is None, reports
    assert sent["sent"] == received["received"] == nbytes, reports
    assert received["sent"] == sent["received"] == nbytes, reports
    assert sent["sent_sha256"] == received["received_sha256"], reports
    assert received["sent_sha256"] == sent["received_sha256"], reports
    return {**reports, "mbit": 2 * nbytes * 8 / max(sent["seconds"], received["seconds"]) / 1e6}
