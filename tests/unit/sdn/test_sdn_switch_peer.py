"""Only our ovs-vswitchd may control a bridge: real TCP connections, real /proc, a real second process.

The "vswitchd" here is a child process holding a connection to a listener;
the pidfile names it, as OVS's does. An impostor is any other process (this
test itself) connecting with the same datapath id.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evio.sdn.boundary import SwitchConnected
from evio.sdn.vswitchd_peer_check import VswitchdPeerCheck, find_socket
from evio.testing.fake_ofapp import FakeDatapath, FakeEvent, FakeMsg, connect, make_app, port_desc

_CHILD = """
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
sys.stdout.write("connected\\n"); sys.stdout.flush()
sys.stdin.read()  # hold the connection until the test closes our stdin
"""


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server
    server.close()


@pytest.fixture
def vswitchd(tmp_path: Path, listener: socket.socket) -> Iterator[tuple[subprocess.Popen[str], socket.socket, Path]]:
    """A child process connected to the listener, named by a pidfile; yields it, our end, the run dir."""
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(listener.getsockname()[1])],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "connected\n"
        accepted, _ = listener.accept()
        (tmp_path / "ovs-vswitchd.pid").write_text(f"{child.pid}\n")
        yield child, accepted, tmp_path
        accepted.close()
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=5)


def test_the_connection_of_the_pidfiles_process_is_accepted_and_another_is_refused(
    vswitchd: tuple[subprocess.Popen[str], socket.socket, Path], listener: socket.socket
) -> None:
    _, from_vswitchd, run_dir = vswitchd
    check = VswitchdPeerCheck(run_dir)
    assert check(from_vswitchd) is None
    impostor = socket.create_connection(listener.getsockname())  # a second, real connection: this process
    from_impostor, _ = listener.accept()
    try:
        reason = check(from_impostor)
        assert reason is not None and "not held by ovs-vswitchd" in reason
    finally:
        impostor.close()
        from_impostor.close()


def test_without_a_running_vswitchd_every_connection_is_refused(tmp_path: Path, listener: socket.socket) -> None:
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    try:
        assert VswitchdPeerCheck(tmp_path)(accepted) is not None  # no pidfile
        (tmp_path / "ovs-vswitchd.pid").write_text("999999999\n")
        assert VswitchdPeerCheck(tmp_path)(accepted) is not None  # a pid that does not run
    finally:
        client.close()
        accepted.close()


def test_proc_net_tcp_entries_are_found_by_both_ends() -> None:
    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:1A0B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1\n"
        "   1: 0100007F:C350 0100007F:1A0B 01 00000000:00000000 00:00000000 00000000  1000        0 2222 1\n"
    )
    found = find_socket(text, ("127.0.0.1", 0xC350), ("127.0.0.1", 0x1A0B))
    assert found is not None and (found.uid, found.inode) == (1000, 2222)
    assert find_socket(text, ("127.0.0.1", 0x1A0B), ("127.0.0.2", 0xC350)) is None


class _SocketDatapath(FakeDatapath):
    def __init__(self, dpid: int, sock: socket.socket) -> None:
        super().__init__(dpid)
        self.socket = sock
        self.address = sock.getpeername()


def test_a_second_connection_with_the_bridges_datapath_id_does_not_replace_the_bridge(
    vswitchd: tuple[subprocess.Popen[str], socket.socket, Path], listener: socket.socket
) -> None:
    _, from_vswitchd, run_dir = vswitchd
    app, commands, sink, _ = make_app(peer_check=VswitchdPeerCheck(run_dir))
    commands.attach("red", 0xE1, node_id=100)
    bridge = _SocketDatapath(0xE1, from_vswitchd)
    connect(app, bridge, [port_desc(1, "evored", "02:00:00:00:00:01")])
    assert app.datapaths[0xE1] is bridge

    impostor = socket.create_connection(listener.getsockname())
    from_impostor, _ = listener.accept()
    try:
        fake = _SocketDatapath(0xE1, from_impostor)
        app.switch_features(FakeEvent(FakeMsg(datapath=fake)))
        assert app.datapaths[0xE1] is bridge and app.refused_switches == 1
        assert fake.sent == []  # no base flows, no port request: it controls nothing
        impostor.settimeout(2)
        assert impostor.recv(1) == b""  # and its connection is closed
        assert [e for e in sink.events if isinstance(e, SwitchConnected)] == [SwitchConnected("red", 0xE1)]
        # The bridge is still the one the overlay talks to.
        app.port_status(FakeEvent(FakeMsg(datapath=bridge, reason=0, desc=port_desc(2, "evot200", "02:00:00:00:00:99"))))
        assert 2 in app.overlays["red"].switch.ports
    finally:
        impostor.close()
        from_impostor.close()


