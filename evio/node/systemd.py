"""The sd_notify protocol (systemd.service Type=notify), written out: one datagram per state change.

    READY=1        bridges exist and every signaling account is logged in
    RELOADING=1    a SIGHUP reload began (READY=1 again when it is done)
    STOPPING=1     the teardown began
    STATUS=...     one line: links up per overlay, signaling state
    WATCHDOG=1     from the event loop, every half of WATCHDOG_USEC, so a stuck loop is noticed

`NOTIFY_SOCKET` names an AF_UNIX datagram socket; a leading '@' means the
abstract namespace (a NUL byte in the address). Without it (not started by
systemd) every call is a no-op. Sending never raises into the daemon: a
refused datagram is logged once.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

log = logging.getLogger(__name__)


def notify_address(value: str) -> str | bytes | None:
    """The socket address NOTIFY_SOCKET names (None if it names none we can use)."""
    if value.startswith("@") and len(value) > 1:
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None


def watchdog_interval(env: Mapping[str, str], pid: int) -> float | None:
    """Seconds between WATCHDOG=1 pings (half the timeout), or None if systemd expects none from this process."""
    usec = env.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    owner = env.get("WATCHDOG_PID", "")
    if owner and (not owner.isdigit() or int(owner) != pid):
        return None
    return int(usec) / 1e6 / 2


class Notifier:
    def __init__(self, address: str | bytes | None, watchdog: float | None = None) -> None:
        self._address = address
        self.watchdog_interval = watchdog if address is not None else None
        self._socket: socket.socket | None = None
        self._failed_logged = False
        self._last_status: str | None = None
        self.sent: list[str] = []  # the last messages, for status and tests (bounded)

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if env is None else env
        address = notify_address(env.get("NOTIFY_SOCKET", ""))
        return cls(address, watchdog_interval(env, os.getpid()))

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, *assignments: str) -> bool:
        """Send one datagram of newline-separated VAR=value lines; True if it went."""
        if self._address is None:
            return False
        message = "\n".join(assignments)
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._socket.sendto(message.encode(), self._address)
        except OSError as exc:
            if not self._failed_logged:
                self._failed_logged = True
                log.warning("systemd notification not delivered (%s): %s", message.replace("\n", " "), exc)
            return False
        self.sent = [*self.sent[-15:], message]
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def reloading(self) -> bool:
        # MONOTONIC_USEC lets systemd >= 253 (Type=notify-reload) match this reload; older ones ignore it.
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def status(self, text: str) -> bool:
        """STATUS=text, only when it changed."""
        text = text.replace("\n", " ")
        if text == self._last_status:
            return False
        self._last_status = text
        return self.notify(f"STATUS={text}")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
