"""Open vSwitch bridge management through OVSDB (docs/design.md, "Open vSwitch bridges").

`OvsBridge` creates and tears down one overlay's bridge and its ports by
running `ovs-vsctl` through a `CommandRunner`; `OvsInstance` starts a private
ovsdb-server + ovs-vswitchd pair in a network namespace, as the lab and the
integration tests need.
"""

from evio.bridge.commands import BridgeError, CommandError, CommandRunner, SubprocessRunner
from evio.bridge.ovs_bridge import BridgeSpec, OvsBridge, datapath_id_for, datapath_type
from evio.bridge.ovs_instance import OvsInstance

__all__ = [
    "BridgeSpec",
    "BridgeError",
    "CommandError",
    "CommandRunner",
    "OvsBridge",
    "OvsInstance",
    "SubprocessRunner",
    "datapath_id_for",
    "datapath_type",
]
