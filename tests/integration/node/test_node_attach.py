"""Workloads on the overlay's Ethernet (issue 23), with real daemons, OVS and namespaces: the recipes of
docs/operations.md ("Attaching containers, VMs and LANs"), typed as the doc gives them.

Two nodes behind NATs. Behind node1 a container (a network namespace on a veth, put on the bridge with
`evio attach`); behind node2 a site LAN (a namespace with a Linux bridge and two hosts, through a veth pair
named in the config's `attach`, applied by a reload) and a VM (a tap added to the bridge as libvirt's
`<virtualport type='openvswitch'/>` does, with a relay standing in for QEMU behind it). Every one reaches
every other and both nodes; bad input is refused in one line with nothing changed; the bridges' IPv6
link-local addresses answer each other across the overlay.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from ipaddress import IPv4Interface
from pathlib import Path

import pytest

from evio.lab.lab import Lab
from evio.testing.labs import LabFactory
from evio.testing.waiting import wait_for_value

pytestmark = pytest.mark.integration

RING_TIMEOUT = 60.0
BRIDGE = "evbr-ov1"
GUIDE = next(p for p in Path(__file__).resolve().parents if (p / "docs").is_dir()) / "docs" / "operations.md"

# QEMU's part for the VM stand-in: frames between the tap (opened by name, as QEMU opens the tap libvirt
# made) and a veth whose other end is the "VM"'s eth0 in its namespace.
_VM_RELAY = """
import fcntl, os, select, socket, struct, sys
tap = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(tap, 0x400454CA, struct.pack("16sH", sys.argv[1].encode(), 0x0002 | 0x1000))  # TUNSETIFF TAP NO_PI
wire = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
wire.bind((sys.argv[2], 0))
print("ready", flush=True)
while True:
    ready, _, _ = select.select([tap, wire], [], [])
    if tap in ready:
        wire.send(os.read(tap, 65536))
    if wire in ready:
        frame, address = wire.recvfrom(65536)
        if address[2] != socket.PACKET_OUTGOING:  # not our own sends coming back
            os.write(tap, frame)
"""


def sh(netns: str, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """A recipe's lines, run as root in `netns` (the node's, as an operator types them on the node).

    By nsenter into the network namespace only, not `ip netns exec`: that one runs in a mount namespace of
    its own, so a namespace the recipe makes with `ip netns add` would die with the shell (its name is a
    bind mount) and take its veths along. The price: /sys here is the host's, so `sysfs()` reads it."""
    return subprocess.run(["nsenter", f"--net=/run/netns/{netns}", "sh", "-ec", script], capture_output=True,
                          text=True, timeout=60, check=check)


def sysfs(netns: str, path: str) -> str:
    """A file of /sys as `netns` sees it (`ip netns exec` mounts its sysfs)."""
    return subprocess.run(["ip", "netns", "exec", netns, "cat", path], capture_output=True, text=True, timeout=10,
                          check=True).stdout.strip()


def recipe(name: str) -> str:
    """The `sh recipe-NAME` block of docs/operations.md, as the operator types it."""
    found = re.search(rf"```sh recipe-{name}\n(.*?)```", GUIDE.read_text(), flags=re.S)
    assert found is not None, f"docs/operations.md has no recipe-{name} block"
    return found.group(1)


def type_recipe(lab: Lab, index: int, name: str, renames: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a recipe on node `index` as root, with `evio` and `ovs-vsctl` the node's own (its daemon's
    config, its Open vSwitch), the names in `renames` replaced (whole words), and the bridge's MTU read
    from the node's sysfs (see `sh`)."""
    script = recipe(name)
    for old, new in renames.items():
        script = re.sub(rf"\b{re.escape(old)}\b", new, script)
    mtu_file = f"/sys/class/net/{BRIDGE}/mtu"
    script = script.replace(f"$(cat {mtu_file})", sysfs(lab.netns(index), mtu_file))
    evio_argv = shlex.join([*lab.evio_command(index)])
    prelude = (f"export OVS_RUNDIR={shlex.quote(str(lab.ovs(index).run_dir))}\n"
               f"evio() {{ {evio_argv} \"$@\" --config {shlex.quote(str(lab.node(index).config_path))}; }}\n")
    return sh(lab.netns(index), prelude + script)


