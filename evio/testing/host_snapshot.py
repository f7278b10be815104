"""What a lab could leave behind on the host: namespaces, root links, processes, lab files.

Tests take a snapshot before and after, then look at the difference. Other
users of the machine change it meanwhile, so `owned_changes` keeps only what
belongs to one lab (its name prefix, its directory, processes in its
namespaces).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from evio.lab.netns import NETNS_DIR
from evio.lab.state import DEFAULT_ROOT


@dataclass(frozen=True)
class Process:
    pid: int
    cmdline: str
    netns_inode: int


@dataclass(frozen=True)
class HostSnapshot:
    namespaces: frozenset[str]
    root_links: frozenset[str]
    processes: frozenset[Process]
    lab_files: frozenset[str]  # paths under the lab root

    def owned(self, prefix: str, lab_dir: Path, netns_inodes: frozenset[int] = frozenset()) -> set[str]:
        """Everything in this snapshot that belongs to the lab with `prefix` and `lab_dir`."""
        found = {f"netns {n}" for n in self.namespaces if n.startswith(prefix)}
        found |= {f"link {n}" for n in self.root_links if n.startswith(prefix)}
        found |= {f"file {f}" for f in self.lab_files if f.startswith(str(lab_dir))}
        found |= {
            f"process {p.pid} {p.cmdline}"
            for p in self.processes
            if str(lab_dir) in p.cmdline or prefix in p.cmdline or p.netns_inode in netns_inodes
        }
        return found


def take_snapshot(lab_root: Path = DEFAULT_ROOT) -> HostSnapshot:
    processes = set()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            inode = os.stat(f"/proc/{entry}/ns/net").st_ino
        except OSError:
            continue
        if cmdline:  # kernel threads have none
            processes.add(Process(int(entry), cmdline.strip(), inode))
    try:
        namespaces = frozenset(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        namespaces = frozenset()
    files = frozenset(str(p) for p in lab_root.rglob("*")) if lab_root.exists() else frozenset()
    return HostSnapshot(
        namespaces=namespaces,
        root_links=frozenset(name for _, name in socket.if_nameindex()),
        processes=frozenset(processes),
        lab_files=files,
    )


def netns_inodes(names: list[str]) -> frozenset[int]:
    """Inodes of named namespaces, to find their processes after the names are gone."""
    inodes = set()
    for name in names:
        try:
            inodes.add(os.stat(NETNS_DIR / name).st_ino)
        except FileNotFoundError:
            pass
    return frozenset(inodes)
