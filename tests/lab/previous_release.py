"""The previous release of evio, built from git history for the rolling-upgrade test (test_upgrade.py).

PREVIOUS_RELEASE is the commit of the release before this one: the release nodes of this one must
interoperate with in one overlay. At each release, once it is tagged, move it here: set
PREVIOUS_RELEASE to the commit (full hash) of the release just made and PREVIOUS_VERSION to its
version, in the same commit that bumps `version` in pyproject.toml and evio/__init__.py for the
next one. Nothing else names it. EVIO_PREVIOUS_RELEASE=<commit> runs the test against another commit
instead, once (e.g. 04fecaa, the commit before reverse copies: its nodes count this release's
BROADCAST_REVERSE as malformed, and the test says so).

`build()` gives the argv that runs that release's `evio` CLI: its tree from `git archive`, a
virtualenv of its own with it installed (`pip install`, its own declared dependencies) and, where
cargo is, its native data path built by its own scripts/build-native, as a deployment of it would
run. All cached under /var/cache/evio/previous-release/<commit> (EVIO_CACHE), built once per commit
(a few minutes: pip and cargo), behind a lock so that parallel runs build it once.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PREVIOUS_RELEASE = "26a4fda37d28576772383159d74d370f29f51561"
PREVIOUS_VERSION = "0.1.0"

REPO_ROOT = Path(__file__).resolve().parents[2]
_READY = "ready"  # written last: a directory without it is half built and is built again


class PreviousReleaseMissing(RuntimeError):
    """The clone lacks the previous release's commit (a shallow clone, or history rewritten)."""


@dataclass(frozen=True)
class PreviousRelease:
    commit: str
    version: str
    directory: Path
    native: bool  # its native data path was built (cargo was there); else its daemons run the Python one
    build_seconds: float  # 0 when it came from the cache

    @property
    def python(self) -> Path:
        return self.directory / "venv" / "bin" / "python"

    @property
    def evio(self) -> tuple[str, ...]:
        """The argv that runs its CLI. -I: neither PYTHONPATH (a test run's, naming this tree) nor the
        working directory may put this release's modules in front of its own."""
        return (str(self.python), "-I", "-m", "evio")


def cache_root() -> Path:
    return Path(os.environ.get("EVIO_CACHE", "/var/cache/evio")) / "previous-release"


def wanted(repo: Path = REPO_ROOT) -> tuple[str, str]:
    """The commit to run beside this tree and its version: PREVIOUS_RELEASE, or EVIO_PREVIOUS_RELEASE's."""
    override = os.environ.get("EVIO_PREVIOUS_RELEASE")
    if not override:
        return PREVIOUS_RELEASE, PREVIOUS_VERSION
    check_commit(override, repo)
    commit = _git(repo, "rev-parse", f"{override}^{{commit}}").strip()
    found = re.search(r'__version__ = "([^"]+)"', _git(repo, "show", f"{commit}:evio/__init__.py"))
    return commit, found.group(1) if found else "?"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def check_commit(commit: str = PREVIOUS_RELEASE, repo: Path = REPO_ROOT) -> None:
    """PreviousReleaseMissing, with what to do, unless `commit` is in the clone's history."""
    found = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"],
                           capture_output=True, text=True, check=False)
    if found.returncode != 0:
        shallow = subprocess.run(["git", "-C", str(repo), "rev-parse", "--is-shallow-repository"],
                                 capture_output=True, text=True, check=False).stdout.strip() == "true"
        hint = "this is a shallow clone: `git fetch --unshallow`" if shallow else "fetch the full history"
        raise PreviousReleaseMissing(
            f"the previous release's commit {commit} (tests/lab/previous_release.py, or EVIO_PREVIOUS_RELEASE) "
            f"is not in the git history of {repo}; {hint} (CI needs a full clone: fetch-depth 0)")


def build(commit: str | None = None, version: str | None = None, repo: Path = REPO_ROOT) -> PreviousRelease:
    """The previous release (by default `wanted()`), installed in its own virtualenv (built now unless cached)."""
    if commit is None or version is None:
        commit, version = wanted(repo)
    check_commit(commit, repo)
    directory = cache_root() / commit
    directory.parent.mkdir(parents=True, exist_ok=True)
    with (directory.parent / f"{commit}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = time.monotonic()
        built = (directory / _READY).exists()
        if not built:
            _build(commit, repo, directory)
        native = (directory / "native").exists()
    release = PreviousRelease(commit, version, directory, native, 0.0 if built else time.monotonic() - started)
    _check_version(release)
    return release


def _build(commit: str, repo: Path, directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    source = directory / "src"
    source.mkdir(parents=True)
    # git archive | tar -x: the tree as committed (tarfile's extraction filters need Python 3.11.4, Debian 12 has 3.11.2).
    with tempfile.TemporaryFile() as archive:
        subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit], stdout=archive, check=True)
        archive.seek(0)
        subprocess.run(["tar", "-x", "-C", str(source)], stdin=archive, check=True)
    venv = directory / "venv"
    # The interpreter this evio's virtualenv was made from: the release's requires-python is met by it.
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", str(venv)], "make its virtualenv")
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(source)], "pip install it")
    cargo = shutil.which("cargo") or (str(Path.home() / ".cargo/bin/cargo") if (Path.home() / ".cargo/bin/cargo").exists() else None)
    if cargo and (source / "scripts" / "build-native").exists():
        # Its own script and crate, into its own virtualenv; a cargo target directory of its own, so the
        # build of this tree (cached under /var/cache/evio/native-target) is not thrown away by it.
        env = {**os.environ, "PYTHON": python, "CARGO": cargo, "EVIO_CACHE": str(directory)}
        _run([str(source / "scripts" / "build-native")], "build its native data path", cwd=source, env=env)
        shutil.rmtree(directory / "native-target", ignore_errors=True)  # 1 GB of objects, never built again
        (directory / "native").write_text("built\n")
    shutil.rmtree(source)
    (directory / _READY).write_text(f"{commit}\n")


def _run(argv: list[str], what: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"previous release: could not {what} ({' '.join(argv)} exited {done.returncode}):\n"
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")


def _check_version(release: PreviousRelease) -> None:
    """That its virtualenv runs its own evio, the version it says, and not this tree's."""
    done = subprocess.run([*release.evio, "--version"], capture_output=True, text=True, check=False,
                          cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    if done.stdout.strip() != f"evio {release.version}":
        raise RuntimeError(f"previous release at {release.directory}: `evio --version` said "
                           f"{(done.stdout + done.stderr).strip()!r}, expected 'evio {release.version}'")
