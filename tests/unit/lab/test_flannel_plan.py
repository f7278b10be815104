"""What the Flannel lab hands to etcd, flanneld and the CNI plugins, and how it judges a WAN capture."""

from __future__ import annotations

import ipaddress
import json

import pytest

from evio.lab.flannel_plan import (
    POD_NETWORK,
    SubnetEnv,
    SubnetEnvError,
    capture_verdict,
    cni_environment,
    delegate_config,
    network_config,
    parse_subnet_env,
    parse_tcpdump,
    pod_address,
    pod_netns,
)

SUBNET_ENV = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=1378\nFLANNEL_IPMASQ=true\n"
SERVER = ipaddress.IPv4Address("198.51.100.1")


def test_subnet_env_is_read_as_flanneld_writes_it() -> None:
    env = parse_subnet_env(SUBNET_ENV)
    assert env == SubnetEnv(ipaddress.IPv4Network("10.244.0.0/16"), ipaddress.IPv4Interface("10.244.7.1/24"),
                            1378, True)


@pytest.mark.parametrize("text, reason", [
    (SUBNET_ENV.replace("FLANNEL_MTU=1378\n", ""), "FLANNEL_MTU"),
    (SUBNET_ENV.replace("1378", "12"), "out of range"),
    (SUBNET_ENV.replace("IPMASQ=true", "IPMASQ=yes"), "not true or false"),
    (SUBNET_ENV.replace("10.244.7.1/24", "10.244.7.1/33"), "subnet file"),
])
def test_a_bad_subnet_env_is_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(SubnetEnvError, match=reason):
        parse_subnet_env(text)


def test_the_delegate_is_what_flannels_cni_plugin_builds() -> None:
    conf = delegate_config(parse_subnet_env(SUBNET_ENV), data_dir="/run/x/ipam")
    assert conf == {
        "name": "cbr0", "cniVersion": "0.3.1", "type": "bridge",
        "hairpinMode": True, "isDefaultGateway": True,  # kube-flannel's delegate keys
        "ipMasq": False,  # flanneld masquerades (FLANNEL_IPMASQ=true), so the bridge must not
        "mtu": 1378, "isGateway": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.7.0/24"}]],
                 "routes": [{"dst": "10.244.0.0/16"}], "dataDir": "/run/x/ipam"},
    }


def test_the_delegates_own_keys_win_and_the_bridge_masquerades_when_flanneld_does_not() -> None:
    env = parse_subnet_env(SUBNET_ENV.replace("IPMASQ=true", "IPMASQ=false"))
    assert delegate_config(env, data_dir="d")["ipMasq"] is True
    conf = delegate_config(env, data_dir="d", delegate={"mtu": 1200, "isGateway": False})
    assert (conf["mtu"], conf["isGateway"]) == (1200, False)


def test_network_configs_for_each_backend() -> None:
    assert network_config("vxlan") == {"Network": str(POD_NETWORK), "SubnetLen": 24,
                                       "Backend": {"Type": "vxlan", "VNI": 1, "Port": 8472}}
    assert network_config("host-gw")["Backend"] == {"Type": "host-gw"}


def test_cni_environment_and_result() -> None:
    env = cni_environment("ADD", "pod1", "/run/netns/pod1", "/usr/lib/cni")
    assert env["CNI_COMMAND"] == "ADD" and env["CNI_IFNAME"] == "eth0" and env["CNI_NETNS"] == "/run/netns/pod1"
    result = json.dumps({"cniVersion": "0.3.1", "ips": [{"version": "4", "address": "10.244.7.2/24"}]})
    assert pod_address(result) == ipaddress.IPv4Interface("10.244.7.2/24")
    with pytest.raises(ValueError):
        pod_address('{"ips": []}')
    with pytest.raises(ValueError):
        pod_address("not json")


def test_pod_namespaces_carry_the_lab_prefix() -> None:
    assert pod_netns("evlfl-", 3) == "evlfl-q3"


CLEAN = [
    "22:40:01.000001 IP 198.51.100.11.40000 > 198.51.100.13.50000: UDP, length 1200",
    "22:40:01.000002 IP 198.51.100.11.41000 > 198.51.100.1.5222: tcp 120",
    "22:40:01.000003 IP 198.51.100.1.3478 > 198.51.100.12.40001: UDP, length 80",
    "22:40:01.000004 ARP, Request who-has 198.51.100.13 tell 198.51.100.11, length 28",
    "22:53:05.061580 ARP, Reply 198.51.100.11 is-at 6e:03:07:99:9a:01, length 28",
    "23:15:01.1 IP 198.51.100.1 > 198.51.100.11: ICMP redirect 10.10.3.2 to host 198.51.100.13, length 36",
    "23:15:01.2 IP 198.51.100.13 > 198.51.100.11: ICMP 198.51.100.13 udp port 40000 unreachable, length 36",
]


def test_a_capture_of_evios_udp_and_signaling_is_clean() -> None:
    verdict = capture_verdict(parse_tcpdump(CLEAN), signal_server=SERVER, signal_port=5222)
    assert verdict.clean
    assert (verdict.packets, verdict.udp, verdict.signaling, verdict.arp, verdict.icmp_control) == (7, 2, 1, 2, 2)


@pytest.mark.parametrize("line, field", [
    ("22:40:01.1 IP 198.51.100.11.43210 > 198.51.100.13.8472: UDP, length 1428", "vxlan"),
    ("22:40:01.1 IP 10.244.1.2 > 10.244.3.2: ICMP echo request, id 1, seq 1, length 64", "pod_addressed"),
    ("22:40:01.1 IP 198.51.100.11.41000 > 198.51.100.13.80: tcp 0", "other"),
    ("22:40:01.1 IP 198.51.100.11 > 198.51.100.13: ICMP echo request, id 1, seq 1, length 64", "other"),
    ("22:40:01.1 ARP, Request who-has 10.244.3.2 tell 10.244.1.2, length 28", "pod_addressed"),
    ("22:40:01.1 IP6 fe80::1 > ff02::2: ICMP6, router solicitation, length 16", "other"),
])
def test_vxlan_pod_addresses_or_anything_else_make_a_capture_dirty(line: str, field: str) -> None:
    verdict = capture_verdict(parse_tcpdump([*CLEAN, line]), signal_server=SERVER, signal_port=5222)
    assert not verdict.clean
    assert getattr(verdict, field)