def pings(netns: str, target: str, count: int = 3) -> bool:
    done = subprocess.run(["ip", "netns", "exec", netns, "ping", "-c", str(count), "-i", "0.2", "-W", "2", target],
                          capture_output=True, text=True, timeout=30, check=False)
    return done.returncode == 0


def host_address(lab: Lab, offset: int) -> IPv4Interface:
    network = lab.node(1).overlay_address.network
    return IPv4Interface(f"{network.network_address + offset}/{network.prefixlen}")


def evio(lab: Lab, index: int, *args: str) -> subprocess.CompletedProcess[str]:
    return lab.exec(index, [*lab.evio_command(index), *args, "--config", str(lab.node(index).config_path)], check=False)


def attached(lab: Lab, index: int) -> dict:
    return lab.daemon_status(index)["overlays"][lab.plan.overlay]["attached_ports"]


@pytest.fixture
def namespaces(lab_factory: LabFactory, request: pytest.FixtureRequest) -> Iterator[tuple[Lab, dict[str, str]]]:
    """A 2-node lab with daemons, and the names of the workload namespaces (removed after, whatever happened)."""
    lab = lab_factory(nodes=2, nat=["eim", "symmetric"], daemons=True)
    names = {role: f"attach-{lab.name}-{role}" for role in ("c1", "h1", "h2", "vm")}
    failed_before = request.session.testsfailed
    try:
        yield lab, names
    finally:
        if request.session.testsfailed > failed_before:
            for node in lab.nodes:
                text = lab.daemon_log(node.index).read_text(errors="replace")
                print(f"===== {node.name} daemon log, last 60 lines\n" + "\n".join(text.splitlines()[-60:]))
        for netns in names.values():
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)


