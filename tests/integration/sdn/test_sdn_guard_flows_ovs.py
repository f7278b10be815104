"""The guards' table-0 flows for certified IPv6 addresses in a real Open vSwitch, read by `ofproto/trace` (decisions
0075 and 0076, review21m M1-M3, review21n N3).

A private OVS (its own ovsdb-server and ovs-vswitchd in a namespace of this test) holds one bridge with a tunnel
port and a leaf port, the flows `neighbor_guard.guard_flows` makes for one certified IPv6 address and the node's own
certified one, a table-0 miss to table 1, and in table 1 a flow ahead to the node's MAC (0072's kind: any source,
any port). Each frame is traced from the tunnel port; the test reads which table-0 flow took it and whether a flow
it met sends it to the controller (else the flow ahead sends it out of the leaf port):

- M1's forged advertisement for the certified address, unicast to the node's MAC: the target flow, controller;
- the same with its target link-layer option twice (Open vSwitch reads no target then; Linux takes the first):
  the flow for unread targets, controller; without that flow, the flow ahead to the leaf port (the way around
  every flow by target that the fix closes);
- M1's solicitation and M3's router solicitation from the certified address: the source flows, controller;
- a duplicate address detection probe (from ::), unicast to the node's MAC, for the certified address, the node's
  own or any other: the one probe flow, controller (review21n N3, 0076; one flow for every target since review21s
  1); an advertisement of the node's own address: the flow by target, controller;
- a redirect (M2): the RA guard's flow, controller (which drops it from tunnel ports);
- a solicitation from another address, and a TCP segment: the flow ahead, out of the leaf port;
- with `neighbor_guard.holder_flows` (review21s 1): any probe, unicast, for whatever target (another member's
  link-local or SLAAC address); an advertisement of an address made from the node's MAC, link-local or any prefix:
  controller; an advertisement of an address made from another MAC, or from one differing in its universal/local
  bit, and a solicitation from an address (not a probe) for the node's link-local one: the flow ahead.

Needs root, `ip` and Open vSwitch; cleans up its namespace and daemons, pass or fail.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import struct
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from evio.bridge import OvsInstance
from evio.sdn import neighbor_guard
from evio.sdn.flow_actions import AddGuardFlow
from evio.sdn.switch import document_flows

pytestmark = pytest.mark.integration

BRIDGE = "evgd0"
TUNNEL, LEAF = 2, 1
NODE_MAC, ATTACKER, OWNER = "02:00:00:00:00:01", "02:00:00:00:00:0a", "02:00:00:00:00:03"
CERTIFIED = "fd00::3"
NODE_ADDRESS = "fd00::1"  # the node's own certified address (decision 0076)


def _mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def _nd(kind: int, src: str, dst: str, body: bytes, options: list[tuple[int, str]], eth_src: str = ATTACKER) -> bytes:
    """An ICMPv6 neighbour-discovery frame to the node's MAC (checksum not made: OVS does not check it)."""
    icmp = bytes([kind, 0, 0, 0]) + body + b"".join(bytes([o, 1]) + _mac(m) for o, m in options)
    ipv6 = struct.pack("!IHBB16s16s", 6 << 28, len(icmp), 58, 255, ipaddress.IPv6Address(src).packed,
                       ipaddress.IPv6Address(dst).packed)  # fmt: skip
    return _mac(NODE_MAC) + _mac(eth_src) + b"\x86\xdd" + ipv6 + icmp


def _target(address: str, flags: int = 0x60000000) -> bytes:
    return struct.pack("!I16s", flags, ipaddress.IPv6Address(address).packed)


_OFCTL_NAMES = {"ipv6_nd_target": "nd_target", "icmpv4_type": "icmp_type"}


