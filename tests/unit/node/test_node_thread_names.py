"""Threads named for the kernel (evio.node.thread_names)."""

from __future__ import annotations

import threading
from pathlib import Path

from evio.node.thread_names import name_os_threads, os_thread_name


def test_a_thread_is_named_after_its_own_name_or_else_its_target() -> None:
    assert os_thread_name("evio-of-tick") == "evio-of-tick"
    assert os_thread_name("Thread-3 (_recv_loop)") == "recv_loop"
    assert os_thread_name("Thread-12") == "thread"
    assert os_thread_name("a-very-long-thread-name") == "a-very-long-thr"  # the kernel keeps 15 bytes


def test_named_into_each_threads_comm_but_the_main_threads(tmp_path: Path) -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, name="evio-side")
    worker.start()
    try:
        assert worker.native_id is not None
        for thread in threading.enumerate():
            (tmp_path / str(thread.native_id)).mkdir()
        assert name_os_threads(tmp_path) == threading.active_count() - 1
        assert (tmp_path / str(worker.native_id) / "comm").read_text() == "evio-side"
        assert not (tmp_path / str(threading.main_thread().native_id) / "comm").exists()
    finally:
        stop.set()
        worker.join()


def test_the_kernel_sees_the_name() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, name="evio-named")
    worker.start()
    try:
        name_os_threads()
        assert Path(f"/proc/self/task/{worker.native_id}/comm").read_text().strip() == "evio-named"
    finally:
        stop.set()
        worker.join()


def test_a_thread_that_ended_is_skipped(tmp_path: Path) -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, name="evio-gone")
    worker.start()
    try:
        assert name_os_threads(tmp_path) == 0  # no task directories: nothing named, nothing raised
    finally:
        stop.set()
        worker.join()
