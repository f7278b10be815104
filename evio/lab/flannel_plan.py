"""Flannel over a lab overlay, the pure part: names, etcd and CNI configs, subnet.env, capture verdicts.

The lab (evio/lab/flannel.py) runs the real pieces: etcd on node 1's overlay
address, flanneld on every node with etcd as its store, and "pods" as network
namespaces attached by the real CNI `bridge` and `host-local` plugins. What
those pieces are given is computed here, so it can be checked without root:

- `network_config`: the document flanneld reads from etcd under
  /coreos.com/network/config (network, subnet length, backend);
- `delegate_config`: the config Flannel's CNI plugin (flannel-io/cni-plugin,
  doCmdAdd and getDelegateIPAM) hands to the `bridge` plugin after reading
  /run/flannel/subnet.env, with kube-flannel's default delegate keys
  (hairpinMode, isDefaultGateway);
- `capture_verdict`: what a capture on a NAT router's WAN side may hold.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Backend = Literal["vxlan", "host-gw"]
BACKENDS: tuple[Backend, ...] = ("vxlan", "host-gw")

FLANNEL_VERSION = "v0.26.7"  # the newest release whose whole module graph the Go module proxy serves
POD_NETWORK = ipaddress.IPv4Network("10.244.0.0/16")  # kube-flannel's default
SUBNET_LEN = 24
ETCD_PREFIX = "/coreos.com/network"
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
VXLAN_PORT = 8472  # Linux's VXLAN port, Flannel's default (not IANA's 4789)
VXLAN_VNI = 1
CNI_NETWORK_NAME = "cbr0"  # kube-flannel's network name
CNI_VERSION = "0.3.1"  # kube-flannel's cni-conf.json
# kube-flannel's cni-conf.json: {"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}}
KUBE_FLANNEL_DELEGATE: Mapping[str, Any] = {"hairpinMode": True, "isDefaultGateway": True}
POD_INTERFACE = "eth0"


class SubnetEnvError(ValueError):
    """/run/flannel/subnet.env is missing a key or holds a bad value."""


@dataclass(frozen=True)
class SubnetEnv:
    """What flanneld wrote to its subnet file: the pod network, this node's subnet, MTU and ipMasq."""

    network: ipaddress.IPv4Network
    subnet: ipaddress.IPv4Interface  # e.g. 10.244.3.1/24: the node's lease and its gateway address
    mtu: int
    ipmasq: bool


_ENV_LINE = re.compile(r"([A-Z_][A-Z0-9_]*)=(.*)")


def parse_subnet_env(text: str) -> SubnetEnv:
    """Parse flanneld's subnet file (KEY=VALUE lines) as Flannel's CNI plugin does."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = _ENV_LINE.fullmatch(line.strip())
        if match:
            values[match[1]] = match[2]
    try:
        network = ipaddress.IPv4Network(values["FLANNEL_NETWORK"])
        subnet = ipaddress.IPv4Interface(values["FLANNEL_SUBNET"])
        mtu = int(values["FLANNEL_MTU"])
        masq = values["FLANNEL_IPMASQ"]
    except KeyError as missing:
        raise SubnetEnvError(f"subnet file has no {missing.args[0]}") from None
    except ValueError as bad:
        raise SubnetEnvError(f"subnet file: {bad}") from None
    if masq not in ("true", "false"):
        raise SubnetEnvError(f"subnet file: FLANNEL_IPMASQ is {masq!r}, not true or false")
    if not 576 <= mtu <= 65535:
        raise SubnetEnvError(f"subnet file: FLANNEL_MTU {mtu} out of range")
    return SubnetEnv(network, subnet, mtu, masq == "true")


def network_config(backend: Backend, network: ipaddress.IPv4Network = POD_NETWORK) -> dict[str, Any]:
    """flanneld's network config (etcd key <prefix>/config) for `backend`."""
    backend_section: dict[str, Any] = {"Type": backend}
    if backend == "vxlan":
        backend_section |= {"VNI": VXLAN_VNI, "Port": VXLAN_PORT}
    return {"Network": str(network), "SubnetLen": SUBNET_LEN, "Backend": backend_section}


def delegate_config(env: SubnetEnv, *, data_dir: str, delegate: Mapping[str, Any] = KUBE_FLANNEL_DELEGATE,
                    name: str = CNI_NETWORK_NAME, cni_version: str = CNI_VERSION) -> dict[str, Any]:
    """The config Flannel's CNI plugin passes to its delegate (the `bridge` plugin) for this subnet.

    As doCmdAdd: the delegate's own keys win; type defaults to bridge; ipMasq to
    the opposite of FLANNEL_IPMASQ (masquerade here only if flanneld does not);
    mtu to FLANNEL_MTU; isGateway to true for a bridge; host-local IPAM with one
    range, the node's subnet, and a route to the whole pod network. `data_dir`
    keeps host-local's leases out of /var/lib/cni (one directory per lab node).
    """
    conf: dict[str, Any] = dict(delegate)
    conf["name"] = name
    conf.setdefault("type", "bridge")
    conf.setdefault("ipMasq", not env.ipmasq)
    conf.setdefault("mtu", env.mtu)
    if conf["type"] == "bridge":
        conf.setdefault("isGateway", True)
    conf["cniVersion"] = cni_version
    conf["ipam"] = {
        "type": "host-local",
        "ranges": [[{"subnet": str(env.subnet.network)}]],
        "routes": [{"dst": str(env.network)}],
        "dataDir": data_dir,
    }
    return conf