def test_a_container_a_site_lan_and_a_vm_on_the_overlay_and_ipv6_link_local_between_nodes(
    namespaces: tuple[Lab, dict[str, str]],
) -> None:
    lab, ns = namespaces
    n1, n2 = lab.netns(1), lab.netns(2)
    topo = wait_for_value(lab.topology, lambda t: len(t.live) == 2 and any(link.state == "up" for link in t.links),
                          RING_TIMEOUT, what="a link between the two nodes")
    assert topo.links
    mtu = sysfs(n1, f"/sys/class/net/{BRIDGE}/mtu")
    # The addresses the recipes give (10.254.0.201 to the container), in the lab's overlay subnet.
    c1, h1, h2, vm = (host_address(lab, offset) for offset in (201, 202, 203, 204))

    # -- IPv6 link-local between the nodes' bridges, as on any Ethernet ---------------------------------
    def link_local(netns: str) -> str | None:
        out = json.loads(sh(netns, f"ip -j -6 address show dev {BRIDGE} scope link").stdout or "[]")
        for info in (out[0].get("addr_info", []) if out else []):
            if not info.get("tentative"):
                return str(info["local"])
        return None

    far = wait_for_value(lambda: link_local(n2), lambda a: a is not None, 30, what="node2's link-local address")
    wait_for_value(lambda: link_local(n1), lambda a: a is not None, 30, what="node1's link-local address")
    assert sh(n1, f"ping -6 -c 3 -i 0.2 -W 2 {far}%{BRIDGE}", check=False).returncode == 0

    # -- recipe 1: a container on a veth, attached at run time -------------------------------------------
    # (`ip netns add` stands in for the container runtime; docs/operations.md has the docker/podman lines)
    done = type_recipe(lab, 1, "container", {"app1": ns["c1"]})
    assert done.stdout.strip().splitlines()[-1] == f"vc1 attached to overlay ov1, MTU {mtu}", done.stdout

    # -- bad input: one line, exit 1, nothing changed -----------------------------------------------------
    sh(n1, "ip link add vbad type veth peer name vbad-peer; ip link add brbad type bridge; ip link set vbad master brbad")
    ports_before = lab.ovs(1).vsctl("list-ports", BRIDGE)
    uplink = lab.plan.node(1).lan_interface
    for interface, why in (("nope0", "no interface 'nope0' on this host"), ("vbad", "already a port of 'brbad'"),
                           (uplink, "carries a default route"), ("vc1", "already attached to overlay 'ov1'")):
        done = evio(lab, 1, "attach", "ov1", interface)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and len(lines) == 1 and why in lines[0], done.stderr
    assert lab.ovs(1).vsctl("list-ports", BRIDGE) == ports_before

    # -- recipe 2: a site LAN (a Linux bridge on the node, two hosts on it) through a veth pair, by config --
    sh(n2, "ip link add br-lan type bridge; ip link set br-lan up")
    for host, address in (("h1", h1), ("h2", h2)):
        sh(n2, f"""
            ip netns add {ns[host]}
            ip link add {host}-lan type veth peer name eth0 netns {ns[host]}
            ip link set {host}-lan master br-lan up
            ip -n {ns[host]} link set eth0 mtu {mtu} up
            ip -n {ns[host]} address add {address} dev eth0
        """)
    type_recipe(lab, 2, "site", {})
    lab.reload_configs(lambda doc: doc["overlays"]["ov1"].update(attach=["vlan0"]))

    # -- recipe 3: a VM's tap, put on the bridge as libvirt's <virtualport type='openvswitch'/> does ------
    type_recipe(lab, 2, "vm", {})
    sh(n2, f"""
        ip netns add {ns['vm']}
        ip link add vmwire type veth peer name eth0 netns {ns['vm']}
        ip link set vmwire up
        ip -n {ns['vm']} link set eth0 mtu {mtu} up
        ip -n {ns['vm']} address add {vm} dev eth0
    """)
    relay = subprocess.Popen(["ip", "netns", "exec", n2, sys.executable, "-c", _VM_RELAY, "tapvm1", "vmwire"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert relay.stdout is not None and relay.stderr is not None
        if relay.stdout.readline().strip() != "ready":
            relay.kill()
            pytest.fail(f"the VM's relay did not start: {relay.stderr.read()}\n{sh(n2, 'ip -o link').stdout}")

        # -- every workload reaches every other and both nodes -------------------------------------------
        workloads = {"c1": (ns["c1"], c1), "h1": (ns["h1"], h1), "h2": (ns["h2"], h2), "vm": (ns["vm"], vm)}
        targets = {name: str(address.ip) for name, (_, address) in workloads.items()}
        targets |= {"node1": str(lab.node(1).overlay_address.ip), "node2": str(lab.node(2).overlay_address.ip)}
        failed = [(a, b) for a, (netns, _) in workloads.items() for b, target in targets.items()
                  if a != b and not pings(netns, target)]
        assert failed == [], f"pairs without an answer: {failed}"
        assert pings(n1, str(h1.ip)) and pings(n2, str(c1.ip))  # and the nodes reach them

        # -- counters per attached port, in the status and the metrics' source ---------------------------
        ports1, ports2 = attached(lab, 1), attached(lab, 2)
        assert ports1["vc1"]["origin"] == "command" and ports1["vc1"]["on_bridge"]
        assert ports1["vc1"]["rx"]["frames"] > 0 and ports1["vc1"]["tx"]["frames"] > 0
        assert ports2["vlan0"]["origin"] == "config" and ports2["vlan0"]["rx"]["frames"] > 0
        text = evio(lab, 2, "status").stdout
        assert "attached ports: 1" in text and "vlan0" in text
    finally:
        relay.kill()
        relay.wait()

    # -- detach at run time; a reload without the key takes the LAN off; stop leaves the interfaces ------
    assert evio(lab, 1, "detach", "ov1", "vc1").returncode == 0
    assert "vc1" not in lab.ovs(1).vsctl("list-ports", BRIDGE).split()
    assert not pings(ns["c1"], str(lab.node(1).overlay_address.ip), count=1)
    lab.reload_configs(lambda doc: doc["overlays"]["ov1"].pop("attach"))
    assert "vlan0" not in lab.ovs(2).vsctl("list-ports", BRIDGE).split()
    assert attached(lab, 2) == {}
    lab.stop_daemon(1)
    assert sh(n1, "ip link show vc1", check=False).returncode == 0  # the host's interface is still there
