"""The evio node image (docker/) in lab tests: build it once, run one node's daemon in it.

`build_image` runs docker/build-image, which caches the Debian base (debootstrap) and podman's
layers under EVIO_IMAGE_CACHE (/var/cache/evio-image), so only the first build on a machine is slow.
`NodeContainer` runs the image in a lab node's namespace with that node's config, rewritten for the
container's volumes, and always removes the container on the way out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from evio.lab.netns import NETNS_DIR

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "docker" / "build-image"
IMAGE_CACHE = Path(os.environ.get("EVIO_IMAGE_CACHE", "/var/cache/evio-image"))
BUILD_TIMEOUT = 1800.0  # a cold build (debootstrap, apt, pip) takes minutes on 2 shared cores

# Where the image expects things (docker/Dockerfile).
CONFIG_DIR = "/etc/evio"
STATE_DIR = "/var/lib/evio"
CA_NAME = "ca.crt"
TEST_CONTAINER_PREFIX = "evio-test-"


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    seconds: float  # how long docker/build-image took in this run
    env: dict[str, str]  # the environment podman needs here (CONTAINERS_CONF from build-image)

    def podman(self, *args: str, timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout,
                              check=False)  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def remove_exited_test_containers(self) -> None:
        """Test containers left by a run that was killed (a later lab `down` ended their processes)."""
        names = self.podman("ps", "--all", "--filter", f"name=^{TEST_CONTAINER_PREFIX}", "--filter", "status=exited",
                            "--format", "{{.Names}}").stdout.split()  # fmt: skip
        if names:
            self.podman("rm", "--force", "--volumes", *names, check=False)


def build_image() -> BuiltImage:
    """docker/build-image, as a user would run it; its output is in the AssertionError if it fails."""
    env = {**os.environ, "EVIO_IMAGE_CACHE": str(IMAGE_CACHE)}
    began = time.monotonic()
    done = subprocess.run([str(BUILD_SCRIPT)], env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT,
                          check=False)  # fmt: skip
    seconds = time.monotonic() - began
    if done.returncode != 0:
        raise AssertionError(f"docker/build-image failed ({done.returncode}):\n{done.stderr[-6000:]}")
    tag = subprocess.run([str(BUILD_SCRIPT), "--print-tag"], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()  # fmt: skip
    return BuiltImage(tag, seconds, {**env, "CONTAINERS_CONF": str(IMAGE_CACHE / "containers.conf")})


def container_config(document: dict[str, Any]) -> dict[str, Any]:
    """A lab node's config as the container sees it: state and CA in the image's volumes, logs on stderr."""
    config = json.loads(json.dumps(document))
    config["node"]["state_dir"] = STATE_DIR
    config["logging"] = {"level": "info", "destination": "stderr"}
    for overlay in config["overlays"].values():
        if "ca_file" in overlay["signal"]:
            overlay["signal"]["ca_file"] = f"{CONFIG_DIR}/{CA_NAME}"
    return config


def write_config_dir(directory: Path, node_config: Path, ca_file: Path) -> Path:
    """The container's /etc/evio: config.json (from the node's lab config) and the lab CA."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = directory / "config.json"
    config.write_text(json.dumps(container_config(json.loads(node_config.read_text())), indent=2) + "\n")
    config.chmod(0o600)
    shutil.copyfile(ca_file, directory / CA_NAME)
    return directory


class NodeContainer:
    """`podman run` of the node image in network namespace `netns`; removed on exit, whatever happened.

    The flags are docs/reference.md's: host networking (here: the node's namespace), NET_ADMIN and NET_RAW,
    /dev/net/tun, config and state as volumes. Open vSwitch runs inside the container, or, given
    `host_ovs` (an OVS run directory: db.sock, pidfiles), is the host's, mounted at the same path (OVS_RUNDIR;
    deployed, /run/openvswitch at /run/openvswitch) with the host's PID namespace (evio checks that the pidfile's ovs-vswitchd runs) and SYS_PTRACE
    (evio raises the receive buffers of vswitchd's sockets, which it reaches through /proc/PID).
    """

    def __init__(self, image: BuiltImage, name: str, netns: str, config_dir: Path, state_dir: Path,
                 host_ovs: Path | None = None) -> None:  # fmt: skip
        self.image = image
        self.name = name
        self.netns = netns
        self.config_dir = config_dir
        self.state_dir = state_dir
        self.host_ovs = host_ovs

    def run_argv(self) -> list[str]:
        return [
            "run", "--detach", "--name", self.name, "--pull", "never",
            "--network", f"ns:{NETNS_DIR / self.netns}",
            "--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW", "--device", "/dev/net/tun",
            "--volume", f"{self.config_dir}:{CONFIG_DIR}:ro", "--volume", f"{self.state_dir}:{STATE_DIR}",
            *(["--env", "EVIO_OVS=container"] if self.host_ovs is None else
              # At the same path as outside: the bridge's controller is a Unix socket in the OVS run directory,
              # and ovs-vswitchd (outside) opens the path the daemon (inside) names.
              ["--env", "EVIO_OVS=host", "--env", f"OVS_RUNDIR={self.host_ovs}",
               "--volume", f"{self.host_ovs}:{self.host_ovs}", "--pid", "host", "--cap-add", "SYS_PTRACE"]),
            # No systemd here to schedule the check: the test runs it with `podman healthcheck run`.
            "--health-interval", "disable",
            self.image.tag,
        ]  # fmt: skip

    def __enter__(self) -> NodeContainer:
        self.remove()  # a container of that name left by a killed run
        try:
            self.image.podman(*self.run_argv())
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.remove()

    def state(self) -> dict[str, Any]:
        """podman's State of the container ({} once it is gone)."""
        done = self.image.podman("inspect", "--type", "container", "--format", "{{json .State}}", self.name, check=False)
        return json.loads(done.stdout) if done.returncode == 0 else {}

    def running(self) -> bool:
        return bool(self.state().get("Running"))

    def logs(self, lines: int = 60) -> str:
        done = self.image.podman("logs", "--tail", str(lines), self.name, check=False)
        return (done.stdout + done.stderr).strip() or "(no output)"

    def exec(self, *argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        return self.image.podman("exec", self.name, *argv, timeout=timeout, check=False)

    def healthcheck(self) -> subprocess.CompletedProcess[str]:
        """The image's HEALTHCHECK, run once now (exit 0: healthy)."""
        return self.image.podman("healthcheck", "run", self.name, check=False, timeout=30.0)

    def stop(self, grace: float) -> int:
        """SIGTERM (the daemon's clean shutdown), SIGKILL after `grace`; the daemon's exit status."""
        self.image.podman("stop", "--time", str(int(grace)), self.name, timeout=grace + 30.0)
        return int(self.state().get("ExitCode", -1))

    def remove(self) -> None:
        self.image.podman("rm", "--force", "--volumes", "--time", "5", self.name, check=False, timeout=60.0)
