"""The controller's Unix socket (issue 21 M1): its private directory, a crashed run's socket, who may connect."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from evio.bridge import BridgeSpec
from evio.sdn.controller_socket import (
    ControllerSocketError,
    OvsOwner,
    PeerCredentials,
    SwitchAdmission,
    admission_refusal,
    bind_controller_socket,
    controller_socket_path,
)

ROOT_OVS = OvsOwner(0, 0)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_socket_lives_in_evio_under_the_ovs_rundir_one_per_state_directory(tmp_path: Path) -> None:
    run = Path("/var/run/openvswitch")
    a, b = controller_socket_path(run, tmp_path / "a"), controller_socket_path(run, tmp_path / "b")
    assert a.parent == b.parent == run / "evio" and a != b
    assert a == controller_socket_path(run, tmp_path / "a")  # a restarted daemon finds its bridges' path again


def test_bind_makes_a_private_directory_and_socket_and_replaces_a_crashed_runs(tmp_path: Path) -> None:
    path = tmp_path / "evio" / "x.sock"
    first = bind_controller_socket(path, ROOT_OVS)
    assert mode(path.parent) == 0o700 and mode(path) == 0o600
    first.close()  # the daemon died; its socket file stays
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    path.parent.chmod(0o755)  # loosened by hand: put right at the next start
    second = bind_controller_socket(path, ROOT_OVS)
    try:
        assert mode(path.parent) == 0o700
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(path))  # the new listener is the one there
        client.close()
    finally:
        second.close()


def test_bind_refuses_what_it_cannot_make_safe(tmp_path: Path) -> None:
    (tmp_path / "evio").mkdir()
    (tmp_path / "evio" / "file.sock").write_text("not a socket")
    with pytest.raises(ControllerSocketError, match="not a socket"):
        bind_controller_socket(tmp_path / "evio" / "file.sock", ROOT_OVS)
    assert (tmp_path / "evio" / "file.sock").read_text() == "not a socket"
    (tmp_path / "evio2").write_text("")
    with pytest.raises(ControllerSocketError, match="not a directory"):
        bind_controller_socket(tmp_path / "evio2" / "x.sock", ROOT_OVS)
    with pytest.raises(ControllerSocketError, match="longer than"):
        bind_controller_socket(tmp_path / ("d" * 120) / "x.sock", ROOT_OVS)
    open_to_all = tmp_path / "shared"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    with pytest.raises(ControllerSocketError, match="writable by every user"):
        bind_controller_socket(open_to_all / "evio" / "x.sock", ROOT_OVS)
    assert not (open_to_all / "evio").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_bind_refuses_a_directory_someone_else_made_and_shares_with_a_non_root_ovs_user(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(ControllerSocketError, match="belongs to uid 65534"):
        bind_controller_socket(theirs / "x.sock", ROOT_OVS)
    path = tmp_path / "evio" / "x.sock"
    listener = bind_controller_socket(path, OvsOwner(4242, 4343))  # vswitchd runs as an `openvswitch` user
    try:
        for made, wanted in ((path.parent, 0o750), (path, 0o660)):
            st = os.lstat(made)
            assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 4343, wanted)
    finally:
        listener.close()


def test_only_vswitchd_root_or_the_ovs_user_may_connect() -> None:
    owner = OvsOwner(4242, 4343)
    assert admission_refusal(PeerCredentials(pid=77, uid=1000, gid=1000), 77, owner) is None  # vswitchd
    assert admission_refusal(PeerCredentials(pid=5, uid=0, gid=0), 77, owner) is None
    assert admission_refusal(PeerCredentials(pid=5, uid=4242, gid=4343), 77, owner) is None
    refusal = admission_refusal(PeerCredentials(pid=5, uid=1000, gid=4343), 77, owner)  # the OVS group is not enough
    assert refusal is not None and "uid 1000" in refusal
    assert admission_refusal(PeerCredentials(pid=5, uid=1000, gid=1000), None, owner) is not None


def test_admission_reads_the_peers_credentials_and_counts_refusals(tmp_path: Path) -> None:
    (tmp_path / "ovs-vswitchd.pid").write_text(f"{os.getpid()}\n")
    ours, theirs = socket.socketpair()
    admission = SwitchAdmission(tmp_path, OvsOwner(4242, 4343))
    assert admission(ours) and admission.refused == 0  # our pid is "vswitchd" here
    # A TCP connection has no credentials of a local process (pid 0, uid -1): refused.
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    assert not admission(accepted) and admission.refused == 1
    for s in (ours, theirs, server, client, accepted):
        s.close()


def test_a_bridge_spec_with_a_socket_targets_it_alone() -> None:
    spec = BridgeSpec("evobr0", 0, controller_socket="/run/openvswitch/evio/x.sock")
    assert spec.controller_target == "unix:/run/openvswitch/evio/x.sock"
    assert BridgeSpec("evobr0", 6653).controller_target == "tcp:127.0.0.1:6653"
    with pytest.raises(Exception, match="absolute"):
        BridgeSpec("evobr0", 0, controller_socket="evio/x.sock")


def test_the_handed_listener_closes_what_admission_refuses_and_goes_on(tmp_path: Path) -> None:
    from evio.sdn.handed_listener import HandedListener

    listener = bind_controller_socket(tmp_path / "evio" / "x.sock", ROOT_OVS)
    asked: list[int] = []
    serving = threading.Event()

    def admit(conn: socket.socket) -> bool:
        asked.append(conn.fileno())
        if len(asked) == 1:
            raise RuntimeError("a check that cannot decide")
        return False

    handed = HandedListener(listener, admit, on_serving=serving.set)

    def serve() -> None:
        with contextlib.suppress(OSError):  # the listener closed at the end
            handed.serve()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert serving.wait(5)
    for _ in range(2):  # the check raising, then refusing: closed either way, and the loop still accepts
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(5)
        client.connect(str(tmp_path / "evio" / "x.sock"))
        assert client.recv(1) == b""
        client.close()
    assert len(asked) == 2 and thread.is_alive()
    listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    thread.join(5)
    assert not thread.is_alive()  # a closed listener ends the loop (and so os-ken's server thread)
