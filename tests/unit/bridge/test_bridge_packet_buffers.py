"""Finding vswitchd's packet sockets of a port, from /proc text and a fake /proc tree."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from evio.bridge.ovs_paths import ovs_run_dir
from evio.bridge.packet_buffers import PacketSocketTuner, packet_socket_inodes, socket_fds

PROC_NET_PACKET = """sk               RefCnt Type Proto  Iface R Rmem   User   Inode
00000000ca152f8a 3      3    0003   5     1 0      0      1106050
000000009b29a6c9 2      3    0000   0     0 0      0      1106111
00000000aa152f8a 3      3    0003   7     1 0      0      1106077
garbage line
"""


def test_packet_sockets_are_found_by_interface_index() -> None:
    assert packet_socket_inodes(PROC_NET_PACKET, 5) == {1106050}
    assert packet_socket_inodes(PROC_NET_PACKET, 7) == {1106077}
    assert packet_socket_inodes(PROC_NET_PACKET, 9) == set()


def test_socket_fds_match_inodes_exactly() -> None:
    links = [(3, "socket:[1106050]"), (4, "socket:[11060501]"), (5, "/dev/net/tun"), (9, "socket:[1106077]")]
    assert socket_fds(links, {1106050, 1106077}) == [3, 9]


def test_rundir_is_beside_the_given_db_socket_else_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ovs_run_dir("/run/lab/ovs/run/db.sock") == Path("/run/lab/ovs/run")
    monkeypatch.setenv("OVS_RUNDIR", "/tmp/ovsrun")
    assert ovs_run_dir(None) == Path("/tmp/ovsrun")
    monkeypatch.delenv("OVS_RUNDIR")
    assert ovs_run_dir(None) == Path("/var/run/openvswitch")


def fake_proc(tmp_path: Path, pid: int = 4242) -> tuple[Path, Path]:
    rundir, proc = tmp_path / "run", tmp_path / "proc"
    rundir.mkdir()
    (rundir / "ovs-vswitchd.pid").write_text(f"{pid}\n")
    here = proc / str(pid)
    (here / "root" / "sys" / "class" / "net" / "evt0").mkdir(parents=True)
    (here / "root" / "sys" / "class" / "net" / "evt0" / "ifindex").write_text("5\n")
    (here / "net").mkdir()
    (here / "net" / "packet").write_text(PROC_NET_PACKET)
    (here / "fd").mkdir()
    for fd, target in ((12, "socket:[1106050]"), (13, "socket:[1106111]"), (14, "anon_inode:[eventfd]")):
        os.symlink(target, here / "fd" / str(fd))
    return rundir, proc


def test_the_tuner_sets_the_buffer_of_the_ports_socket_only(tmp_path: Path) -> None:
    rundir, proc = fake_proc(tmp_path)
    calls: list[tuple[int, int, int]] = []
    tuner = PacketSocketTuner(rundir, size=1 << 22, proc=proc, set_buffer=lambda *a: calls.append(a))
    assert tuner.tune("evt0") == 1
    assert calls == [(4242, 12, 1 << 22)]


def test_an_unreachable_switch_is_logged_once_and_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[tuple[int, int, int]] = []
    tuner = PacketSocketTuner(tmp_path / "nothing", proc=tmp_path, set_buffer=lambda *a: calls.append(a))
    with caplog.at_level(logging.WARNING, logger="evio.bridge.packet_buffers"):
        tuner("evt0")
        tuner("evt1")
    assert len(caplog.records) == 1 and "evt0" in caplog.records[0].getMessage()
    assert calls == []


def test_a_port_the_switch_does_not_have_is_an_error_not_a_guess(tmp_path: Path) -> None:
    rundir, proc = fake_proc(tmp_path)
    tuner = PacketSocketTuner(rundir, proc=proc, set_buffer=lambda *a: None)
    with pytest.raises(OSError):
        tuner.tune("evt9")
