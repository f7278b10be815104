"""The L2 policy and 802.1Q-tagged frames on real daemons: two full nodes, their Open vSwitch and tunnels.

- A policy given by reload drops ICMP and one TCP port from members in table 0; `evio status` counts
  the drops by rule; a reload without it lets them through again; no tunnel goes down meanwhile.
- Tagged frames sent on one node's bridge port (AF_PACKET: this machine has no 8021q module for VLAN
  devices) arrive tag and all on the other's: broadcast (the FRB path), unicast (the controller's
  first frame, then the flow it installs) and the answer back (learned from them); a rule on a VLAN
  drops that VLAN's frames only; a priority-tagged or double-tagged frame is dropped where it enters node2
  and counted (decision 0068 amended).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from evio.lab.lab import Lab
from evio.testing.labs import unique_lab_name
from evio.testing.waiting import wait_for_value

pytestmark = pytest.mark.integration

RING_TIMEOUT = 60.0
COUNT_TIMEOUT = 20.0  # the controller reads the policy flows' counters every few seconds
OVERLAY = "ov1"
BRIDGE = "evbr-ov1"
ETH_TYPE_TEST = 0x9000  # Ethernet loopback (configuration testing), which no node acts on; not 0x88B5 or 0x88B6,
# the signed documents and host claims (0043, 0055), whose unicasts to a node the switch takes to its controller

POLICY: list[dict[str, Any]] = [
    {"name": "no-ping", "action": "drop", "in_port": "members", "ip_proto": "icmp"},
    {"name": "no-5303", "action": "drop", "in_port": "members", "ip_proto": "tcp", "dst_port": 5303},
    {"name": "no-vlan-43", "action": "drop", "in_port": "members", "vlan": 43},
]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    name = unique_lab_name()
    try:
        made = Lab.up(name, nodes=2, nat="eim", daemons=True)
        wait_for_value(lambda: links_on_bridges(made), bool, RING_TIMEOUT, what="the two nodes linked")
        yield made
    finally:
        Lab.down(name)


def links_on_bridges(lab: Lab) -> bool:
    for index in (1, 2):
        links = lab.daemon_status(index)["overlays"][OVERLAY]["links"]
        if not any(link["state"] == "up" and link["on_bridge"] and link["port"] is not None for link in links):
            return False
    return True


def overlay(lab: Lab, index: int) -> dict[str, Any]:
    document: dict[str, Any] = lab.daemon_status(index)["overlays"][OVERLAY]
    return document


def set_policy(lab: Lab, rules: list[dict[str, Any]]) -> None:
    def edit(config: dict[str, Any]) -> None:
        if rules:
            config["overlays"][OVERLAY]["policy"] = rules
        else:
            config["overlays"][OVERLAY].pop("policy", None)

    lab.reload_configs(edit)


def pings(lab: Lab, a: int, b: int) -> bool:
    target = str(lab.node(b).overlay_address.ip)
    done = lab.exec(a, ["ping", "-c", "3", "-i", "0.2", "-W", "1", target], check=False, timeout=20)
    return done.returncode == 0


_LISTEN = """
import socket, sys, time
servers = [socket.create_server((sys.argv[1], port)) for port in (5303, 5304)]
print("listening", flush=True)
time.sleep(float(sys.argv[2]))
"""
_CONNECT = """
import socket, sys
for port in (5303, 5304):
    try:
        socket.create_connection((sys.argv[1], port), timeout=3).close()
        print(port, "connected")
    except OSError as exc:
        print(port, type(exc).__name__)
