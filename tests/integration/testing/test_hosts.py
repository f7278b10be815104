"""The simulated hosts the operator's guide is tested on (evio.testing.hosts/internet/host_services).

One internet for most checks: a server, node1 behind an endpoint-independent NAT, node2 behind a
symmetric NAT, node3 on the public segment behind its own firewall.

1. Reachability: the server reaches the routers' public addresses, nodes reach the server, no node
   reaches another's private address.
2. The NATs map as named: one outside port for two destinations (eim), one per destination (symmetric);
   the public host's firewall drops an unsolicited connection but lets its own through.
3. Each host has its own /etc/evio, ... : a file one writes is seen by no other host nor the real root,
   and the binds never show in the real root's mount table.
4. Open vSwitch started on a host answers `ovs-vsctl show` there, not on another host nor the real root;
   `evio run` on a host makes its bridge there and keeps its state in the host's /var/lib/evio.
5. Leaving the context removes everything (namespaces, veths, mounts, mount points, processes, files),
   also after a build that fails half-way; the setup and teardown times are printed.
6. ejabberd runs on a host as its unit runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evio.testing.host_services import is_listening, start_coturn, start_ejabberd, start_openvswitch, start_prosody
from evio.testing.hosts import HOST_PATHS, Host, HostCommandError, netns_list
from evio.testing.internet import Internet, Site
from evio.testing.mount_points import MountPoints
from evio.testing.waiting import wait_until_blocking

pytestmark = pytest.mark.integration

UDP_ECHO = """
import selectors, socket
sel = selectors.DefaultSelector()
for port in (40001, 40002):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    sel.register(s, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        data, addr = key.fileobj.recvfrom(2048)
        key.fileobj.sendto(f"{addr[0]}:{addr[1]}".encode(), addr)
"""

# One inside socket to two destinations: prints the outside address:port each destination saw.
UDP_CLIENT = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 50000))
s.settimeout(3)
for port in (40001, 40002):
    s.sendto(b"x", (sys.argv[1], port))
    print(s.recv(100).decode())
"""

TCP_CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.5).close()
    print("connected")
except TimeoutError:
    print("timeout")
except ConnectionRefusedError:
    print("refused")
