"""The node image (docker/): one lab node's daemon runs in the container, joins the ring, pings the others.

Node 1 of a 3-node lab runs `evio run` from the image, in its own namespace (podman
`--network ns:`), with Open vSwitch inside the container or the node's own (the "host" OVS,
mounted), and its config and state as volumes: its lab config rewritten for the container, the lab CA, its lab state directory
(so the lab's topology reads its control socket as for any node). Nodes 2 and 3 run the
daemon directly, as the lab does. The container's tunnels run the native data path (the
image builds it). The container is removed even when the test fails.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from node_image import STATE_DIR, TEST_CONTAINER_PREFIX, BuiltImage, NodeContainer, write_config_dir

from evio.lab import daemons as full_nodes
from evio.lab.lab import Lab
from evio.lab.node_config import node_dir
from evio.node import control
from evio.testing.labs import LabFactory
from evio.testing.waiting import wait_for_value

pytestmark = pytest.mark.lab

T = TypeVar("T")
RING_TIMEOUT = 90.0  # generous: 2 shared cores, and one node starts its OVS inside a container
STOP_GRACE = 30


def wait_for(get: Callable[[], T], good: Callable[[T], bool], timeout: float, what: str,
             alive: Callable[[], str | None]) -> T:  # fmt: skip
    """`get()` once `good` holds; fails at once if `alive()` names a reason the wait is hopeless."""
    dead: list[str] = []

    def reached_or_hopeless(value: T) -> bool:
        if good(value):
            return True
        reason = alive()
        if reason is not None:
            dead.append(reason)
        return reason is not None

    value = wait_for_value(get, reached_or_hopeless, timeout, what=what)
    if dead:
        raise AssertionError(f"{what}: {dead[0]}")
    return value


def pings(lab: Lab, a: int, b: int) -> bool:
    target = str(lab.node(b).overlay_address.ip)
    return lab.exec(a, ["ping", "-c", "3", "-i", "0.2", "-W", "2", target], check=False, timeout=20).returncode == 0


def overlay_interfaces(lab: Lab, index: int) -> list[str]:
    """Interfaces in a node's namespace other than lo and its LAN link (TAPs, bridge ports, ovs-netdev)."""
    out = lab.exec(index, ["ip", "-o", "link", "show"]).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
    return [n for n in names if n not in ("lo", lab.plan.node(index).lan_interface)]


def status_or_error(socket: Path) -> dict[str, object] | str:
    try:
        return control.query(socket, "status", 2.0)
    except control.ControlError as exc:
        return str(exc)


def healthcheck(container: NodeContainer) -> subprocess.CompletedProcess[str]:
    """The image's HEALTHCHECK, run once. Until this image's evio has `evio status` (issue 10, item 1,
    written separately), the same question put to the control socket from inside the container."""
    if container.exec("evio", "status", "--help").returncode == 0:
        return container.healthcheck()
    probe = "import sys; from evio.node import control; control.query(sys.argv[1], 'status', 5.0)"
    return container.exec("/opt/evio/bin/python", "-c", probe, f"{STATE_DIR}/control.sock")


@pytest.mark.parametrize("ovs", ["container", "host"])
def test_a_node_in_the_container_joins_the_ring_and_pings_the_others(
    lab_factory: LabFactory, node_image: BuiltImage, tmp_path: Path, ovs: str
) -> None:
    lab = lab_factory(nodes=3, nat="mixed")
    host_nodes = [2, 3]
    for index in host_nodes:
        lab.start_ovs(index)
        lab.start_daemon(index)
    host_ovs = lab.start_ovs(1).run_dir if ovs == "host" else None

    node = lab.plan.node(1)
    state_dir = node_dir(lab.directory, node) / "state"
    config_dir = write_config_dir(tmp_path / "etc-evio", lab.node(1).config_path, lab.public.ca_file)
    name = f"{TEST_CONTAINER_PREFIX}{lab.name}-{secrets.token_hex(3)}"
    container = NodeContainer(node_image, name, node.netns, config_dir, state_dir, host_ovs)

    with container:
        def container_gone() -> str | None:
            return None if container.running() else f"the container exited; its log:\n{container.logs()}"

        try:
            socket = full_nodes.control_socket(lab.directory, node)
            wait_for(lambda: status_or_error(socket), lambda s: isinstance(s, dict) and full_nodes.is_ready(s),
                     60.0, "the containerised daemon's bridge connected", container_gone)  # fmt: skip
            lab.wait_daemons(host_nodes, 60.0)

            topo = wait_for(lab.topology, lambda t: set(t.live) == {"node1", "node2", "node3"} and not t.ring_gaps(),
                            RING_TIMEOUT, "a ring of successor links with the container's node", container_gone)  # fmt: skip
            assert {link.peer for link in topo.links_of("node1") if link.state == "up"} == {"node2", "node3"}

            failed = [(a, b) for a in (1, 2, 3) for b in (1, 2, 3) if a != b and not pings(lab, a, b)]
            assert failed == [], f"pairs without an answer over the overlay: {failed}"

            # The image builds the native data path, so tunnel.datapath "auto" runs it there.
            status = status_or_error(socket)
            assert isinstance(status, dict), status
            overlays = status["overlays"]
            assert isinstance(overlays, dict), status
            datapaths = {link.get("datapath") for ov in overlays.values() for link in ov["links"]
                         if link.get("tunnel_state") == "up"}  # fmt: skip
            assert datapaths == {"native"}, f"the container's tunnels run {datapaths}"

            # /proc/sys is read-only in the container: its TAPs still get no IPv6 address (netlink instead).
            for link in topo.links_of("node1"):
                addresses = lab.exec(1, ["ip", "-o", "addr", "show", "dev", str(link.tap)]).stdout
                assert addresses.strip() == "", f"the container's TAP {link.tap} has addresses: {addresses}"

            # The image's HEALTHCHECK (`evio status`) passes while the daemon answers.
            health = healthcheck(container)
            assert health.returncode == 0, f"healthcheck: {health.stdout}{health.stderr}"

            # The flags suffice for evio to reach vswitchd's packet sockets (else one warning per bridge).
            log = container.logs(2000)
            assert "cannot raise ovs-vswitchd's receive buffer" not in log, [l for l in log.splitlines() if "buffer" in l]

            # SIGTERM from `podman stop` reaches the daemon (tini passes it on): a clean exit,
            # its bridge, ports and TAPs removed from the node's namespace.
            assert container.stop(STOP_GRACE) == 0, container.logs()
            assert overlay_interfaces(lab, 1) == []
            if host_ovs is not None:
                assert lab.ovs(1).vsctl("list-br").strip() == "", "the host's OVS still has the node's bridge"
        except BaseException:
            print(f"===== container {name} log\n{container.logs()}")
            raise

    assert container.state() == {}, "the container is still there"
