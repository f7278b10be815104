"""The lab's state file: what `up` made, so `down`, `status` and `exec` find it.

It lives in /run/evio-lab/<name>/state.json. /run is a tmpfs emptied at boot,
exactly like the namespaces and processes the file describes, so a state file
never outlives what it records (one under /var/lib would describe a lab that
a reboot already removed).

`up` writes the file before it creates anything and again after every step
that starts a process, so a crash leaves a file that names at least what
exists; `down` also scans by prefix for anything the file missed.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from evio.lab.errors import LabStateError
from evio.lab.topology import NatKind, nat_kinds

DEFAULT_ROOT = Path("/run/evio-lab")
STATE_FILE = "state.json"
STATE_VERSION = 1

Phase = Literal["creating", "up"]


@dataclass(frozen=True)
class ProcessRecord:
    role: str  # "prosody", "coturn", or what a caller of Lab.spawn named it
    pid: int
    starttime: int  # /proc/<pid>/stat field 22: tells a reused PID apart from ours
    netns: str | None
    argv: tuple[str, ...]


@dataclass(frozen=True)
class LabSecrets:
    turn_secret: str = field(repr=False)
    passwords: tuple[str, ...] = field(repr=False)  # per node, in node order
    node_ids: tuple[str, ...]  # per node, 32 hex digits


@dataclass
class LabState:
    name: str
    phase: Phase
    nat: tuple[NatKind, ...]
    overlay: str
    domain: str
    secrets: LabSecrets
    namespaces: tuple[str, ...]
    rate_mbit: float | None = None
    created_at: float = 0.0  # wall clock, for display only
    processes: list[ProcessRecord] = field(default_factory=list)
    accounts: dict[str, str] = field(default_factory=dict)  # extra accounts: localpart -> password
    # Nodes whose daemon runs another evio than the lab's own (e.g. the previous release): index -> argv
    evio_commands: dict[int, tuple[str, ...]] = field(default_factory=dict)
    xmpp: str = "prosody"  # the signaling server: prosody, ejabberd or ejabberd-cluster (evio.lab.ejabberd)

    def to_json(self) -> str:
        document = {"version": STATE_VERSION, **asdict(self)}
        return json.dumps(document, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> LabState:
        try:
            doc = json.loads(text)
            if doc.get("version") != STATE_VERSION:
                raise LabStateError(f"state version {doc.get('version')!r}, expected {STATE_VERSION}")
            secrets = doc["secrets"]
            return cls(
                name=str(doc["name"]),
                phase=_phase(doc["phase"]),
                nat=nat_kinds(list(doc["nat"]), len(doc["nat"])),
                overlay=str(doc["overlay"]),
                domain=str(doc["domain"]),
                secrets=LabSecrets(
                    turn_secret=str(secrets["turn_secret"]),
                    passwords=tuple(str(p) for p in secrets["passwords"]),
                    node_ids=tuple(str(n) for n in secrets["node_ids"]),
                ),
                namespaces=tuple(str(n) for n in doc["namespaces"]),
                rate_mbit=None if doc.get("rate_mbit") is None else float(doc["rate_mbit"]),
                created_at=float(doc.get("created_at", 0.0)),
                processes=[_process(p) for p in doc.get("processes", [])],
                accounts={str(k): str(v) for k, v in doc.get("accounts", {}).items()},
                evio_commands={int(k): tuple(str(a) for a in v) for k, v in doc.get("evio_commands", {}).items()},
                xmpp=str(doc.get("xmpp", "prosody")),
            )
        except LabStateError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise LabStateError(f"unreadable lab state: {exc}") from exc


def _phase(value: Any) -> Phase:
    if value == "creating":
        return "creating"
    if value == "up":
        return "up"
    raise ValueError(f"unknown phase {value!r}")


def _process(doc: dict[str, Any]) -> ProcessRecord:
    return ProcessRecord(
        role=str(doc["role"]),
        pid=int(doc["pid"]),
        starttime=int(doc["starttime"]),
        netns=None if doc.get("netns") is None else str(doc["netns"]),
        argv=tuple(str(a) for a in doc["argv"]),
    )


def lab_dir(root: Path, name: str) -> Path:
    return root / name


def state_path(root: Path, name: str) -> Path:
    return lab_dir(root, name) / STATE_FILE


def save_state(root: Path, state: LabState) -> None:
    """Replace the state file atomically (a reader never sees half a file)."""
    path = state_path(root, state.name)
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
    tmp.write_text(state.to_json())
    os.chmod(tmp, 0o600)  # holds the TURN secret and the account passwords
    os.replace(tmp, path)


def load_state(root: Path, name: str) -> LabState:
    path = state_path(root, name)
    try:
        text = path.read_text()
    except FileNotFoundError as exc:
        raise LabStateError(f"no state file {path}") from exc
    except OSError as exc:
        raise LabStateError(f"cannot read {path}: {exc}") from exc
    state = LabState.from_json(text)
    if state.name != name:
        raise LabStateError(f"{path} describes lab {state.name!r}, not {name!r}")
    return state


def list_labs(root: Path) -> list[str]:
    """Names of the labs that have a directory under `root` (up, or left behind by a crash)."""
    try:
        return sorted(p.name for p in root.iterdir() if p.is_dir())
    except FileNotFoundError:
        return []
