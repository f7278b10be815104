"""The house holds: import contracts, lint and types (docs/design.md, "Packages").

Each tool's own exit status is the verdict; its output is shown on failure so
the broken contract, rule or type error is named.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param((str(BIN / "lint-imports"),), id="import-contracts"),
        pytest.param((sys.executable, "-m", "ruff", "check", "evio", "tests", "benchmarks"), id="ruff"),
        pytest.param((sys.executable, "-m", "mypy"), id="mypy"),
        # The integration and lab tiers too, each on its own (both have a conftest module).
        pytest.param((sys.executable, "-m", "mypy", "tests/integration"), id="mypy-integration"),
        pytest.param((sys.executable, "-m", "mypy", "tests/lab"), id="mypy-lab"),
    ],
)
def test_tool_passes(argv: tuple[str, ...]) -> None:
    result = _run(*argv)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_the_native_crate_is_clippy_clean() -> None:
    # Warnings as errors, as for ruff: a new lint in a toolchain update shows up here, not in a review.
    cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
    if not os.path.exists(cargo):
        pytest.skip("no cargo on this machine: the native data path is not built")
    if subprocess.run([cargo, "clippy", "--version"], capture_output=True, check=False).returncode != 0:
        pytest.skip("cargo has no clippy here (a distribution's cargo without the clippy component)")
    cache = Path(os.environ.get("EVIO_CACHE", "/var/cache/evio"))
    # Where scripts/build-native builds, so the dependencies are checked once.
    target = (cache if os.access(cache, os.W_OK) else ROOT / "native") / "native-target"
    env = {**os.environ, "PYO3_PYTHON": sys.executable, "CARGO_TARGET_DIR": str(target)}
    result = subprocess.run(
        [cargo, "clippy", "--quiet", "--release", "--locked", "--manifest-path", "native/Cargo.toml", "--", "-D", "warnings"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


def test_import_contracts_can_fail(tmp_path: Path) -> None:
    # A contract that forbids what the code does must be reported broken: the checker really checks.
    config = tmp_path / "contracts.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "evio"\n\n'
        '[[tool.importlinter.contracts]]\nname = "node may not use the tunnel"\ntype = "forbidden"\n'
        'source_modules = ["evio.node"]\nforbidden_modules = ["evio.tunnel"]\n'
    )
    result = _run(str(BIN / "lint-imports"), "--config", str(config))
    assert result.returncode != 0
    assert "BROKEN" in result.stdout


def test_no_merge_conflict_markers() -> None:
    # A conflict resolved by hand once left its markers inside a docstring,
    # where no linter or type checker looks.
    listed = _run("git", "ls-files", "-z")
    if listed.returncode != 0:  # not a git checkout (a source tarball)
        pytest.skip("no git checkout")
    found = []
    for name in listed.stdout.split("\0"):
        path = ROOT / name
        if not name or path.suffix not in {".py", ".md", ".json", ".jsonc", ".toml", ".rs", ".yaml", ".yml", ""}:
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for number, line in enumerate(lines, 1):
            if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "=======":
                found.append(f"{name}:{number}: {line}")
    assert not found, "merge conflict markers:\n" + "\n".join(found)


def test_test_modules_have_unique_names_across_tiers() -> None:
    """The tiers have no __init__.py: two test files of one name stop `pytest tests` at collection."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
