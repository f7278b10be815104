"""The house holds: import contracts, lint and types (docs/design.md, "Packages").

Each tool's own exit status is the verdict; its output is shown on failure so
the broken contract, rule or type error is named.
"""

from __future__ import annotations

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
    ],
)
def test_tool_passes(argv: tuple[str, ...]) -> None:
    result = _run(*argv)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


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