def _ofctl_flow(flow: AddGuardFlow) -> str:
    """A guard flow as ovs-ofctl writes it (the OXM names os-ken uses, but `nd_target` and `icmp_type`)."""
    fields = []
    for name, value in flow.fields:
        if isinstance(value, tuple):  # masked: an int (vlan_vid) or an IPv6 address (nd_target, review21s 1)
            text = "/".join(v if isinstance(v, str) else f"{v:#x}" for v in value)
        else:
            text = str(value)
        fields.append(f"{_OFCTL_NAMES.get(name, name)}={text}")
    action = "goto_table:1" if flow.to_switching else "controller"
    return f"table=0,priority={flow.priority},{','.join(fields)},actions={action}"


@pytest.fixture
def ovs() -> Iterator[OvsInstance]:
    if shutil.which("ovs-vswitchd") is None or shutil.which("ip") is None:
        pytest.skip("needs Open vSwitch and ip")
    netns = f"evgd{uuid.uuid4().hex[:8]}"
    base = Path(tempfile.mkdtemp(prefix="evgd", dir="/tmp"))
    subprocess.run(["ip", "netns", "add", netns], check=True)
    instance = OvsInstance(base, netns=netns, userspace_tso=False)
    try:
        instance.start()
        instance.vsctl("add-br", BRIDGE, "--", "set", "bridge", BRIDGE, "datapath_type=netdev", "fail_mode=secure",
                       "protocols=OpenFlow13")  # fmt: skip
        for name, port in (("evgdl", LEAF), ("evgdt", TUNNEL)):
            instance.vsctl("add-port", BRIDGE, name, "--", "set", "interface", name, "type=internal",
                           f"ofport_request={port}")  # fmt: skip
        yield instance
    finally:
        instance.stop()
        subprocess.run(["ip", "netns", "delete", netns], check=False)
        shutil.rmtree(base, ignore_errors=True)


def _trace(ovs: OvsInstance, frame: bytes) -> tuple[int, bool]:
    """(priority of the table-0 flow that took `frame` from the tunnel port, whether it goes to the controller)."""
    rule, to_controller = _traced(ovs, frame)
    return int(rule.rsplit("priority ", 1)[1].split(",")[0]), to_controller


def _traced(ovs: OvsInstance, frame: bytes) -> tuple[str, bool]:
    """(the table-0 flow that took `frame` from the tunnel port, as the trace names it; whether a flow it met sends it
    to the controller)."""
    out = subprocess.run(["ovs-appctl", "-t", str(ovs.run_dir / "ovs-vswitchd.ctl"), "ofproto/trace", BRIDGE,
                          f"in_port={TUNNEL}", frame.hex()], capture_output=True, text=True, timeout=30, check=True,
                         env=ovs.env).stdout  # fmt: skip
    first = re.search(r"^ 0\. (.*priority \d+.*)$", out, re.MULTILINE)
    assert first is not None, out
    rules = out.split("Final flow", 1)[0]  # the flows it met, table by table, each with its actions
    return first.group(1), "CONTROLLER" in rules


