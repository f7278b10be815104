"""Flows between this node's own interface and the members' certified MACs, installed before a frame needs them.

Decision 0066 (issue 23's first contact, issue 25 item 4). In trust mode every switch is told, from the signed host
claims, each member's certified overlay address with the MAC of the interface holding it (decision 0062), and the
one member that holds that MAC (0055). Bounded Flood learning already placed the MAC under that member's root, on
the port its floods come by. The first frame between this node's interface and that MAC would install, at this
switch, exactly two flows: `(leaf, own, mac) -> port` and its way back `(port, mac, own) -> leaf` (0047). They are
wanted here at once instead, so neither end of a path between members' interfaces asks its controller.

A MAC gets them only while all of these hold (each is re-read at every tick; a flow no longer wanted is deleted):

- its address is certified by the overlay CA (one member claims the address, and holds the MAC: 0062's rule);
- the MAC's one owner (`mac_owners`) is a member other than this node;
- the learning table places it live on a peer port *under that owner's root* (learned from the owner's floods,
  never from a plain frame): the port Bounded Flood would send it to;
- it is among the first `PROACTIVE_MACS_PER_PORT` such MACs of its port (sorted), so a port's share is bounded
  whatever the claims say.

The local end is the bridge's own interface (`LOCAL_PORT`) or a leaf port whose own MAC was heard sending there:
the interface holding this node's certified address. Hosts behind leaf ports keep learning.

A MAC that moves, expires or is forgotten takes its flows with it as before (`flows_of_macs`), a port that goes
takes its own; the next tick installs them where the table then places the MAC. Without trust there are no
owners and no certified addresses, so nothing here; the old learning is untouched.

Pure: reads the switch's tables, returns the wanted flows.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from evio.sdn.flow_actions import FlowMatch
from evio.sdn.switch_terms import PortKind, is_group_mac

if TYPE_CHECKING:
    from evio.sdn.switch import BoundedFloodSwitch

# Remote MACs with flows installed ahead per peer port: members' interfaces, one each; more is a port's claims
# going beyond what the overlay's members are, and those are left to learning.
PROACTIVE_MACS_PER_PORT = 256
LOCAL_PORT = 0xFFFF_FFFE  # OFPP_LOCAL: the bridge's own interface
_NO_MAC = "00:00:00:00:00:00"


def local_interfaces(switch: BoundedFloodSwitch, now: float) -> list[tuple[int, str]]:
    """(leaf port, its own MAC) for the bridge's interface and each leaf port whose own MAC was heard sending on it."""
    found: list[tuple[int, str]] = []
    for port_no in switch.leaf_ports():
        mac = switch.ports[port_no].hw_addr
        if mac is None or mac.lower() == _NO_MAC or is_group_mac(mac):
            continue
        mac = mac.lower()
        entry = switch.learning.lookup(mac, now)
        if port_no == LOCAL_PORT or (entry is not None and entry.local and entry.port == port_no):
            found.append((port_no, mac))
    return found


def member_places(switch: BoundedFloodSwitch, now: float) -> dict[str, int]:
    """Certified member MAC -> the peer port learning places it on under its owner, by 0066's rules."""
    certified = {mac.lower() for mac in switch.neighbors.certified.values()}
    places: dict[str, int] = {}
    if not certified or not switch.mac_owners:
        return places
    per_port: Counter[int] = Counter()
    for mac in sorted(certified):
        owner = switch.mac_owners.get(mac)
        if owner is None or owner == switch.node_id:
            continue
        entry = switch.learning.lookup(mac, now)
        if entry is None or entry.local or entry.root != owner:
            continue
        port = switch.ports.get(entry.port)
        if port is None or port.kind is not PortKind.PEER or per_port[entry.port] >= PROACTIVE_MACS_PER_PORT:
            continue
        per_port[entry.port] += 1
        places[mac] = entry.port
    return places


def wanted_flows(switch: BoundedFloodSwitch, now: float, paused: frozenset[str] = frozenset()) -> dict[FlowMatch, int]:
    """Match -> out port of every flow wanted ahead now. `paused`: local MACs whose way back must not be installed
    (a request of theirs was flooded: its answer must reach the controller, 0056)."""
    places = member_places(switch, now)
    if not places:
        return {}
    ends = local_interfaces(switch, now)
    if not ends:
        return {}
    flows: dict[FlowMatch, int] = {}
    for mac, port in places.items():
        for leaf, own in ends:
            flows[FlowMatch(leaf, own, mac)] = port
            if own not in paused:
                flows[FlowMatch(port, mac, own)] = leaf
    return flows
