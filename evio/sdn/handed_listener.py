"""A listening Unix socket made before os-ken, that os-ken's OpenFlow server serves.

os-ken 4.2 cannot be handed a listener: its OpenFlow server binds its own
sockets. The daemon binds its controller socket before any bridge exists
(evio.sdn.controller_socket); `HandedListener.openflow_server` is what
os-ken's ofp_handler constructs in place of its own server (evio.sdn.ofapp
swaps it in), and serves that socket: every accepted connection is checked
(`admit`) before os-ken sees it.
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from evio.sdn.osken_imports import trim_os_ken

trim_os_ken()  # before os-ken is first imported: OpenFlow 1.3 only (evio.sdn.osken_imports)

from os_ken.base import app_manager  # noqa: E402
from os_ken.controller import controller as osken_controller  # noqa: E402

log = logging.getLogger(__name__)

_TRANSIENT_ACCEPT_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED,
                                      errno.EINTR})


class _UnixSwitchSocket(socket.socket):
    """An accepted Unix socket that ignores TCP-level options: os-ken's Datapath sets TCP_NODELAY on
    every connection, which fails (EOPNOTSUPP) on AF_UNIX and would end the connection at once."""

    def setsockopt(self, level: int, *args: Any) -> None:
        if level == socket.IPPROTO_TCP:
            return
        super().setsockopt(level, *args)


class HandedListener:
    """A listening Unix socket made before any bridge (evio.sdn.controller_socket), served by os-ken.

    `admit(conn)` is asked at every accept (the peer's credentials) before os-ken sees the
    connection; `on_serving()` is called once the accept loop runs.
    """

    def __init__(
        self, sock: socket.socket, admit: Callable[[socket.socket], bool], on_serving: Callable[[], None] | None = None
    ) -> None:
        self.sock = sock
        self.admit = admit
        self.on_serving = on_serving
        self.address = str(sock.getsockname())

    def openflow_server(self) -> Any:
        """What os-ken's ofp_handler constructs and spawns: its OpenFlow server, on our listener."""
        return _HandedOpenFlowServer(self)

    def serve(self) -> None:
        if self.on_serving is not None:
            self.on_serving()
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError as exc:
                if exc.errno not in _TRANSIENT_ACCEPT_ERRORS:
                    raise
                log.warning("controller socket: accept failed (%s); trying again", exc)
                time.sleep(0.1)  # out of descriptors or memory: give what holds them a moment
                continue
            try:
                admitted = self.admit(conn)
            except Exception:  # a check that cannot decide refuses, and the loop goes on
                log.exception("controller connection check failed; refused")
                admitted = False
            if not admitted:
                conn.close()
                continue
            switch = _UnixSwitchSocket(fileno=conn.detach())
            app_manager.hub.spawn(osken_controller.datapath_connection_factory, switch, self.address)


class _HandedOpenFlowServer(osken_controller.OpenFlowController):
    def __init__(self, listener: HandedListener) -> None:
        # Not os-ken's __init__: it picks TCP ports, and with none configured serves 6633 too.
        self._clients: dict[Any, Any] = {}
        self.ofp_tcp_listen_port = None
        self.ofp_ssl_listen_port = None
        self._listener = listener

    def server_loop(self, ofp_tcp_listen_port: Any, ofp_ssl_listen_port: Any) -> None:
        self._listener.serve()