def test_every_neighbour_message_naming_a_certified_ipv6_address_goes_to_the_controller(ovs: OvsInstance) -> None:
    flows = neighbor_guard.guard_flows({ipaddress.IPv6Address(CERTIFIED): OWNER}, [TUNNEL],
                                       [ipaddress.IPv6Address(NODE_ADDRESS)])
    for flow in sorted(flows, key=repr):
        ovs.ofctl("add-flow", BRIDGE, _ofctl_flow(flow))
    ovs.ofctl("add-flow", BRIDGE, "table=0,priority=0,actions=goto_table:1")
    ovs.ofctl("add-flow", BRIDGE, f"table=1,priority=5,eth_dst={NODE_MAC},actions=output:{LEAF}")  # a flow ahead
    guard = 2500
    frames = {
        "M1 NA for the certified address at A's MAC": (
            _nd(136, CERTIFIED, "fe80::1", _target(CERTIFIED), [(2, ATTACKER)]), guard, True),
        "the same NA, its target option twice": (
            _nd(136, CERTIFIED, "fe80::1", _target(CERTIFIED), [(2, ATTACKER), (2, OWNER)]), guard, True),
        "the owner's own NA (no pass flow)": (
            _nd(136, CERTIFIED, "fe80::1", _target(CERTIFIED), [(2, OWNER)], OWNER), guard, True),
        "M1 NS from the certified address": (
            _nd(135, CERTIFIED, "fd00::1", _target("fd00::1", 0), [(1, ATTACKER)]), guard, True),
        "M3 RS from the certified address": (_nd(133, CERTIFIED, "ff02::2", bytes(4), [(1, ATTACKER)]), guard, True),
        "M2 redirect": (_nd(137, "fe80::66", "fd00::aa", _target("2001:db8::1", 0) + bytes(16), [(2, ATTACKER)]),
                        guard, True),
        "N3 DAD probe for the certified address, unicast": (
            _nd(135, "::", "ff02::1:ff00:3", _target(CERTIFIED, 0), []), guard, True),
        "N3 DAD probe for the node's own address": (_nd(135, "::", "ff02::1:ff00:1", _target(NODE_ADDRESS, 0), []),
                                                   guard, True),
        "an NA for the node's own address": (_nd(136, NODE_ADDRESS, "ff02::1", _target(NODE_ADDRESS, 0x20000000),
                                                 [(2, ATTACKER)]), guard, True),
        "a DAD probe for another address": (_nd(135, "::", "ff02::1:ff00:9", _target("fd00::9", 0), []), guard, True),
        "an NS from another address": (_nd(135, "fd00::9", "fd00::1", _target("fd00::1", 0), [(1, ATTACKER)]), 0, False),
        "an NA for another address": (_nd(136, "fd00::9", "fe80::1", _target("fd00::9"), [(2, ATTACKER)]), 0, False),
    }
    seen = {}
    for name, (frame, _, _) in frames.items():
        seen[name] = _trace(ovs, frame)
        print(f"{name}: table-0 priority {seen[name][0]}, to the controller: {seen[name][1]}")
    assert seen == {name: (priority, to_controller) for name, (_, priority, to_controller) in frames.items()}

    # The doubled option: OVS read no target (the flow for unread targets took it, not the certified address's);
    # without that flow the advertisement rides the flow ahead to the leaf, as Linux reads it "fd00::3 at A's MAC".
    doubled = frames["the same NA, its target option twice"][0]
    rule, _ = _traced(ovs, doubled)
    print(f"the doubled NA's table-0 flow: {rule}")
    assert "nd_target=::," in rule
    unread = AddGuardFlow((("eth_type", 0x86DD), ("ip_proto", 58), ("icmpv6_type", 136), ("ipv6_nd_target", "::")),
                          to_switching=False)
    ovs.ofctl("del-flows", BRIDGE, "--strict", _ofctl_flow(unread).rsplit(",actions=", 1)[0])
    without = _trace(ovs, doubled)
    print(f"the doubled NA without that flow: table-0 priority {without[0]}, to the controller: {without[1]}")
    assert without == (0, False)


def test_a_unicast_of_the_signed_documents_flood_for_the_node_goes_to_the_controller_alone(ovs: OvsInstance) -> None:
    """Decision 0043, amended for review21r's residual: `switch.document_flows` takes every unicast of the flood
    (0x88B5) for the node's MAC, tagged or not, to the controller, ahead of the flow ahead by destination; a frame of
    the flood for another MAC, or another type for the node, rides the flows as before."""
    for flow in sorted(document_flows([NODE_MAC]), key=repr):
        ovs.ofctl("add-flow", BRIDGE, _ofctl_flow(flow))
    ovs.ofctl("add-flow", BRIDGE, "table=0,priority=0,actions=goto_table:1")
    ovs.ofctl("add-flow", BRIDGE, f"table=1,priority=5,eth_dst={NODE_MAC},actions=output:{LEAF}")  # a flow ahead
    body = b"EVRL" + bytes(60)
    frames = {
        "a manifest for the node in V's name": (_mac(NODE_MAC) + _mac(OWNER) + b"\x88\xb5" + body, 2500, True),
        "the same behind a VLAN tag": (_mac(NODE_MAC) + _mac(OWNER) + b"\x81\x00\x00\x05\x88\xb5" + body, 2500, True),
        "one for another node": (_mac(OWNER) + _mac(ATTACKER) + b"\x88\xb5" + body, 0, False),
        "another type for the node": (_mac(NODE_MAC) + _mac(OWNER) + b"\x88\xb6" + body, 0, False),
    }
    seen = {}
    for name, (frame, _, _) in frames.items():
        seen[name] = _trace(ovs, frame)
        print(f"{name}: table-0 priority {seen[name][0]}, to the controller: {seen[name][1]}")
    assert seen == {name: (priority, to_controller) for name, (_, priority, to_controller) in frames.items()}
    out = subprocess.run(["ovs-appctl", "-t", str(ovs.run_dir / "ovs-vswitchd.ctl"), "ofproto/trace", BRIDGE,
                          f"in_port={TUNNEL}", frames["a manifest for the node in V's name"][0].hex()],
                         capture_output=True, text=True, timeout=30, check=True, env=ovs.env).stdout  # fmt: skip
    assert f"output:{LEAF}" not in out.split("Final flow", 1)[0], "the interface got it past the controller"


