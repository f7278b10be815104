"""evio's packages, as an operator installs them: scripts/build-packages, then the wheel in a fresh
venv and the .deb in a clean Debian root.

The Debian root is bookworm minbase from debootstrap, kept as a tarball: docker/build-image's base
($EVIO_IMAGE_CACHE/bookworm-rootfs.tar) where that script ran, else ours under $EVIO_CACHE, made
once per machine from the apt mirror this machine uses (`docker/build-image --print-mirror`). Each
run unpacks a copy, installs the .deb with `apt-get install ./evio_*.deb` (which must pull
openvswitch-switch and python3 in), runs evio there, purges it and removes the copy. apt's lists and
downloaded packages are kept under $EVIO_CACHE/packages-test-apt, so a second run fetches only what
changed. Services stay down in the root: a policy-rc.d refuses every start (and logs the request).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("EVIO_CACHE", "/var/cache/evio"))
IMAGE_CACHE = Path(os.environ.get("EVIO_IMAGE_CACHE", "/var/cache/evio-image"))
SUITE = "bookworm"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
DEB_PYTHON = "/usr/bin/python3"  # the Python the .deb's venv is built for, and the one a node has
CHROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive",
              "HOME": "/root"}  # fmt: skip
# Refuses every service start and writes down what was asked (postinst must not start evio).
POLICY_RC_D = '#!/bin/sh\necho "$*" >> /var/log/policy-rc.d.log\nexit 101\n'


@dataclass(frozen=True)
class Packages:
    wheel: Path
    deb: Path
    seconds: float


@pytest.fixture(scope="module")
def packages() -> Packages:
    """scripts/build-packages, as a user runs it; its output is in the failure if it fails."""
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb not found: not a Debian machine")
    started = time.monotonic()
    env = {**os.environ, "PYTHON": os.environ.get("PYTHON", sys.executable)}
    done = subprocess.run([str(REPO / "scripts" / "build-packages")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1800, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]
    seconds = time.monotonic() - started
    dist = REPO / "dist"
    wheels = sorted(dist.glob(f"evio-{VERSION}-cp311-abi3-linux_*.whl"))
    debs = sorted(dist.glob(f"evio_{VERSION}_*.deb"))
    assert len(wheels) == 1 and len(debs) == 1, sorted(p.name for p in dist.iterdir())
    return Packages(wheels[0], debs[0], seconds)


def test_the_wheel_carries_evio_with_its_data_and_the_native_extension(packages: Packages) -> None:
    with zipfile.ZipFile(packages.wheel) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"evio-{VERSION}.dist-info/WHEEL").decode()
    assert "evio_native.abi3.so" in names
    assert "Root-Is-Purelib: false" in metadata
    # Every file of the evio package (data too) and nothing else of the tree: what setuptools builds.
    source = {
        path.relative_to(REPO).as_posix()
        for path in (REPO / "evio").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    assert {name for name in names if name.startswith("evio/")} == source


def test_the_wheel_installs_in_a_fresh_venv_with_the_native_data_path(packages: Packages, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # Without PYTHONPATH: a checkout on it (its evio.egg-info) would make pip take evio as installed.
    # CC=false: nothing of evio may need a compiler (a dependency's optional C speedups may fail and fall back).
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}, "CC": "false"}
    subprocess.run([DEB_PYTHON, "-m", "venv", str(venv)], env=env, check=True, timeout=120)
    installed = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(packages.wheel)],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-4000:]
    probe = (
        "import evio_native; from evio.tunnel.datapath.native import pick_implementation; "
        "print(evio_native.__file__); print(pick_implementation('auto'))"
    )
    done = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    where, datapath = done.stdout.split()
    assert Path(where).is_relative_to(venv)
    assert datapath == "native"
    version = subprocess.run([str(venv / "bin" / "evio"), "--version"], env=env, capture_output=True, text=True,
                             timeout=60, check=True)  # fmt: skip
    assert version.stdout.strip() == f"evio {VERSION}"


# --- the .deb in a clean Debian root ----------------------------------------------------------------


def _rootfs_tarball() -> Path:
    """A bookworm minbase root as a tarball: docker/build-image's, else ours, made here once."""
    for tarball in (IMAGE_CACHE / f"{SUITE}-rootfs.tar", CACHE / f"{SUITE}-rootfs.tar"):
        if tarball.is_file() and tarball.stat().st_size > 0:
            return tarball
    mirrors = subprocess.run([str(REPO / "docker" / "build-image"), "--print-mirror"], capture_output=True,
                             text=True, timeout=60, check=True).stdout.split("\n")  # fmt: skip
    mirror, security = mirrors[0].strip(), (mirrors[1].strip() if len(mirrors) > 1 else "")
    assert mirror, "no apt source for bookworm in /etc/apt/sources.list*; set EVIO_DEBIAN_MIRROR"
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / f"{SUITE}-rootfs.tar"
    rootfs = Path(tempfile.mkdtemp(prefix="evio-pkg-debootstrap-", dir=CACHE))
    try:
        done = subprocess.run(["debootstrap", "--variant=minbase", SUITE, str(rootfs), mirror], capture_output=True,
                              text=True, timeout=1800, check=False)  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        sources = [f"deb {mirror} {SUITE} main", f"deb {mirror} {SUITE}-updates main"]
        if security:
            sources.append(f"deb {security} {SUITE}-security main")
        (rootfs / "etc/apt/sources.list").write_text("\n".join(sources) + "\n")
        for leftover in [
            *(rootfs / "var/cache/apt/archives").glob("*.deb"),
            *(rootfs / "var/lib/apt/lists").glob("*_*"),
        ]:
            leftover.unlink()
        partial = tarball.with_name(f"{tarball.name}.{os.getpid()}.part")  # two runs at once: one wins whole
        subprocess.run(["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(partial), "."],
                       check=True, timeout=600)  # fmt: skip
        partial.replace(tarball)
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(rootfs)], check=False, timeout=600)
    return tarball


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root) + "/"
    with open("/proc/self/mountinfo") as mountinfo:
        points = [line.split()[4] for line in mountinfo]
    return [point for point in points if point.startswith(prefix) or point == str(root)]