"""

TCP_LISTEN = """
import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen()
time.sleep(600)
"""


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


@pytest.fixture(scope="module")
def net() -> Iterator[Internet]:
    with Internet([Site("eim"), Site("symmetric"), Site("none")]) as internet:
        print(f"\ninternet of 4 hosts, 2 routers up in {internet.setup_seconds:.2f} s ({_load()})")
        yield internet


# -- 1. reachability ------------------------------------------------------------------------------------------


def test_the_server_reaches_the_routers_and_the_nodes_reach_the_server(net: Internet) -> None:
    for router in net.routers:
        if router is not None:
            net.server.run(["ping", "-c1", "-W2", router.wan_address])
    for node in net.nodes:
        node.run(["ping", "-c1", "-W2", net.server.address])
        node.run(["ping", "-c1", "-W2", "server"])  # by name, through the host's /etc/hosts


def test_no_node_reaches_another_nodes_private_address(net: Internet) -> None:
    node1, node2, _ = net.nodes
    for a, b in ((node1, node2), (node2, node1)):
        assert a.run(["ping", "-c1", "-W1", b.address], check=False).returncode != 0, f"{a.name} reached {b.address}"


# -- 2. NAT and firewall -------------------------------------------------------------------------------------


def _outside_mappings(net: Internet, node: Host) -> list[str]:
    return node.run(["python3", "-c", UDP_CLIENT, net.server.address], timeout=20).stdout.split()


def test_each_nat_maps_as_its_kind_says(net: Internet) -> None:
    echo = net.server.spawn(["python3", "-c", UDP_ECHO])
    try:
        wait_until_blocking(lambda: is_listening(net.server, "udp", 40002) or not echo.alive(), 10,
                            what="udp 40002 listening", interval=0.05)
        assert echo.alive(), echo.tail()
        node1, node2, node3 = net.nodes
        eim, symmetric, public = (_outside_mappings(net, n) for n in (node1, node2, node3))
    finally:
        echo.stop()
    assert {m.split(":")[0] for m in eim} == {node1.public_address}
    assert len(set(eim)) == 1, f"endpoint-independent NAT gave two mappings: {eim}"
    assert {m.split(":")[0] for m in symmetric} == {node2.public_address}
    assert len(set(symmetric)) == 2, f"symmetric NAT kept one mapping for two destinations: {symmetric}"
    assert public == [f"{node3.address}:50000"] * 2


def test_the_public_hosts_firewall_drops_unsolicited_connections(net: Internet) -> None:
    node3 = net.nodes[2]
    listener = node3.spawn(["python3", "-c", TCP_LISTEN])
    try:
        wait_until_blocking(lambda: is_listening(node3, "tcp", 8080) or not listener.alive(), 10,
                            what="tcp 8080 listening", interval=0.05)
        assert listener.alive(), listener.tail()
        inbound = net.server.run(["python3", "-c", TCP_CONNECT, node3.address, "8080"]).stdout.strip()
        local = node3.run(["python3", "-c", TCP_CONNECT, "127.0.0.1", "8080"]).stdout.strip()
    finally:
        listener.stop()
    assert (inbound, local) == ("timeout", "connected")
    net.server.run(["ping", "-c1", "-W2", node3.address])  # ping is let in


# -- 3. private files ---------------------------------------------------------------------------------------


def test_a_file_one_host_writes_is_its_own(net: Internet) -> None:
    node1, node2, _ = net.nodes
    node1.run(["sh", "-c", "echo node1 > /etc/evio/x"])
    assert node1.path("/etc/evio/x").read_text() == "node1\n"
    assert node2.run(["test", "-e", "/etc/evio/x"], check=False).returncode == 1
    assert net.server.run(["test", "-e", "/etc/evio/x"], check=False).returncode == 1
    assert not Path("/etc/evio/x").exists()
    # The operator's working directory /root: what the host writes stays its own, what the real one holds shows.
    node1.run(["sh", "-c", "echo token > evh-token"])
    assert node1.path("/root/evh-token").read_text() == "token\n"
    assert not Path("/root/evh-token").exists()
    assert node2.run(["test", "-e", "/root/evh-token"], check=False).returncode == 1
    assert node1.run(["evio", "--version"]).stdout.startswith("evio ")  # the evio under test, on PATH
    assert node1.run(["hostname"]).stdout.strip() == "node1"
    assert node1.run(["test", "-e", "/run/systemd/system"], check=False).returncode == 1
    # A fresh Debian host with the packages: prosody's config and dirs as the package left them.
    assert net.server.path("/etc/prosody/prosody.cfg.lua").is_file()
    assert net.server.path("/etc/prosody/conf.d").is_dir()
    with pytest.raises(ValueError):
        node1.path("/usr/bin/evio")  # not private: the real root's


def test_the_binds_stay_in_the_commands_mount_namespace(net: Internet) -> None:
    namespace = net.nodes[0].run(["readlink", "/proc/self/ns/mnt"]).stdout.strip()
    assert namespace != os.readlink("/proc/self/ns/mnt")  # `ip netns exec` unshared it
    inside = net.nodes[0].run(["cat", "/proc/self/mountinfo"]).stdout
    assert any(line.split()[4] == "/etc/evio" for line in inside.splitlines())
    assert str(net.workdir) not in Path("/proc/self/mountinfo").read_text()


def test_a_failing_command_names_the_host_and_its_error(net: Internet) -> None:
    with pytest.raises(HostCommandError) as failed:
        net.nodes[0].run(["cat", "/etc/evio/missing"])
    assert "on node1" in str(failed.value) and "No such file" in str(failed.value)


# -- 4. Open vSwitch ------------------------------------------------------------------------------------------


def test_open_vswitch_on_a_host_is_that_hosts(net: Internet) -> None:
    node1, node2, _ = net.nodes
    started = time.monotonic()
    ovs = start_openvswitch(node1)
    print(f"\nOpen vSwitch ready in {time.monotonic() - started:.2f} s ({_load()})")
    try:
        node1.run(["ovs-vsctl", "add-br", "evhbr0", "--", "set", "bridge", "evhbr0", "datapath_type=netdev"])
        assert "Bridge evhbr0" in node1.run(["ovs-vsctl", "show"]).stdout
        assert node1.path("/run/openvswitch/db.sock").is_socket()
        node1.run(["ip", "link", "show", "evhbr0"])  # the netdev datapath's TAP is in node1's namespace
        assert node2.run(["ovs-vsctl", "--timeout=2", "show"], check=False).returncode != 0
        root = subprocess.run(["ovs-vsctl", "--timeout=2", "list-br"], capture_output=True, text=True)
        assert "evhbr0" not in root.stdout
        assert str(net.workdir) not in Path("/proc/self/mountinfo").read_text()  # while its daemons run
    finally:
        ovs.stop()
    assert not any(p.alive() for p in ovs.processes)


def test_the_evio_daemon_runs_on_a_host_with_its_open_vswitch_and_state(net: Internet) -> None:
    node = net.nodes[2]
    start_openvswitch(node, other_config={"userspace-tso-enable": "true"})
    config = {"overlays": {"ov1": {
        "signal": {"server": net.server.address, "jid": "node3@localhost", "password": "x", "insecure_plaintext": True},
        "bridge": {"address": "10.254.0.3/16"},
    }}}  # fmt: skip
    node.path("/etc/evio/config.json").write_text(json.dumps(config))
    node.path("/etc/evio/config.json").chmod(0o600)
    daemon = node.spawn(["evio", "run", "--config", "/etc/evio/config.json"])

    def status() -> str:
        assert daemon.alive(), daemon.tail()
        return node.run(["evio", "status"], check=False).stdout

    wait_until_blocking(lambda: "switch connected" in status(), 30, what="evio up on node3")
    assert "evbr-ov1" in node.run(["ovs-vsctl", "list-br"]).stdout
    assert node.path("/var/lib/evio/control.sock").is_socket()
    assert not Path("/var/lib/evio/control.sock").exists()
    daemon.stop()
    assert daemon.returncode == 0, daemon.tail()


# -- 5. cleanup -----------------------------------------------------------------------------------------------


def _harness_traces(prefix: str, workdir: Path) -> list[str]:
    traces = [f"namespace {ns}" for ns in netns_list() if ns.startswith(prefix)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    traces += [f"root link {line}" for line in links.splitlines() if prefix in line]
    traces += [f"mount {line}" for line in Path("/proc/self/mountinfo").read_text().splitlines() if prefix in line]
    if workdir.exists():
        traces.append(f"work directory {workdir}")
    return traces


def test_leaving_removes_everything_even_with_services_and_a_stray_daemon() -> None:
    missing_before = [hp.path for hp in HOST_PATHS if not os.path.lexists(hp.path)]
    with Internet([Site("eim"), Site("symmetric")]) as net:
        setup = net.setup_seconds
        start_openvswitch(net.nodes[0])
        start_prosody(net.server)
        start_coturn(net.server)
        late = net.add_site(Site("eim"))  # a site added while the services run
        late.run(["ping", "-c1", "-W2", "server"])
        assert late.name == "node3" and late.run(["hostname"]).stdout.strip() == "node3"
        # A daemon that leaves its process group, as `epmd -daemon` does: the namespace sweep ends it.
        net.nodes[1].run(["sh", "-c", "setsid sleep 600 >/dev/null 2>&1 < /dev/null &"])
        pids = [p.pid for h in net.hosts for p in h.processes] + [pid for h in net.hosts for pid in h.pids()]
        assert len(pids) >= 5
        prefix, workdir = net.prefix, net.workdir
        assert _harness_traces(prefix, workdir) != []  # the check below can see something
    print(f"\nsetup {setup:.2f} s, teardown with OVS, prosody, coturn {net.teardown_seconds:.2f} s ({_load()})")
    assert _harness_traces(prefix, workdir) == []
    assert [pid for pid in pids if _running(pid)] == []
    if not Path(MountPoints().registry).exists():  # no other harness run is using the mount points
        assert [p for p in missing_before if os.path.lexists(p)] == []


def test_a_build_that_fails_half_way_leaves_nothing() -> None:
    net = Internet([Site("eim"), Site("eim", mtu=10)])  # the second site's MTU is refused by the kernel
    with pytest.raises(HostCommandError, match="mtu"):
        net.up()
    assert _harness_traces(net.prefix, net.workdir) == []


def test_a_run_killed_before_its_cleanup_is_swept_by_the_next() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": ":".join(sys.path)}
    )
    try:
        assert child.stdout is not None
        prefix, workdir = child.stdout.readline().split()
    finally:
        child.kill()
        child.wait()
    assert _harness_traces(prefix, Path(workdir)) != []
    with Internet([Site("eim")]):
        assert _harness_traces(prefix, Path(workdir)) == []


KILLED_RUN = """
import time
from evio.testing.internet import Internet, Site
net = Internet([Site("eim")]).up()
net.nodes[0].spawn(["sleep", "600"])
print(net.prefix, net.workdir, flush=True)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


# -- 6. ejabberd ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/usr/sbin/ejabberdctl"), reason="ejabberd is not installed")
def test_ejabberd_runs_on_a_host_as_its_unit_runs_it() -> None:
    with Internet([Site("eim")]) as net:
        started = time.monotonic()
        ejabberd = start_ejabberd(net.server)
        print(f"\nejabberd ready in {time.monotonic() - started:.2f} s ({_load()})")
        status = net.server.run(["ejabberdctl", "status"], user="ejabberd").stdout
        assert "started" in status
        assert net.server.path("/var/lib/ejabberd").is_dir()
        assert all(p.alive() for p in ejabberd.processes)
        assert not is_listening(net.nodes[0], "tcp", 5222)
    print(f"teardown with ejabberd {net.teardown_seconds:.2f} s ({_load()})")
    assert [p.pid for p in ejabberd.processes if p.alive()] == []