def _eui64(mac: str, prefix: str = "fe80::") -> str:
    octets = bytearray(_mac(mac))
    octets[0] ^= 0x02
    iid = bytes(octets[:3]) + b"\xff\xfe" + bytes(octets[3:])
    return str(ipaddress.IPv6Address(ipaddress.IPv6Address(prefix).packed[:8] + iid))


def test_the_holders_flows_bring_every_probe_and_the_advertisements_of_the_nodes_eui64_addresses(ovs: OvsInstance) -> None:
    """review21s 1: the one probe flow (`guard_flows`), and per own MAC one advertisement flow by the target's
    interface identifier under a mask (`holder_flows`), as Open vSwitch matches them (`nd_target` takes an arbitrary
    bitwise mask)."""
    flows = neighbor_guard.guard_flows({}, [TUNNEL]) | neighbor_guard.holder_flows([NODE_MAC])
    for flow in sorted(flows, key=repr):
        ovs.ofctl("add-flow", BRIDGE, _ofctl_flow(flow))
    ovs.ofctl("add-flow", BRIDGE, "table=0,priority=0,actions=goto_table:1")
    ovs.ofctl("add-flow", BRIDGE, f"table=1,priority=5,eth_dst={NODE_MAC},actions=output:{LEAF}")  # a flow ahead
    guard = 2500
    own_ll, own_slaac = _eui64(NODE_MAC), _eui64(NODE_MAC, "2001:db8:1::")
    other, look_alike = _eui64(OWNER), _eui64("00:00:00:00:00:01")  # 02:..:01 with its universal/local bit flipped
    frames = {
        "a unicast probe for the node's link-local address": (_nd(135, "::", "ff02::1:ff00:1", _target(own_ll, 0), []),
                                                               guard, True),
        "a unicast probe for another member's link-local address": (
            _nd(135, "::", "ff02::1:ff00:3", _target(other, 0), []), guard, True),
        "an NA for the node's link-local address": (
            _nd(136, own_ll, "ff02::1", _target(own_ll, 0x20000000), [(2, ATTACKER)]), guard, True),
        "an NA for the node's SLAAC address": (
            _nd(136, own_slaac, "ff02::1", _target(own_slaac, 0x20000000), [(2, ATTACKER)]), guard, True),
        "an NA for another MAC's link-local address": (
            _nd(136, other, "fe80::1", _target(other), [(2, ATTACKER)]), 0, False),
        "an NA for a look-alike MAC's link-local address": (
            _nd(136, look_alike, "fe80::1", _target(look_alike), [(2, ATTACKER)]), 0, False),
        "an NS from an address for the node's link-local one": (
            _nd(135, other, own_ll, _target(own_ll, 0), [(1, ATTACKER)]), 0, False),
    }
    seen = {}
    for name, (frame, _, _) in frames.items():
        seen[name] = _trace(ovs, frame)
        print(f"{name}: table-0 priority {seen[name][0]}, to the controller: {seen[name][1]}")
    assert seen == {name: (priority, to_controller) for name, (_, priority, to_controller) in frames.items()}