@pytest.fixture
def debian_root() -> Iterator[Path]:
    """A copy of the clean root with /proc mounted, resolv.conf, a refusing policy-rc.d and apt's cache;
    afterwards apt's cache goes back to $EVIO_CACHE and the copy is unmounted and removed, whatever happened."""
    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap not found (scripts/bootstrap installs it)")
    tarball = _rootfs_tarball()
    root = Path(tempfile.mkdtemp(prefix="evio-pkg-root-", dir="/var/tmp"))
    apt_cache = CACHE / "packages-test-apt"
    try:
        # Our own tarball: device nodes, owners and modes as debootstrap made them.
        subprocess.run(["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-xf", str(tarball)], check=True,
                       timeout=600)  # fmt: skip
        shutil.copy2("/etc/resolv.conf", root / "etc/resolv.conf", follow_symlinks=True)
        policy = root / "usr/sbin/policy-rc.d"
        policy.write_text(POLICY_RC_D)
        policy.chmod(0o755)
        for part, inside in (("lists", "var/lib/apt/lists"), ("archives", "var/cache/apt/archives")):
            if (apt_cache / part).is_dir():
                shutil.copytree(apt_cache / part, root / inside, dirs_exist_ok=True)
        subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True, timeout=30)
        yield root
    finally:
        try:
            _save_apt_cache(root, apt_cache)
        except OSError:
            pass  # only the next run's speed depends on it
        for point in reversed(_mounts_under(root)):
            if subprocess.run(["umount", point], check=False, timeout=30).returncode != 0:
                subprocess.run(["umount", "-l", point], check=False, timeout=30)
        left = _mounts_under(root)
        # Never rm -rf through a mount (a bound /dev or /proc would be emptied on the host).
        assert not left, f"still mounted, {root} kept: {left}"
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False, timeout=600)


def _save_apt_cache(root: Path, apt_cache: Path) -> None:
    """apt's lists and the downloaded packages, for the next run (replaced whole: no stale lists)."""
    for part, inside in (("lists", "var/lib/apt/lists"), ("archives", "var/cache/apt/archives")):
        source = root / inside
        if not any(source.glob("*_*")):
            continue
        fresh = apt_cache / f".{part}.{os.getpid()}.new"
        shutil.rmtree(fresh, ignore_errors=True)
        shutil.copytree(source, fresh, ignore=shutil.ignore_patterns("lock", "partial"))
        shutil.rmtree(apt_cache / part, ignore_errors=True)
        fresh.replace(apt_cache / part)


