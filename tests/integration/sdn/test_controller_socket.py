"""Issue 21 M1: no local process can stand in for the node's OpenFlow controller.

1. A bridge is made as the daemon makes it, on a private OVS in a namespace, with no controller
   behind it (the daemon has crashed, or has not bound its listener yet). A process of another user
   (`nobody`) then tries to listen where the bridge connects; it must not receive the connection.
2. The daemon's controller (`OskenController`, in a process of its own as in `evio run`) serves a
   bridge that an older release left pointing at loopback TCP: the bridge ends up with the Unix
   socket alone and connects; `nobody` cannot even connect to it. The connect time is printed.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from evio.bridge import BridgeSpec, OvsBridge, OvsInstance, SubprocessRunner, datapath_id_for
from evio.sdn.controller_socket import OvsOwner, bind_controller_socket, controller_socket_path

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]

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
        os.makedirs(os.path.dirname(where), exist_ok=True)
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


def controller_socket(host: Host) -> Path:
    return controller_socket_path(host.ovs.run_dir, host.base / "state")


def daemon_bridge(host: Host, name: str) -> OvsBridge:
    """The bridge as `evio run` makes it (evio.cli.run_cmd: the controller's socket, then the bridges)."""
    spec = BridgeSpec(name, 0, "10.77.0.1/24", datapath_id=datapath_id_for("o"),
                      controller_socket=str(controller_socket(host)))
    return OvsBridge(spec, SubprocessRunner(prefix=["ip", "netns", "exec", host.netns]), "netdev",
                     str(host.ovs.db_socket))


def as_nobody(host: Host, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        host.run("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", SYSTEM_PYTHON, "-c", script,
                 *args),
        capture_output=True, text=True, timeout=60, check=False, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip


@pytest.mark.parametrize("daemon", ["crashed", "not-yet-started"])
def test_a_local_user_cannot_receive_the_bridges_controller_connection(host: Host, daemon: str) -> None:
    if daemon == "crashed":  # it had made its socket, then died: the file stays, nobody listens
        bind_controller_socket(controller_socket(host), OvsOwner.of_run_dir(host.ovs.run_dir)).close()
    name = f"{host.netns}o"
    asyncio.run(daemon_bridge(host, name).create())
    (target,) = host.ovs.vsctl("get-controller", name).split()
    # OVS backs off up to 8 s between attempts: 12 s is enough for it to come to whoever listens.
    attack = as_nobody(host, ATTACKER, target, "12")
    print(f"controller target {target}: attacker as nobody -> {attack.stdout.strip()} {attack.stderr.strip()}")
    assert attack.returncode == 0, attack.stderr
    assert not attack.stdout.startswith("hello"), f"an unprivileged process took the bridge's controller connection ({target})"


# The daemon's controller and bridge, as `evio run` starts them (Node.start: the controller, then the
# bridges), in a process of its own (os-ken is once per process). Prints the seconds from the bridge's
# creation to the controller's SwitchConnected.
CONTROLLER = r"""
import asyncio, sys, time
from pathlib import Path
from evio.bridge import BridgeSpec, OvsBridge, SubprocessRunner, datapath_id_for
from evio.node.sdn import OskenController
from evio.sdn.boundary import SwitchConnected

name, db_socket, run_dir, socket_path = sys.argv[1:5]

async def main():
    sdn = OskenController(Path(socket_path), Path(run_dir))
    await sdn.start()
    sdn.commands.attach("o", datapath_id_for("o"), 1)
    spec = BridgeSpec(name, 0, "10.77.0.1/24", datapath_id=datapath_id_for("o"), controller_socket=socket_path)
    started = time.monotonic()
    await OvsBridge(spec, SubprocessRunner(), "netdev", db_socket).create()
    while not isinstance(await asyncio.wait_for(sdn.next_event(), 30), SwitchConnected):
        pass
    print(f"connected {time.monotonic() - started:.3f}", flush=True)
    await asyncio.sleep(3600)  # serve until the test ends it

asyncio.run(main())
"""
CONNECT = r"""
import socket, sys
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(sys.argv[1])
    print("connected", flush=True)
except OSError as exc:
    print("denied", exc, flush=True)
"""


def test_the_daemons_controller_serves_its_bridge_over_the_private_socket_alone(host: Host) -> None:
    name = f"{host.netns}o"
    socket_path = controller_socket(host)
    # A bridge an older release made: its controller on loopback TCP.
    host.ovs.vsctl("add-br", name, "--", "set", "Bridge", name, "datapath_type=netdev", "fail_mode=secure",
                   "--", "set-controller", name, "tcp:127.0.0.1:16653")
    env = {**os.environ, "PYTHONPATH": str(REPO), **{k: v for k, v in host.ovs.env.items() if k.startswith("OVS_")}}
    controller = subprocess.Popen(
        host.run(sys.executable, "-c", CONTROLLER, name, str(host.ovs.db_socket), str(host.ovs.run_dir),
                 str(socket_path)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
    )  # fmt: skip
    try:
        assert controller.stdout is not None and controller.stderr is not None
        line = controller.stdout.readline()
        if not line.startswith("connected"):
            controller.kill()
            pytest.fail(f"no SwitchConnected: {line!r} {controller.stderr.read()}")
        print(f"bridge created -> switch connected over {socket_path}: {float(line.split()[1]) * 1000:.0f} ms")
        assert host.ovs.vsctl("get-controller", name).split() == [f"unix:{socket_path}"]
        assert oct(socket_path.parent.stat().st_mode & 0o777) == "0o700"
        attempt = as_nobody(host, CONNECT, str(socket_path))
        print(f"nobody connecting to {socket_path}: {attempt.stdout.strip()}")
        assert attempt.stdout.startswith("denied") and "Permission denied" in attempt.stdout
    finally:
        controller.kill()
        controller.wait(timeout=10)
        host.ovs.vsctl("--if-exists", "del-br", name)
