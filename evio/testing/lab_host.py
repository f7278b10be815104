"""A fake of evio.lab.netns.Host: namespaces, links and processes kept in memory.

It understands the `ip -batch` lines the lab emits well enough to track which
namespaces and interfaces exist, so tests can check that `up` and `down` leave
nothing behind, and it can fail or be interrupted at a chosen call to test
cleanup without root.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evio.lab.errors import LabCommandError
from evio.lab.state import ProcessRecord
from evio.lab.wiring import IpBatch


@dataclass
class FakeHost:
    namespaces: set[str] = field(default_factory=set)
    links: dict[str, set[str]] = field(default_factory=dict)  # namespace ("" = root) -> interface names
    processes: dict[int, ProcessRecord] = field(default_factory=dict)
    nft_rulesets: dict[str, str] = field(default_factory=dict)
    qdiscs: dict[str, list[str]] = field(default_factory=dict)
    sysctl_values: dict[str, dict[str, str]] = field(default_factory=dict)
    # The root namespace's integer sysctls the lab raises (the kernel's defaults for the neighbour tables).
    host_sysctls: dict[str, int] = field(default_factory=lambda: {
        f"net/{family}/neigh/default/gc_thresh{n}": value
        for family in ("ipv4", "ipv6") for n, value in ((1, 128), (2, 512), (3, 1024))})  # fmt: skip
    commands: list[tuple[str | None, tuple[str, ...]]] = field(default_factory=list)
    # Raise `fail_with` once, when the call counter reaches `fail_at` (1-based; 0 = never).
    fail_at: int = 0
    fail_with: BaseException | None = None
    calls: int = 0
    unkillable: set[int] = field(default_factory=set)
    _next_pid: int = 40000

    # -- the Host protocol ---------------------------------------------------------------------

    def check_ready(self) -> None:
        pass

    def netns_list(self) -> list[str]:
        return sorted(self.namespaces)

    def ip_batch(self, batch: IpBatch, *, force: bool = False) -> None:
        self._tick()
        for line in batch.lines:
            try:
                self._ip_line(batch.netns, line.split())
            except LabCommandError:
                if not force:
                    raise

    def tc_batch(self, netns: str, lines: Sequence[str]) -> None:
        self._tick()
        self._require(netns)
        self.qdiscs.setdefault(netns, []).extend(lines)

    def nft(self, netns: str, ruleset: str) -> None:
        self._tick()
        self._require(netns)
        self.nft_rulesets[netns] = ruleset

    def sysctl(self, netns: str, settings: Mapping[str, str]) -> None:
        self._tick()
        self._require(netns)
        self.sysctl_values.setdefault(netns, {}).update(settings)

    def raise_host_sysctls(self, floors: Mapping[str, int]) -> dict[str, int]:
        self._tick()
        raised = {path: floor for path, floor in floors.items() if self.host_sysctls[path] < floor}
        self.host_sysctls.update(raised)
        return raised

    def root_links(self) -> list[str]:
        return sorted(self.links.get("", set()))

    def run(
        self,
        netns: str | None,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 60.0,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        self._tick()
        if netns is not None:
            self._require(netns)
        self.commands.append((netns, tuple(argv)))
        return subprocess.CompletedProcess(list(argv), 0, "", "")

    def spawn(self, role: str, netns: str | None, argv: Sequence[str], log_path: Path) -> ProcessRecord:
        self._tick()
        if netns is not None:
            self._require(netns)
        self._next_pid += 1
        record = ProcessRecord(role=role, pid=self._next_pid, starttime=1, netns=netns, argv=tuple(argv))
        self.processes[record.pid] = record
        return record

    def is_running(self, record: ProcessRecord) -> bool:
        current = self.processes.get(record.pid)
        return current is not None and current.starttime == record.starttime

    def processes_in(self, namespaces: Sequence[str]) -> list[ProcessRecord]:
        wanted = set(namespaces)
        return [
            ProcessRecord("found", p.pid, p.starttime, p.netns, p.argv)
            for p in self.processes.values()
            if p.netns in wanted
        ]

    def stop(self, records: Sequence[ProcessRecord], grace: float) -> list[ProcessRecord]:
        survivors = []
        for record in records:
            if not self.is_running(record):
                continue
            if record.pid in self.unkillable:
                survivors.append(record)
            else:
                del self.processes[record.pid]
        return survivors

    def listening(self, pid: int, proto: str, port: int) -> bool:
        return pid in self.processes

    # -- helpers -------------------------------------------------------------------------------

    def add_process(self, role: str, netns: str | None) -> ProcessRecord:
        """A process someone else started (e.g. a daemon inside a node namespace)."""
        self._next_pid += 1
        record = ProcessRecord(role=role, pid=self._next_pid, starttime=1, netns=netns, argv=(role,))
        self.processes[record.pid] = record
        return record

    def _tick(self) -> None:
        self.calls += 1
        if self.fail_at and self.calls == self.fail_at:
            self.fail_at = 0  # one failure: the cleanup that follows runs on a working host
            raise self.fail_with or LabCommandError(["fake"], 1, f"injected failure at call {self.calls}")

    def _require(self, netns: str) -> None:
        if netns not in self.namespaces:
            raise LabCommandError(["fake"], 1, f'Cannot open network namespace "{netns}"')

    def _ip_line(self, netns: str | None, words: list[str]) -> None:
        key = netns or ""
        if netns is not None:
            self._require(netns)
        match words:
            case ["netns", "add", name]:
                if name in self.namespaces:
                    raise LabCommandError(["ip", *words], 1, "File exists")
                self.namespaces.add(name)
                self.links[name] = {"lo"}
            case ["netns", "del", name]:
                if name not in self.namespaces:
                    raise LabCommandError(["ip", *words], 1, "No such file or directory")
                self.namespaces.discard(name)
                self._drop_namespace_links(name)
            case ["link", "add", name, "netns", ns, "type", "veth", "peer", "name", peer, "netns", peer_ns]:
                self._require(ns)
                self._require(peer_ns)
                self.links[ns].add(name)
                self.links[peer_ns].add(peer)
            case ["link", "add", name, "type", "veth", "peer", "name", peer]:
                self.links.setdefault(key, set()).update({name, peer})
            case ["link", "add", name, "type", _]:
                self.links.setdefault(key, set()).add(name)
            case ["link", "del", name]:
                if name not in self.links.get(key, set()):
                    raise LabCommandError(["ip", *words], 1, "Cannot find device")
                self.links[key].discard(name)
            case _:
                pass  # addresses, routes, link state: not tracked

    def _drop_namespace_links(self, name: str) -> None:
        # A veth dies with either end; the fake does not track pairs, so it only drops the namespace's own.
        self.links.pop(name, None)
