"""Issue 21 M1: no local process can stand in for the node's OpenFlow controller.

A bridge is made as the daemon makes it, on a private OVS in a namespace, with no controller
behind it (the daemon has crashed, or has not bound its listener yet). A process of another user
(`nobody`) then tries to listen where the bridge connects; it must not receive the connection.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from evio.bridge import BridgeSpec, OvsBridge, OvsInstance, SubprocessRunner, datapath_id_for
from evio.node.sdn import free_tcp_port

pytestmark = pytest.mark.integration

NOBODY = "65534"
SYSTEM_PYTHON = "/usr/bin/python3"  # nobody cannot enter /root, where the venv's interpreter lives
# What the attacker runs, as `nobody`, in the node's namespace: listen on the bridge's controller
# target and wait for the switch. Prints one line: "denied ..." if it cannot listen there,
# "hello VERSION" if the switch connected and spoke, "nothing" if no switch came.
ATTACKER = r"""
import os, socket, sys
target, wait = sys.argv[1], float(sys.argv[2])
kind, _, where = target.partition(":")
try:
    if kind == "tcp":
        host, _, port = where.rpartition(":")
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((host, int(port)))
    else:
        try:
            os.unlink(where)
        except FileNotFoundError:
            pass
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(where)
    server.listen(1)
except OSError as exc:
    print("denied", exc, flush=True)
    sys.exit(0)
server.settimeout(wait)
try:
    conn, _ = server.accept()
except socket.timeout:
    print("nothing", flush=True)
    sys.exit(0)
conn.settimeout(wait)
print("hello", conn.recv(8)[:1].hex(), flush=True)
"""


def _sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout


@dataclass
class Host:
    netns: str
    base: Path
    ovs: OvsInstance

    def run(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]


@pytest.fixture
def host() -> Iterator[Host]:
    netns = f"ofsock{secrets.token_hex(3)}"
    # Like /var/run/openvswitch: a root directory any user may enter, so only evio's own keeps them out.
    base = Path(tempfile.mkdtemp(prefix="ofsock-", dir="/tmp"))
    base.chmod(0o755)
    ovs = OvsInstance(base / "ovs", netns=netns)
    _sh("ip", "netns", "add", netns)
    try:
        _sh("ip", "netns", "exec", netns, "ip", "link", "set", "lo", "up")
        ovs.start()
        (base / "ovs").chmod(0o755)
        ovs.run_dir.chmod(0o755)
        yield Host(netns, base, ovs)
    finally:
        ovs.stop()
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=30, check=False)
        shutil.rmtree(base, ignore_errors=True)


def daemon_bridge(host: Host, name: str) -> OvsBridge:
    """The bridge as `evio run` makes it (evio.cli.run_cmd: the controller's port, then the bridges)."""
    spec = BridgeSpec(name, free_tcp_port(), "10.77.0.1/24", datapath_id=datapath_id_for("o"))
    return OvsBridge(spec, SubprocessRunner(prefix=["ip", "netns", "exec", host.netns]), "netdev",
                     str(host.ovs.db_socket))


@pytest.mark.xfail(strict=True, reason="M1: the controller is loopback TCP; any local user can listen there")
def test_a_local_user_cannot_receive_the_bridges_controller_connection(host: Host) -> None:
    name = f"{host.netns}o"
    asyncio.run(daemon_bridge(host, name).create())
    (target,) = host.ovs.vsctl("get-controller", name).split()
    # OVS backs off up to 8 s between attempts: 12 s is enough for it to come to whoever listens.
    attack = subprocess.run(
        host.run("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                 SYSTEM_PYTHON, "-c", ATTACKER, target, "12"),
        capture_output=True, text=True, timeout=60, check=False, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    print(f"controller target {target}: attacker as nobody -> {attack.stdout.strip()} {attack.stderr.strip()}")
    assert attack.returncode == 0, attack.stderr
    assert not attack.stdout.startswith("hello"), f"an unprivileged process took the bridge's controller connection ({target})"
