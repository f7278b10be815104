"""Where Open vSwitch keeps its sockets and pidfiles, found as its own tools find them.

ovs-vsctl and ovs-appctl look in `OVS_RUNDIR` when it is set (the lab sets it
per node, evio.bridge.ovs_instance), else in /var/run/openvswitch.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_OVS_RUN_DIR = Path("/var/run/openvswitch")
DB_SOCKET = "db.sock"
VSWITCHD_PIDFILE = "ovs-vswitchd.pid"


def ovs_run_dir(db_socket: str | Path | None = None) -> Path:
    """The run directory: beside the OVSDB socket we were given, else where ovs-vsctl looks."""
    if db_socket is not None:
        return Path(db_socket).parent
    return Path(os.environ.get("OVS_RUNDIR", str(DEFAULT_OVS_RUN_DIR)))
