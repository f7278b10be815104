"""A deferred module runs its code once, and no thread sees it half made."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from evio import deferred_modules
from evio.testing.waiting import wait_until_blocking

# Counts its runs in builtins (which outlive the module) and holds still until the test releases it.
SLOW_MODULE = '''
import builtins
builtins._evio_deferred_runs = getattr(builtins, "_evio_deferred_runs", 0) + 1
_hooks = __import__("evio_deferred_hooks")
_hooks.started.set()
assert _hooks.release.wait(10)
answer = 42
'''


class WatchedLock:
    """The deferred modules' lock, telling when a thread finds it held by another and waits for it: the test
    then knows the second lookup is waiting, with no wait of its own to guess how long that takes."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant, as the real one: a module's code may run another's
        self.waited = threading.Event()

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            self.waited.set()
            self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


@pytest.fixture
def slow_module(tmp_path: Path) -> Iterator[str]:
    name = "evio_deferred_probe"
    (tmp_path / f"{name}.py").write_text(SLOW_MODULE)
    hooks = type(sys)("evio_deferred_hooks")
    hooks.started = threading.Event()  # type: ignore[attr-defined]
    hooks.release = threading.Event()  # type: ignore[attr-defined]
    sys.modules["evio_deferred_hooks"] = hooks
    sys.path.insert(0, str(tmp_path))
    try:
        deferred_modules.defer(name, {"preset": 1})
        yield name
    finally:
        sys.path.remove(str(tmp_path))
        deferred_modules.finder.deferred.pop(name, None)
        for module in (name, "evio_deferred_hooks"):
            sys.modules.pop(module, None)
        import builtins

        builtins.__dict__.pop("_evio_deferred_runs", None)


def test_a_lookup_while_another_thread_runs_the_code_waits_for_it_and_the_code_runs_once(
    slow_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins
    import importlib

    lock = WatchedLock()
    monkeypatch.setattr(deferred_modules, "_running_lock", lock)
    module = importlib.import_module(slow_module)
    hooks = sys.modules["evio_deferred_hooks"]
    assert module.preset == 1  # the preset answers without running the code
    assert not hooks.started.is_set()

    answers: dict[str, object] = {}

    def look_up(who: str) -> None:
        try:
            answers[who] = module.answer
        except AttributeError as exc:  # what a half-made module would answer
            answers[who] = exc

    first = threading.Thread(target=look_up, args=("first",))
    first.start()
    assert hooks.started.wait(10)  # the first lookup is inside the module's code now, holding the lock
    second = threading.Thread(target=look_up, args=("second",))
    second.start()
    # Either the second lookup finds the lock held and waits, or (a lock that does not hold it) it answers
    # at once, from a module half made: whichever comes first tells.
    wait_until_blocking(lambda: lock.waited.is_set() or "second" in answers, 10, what="the second lookup")
    assert "second" not in answers, "the second lookup did not wait for the module's code to finish"
    hooks.release.set()
    first.join(10)
    second.join(10)
    assert answers == {"first": 42, "second": 42}
    assert builtins._evio_deferred_runs == 1  # type: ignore[attr-defined]
    assert type(module) is type(sys)
