"""The namespace benchmarks parse their arguments before they need root: an import or an option broken by a change
must fail here, not in the first root run on a quiet machine (where a run costs a held lock and minutes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
SCRIPTS = ["peers_bench.py", "rtt_floor.py"]


def _run(script: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *argv], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_benchmark_prints_its_options(script: str) -> None:
    done = _run(script, "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:"), done.stdout[:500]


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_unknown_option_is_refused(script: str) -> None:
    done = _run(script, "--no-such-option")
    assert done.returncode == 2
    assert "unrecognized arguments: --no-such-option" in done.stderr


@pytest.mark.parametrize("argv", [["--rows", "forwarder,wireguard"], ["--rounds", "0"], ["--interval", "0"]])
def test_rtt_floor_refuses_bad_values_before_it_needs_root(argv: list[str]) -> None:
    done = _run("rtt_floor.py", *argv)
    assert done.returncode == 2
    assert "error:" in done.stderr


def test_rtt_floor_rings_end_prints_its_usage_without_its_arguments() -> None:
    # rtt_floor.py starts it in each namespace; its imports and usage must hold without root.
    done = _run("rtt_floor_rings.py")
    assert done.returncode == 2
    assert "rtt_floor_rings.py TAP LOCAL_ADDR:PORT REMOTE_ADDR:PORT KEY_HEX" in done.stderr