def cni_environment(command: Literal["ADD", "DEL"], container_id: str, netns_path: str,
                    plugin_path: str) -> dict[str, str]:
    """The environment a runtime gives a CNI plugin (CNI spec, section "Parameters")."""
    return {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": netns_path,
        "CNI_IFNAME": POD_INTERFACE,
        "CNI_PATH": plugin_path,
    }


def pod_address(cni_result: str) -> ipaddress.IPv4Interface:
    """The pod's IPv4 address from a CNI ADD result (spec 0.3.x / 1.0: ips[].address)."""
    try:
        result = json.loads(cni_result)
        for ip in result.get("ips", []):
            address = ipaddress.ip_interface(ip["address"])
            if isinstance(address, ipaddress.IPv4Interface):
                return address
    except (ValueError, TypeError, KeyError, AttributeError) as bad:
        raise ValueError(f"CNI result without a usable address: {bad}") from None
    raise ValueError("CNI result holds no IPv4 address")


def pod_netns(prefix: str, node: int) -> str:
    """The pod namespace on node `node`: under the lab's prefix, so `evio lab down` removes it."""
    return f"{prefix}q{node}"


def etcd_endpoint(address: ipaddress.IPv4Address) -> str:
    return f"http://{address}:{ETCD_CLIENT_PORT}"


# -- captures ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Packet:
    """One packet of a capture, as far as the verdict needs: protocol and outer addresses and ports."""

    proto: str  # "UDP", "TCP", or what else tcpdump named
    src: ipaddress.IPv4Address
    dst: ipaddress.IPv4Address
    sport: int | None
    dport: int | None


@dataclass(frozen=True)
class CaptureVerdict:
    packets: int
    udp: int
    signaling: int  # TCP to or from the XMPP server (evio's TLS signaling)
    arp: int  # the underlay's own address resolution between public addresses
    icmp_control: int  # the underlay's ICMP errors and redirects about those packets (no pod address)
    vxlan: int  # UDP to or from port 8472
    pod_addressed: int  # an outer address inside the pod network
    other: tuple[str, ...]  # anything else, described (at most a few)

    @property
    def clean(self) -> bool:
        """Only evio's encrypted UDP (and its TLS signaling, the underlay's ARP and ICMP errors): no VXLAN,
        no pod address, nothing else."""
        return self.vxlan == 0 and self.pod_addressed == 0 and not self.other


_TCPDUMP_LINE = re.compile(
    r"IP (?P<src>\d+\.\d+\.\d+\.\d+)(?:\.(?P<sport>\d+))? > (?P<dst>\d+\.\d+\.\d+\.\d+)(?:\.(?P<dport>\d+))?: "
    r"(?P<rest>.*)"
)


_ARP_LINE = re.compile(r"ARP, \w+ .*?(?P<a>\d+\.\d+\.\d+\.\d+)(?:.*?(?P<b>\d+\.\d+\.\d+\.\d+))?")


def parse_tcpdump(lines: Iterable[str]) -> list[Packet]:
    """Packets from `tcpdump -nn -q -r FILE` output ("IP a.b.c.d.p > e.f.g.h.q: UDP, length N")."""
    packets = []
    for line in lines:
        match = _TCPDUMP_LINE.search(line)
        arp = _ARP_LINE.search(line) if match is None else None
        if arp is not None:
            packets.append(Packet("ARP", ipaddress.IPv4Address(arp["a"]), ipaddress.IPv4Address(arp["b"] or arp["a"]),
                                  None, None))
            continue
        if match is None:
            if line.strip():
                packets.append(Packet(line.strip()[:60], ipaddress.IPv4Address(0), ipaddress.IPv4Address(0),
                                      None, None))
            continue
        rest = match["rest"]
        proto = "UDP" if rest.startswith("UDP") else "TCP" if rest.startswith("tcp") else rest.split(",")[0]
        packets.append(Packet(
            proto, ipaddress.IPv4Address(match["src"]), ipaddress.IPv4Address(match["dst"]),
            int(match["sport"]) if match["sport"] else None, int(match["dport"]) if match["dport"] else None,
        ))
    return packets


# A router on the public side redirects or refuses evio's UDP ("ICMP redirect 10.10.3.2 to host ...",
# "ICMP 198.51.100.13 udp port 40000 unreachable"): the underlay's own control traffic.
_ICMP_CONTROL = ("redirect", "unreachable", "time exceeded")


def capture_verdict(packets: Iterable[Packet], *, signal_server: ipaddress.IPv4Address, signal_port: int,
                    pod_network: ipaddress.IPv4Network = POD_NETWORK) -> CaptureVerdict:
    count = udp = signaling = arp = icmp = vxlan = pods = 0
    other: list[str] = []
    for p in packets:
        count += 1
        if p.src in pod_network or p.dst in pod_network:
            pods += 1
        if p.proto == "UDP":
            udp += 1
            if VXLAN_PORT in (p.sport, p.dport):
                vxlan += 1
        elif p.proto == "ARP":
            arp += 1
        elif p.proto.startswith("ICMP") and any(word in p.proto for word in _ICMP_CONTROL):
            icmp += 1
        elif p.proto == "TCP" and signal_server in (p.src, p.dst) and signal_port in (p.sport, p.dport):
            signaling += 1
        elif len(other) < 5:
            other.append(f"{p.proto[:40]} {p.src}:{p.sport} > {p.dst}:{p.dport}")
    return CaptureVerdict(count, udp, signaling, arp, icmp, vxlan, pods, tuple(other))
