"""Neutral descriptions of what the Bounded Flood logic wants done to the switch.

The pure switch logic (`evio.sdn.switch`) returns lists of these; the os-ken
adapter (`evio.sdn.ofapp`) turns each into OpenFlow 1.3 messages
(`evio.sdn.openflow_messages`), which the fake flow table
(`evio.testing.fake_flow_table`) decodes and applies as a switch would.
Keeping them free of os-ken types keeps the logic pure.
"""

from __future__ import annotations

from dataclasses import dataclass

# Two tables: the L2 policy in table 0 (evio.sdn.l2policy; a frame it allows goes on to table 1),
# the switching in table 1. Priorities of the flows evio installs; the adapter installs the base
# flows at switch features time, the logic only ever adds UNICAST_PRIORITY and policy flows.
POLICY_TABLE = 0
SWITCHING_TABLE = 1
TABLE_MISS_PRIORITY = 0  # in both tables: table 0's goes on to table 1, table 1's to the controller
UNICAST_PRIORITY = 10
DESTINATION_PRIORITY = 5  # a flow ahead by destination MAC (destination_flows.py): any pair flow wins over it
DESTINATION_HAIRPIN_PRIORITY = 6  # its frames entering by the port it leads to go to the controller
OWN_SOURCE_PRIORITY = 7  # frames from our own interface that no pair flow takes go to the controller
ARP_ANSWER_PRIORITY = 20  # a local host's ARP request for a member's certified address, answered by the bridge
ARP_ASK_PRIORITY = 21  # above the answers: the requests the controller must see (probes, announcements)
FRB_TO_CONTROLLER_PRIORITY = 100
POLICY_RULE_PRIORITY = 2000  # rule i of a policy: this less i (at most 1000 rules, config/semantic_checks.py)
FRB_PAST_POLICY_PRIORITY = 3000  # FRBs pass table 0 whole: the controller polices their inner frames
GUARD_PRIORITY = 2500  # the RA and ARP guards' table-0 flows (evio.sdn.neighbor_guard); +1: a certified pair's;
# +2: a tunnel port's frames the guards refuse (a VLAN-0 or second tag, ARP Open vSwitch does not read)


@dataclass(frozen=True)
class FlowMatch:
    """The match of an evio unicast flow: `(in_port, eth_src, eth_dst)`; MACs as "aa:bb:..:ff"."""

    in_port: int
    eth_src: str
    eth_dst: str


@dataclass(frozen=True)
class PacketOut:
    """Send `data` out of `port` (never back out of the port it arrived on)."""

    port: int
    data: bytes


@dataclass(frozen=True)
class AddFlow:
    """Install `match -> output:out_port`, removed by the switch after `idle_timeout` s idle, and
    `hard_timeout` s after it was installed however busy (0: never)."""

    match: FlowMatch
    out_port: int
    idle_timeout: int
    priority: int = UNICAST_PRIORITY
    hard_timeout: int = 0
    # Whether the on-demand policy counts its bytes (a local host and a remote one whose root node is
    # known): only such flows are polled, so a poll's cost does not grow with the rest.
    counted: bool = False


@dataclass(frozen=True)
class DeleteFlow:
    """Delete the one evio flow with this match (its port had too many)."""

    match: FlowMatch


@dataclass(frozen=True)
class DestinationMatch:
    """The match of a flow ahead by destination (destination_flows.py): `eth_dst`, any port, any source."""

    eth_dst: str


@dataclass(frozen=True)
class AddDestinationFlow:
    """Install `match -> output:out_port` and a copy to the controller, at DESTINATION_PRIORITY, with no timeout:
    the frame goes on at once, and the controller installs the pair flow it would have (decision 0072); and above
    it the same frames entering by `out_port` itself to the controller (the hairpin, as before)."""

    match: DestinationMatch
    out_port: int
    # The node's own interface: its frames seen coming back (from a tunnel, or with no pair flow) go to the
    # controller, which drops what a peer sends in our name, so no flow ahead keeps a loop going.
    own: bool = False


@dataclass(frozen=True)
class DeleteDestinationFlow:
    """Delete the flow ahead with this match, and its hairpin's."""

    match: DestinationMatch
    out_port: int
    own: bool = False


@dataclass(frozen=True)
class ArpAnswerMatch:
    """A broadcast ARP request entering by leaf port `in_port` for IPv4 `address` (dotted)."""

    in_port: int
    address: str


@dataclass(frozen=True)
class AddArpAnswer:
    """Answer `match`'s requests on the bridge with `mac` (the request turned into the reply, out by its port),
    except probes (sender 0.0.0.0) and announcements (sender = target), which still go to the controller (0072)."""

    match: ArpAnswerMatch
    mac: str


@dataclass(frozen=True)
class DeleteArpAnswer:
    match: ArpAnswerMatch


@dataclass(frozen=True)
class DeleteFlowsOfPort:
    """Delete every evio flow that enters by or leaves through `port`."""

    port: int


@dataclass(frozen=True)
class DeleteFlowsToMac:
    """Delete every evio flow whose `eth_dst` is `mac` (the MAC moved or expired)."""

    mac: str


@dataclass(frozen=True)
class DeleteFlowsFromMac:
    """Delete every evio flow whose `eth_src` is `mac` (the MAC was evicted or expired)."""

    mac: str


@dataclass(frozen=True)
class PolicyMatch:
    """What a policy flow matches (None: any); `in_port` None: every port. MACs as "aa:bb:..:ff"."""

    in_port: int | None = None
    eth_src: str | None = None
    eth_dst: str | None = None
    eth_type: int | None = None
    vlan: int | None = None
    ip_proto: int | None = None
    src_port: int | None = None
    dst_port: int | None = None


@dataclass(frozen=True)
class AddPolicyFlow:
    """Install a table-0 policy flow for rule number `rule`: `allow` goes on to the switching table,
    else the frame is dropped there (its packet counter is the rule's count)."""

    rule: int
    priority: int
    match: PolicyMatch
    allow: bool


@dataclass(frozen=True)
class DeletePolicyFlow:
    """Delete the one policy flow with this priority and match."""

    priority: int
    match: PolicyMatch


@dataclass(frozen=True)
class AddGuardFlow:
    """Install a table-0 guard flow (evio.sdn.neighbor_guard): `fields` as OpenFlow match keywords (a masked one as
    (value, mask)); `to_switching` goes on to table 1 at GUARD_PRIORITY + 1 (a certified pair), else the frame goes
    to the controller, at GUARD_PRIORITY + 2 if `unreadable` (a tunnel port's frames the guards refuse)."""

    fields: tuple[tuple[str, int | str | tuple[int, int] | tuple[str, str]], ...]
    to_switching: bool
    unreadable: bool = False

    @property
    def priority(self) -> int:
        if self.unreadable:
            return GUARD_PRIORITY + 2
        return GUARD_PRIORITY + 1 if self.to_switching else GUARD_PRIORITY


@dataclass(frozen=True)
class DeleteGuardFlow:
    """Delete the one guard flow `flow` installed."""

    flow: AddGuardFlow


FlowAction = (AddGuardFlow | DeleteGuardFlow | AddPolicyFlow | DeletePolicyFlow | PacketOut | AddFlow | DeleteFlow
              | DeleteFlowsOfPort | DeleteFlowsToMac | DeleteFlowsFromMac | AddDestinationFlow | DeleteDestinationFlow
              | AddArpAnswer | DeleteArpAnswer)
