"""A short fuzz run of every target (benchmarks/fuzz.py runs 10^6 inputs each): nothing may raise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evio.testing.fuzz import TARGETS, fuzz_targets, run_target

INPUTS = 2000


async def test_no_target_raises_on_mutated_input() -> None:
    with fuzz_targets() as targets:
        assert set(targets) == set(TARGETS)
        for name in TARGETS:
            result = run_target(targets[name], INPUTS, seed=1)
            assert result.inputs == INPUTS
            # Seeds are valid and mutations mostly not: both outcomes must occur, or the target tests nothing.
            assert result.accepted > 0 and sum(result.rejected.values()) > 0, name
            assert not result.unexpected, (name, {k: result.examples[k][1] for k in result.unexpected})


def test_a_rust_panic_crossing_into_python_counts_as_unexpected() -> None:
    # pyo3 raises a panic as pyo3_runtime.PanicException, a BaseException: `except Exception` misses it.
    from evio.testing.fuzz import Target

    class PanicException(BaseException):
        pass

    def check(data: bytes) -> str | None:
        if data[:1] == b"p":
            raise PanicException("index out of bounds")
        return None

    result = run_target(Target("panics", [b"p", b"q"], check), 200, seed=1)
    assert result.unexpected and all(key.startswith("PanicException") for key in result.unexpected)
    assert result.accepted + sum(result.unexpected.values()) == 200


@pytest.mark.parametrize("name", ["offer"])
async def test_the_offer_that_raised_type_error_is_now_refused(name: str) -> None:
    # issue 9: "ciphers":[{}] made TunnelOffer.from_body raise TypeError.
    from evio.tunnel.errors import OfferError
    from evio.tunnel.path.offer_answer import TunnelOffer

    with fuzz_targets() as targets:
        body = targets[name].json_docs[0] | {"ciphers": [{}]}
    with pytest.raises(OfferError):
        TunnelOffer.from_body(body)


def test_a_config_path_too_long_to_look_up_is_a_problem_not_an_oserror(tmp_path: Path) -> None:
    # Found by benchmarks/fuzz.py: Path.exists() raises ENAMETOOLONG instead of answering False,
    # and ValueError for a NUL in the name.
    from evio.config.loader import ConfigError, loads_config

    for name, says in (("x" * 300, "too long"), ("a\x00b", "NUL")):
        for section in ({"node": {"state_dir": name}}, {"logging": {"destination": "file", "file": name + "/log"}}):
            text = json.dumps({"overlays": {"ov1": {"signal": {"jid": "n1@overlay.test", "password": "pw"}}}} | section)
            with pytest.raises(ConfigError) as raised:
                loads_config(text, tmp_path)
            assert any(says in p.reason for p in raised.value.problems), raised.value.problems


def test_an_input_that_spins_counts_as_a_hang_and_one_that_waits_for_a_core_does_not() -> None:
    # The limit is CPU time: an endless loop is caught after `hang_seconds` of it, while a check that only
    # waits (as a process does for a core on a loaded machine) is not called a hang until the wall backstop.
    import time

    from evio.testing.fuzz import Target

    def check(data: bytes) -> str | None:
        if data[:1] == b"s":
            while True:
                pass
        time.sleep(0.1)  # twice the CPU limit, spent waiting
        return None

    result = run_target(Target("spins", [b"s", b"w"], check, hang_seconds=0.05), 20, seed=1)
    assert result.unexpected and all(key.startswith("Hang") for key in result.unexpected)
    assert result.accepted > 0 and result.accepted + sum(result.unexpected.values()) == 20
