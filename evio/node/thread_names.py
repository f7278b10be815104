"""Name the daemon's threads for the kernel, so `top -H`, /proc and benchmarks can tell them apart.

Python keeps a thread's name to itself: every thread of the daemon shows as
`python` in /proc/PID/task/*/comm. Where its CPU and wake-ups go (os-ken's
receive, send and event threads, the controller's ticker, the side loop,
executor workers) is then guesswork. `name_os_threads` writes each live
thread's name into its comm (15 bytes at most): its own name when it was given
one, else its target's (`Thread-3 (_recv_loop)` becomes `recv_loop`). The
main thread keeps the process name. Threads started later are named at the
next call; the daemon calls it once started and when a switch connects.
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

log = logging.getLogger(__name__)

COMM_LIMIT = 15  # TASK_COMM_LEN less its NUL
_DEFAULT_NAME = re.compile(r"^Thread-\d+(?: \((?P<target>.+)\))?\Z")


def os_thread_name(name: str) -> str:
    """The comm for a Python thread named `name`."""
    default = _DEFAULT_NAME.match(name)
    if default is not None:
        name = (default.group("target") or "thread").strip("_") or "thread"
    return name.encode()[:COMM_LIMIT].decode(errors="ignore")


def name_os_threads(task_dir: Path = Path("/proc/self/task")) -> int:
    """Name every live thread but the main one after its Python name; how many were named."""
    named = 0
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is main or thread.native_id is None:
            continue
        try:
            (task_dir / str(thread.native_id) / "comm").write_text(os_thread_name(thread.name))
        except OSError as exc:  # it ended meanwhile, or not Linux: names are a convenience
            log.debug("thread %s not named: %s", thread.name, exc)
            continue
        named += 1
    return named
