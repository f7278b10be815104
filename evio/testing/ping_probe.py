"""Probes the lab scenarios and benchmarks run in a lab of full nodes: a background ping whose
trace gives gaps and losses, and moving an overlay address from one node's bridge port to another's.
Every process is started through the lab, so `Lab.down` stops it even if the caller dies half-way.
"""

from __future__ import annotations

import os
import signal
import uuid
from types import TracebackType

from evio.lab.lab import Lab
from evio.lab.node_config import bridge_name
from evio.lab.state import ProcessRecord
from evio.testing.scenarios import PingTrace
from evio.testing.waiting import holds_within, wait_for_value


class PingProbe:
    """`ping -D` from node `index` to `address` every `interval` seconds, in the background.

        with PingProbe(lab, 3, "10.254.0.7", 0.1) as probe:
            probe.wait_replies(5, timeout=30)
            ...
        trace = probe.trace()
    """

    def __init__(self, lab: Lab, index: int, address: str, interval: float) -> None:
        self.lab = lab
        self.index = index
        self.address = address
        self.interval = interval
        self.log_path = lab.directory / "logs" / f"ping-{index}-{uuid.uuid4().hex[:8]}.log"
        self._record: ProcessRecord | None = None

    def __enter__(self) -> PingProbe:
        argv = ["ping", "-D", "-n", "-i", f"{self.interval:g}", "-W", "1", self.address]
        self._record = self.lab.spawn(self.index, argv, role="scenario-ping", log_path=self.log_path)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGINT (ping prints its summary and exits), then forget the process."""
        record, self._record = self._record, None
        if record is None:
            return
        try:
            os.kill(record.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        holds_within(lambda: not self.lab.is_running(record), 5.0)
        self.lab.stop(record)  # SIGTERM/SIGKILL if it is somehow still there; drops it from the lab's state

    def text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def trace(self) -> PingTrace:
        return PingTrace.parse(self.text(), self.interval)

    def wait_replies(self, count: int, timeout: float) -> PingTrace:
        """Once `count` replies came (the path is warm: ARP resolved, flows installed)."""
        return wait_for_value(self.trace, lambda t: len(t.replies) >= count, timeout,
                              what=f"{count} ping replies from {self.address}", interval=0.05)

    def wait_reply_after(self, moment: float, timeout: float) -> PingTrace:
        """Once a reply came after `moment` (epoch seconds, as `ping -D` prints)."""
        return wait_for_value(self.trace, lambda t: any(at > moment for _, at in t.replies), timeout,
                              what=f"a ping reply from {self.address} after the change", interval=0.05)


def move_address(lab: Lab, address: str, prefixlen: int, source: int, destination: int) -> None:
    """Take `address` off node `source`'s bridge port and put it on node `destination`'s."""
    bridge = bridge_name(lab.plan)
    lab.exec(source, ["ip", "addr", "del", f"{address}/{prefixlen}", "dev", bridge])
    lab.exec(destination, ["ip", "addr", "add", f"{address}/{prefixlen}", "dev", bridge])


def restore_address(lab: Lab, address: str, prefixlen: int, home: int, away: int) -> None:
    """Put `address` back on node `home` only, whatever state a failed move left it in."""
    bridge = bridge_name(lab.plan)
    lab.exec(away, ["ip", "addr", "del", f"{address}/{prefixlen}", "dev", bridge], check=False)
    lab.exec(home, ["ip", "addr", "replace", f"{address}/{prefixlen}", "dev", bridge])
