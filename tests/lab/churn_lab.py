"""What the churn and fault scenarios (E8) do to a lab of full nodes: long-lived TCP streams, leftover checks,
ping loss, waiting for a node's links. Every process goes through the lab, so `Lab.down` stops it whatever
happens to the test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from scenario_lab import wait_for

from evio.lab.lab import Lab
from evio.lab.node_config import bridge_name
from evio.lab.state import ProcessRecord
from evio.node.control import ControlError
from evio.testing.scenarios import PingTrace

STREAM_PORT = 5300
TAP_PREFIX = "evt"


def churn_seconds() -> float:
    """How long the churn runs: EVIO_CHURN_SECONDS, default 40 (CI); the paper-sized run takes 180."""
    text = os.environ.get("EVIO_CHURN_SECONDS", "40")
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"EVIO_CHURN_SECONDS must be a number, not {text!r}") from None
    if seconds < 10:
        raise ValueError(f"EVIO_CHURN_SECONDS must be at least 10 (two leave/join events), got {seconds:g}")
    return seconds


# -- TCP streams ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamResult:
    client: int
    server: int
    sent: int
    echoed: int
    max_stall: float
    broken: str | None


class TcpStream:
    """A long-lived TCP stream (evio.lab.tcp_stream) from node `client` to node `server` over the overlay."""

    def __init__(self, lab: Lab, client: int, server: int, port: int = STREAM_PORT, rate: float = 20.0) -> None:
        self.lab, self.client, self.server, self.port, self.rate = lab, client, server, port, rate
        tag = uuid.uuid4().hex[:8]
        self.server_log = lab.directory / "logs" / f"stream-server-{server}-{tag}.log"
        self.client_log = lab.directory / "logs" / f"stream-client-{client}-{tag}.log"
        self._records: list[ProcessRecord] = []

    def __enter__(self) -> TcpStream:
        address = str(self.lab.node(self.server).overlay_address.ip)
        tool = [sys.executable, "-m", "evio.lab.tcp_stream"]
        self._records.append(self.lab.spawn(self.server, [*tool, "serve", "--bind", address, "--port", str(self.port)],
                                            role="scenario-stream", log_path=self.server_log))
        wait_for(lambda: "listening" in _text(self.server_log), bool, 15.0, f"stream server on node{self.server}", 0.05)
        self._records.append(self.lab.spawn(
            self.client, [*tool, "client", "--connect", f"{address}:{self.port}", "--rate", f"{self.rate:g}"],
            role="scenario-stream", log_path=self.client_log))  # fmt: skip
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def report(self) -> dict[str, Any]:  # the client's last JSON report
        lines = [line for line in _text(self.client_log).splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else {}

    def stalls(self, longer_than: float) -> list[tuple[float, float]]:
        """(epoch seconds, length) of each stretch of the once-a-second reports where no echo came back."""
        reports = [json.loads(line) for line in _text(self.client_log).splitlines() if line.startswith("{\"sent")]
        found, since, echoed, previous = [], None, -1, 0.0
        for report in reports:
            if report["echoed"] == echoed and report["sent"] > echoed:
                since = since if since is not None else previous
            elif since is not None:
                if report["t"] - since > longer_than:
                    found.append((since, report["t"] - since))
                since = None
            echoed, previous = report["echoed"], report["t"]
        if since is not None and reports and reports[-1]["t"] - since > longer_than:
            found.append((since, reports[-1]["t"] - since))
        return found

    def wait_flowing(self, timeout: float) -> None:
        wait_for(self.report, lambda r: int(r.get("echoed", 0)) > 0, timeout, f"stream node{self.client} -> node{self.server}")

    def stop(self) -> StreamResult:
        """Stop the client first (it prints its final report on SIGTERM), then the server."""
        for record in reversed(self._records):  # the client, then the server
            self.lab.stop(record)
        self._records.clear()
        report = self.report()
        return StreamResult(self.client, self.server, int(report.get("sent", 0)), int(report.get("echoed", 0)),
                            float(report.get("max_stall", 0.0)), report.get("broken") or (None if report.get("final") else "no final report"))


def keep_logs(lab: Lab, label: str) -> Path | None:
    """With EVIO_KEEP_LOGS=DIR: copy the lab's daemon and tool logs to DIR/<lab>-<label> (for a failure's post-mortem)."""
    target_dir = os.environ.get("EVIO_KEEP_LOGS")
    if not target_dir:
        return None
    target = Path(target_dir) / f"{lab.name}-{label}"
    shutil.copytree(lab.directory / "logs", target / "logs", dirs_exist_ok=True)
    for node in lab.nodes:
        try:
            shutil.copy(lab.daemon_log(node.index), target / f"{node.name}.log")
        except OSError:
            continue
    return target


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


# -- ping loss -----------------------------------------------------------------------------------


def ping_loss(trace: PingTrace) -> tuple[int, int]:
    """(lost, sent) between the first and the last reply of a trace."""
    if not trace.replies:
        return 0, 0
    seqs = [seq for seq, _ in trace.replies]
    first, last = min(seqs), max(seqs)
    sent = last - first + 1
    return sent - len(set(seqs)), sent


# -- what a node holds ---------------------------------------------------------------------------


_PORT_DESC = re.compile(r"^\s*(\d+)\((\S+)\):", re.MULTILINE)
_FLOW_PORTS = re.compile(r"(?:in_port=|output:)(\d+)")


def evio_taps(lab: Lab, index: int) -> set[str]:
    out = lab.exec(index, ["ip", "-br", "link", "show", "type", "tun"], check=False).stdout
    return {line.split()[0].split("@")[0] for line in out.splitlines() if line.startswith(TAP_PREFIX)}


def leftovers(lab: Lab, index: int) -> list[str]:
    """What node `index` holds beyond its daemon's links: TAPs, bridge ports, flows on ports that are gone.

    With no daemon running: any evio TAP or bridge at all."""
    name = lab.node(index).name
    taps = evio_taps(lab, index)
    ovs = lab.ovs(index)
    bridge = bridge_name(lab.plan)
    if lab.daemon(index) is None:
        problems = [f"{name}: TAP {t} with no daemon" for t in sorted(taps)]
        bridges = ovs.vsctl("list-br").split()
        problems += [f"{name}: bridge {b} with no daemon" for b in bridges]
        return problems
    try:
        status = lab.daemon_status(index)
    except ControlError as exc:
        return [f"{name}: daemon does not answer ({exc})"]
    links = status["overlays"][lab.plan.overlay]["links"]
    link_taps = {link["tap"] for link in links if link["tap"]}
    ports = set(ovs.vsctl("list-ports", bridge).split())
    problems = [f"{name}: TAP {t} without a link" for t in sorted(taps - link_taps)]
    problems += [f"{name}: port {p} without a link" for p in sorted(ports - link_taps)]
    problems += [f"{name}: link TAP {t} not on the bridge" for t in sorted(link_taps - ports)]
    numbers = {int(n) for n, _ in _PORT_DESC.findall(ovs.ofctl("dump-ports-desc", bridge))}
    for line in ovs.ofctl("dump-flows", bridge).splitlines():
        missing = {int(n) for n in _FLOW_PORTS.findall(line)} - numbers
        if missing:
            problems.append(f"{name}: flow on missing port(s) {sorted(missing)}: {line.strip()}")
    return problems


def overlay_status(lab: Lab, index: int) -> dict[str, Any] | None:
    """Node `index`'s status of the lab's overlay (None while its daemon does not answer or is still starting)."""
    try:
        status = lab.daemon_status(index, timeout=2.0)
    except ControlError:
        return None
    overlay: dict[str, Any] | None = (status.get("overlays") or {}).get(lab.plan.overlay)
    return overlay


def up_links(lab: Lab, index: int) -> int:
    """How many links node `index`'s daemon reports up (-1 if it does not answer)."""
    status = overlay_status(lab, index)
    return -1 if status is None else sum(1 for link in status["links"] if link["state"] == "up")


def signal_connected(lab: Lab, index: int) -> bool:
    status = overlay_status(lab, index)
    return status is not None and bool(status["signal"]["connected"])


def switch_connected(lab: Lab, index: int) -> bool:
    status = overlay_status(lab, index)
    return status is not None and bool(status["switch_connected"])


def reply_gaps(trace: PingTrace, longer_than: float) -> list[tuple[float, float]]:
    """(epoch seconds of the last reply before, seconds without a reply) for each gap longer than `longer_than`."""
    stamps = [at for _, at in trace.replies]
    return [(a, b - a) for a, b in zip(stamps, stamps[1:]) if b - a > longer_than]


def elapsed_until(condition: object, timeout: float, what: str, poll: float = 0.1) -> float:
    """Seconds until `condition()` holds (AssertionError naming `what` after `timeout`)."""
    started = time.monotonic()
    wait_for(condition, bool, timeout, what, poll)  # type: ignore[arg-type]
    return time.monotonic() - started
