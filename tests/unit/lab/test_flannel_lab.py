"""How the Flannel lab starts flanneld, against a fake lab (the real one runs in tests/lab/test_flannel.py)."""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from evio.lab.flannel import FlannelLab, FlannelLabError


class PodsReached(Exception):
    """The fake host stops the start where pods would be attached: the flanneld phase is over."""


@dataclass
class FakeFlanneld:
    subnet_file: Path
    third: int
    polled: int = 0
    exits: bool = False


@dataclass
class FakeLab:
    """Spawned flanneld write their subnet file only once polled: a lease takes a moment in etcd."""

    directory: Path
    count: int = 3
    spawned: list[FakeFlanneld] = field(default_factory=list)
    unwritten_at_spawn: list[list[Path]] = field(default_factory=list)
    exit_on: int | None = None

    def __post_init__(self) -> None:
        self.nodes = [SimpleNamespace(index=i, netns=f"fl-node{i}") for i in range(1, self.count + 1)]
        self.plan = SimpleNamespace(prefix="fl", overlay="ov1")

    def node(self, index: int) -> Any:
        return SimpleNamespace(index=index, overlay_address=ipaddress.IPv4Interface(f"10.254.0.{index}/16"))

    def exec(self, node: int, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, "", "")

    def spawn(self, node: int, argv: list[str], *, log_path: Path, **_: Any) -> FakeFlanneld:
        if node == self.exit_on:
            log_path.write_text("E main.go:359] Error registering network: failed to acquire lease: "
                                "subnet already exists\n")
        self.unwritten_at_spawn.append([f.subnet_file for f in self.spawned if not f.subnet_file.exists()])
        subnet = Path(next(a for a in argv if a.startswith("--subnet-file=")).split("=", 1)[1])
        record = FakeFlanneld(subnet, third=node, exits=node == self.exit_on)
        self.spawned.append(record)
        return record

    def is_running(self, record: FakeFlanneld) -> bool:
        record.polled += 1
        if record.exits:
            return False
        record.subnet_file.write_text(f"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.{record.third}.1/24\n"
                                      "FLANNEL_MTU=1428\nFLANNEL_IPMASQ=true\n")
        return True


class FakeHost:
    def sysctl(self, netns: str, values: dict[str, str]) -> None:
        pass

    def run(self, netns: str | None, argv: list[str], **_: Any) -> None:
        raise PodsReached


def test_each_flanneld_starts_once_the_previous_one_holds_its_lease(tmp_path: Path) -> None:
    # flanneld v0.26 exits instead of retrying when two nodes take the same free subnet at once.
    lab = FakeLab(tmp_path)
    flannel = FlannelLab(lab, flanneld=Path("/bin/true"), host=FakeHost())  # type: ignore[arg-type]
    with pytest.raises(PodsReached):
        flannel.start("host-gw", timeout=5)
    assert [f.third for f in lab.spawned] == [1, 2, 3]
    assert lab.unwritten_at_spawn == [[], [], []]


def test_a_flanneld_that_exits_is_named_with_its_log_once(tmp_path: Path) -> None:
    lab = FakeLab(tmp_path, exit_on=2)
    flannel = FlannelLab(lab, flanneld=Path("/bin/true"), host=FakeHost())  # type: ignore[arg-type]
    with pytest.raises(FlannelLabError) as raised:
        flannel.start("host-gw", timeout=5)
    message = str(raised.value)
    assert message.startswith("node2's flanneld exited")
    assert message.count("subnet already exists") == 1
    assert [f.third for f in lab.spawned] == [1, 2]  # node 3 is not started after a failure
