"""The house holds: import contracts, lint and types (docs/design.md, "Packages").

Each tool's own exit status is the verdict; its output is shown on failure so
the broken contract, rule or type error is named.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
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


# -- the layout of tests/ (docs/development.md, "Tests") ---------------------------------------------

TESTS = ROOT / "tests"
# Tests of the whole project rather than of one package: they stay flat in their tier.
WHOLE_PROJECT = {
    "unit": {
        "test_house.py", "test_design_doc.py", "test_design_layers.py", "test_readme.py", "test_operations_doc.py",
        "test_docker_image.py", "test_packaging.py", "test_systemd_unit.py",
    },
    "integration": {"test_operations.py", "test_packages.py", "test_kubernetes_manifests.py"},
}  # fmt: skip


def _evio_packages() -> list[str]:
    """evio's packages as paths under evio/ ("sdn", "tunnel", and subpackages as "a/b")."""
    evio = ROOT / "evio"
    return sorted(str(init.parent.relative_to(evio)) for init in evio.rglob("*/__init__.py"))


def _package_it_tests(test_file: Path) -> str | None:
    """Where a flat test file belongs: the package its name starts with, else the one it imports most."""
    stem = test_file.stem.removeprefix("test_")
    tops = [p for p in _evio_packages() if "/" not in p and p != "testing"]
    for package in sorted(tops, key=len, reverse=True):
        if stem == package or stem.startswith(package + "_"):
            return package
    imported = re.findall(r"^\s*(?:from|import) evio\.(\w+)", test_file.read_text(encoding="utf-8"), re.MULTILINE)
    counts = Counter(name for name in imported if name in tops)
    return counts.most_common(1)[0][0] if counts else None


def _move_hint(test_file: Path) -> str:
    rel = test_file.relative_to(ROOT)
    package = _package_it_tests(test_file)
    where = f"{rel.parent}/{package}/" if package else f"{rel.parent}/<package>/ (the evio package it tests)"
    return (
        f"{rel} sits flat in {rel.parent}: `git mv {rel} {where}`; or, if it tests the whole project, "
        f"add it to WHOLE_PROJECT in tests/unit/test_house.py"
    )


@pytest.mark.parametrize("tier", ["unit", "integration"])
def test_tests_sit_under_the_directory_of_the_package_they_test(tier: str) -> None:
    """tests/<tier>/<package>/ mirrors evio/<package>/; flat are only the whole project's tests and
    those of evio's top-level modules (tests/unit/test_ids.py for evio/ids.py)."""
    packages = set(_evio_packages())
    top_modules = {f"test_{p.stem}.py" for p in (ROOT / "evio").glob("*.py")} if tier == "unit" else set()
    wrong = []
    for test_file in sorted((TESTS / tier).rglob("test_*.py")):
        folder = test_file.parent.relative_to(TESTS / tier)
        if str(folder) == ".":
            if test_file.name not in WHOLE_PROJECT[tier] | top_modules:
                wrong.append(_move_hint(test_file))
        elif str(folder) not in packages:
            wrong.append(f"{test_file.relative_to(ROOT)}: {tier}/{folder}/ mirrors no package (there is no evio/{folder}/)")
    if tier == "unit":
        for package in sorted(p for p in packages if "/" not in p):
            if not any((TESTS / "unit" / package).glob("test_*.py")):
                wrong.append(f"evio/{package}/ has no tests/unit/{package}/: make it and move the package's tests there")
    assert not wrong, "\n".join(wrong)


def test_the_layout_rule_names_the_file_to_move(tmp_path: Path) -> None:
    # The hint a helper adding a flat file sees: by its name first, by its imports otherwise.
    by_name = TESTS / "unit" / "test_tunnel_pmtu.py"  # not created: the name alone decides
    assert _package_it_tests(by_name) == "tunnel"
    assert "`git mv tests/unit/test_tunnel_pmtu.py tests/unit/tunnel/`" in _move_hint(by_name)
    by_imports = tmp_path / "test_relogin.py"
    by_imports.write_text("from evio.testing.fake_signal import Hub\nfrom evio.signal.client import SignalClient\n")
    assert _package_it_tests(by_imports) == "signal"


def test_each_tier_carries_its_own_marker_only() -> None:
    """`-m integration` and `-m lab` choose the tiers (docs/development.md, "Tests"): a lab test marked
    integration would run with the wrong tier, a unit test marked either would be skipped without root."""
    foreign = {"unit": ("integration", "lab"), "integration": ("lab",), "lab": ("integration",)}
    own = {"unit": "neither marker", "integration": "pytest.mark.integration", "lab": "pytest.mark.lab"}
    wrong = []
    for tier, markers in foreign.items():
        for test_file in sorted((TESTS / tier).rglob("*.py")):
            text = test_file.read_text(encoding="utf-8")
            for marker in markers:
                # As a module's pytestmark (alone or in a list) or a decorator.
                if re.search(rf"^\s*(pytestmark\s*=.*|@)pytest\.mark\.{marker}\b", text, re.MULTILINE):
                    wrong.append(f"{test_file.relative_to(ROOT)}: marked {marker}; tests/{tier} takes {own[tier]}")
    assert not wrong, "\n".join(wrong)


def test_paths_to_tests_named_in_the_project_exist() -> None:
    """Docs, code and scripts name test files by path; a moved or renamed test would leave them pointing nowhere."""
    listed = _run("git", "ls-files", "-z")
    if listed.returncode != 0:
        pytest.skip("no git checkout")
    missing = []
    for name in listed.stdout.split("\0"):
        path = ROOT / name
        if not name or not path.is_file() or path.suffix not in {".py", ".md", ".toml", ".jsonc", ""}:
            continue
        if path == Path(__file__).resolve():  # names made-up test files as examples
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for named in sorted(set(re.findall(r"\btests/(?:unit|integration|lab)(?:/\w+)*/\w+\.py\b", text))):
            if not (ROOT / named).exists():
                missing.append(f"{name} names {named}, which does not exist")
    assert not missing, "\n".join(missing)