"""


def tcp_ports(lab: Lab, a: int, b: int) -> dict[int, str]:
    """Whether a TCP connection from a to b's overlay address gets through, on ports 5303 and 5304."""
    target = str(lab.node(b).overlay_address.ip)
    server = subprocess.Popen(["ip", "netns", "exec", lab.netns(b), sys.executable, "-c", _LISTEN, target, "15"],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        out = lab.exec(a, [sys.executable, "-c", _CONNECT, target], timeout=30).stdout
    finally:
        server.kill()
        server.wait()
    return {int(port): result for port, result in (line.split() for line in out.splitlines())}


def test_a_policy_by_reload_drops_and_counts_by_rule_and_goes_without_a_tunnel_going_down(lab: Lab) -> None:
    assert pings(lab, 1, 2)
    assert tcp_ports(lab, 1, 2) == {5303: "connected", 5304: "connected"}
    tunnels = [overlay(lab, i)["tunnels"] for i in (1, 2)]

    set_policy(lab, POLICY)
    assert not pings(lab, 1, 2)  # node2 drops the echo requests, node1 the replies
    assert tcp_ports(lab, 1, 2) == {5303: "TimeoutError", 5304: "connected"}
    rules = wait_for_value(lambda: overlay(lab, 2)["policy"], lambda r: r[0]["packets"] >= 3 and r[1]["packets"] >= 1,
                           COUNT_TIMEOUT, what="node2's drops counted by rule")
    assert [(r["rule"], r["action"], r["in_port"]) for r in rules] == [
        ("no-ping", "drop", "members"), ("no-5303", "drop", "members"), ("no-vlan-43", "drop", "members")]
    assert overlay(lab, 2)["drops"].get("POLICY", 0) == 0  # no broadcast met a rule: the flows did it all
    flows = lab.ovs(2).ofctl("dump-flows", BRIDGE, "table=0")
    assert "icmp" in flows and "tp_dst=5303" in flows and "dl_vlan=43" in flows, flows

    set_policy(lab, [])
    assert pings(lab, 1, 2)
    assert tcp_ports(lab, 1, 2) == {5303: "connected", 5304: "connected"}
    assert overlay(lab, 2)["policy"] == []
    assert "tp_dst=5303" not in lab.ovs(2).ofctl("dump-flows", BRIDGE, "table=0")
    assert [overlay(lab, i)["tunnels"] for i in (1, 2)] == tunnels  # no tunnel went down or was made anew
    assert links_on_bridges(lab)


# ---------------------------------------------------------------------- 802.1Q


_RECEIVE = """
import json, socket, struct, sys, time
# Tagged frames reach a packet socket with their tag in the ancillary data (the kernel takes it off
# on receive); PACKET_AUXDATA gives it back, and the frame is put together as it was on the wire.
SOL_PACKET, PACKET_AUXDATA, TP_STATUS_VLAN_VALID, TP_STATUS_VLAN_TPID_VALID = 263, 8, 1 << 4, 1 << 6
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.bind((sys.argv[1], 0))
s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
marker, want, deadline = bytes.fromhex(sys.argv[2]), int(sys.argv[3]), time.monotonic() + float(sys.argv[4])
print("listening", flush=True)
got = []
while len(got) < want and time.monotonic() < deadline:
    s.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        data, ancillary, _, _ = s.recvmsg(65535, socket.CMSG_SPACE(20))
    except TimeoutError:
        break
    for level, kind, value in ancillary:
        if level == SOL_PACKET and kind == PACKET_AUXDATA:
            status, _, _, _, _, tci, tpid = struct.unpack("IIIHHHH", value[:20])
            if status & TP_STATUS_VLAN_VALID:
                tpid = tpid if status & TP_STATUS_VLAN_TPID_VALID else 0x8100
                data = data[:12] + struct.pack("!HH", tpid, tci) + data[12:]
    if marker in data:
        got.append(data.hex())
print(json.dumps(got), flush=True)
"""
_SEND = """
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
for frame in sys.argv[2:]:
    s.send(bytes.fromhex(frame))
"""


def bridge_mac(lab: Lab, index: int) -> bytes:
    text = lab.exec(index, ["cat", f"/sys/class/net/{BRIDGE}/address"]).stdout.strip()
    return bytes.fromhex(text.replace(":", ""))


def tagged(dst: bytes, src: bytes, vlan: int, marker: bytes) -> bytes:
    return dst + src + (0x8100).to_bytes(2, "big") + vlan.to_bytes(2, "big") + ETH_TYPE_TEST.to_bytes(2, "big") + (
        marker + b"\x00" * 40)


def carry(lab: Lab, sender: int, receiver: int, frames: list[bytes], marker: bytes, want: int) -> list[bytes]:
    """Send `frames` on the sender's bridge port; what carrying `marker` the receiver's port got (want at most)."""
    receive = subprocess.Popen(
        ["ip", "netns", "exec", lab.netns(receiver), sys.executable, "-c", _RECEIVE, BRIDGE, marker.hex(), str(want),
         "8"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert receive.stdout is not None and receive.stdout.readline().strip() == "listening"
        lab.exec(sender, [sys.executable, "-c", _SEND, BRIDGE, *(f.hex() for f in frames)], timeout=20)
        out, _ = receive.communicate(timeout=30)
    finally:
        if receive.poll() is None:
            receive.kill()
            receive.wait()
    return [bytes.fromhex(h) for h in json.loads(out)]


def test_tagged_frames_cross_end_to_end_with_their_tag_and_a_vlan_rule_drops_only_its_vlan(lab: Lab) -> None:
    mac1, mac2 = bridge_mac(lab, 1), bridge_mac(lab, 2)
    broadcast = tagged(b"\xff" * 6, mac1, 42, b"evio-bcast-42")
    assert carry(lab, 1, 2, [broadcast], b"evio-bcast-42", 1) == [broadcast]  # the FRB path
    unicast = [tagged(mac2, mac1, 42, b"evio-uni-42-%d" % i) for i in range(5)]
    # The first by the controller, the rest by the flow it installs (which may overtake the first).
    assert sorted(carry(lab, 1, 2, unicast, b"evio-uni-42", 5)) == sorted(unicast)
    answers = [tagged(mac1, mac2, 42, b"evio-back-42-%d" % i) for i in range(3)]
    assert sorted(carry(lab, 2, 1, answers, b"evio-back-42", 3)) == sorted(answers)  # and the way back
    flows = lab.ovs(1).ofctl("dump-flows", BRIDGE, "table=1")
    mac2_text = mac2.hex(":")
    assert f"dl_dst={mac2_text}" in flows, flows  # the unicast went by a flow of the switching table

    set_policy(lab, POLICY)
    try:
        dropped = [tagged(mac2, mac1, 43, b"evio-uni-43"), tagged(b"\xff" * 6, mac1, 43, b"evio-bcast-43")]
        kept = [tagged(mac2, mac1, 42, b"evio-kept-42")]
        assert carry(lab, 1, 2, dropped + kept, b"evio-", 3) == kept
        rules = wait_for_value(lambda: overlay(lab, 2)["policy"], lambda r: r[2]["packets"] >= 2, COUNT_TIMEOUT,
                               what="node2's VLAN 43 drops counted")
        assert rules[2]["frb_packets"] >= 1  # the broadcast, dropped by its inner frame in the controller
    finally:
        set_policy(lab, [])


def test_priority_tagged_and_double_tagged_frames_are_dropped_where_they_enter_a_node_and_counted(lab: Lab) -> None:
    """Decision 0068 amended (review21k K1, K2): the kernel would take a priority-tagged frame as untagged, past the
    guards and the policy; Open vSwitch reads one tag. Real OVS takes the tunnel ports' guard flows and matches them."""
    mac1, mac2 = bridge_mac(lab, 1), bridge_mac(lab, 2)
    flows = lab.ovs(2).ofctl("dump-flows", BRIDGE, "table=0")
    assert "dl_vlan=0" in flows and "arp_op=0" in flows and "dl_type=0x8100" in flows, flows
    before = overlay(lab, 2)["drops"].get("UNREADABLE_FRAME", 0)
    double = mac2 + mac1 + bytes.fromhex("8100002a81000007") + ETH_TYPE_TEST.to_bytes(2, "big") + b"evio-qinq" + (
        b"\x00" * 40)
    refused = [tagged(mac2, mac1, 0, b"evio-prio-uni"), tagged(b"\xff" * 6, mac1, 0, b"evio-prio-bcast"), double]
    kept = [tagged(mac2, mac1, 42, b"evio-one-tag")]
    assert carry(lab, 1, 2, refused + kept, b"evio-", 4) == kept
    wait_for_value(lambda: overlay(lab, 2)["drops"].get("UNREADABLE_FRAME", 0), lambda n: n >= before + 3,
                   COUNT_TIMEOUT, what="node2's UNREADABLE_FRAME drops counted")