def _chroot(root: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chroot", str(root), *argv], env=CHROOT_ENV, cwd="/", capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_deb_installs_in_a_clean_debian_root_and_evio_runs(packages: Packages, debian_root: Path) -> None:
    root = debian_root
    started = time.monotonic()
    assert not (root / "usr/bin/python3").exists(), "the clean root already has python3: the test proves less"
    shutil.copy2(packages.deb, root / "root" / packages.deb.name)
    _ok(_chroot(root, "apt-get", "update", "-qq", timeout=600))
    _ok(_chroot(root, "apt-get", "install", "-y", "-qq", "--no-install-recommends", f"/root/{packages.deb.name}",
                timeout=1200))  # fmt: skip
    _ok(_chroot(root, "apt-get", "autoclean", "-qq"))  # the kept archives: no superseded versions piling up
    installed = _ok(_chroot(root, "dpkg-query", "-W", "-f", "${Package} ${Status}\n", "evio", "openvswitch-switch"))
    assert installed.splitlines() == ["evio install ok installed", "openvswitch-switch install ok installed"]

    # evio runs from /usr/bin on the node's own python3, with its native data path and package data.
    assert _ok(_chroot(root, "evio", "--version")).strip() == f"evio {VERSION}"
    # What `evio run` loads (the node, its SDN controller, tunnels, OVSDB and netlink clients) imports
    # here, without a compiler or the lab's packages; the native data path is the one that runs.
    probe = (
        "import evio.node.node, evio.node.platform, evio.node.sdn, evio.sdn.ofapp, uvloop, pyroute2, ovs.db.idl, "
        "prometheus_client, os_ken.base.app_manager, os_ken.ofproto.ofproto_v1_3; "
        "from evio.tunnel.datapath.native import pick_implementation; print(pick_implementation('auto'))"
    )
    assert _ok(_chroot(root, "/opt/evio/venv/bin/python", "-c", probe)).strip() == "native"
    # The example as an operator would start from it: private (it holds passwords inline).
    _ok(_chroot(root, "install", "-m", "0600", "/usr/share/doc/evio/evio.example.jsonc", "/root/config.jsonc"))
    check = _ok(_chroot(root, "evio", "config", "check", "/root/config.jsonc"))
    assert check.startswith("ok: 1 overlay"), check
    assert "datapath" in _ok(_chroot(root, "evio", "config", "example"))
    # A bad token: one line saying why, a non-zero exit, and nothing written where join writes.
    join = _chroot(root, "evio", "join", "evio1.not-a.token")
    assert join.returncode != 0
    assert len(join.stderr.splitlines()) == 1 and join.stderr.startswith("evio join: "), join.stderr
    assert list((root / "etc/evio").iterdir()) == [] and not (root / "var/lib/evio").exists()

    # The node's layout, and no service started or enabled: the node has no config yet.
    assert (root / "etc/evio").stat().st_mode & 0o7777 == 0o750
    unit = (root / "lib/systemd/system/evio.service").read_text()
    assert "ExecStart=/usr/bin/evio run --config /etc/evio/config.json" in unit
    assert not (root / "etc/systemd/system/multi-user.target.wants/evio.service").exists()
    policy_log = root / "var/log/policy-rc.d.log"
    asked = policy_log.read_text() if policy_log.exists() else ""
    assert "evio" not in asked, asked

    # Purge leaves OVS and takes all of evio away, bytecode included.
    (root / "etc/evio/config.json").write_text("{}\n")  # as `evio join` would leave it
    _ok(_chroot(root, "apt-get", "purge", "-y", "-qq", "evio", timeout=300))
    for gone in ("opt/evio", "usr/bin/evio", "etc/evio", "lib/systemd/system/evio.service"):
        assert not (root / gone).exists() and not (root / gone).is_symlink(), gone
    assert (root / "usr/sbin/ovs-vswitchd").exists()
    print(f"\nbuild-packages {packages.seconds:.0f} s; install, run and purge in the root {time.monotonic() - started:.0f} s; "
          f"wheel {packages.wheel.stat().st_size // 1024} KiB, deb {packages.deb.stat().st_size // 1024} KiB; "
          f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
