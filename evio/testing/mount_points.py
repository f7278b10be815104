"""Mount points the simulated hosts need on the real root, shared by parallel runs.

A bind needs its target to exist: /etc/evio-server does not on a machine without evio, so the first
harness that needs it creates it (an empty dir or file) and the last one to leave removes it again;
only if still empty, so a real install that appeared meanwhile keeps its files. The registry is a
JSON file in /run under an flock. A run that died before its cleanup (its PID and start time gone)
is pruned by the next one, which also sweeps its namespaces and the work directory it made.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from evio.testing.hosts import HostPath, Namespace, netns_list

__all__ = ["MountPoints"]


class MountPoints:
    """The registry of mount points harness runs created, and of the runs (users) using them."""

    def __init__(self, registry: Path = Path("/run/evio-testing-hosts.json")) -> None:
        self.registry = registry
        self.lock = Path("/run/lock") / (registry.stem + ".lock")

    def claim(self, user: str, paths: Sequence[HostPath], own_workdir: Path | None) -> None:
        """Register `user` (this process), creating the targets of `paths` missing on the real root.
        `own_workdir`, a directory the run made and removes, is swept if the run dies."""
        with self._locked() as state:
            users, created = state["users"], state["created"]
            workdir = str(own_workdir) if own_workdir else ""
            users[user] = {"pid": os.getpid(), "start": _start_time(os.getpid()), "workdir": workdir}
            for hp in paths:
                target = Path(hp.path)
                if target.exists() or target.is_symlink():
                    continue
                if hp.is_file:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.touch()
                else:
                    target.mkdir(parents=True)
                if hp.path not in created:
                    created.append(hp.path)

    def release(self, user: str) -> list[str]:
        """Forget `user`; if no one is left, remove the mount points runs created. The paths removed."""
        removed: list[str] = []
        with self._locked() as state:
            state["users"].pop(user, None)
            if state["users"]:
                return removed
            for path in sorted(state["created"], key=len, reverse=True):
                if _remove_if_empty(Path(path)):
                    removed.append(path)
            state["created"] = [p for p in state["created"] if p not in removed]
        return removed

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        self.lock.parent.mkdir(parents=True, exist_ok=True)
        with self.lock.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = _read_registry(self.registry)
            _prune_dead(state)
            yield state
            if state["users"] or state["created"]:
                _write_atomically(self.registry, json.dumps(state, indent=1))
            else:
                self.registry.unlink(missing_ok=True)


def _read_registry(registry: Path) -> dict[str, Any]:
    try:
        state: dict[str, Any] = json.loads(registry.read_text())
    except (OSError, ValueError):
        state = {}
    state.setdefault("users", {})
    state.setdefault("created", [])
    return state


def _prune_dead(state: dict[str, Any]) -> None:
    """Sweep what a run that died (killed before its cleanup) left: its namespaces and work directory."""
    for user, entry in list(state["users"].items()):
        if _start_time(entry["pid"]) == entry["start"]:
            continue
        for netns in netns_list():
            if netns.startswith(user + "-"):
                ns = Namespace(netns)
                ns.end_processes()
                ns.delete()
        if entry.get("workdir"):
            shutil.rmtree(entry["workdir"], ignore_errors=True)
        del state["users"][user]


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks (field 22 of /proc/PID/stat): a PID and it name one process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


def _remove_if_empty(path: Path) -> bool:
    try:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        elif path.is_file() and path.stat().st_size == 0:
            path.unlink()
        else:
            return not path.exists()
    except OSError:
        return False
    return True
