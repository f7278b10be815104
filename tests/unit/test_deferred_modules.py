"""A deferred module runs its code once, and no thread sees it half made; versions read as importlib.metadata reads them."""

from __future__ import annotations

import importlib.metadata
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from evio import deferred_modules
from evio.deferred_modules import InstalledVersionInfo, installed_version, version_info
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


# --- versions, without importlib.metadata ------------------------------------------------------


@pytest.mark.parametrize("distribution", ["slixmpp", "os-ken", "os_ken", "cryptography", "pyOpenSSL", "aioice"])
def test_the_version_is_importlib_metadatas(distribution: str) -> None:
    assert installed_version(distribution) == importlib.metadata.version(distribution)


def test_a_distribution_without_a_dist_info_directory_is_asked_of_importlib_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    egg = tmp_path / "some_lib.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: some-lib\nVersion: 7.1\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert installed_version("some-lib") == "7.1"
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        installed_version("no-such-lib")


def test_the_first_dist_info_on_the_path_wins_as_for_an_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for where, version in (("a", "2.0.1"), ("b", "1.0")):
        (tmp_path / where / f"Some.Lib-{version}.dist-info").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(tmp_path / "a"), str(tmp_path / "b")])
    assert installed_version("some-lib") == "2.0.1"
    assert str(InstalledVersionInfo("some_lib")) == "2.0.1"


def test_version_info_is_slixmpps() -> None:
    assert version_info("1.17.0") == (1, 17, 0)
    assert version_info("1.17") == (0, 0, 0)
    assert version_info("1.17.0rc1") == (0, 0, 0)
    assert version_info("1.17.0.post1") == (1, 17, 0)


def test_what_else_pbrs_version_info_offers_is_pbrs() -> None:
    assert InstalledVersionInfo("os-ken").release_string() == importlib.metadata.version("os-ken")


def test_an_egg_first_on_the_path_is_asked_of_importlib_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    egg = tmp_path / "a" / "some_lib-3.0-py3.11.egg-info"
    egg.mkdir(parents=True)
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: some-lib\nVersion: 3.0\n")
    (tmp_path / "b" / "some_lib-1.0.dist-info").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "a"), str(tmp_path / "b")])
    assert installed_version("some-lib") == "3.0"
