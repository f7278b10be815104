"""A small internet of simulated hosts: a public segment, a server, and sites behind NAT routers.

    public segment (namespace P-pub, bridge br0: 203.0.113.1/24 and 198.51.100.1/24, routes between them)
      |- server        203.0.113.10                  host "server"
      |- router r1     198.51.100.11  NAT  10.1.0.1  -- node1 10.1.0.2    (site 1, "eim" or "symmetric")
      |- router r2     198.51.100.12  NAT  10.2.0.1  -- node2 10.2.0.2
      '- node3         198.51.100.103, no NAT, its own stateful firewall  (site 3, "none")

With IPv6 (`Internet(..., ipv6=True)`, or any site that has it) br0 also routes 2001:db8::/64, the
server is dual-stack (2001:db8::10, both addresses under the name "server"), and a site may have IPv6:

      |- router rN     2001:db8::(10+N)  routes 2001:db8:N::/64, stateful firewall, no NAT  -- nodeN 2001:db8:N::2
      '- nodeN         2001:db8::(100+N) on the segment, its own stateful firewall          (site "none")

    Site("eim", ipv6=True)                 dual stack: IPv4 behind NAT, IPv6 behind the router's firewall
    Site("none", ipv4=False, ipv6=True)    IPv6 only: no IPv4 address or route at all
    Site("eim")                            IPv4 only, as before

The firewalls for IPv6 are the home router's (RFC 6092): replies and ICMPv6 in, nothing unsolicited.

Both ranges are TEST-NETs (RFC 5737), so coturn's default deny list for RFC 1918 peers does not
refuse the public addresses. A NAT router forwards to nothing it was not asked for: its input and
forward chains drop new connections from the WAN (they answer ping), as a home router does; that
also keeps an early probe from a peer from taking the port a later outbound mapping wants.

    with Internet([Site("eim"), Site("symmetric"), Site("none")]) as net:
        net.server.run(["evio", "server", "init", ...]); net.nodes[0].run(["evio", "join", token])
        late = net.add_site(Site("eim"))                    # node4, while the others run
        net.add_name(net.server.address, "xmpp.example.org")  # a DNS name, in every host's /etc/hosts

Each host's /etc/hosts names the server ("server") and the hosts without NAT (a name for a host
behind NAT would lead nowhere).

Every namespace is named PREFIX-<name>, PREFIX being "evh" and 4 random characters not in use, so
parallel runs and other labs do not collide (tests/conftest.py's leak check sees "ev..."). Veths are
created straight into their namespaces, so none is ever in the real root. Leaving the context (or
`close()`) ends every process, deletes the namespaces, the backing directories (if the harness made
the work directory) and the mount points it created, whatever happened in between; a step that
fails while building undoes the steps before it.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import string
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from evio.testing.hosts import HOST_PATHS, Host, Namespace, netns_list
from evio.testing.mount_points import MountPoints

__all__ = ["Internet", "NatKind", "Router", "Site", "unique_prefix"]

log = logging.getLogger(__name__)

NatKind = Literal["eim", "symmetric", "none"]

PUBLIC_GATEWAYS = ("203.0.113.1", "198.51.100.1")  # br0 in the public namespace routes between the two
SERVER_ADDRESS = "203.0.113.10"
PUBLIC_V6_GATEWAY = "2001:db8::1"  # br0's IPv6 address (RFC 3849, documentation), 2001:db8::/64
SERVER_V6_ADDRESS = "2001:db8::10"
NFT_TABLE = "evio_site"
MAX_SITES = 80  # site N: router 198.51.100.(10+N), public host 198.51.100.(100+N), LAN 10.N.0.0/24


@dataclass(frozen=True)
class Site:
    """One site: a node host behind a NAT router ("eim": endpoint-independent mapping, "symmetric": a
    new port per destination), or ("none") a host on the public segment with a stateful firewall.
    `mtu` lowers the MTU of the site's access link (router to node, or the host's own interface)."""

    nat: NatKind = "eim"
    mtu: int | None = None
    ipv4: bool = True
    ipv6: bool = False
    """A public IPv6 address: on the segment (nat "none"), or in the router's routed /64 behind its firewall."""

    def __post_init__(self) -> None:
        if not self.ipv4 and self.nat != "none":
            raise ValueError("a site without IPv4 has no NAT: nat must be 'none'")
        if not (self.ipv4 or self.ipv6):
            raise ValueError("a site needs IPv4, IPv6 or both")


@dataclass
class Router:
    namespace: Namespace
    wan_address: str
    lan_address: str
    nat: NatKind
    ipv6_address: str = ""  # its WAN IPv6 address, when the site has IPv6

    def run(self, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.namespace.run(argv, check=check)


def unique_prefix() -> str:
    """ "evh" + 4 random characters that no namespace on this machine starts with."""
    taken = netns_list()
    alphabet = string.ascii_lowercase + string.digits
    while True:
        prefix = "evh" + "".join(secrets.choice(alphabet) for _ in range(4))
        if not any(ns.startswith(prefix) for ns in taken):
            return prefix


class Internet:
    """The network above, built on `__enter__` (or `up()`) and removed on `__exit__` (or `close()`)."""

    def __init__(self, sites: list[Site], *, workdir: Path | None = None, prefix: str | None = None,
                 ipv6: bool = False) -> None:
        if len(sites) > MAX_SITES:
            raise ValueError(f"at most {MAX_SITES} sites")
        self.sites = list(sites)
        self.ipv6 = ipv6 or any(site.ipv6 for site in sites)
        self.prefix = prefix or unique_prefix()
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix=f"{self.prefix}-"))
        self.workdir.chmod(0o755)
        self.public = Namespace(f"{self.prefix}-pub")
        self.server = self._host("server")
        self.nodes: list[Host] = []
        self.routers: list[Router | None] = []  # one per site; None for a site without NAT
        self.setup_seconds = 0.0
        self.teardown_seconds = 0.0
        self._namespaces: list[Namespace] = []
        self._mount_points = MountPoints()
        self._claimed = False
        self._names: list[tuple[str, tuple[str, ...]]] = []  # /etc/hosts lines every host gets

    @property
    def hosts(self) -> list[Host]:
        return [self.server, *self.nodes]

    def __enter__(self) -> Internet:
        return self.up()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- building ------------------------------------------------------------------------------------

    def up(self) -> Internet:
        started = time.monotonic()
        try:
            self._mount_points.claim(self.prefix, HOST_PATHS, self.workdir if self._own_workdir else None)
            self._claimed = True
            self._public_segment()
            self._attach(self.server, "eth0", "server", SERVER_ADDRESS, PUBLIC_GATEWAYS[0], mtu=None)
            self.add_name(SERVER_ADDRESS, self.server.name)
            if self.ipv6:
                self._public_ipv6()
            for site in self.sites:
                self._site(site)
        except BaseException:
            self.close()
            raise
        self.setup_seconds = time.monotonic() - started
        log.info("internet up prefix=%s sites=%s in %.2f s", self.prefix, len(self.sites), self.setup_seconds)
        return self

    def add_site(self, site: Site) -> Host:
        """One more site while the others run (a member joining later); its node host. What fails
        half-way is removed with the rest by `close()`."""
        self.sites.append(site)
        if site.ipv6 and not self.ipv6:
            self.ipv6 = True
            self._public_ipv6()
        return self._site(site)

    def add_name(self, address: str, *names: str) -> None:
        """A DNS name stand-in: `names` resolve to `address` on every host, also on hosts added later."""
        self._names.append((address, names))
        for host in self.hosts:
            host.add_hosts_entry(address, *names)

    def _host(self, name: str) -> Host:
        return Host(f"{self.prefix}-{name}", name, self.workdir / name / "fs")

    def _namespace(self, ns: Namespace) -> Namespace:
        self._namespaces.append(ns)  # before create: close() deletes it even if create fails half-way
        ns.create()
        if self.ipv6:
            # No duplicate address detection on the interfaces to come: a link-local address stays tentative
            # for a second, and a router's first neighbour solicitation from it got no answer (first pings lost).
            sysctl = ["sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0", "net.ipv6.conf.all.accept_dad=0"]
            subprocess.run(Namespace.exec_argv(ns, sysctl), check=True, capture_output=True)  # no host files yet
        if isinstance(ns, Host):
            ns.seed()
        return ns

    def _public_segment(self) -> None:
        pub = self._namespace(self.public)
        pub.ip(
            "link add br0 type bridge",
            *(f"address add {gw}/24 dev br0" for gw in PUBLIC_GATEWAYS),
            "link set br0 up",
        )
        pub.run(["sysctl", "-qw", "net.ipv4.ip_forward=1"])

    def _public_ipv6(self) -> None:
        """IPv6 on the segment (br0 routes it) and on the server, which is then dual-stack."""
        self.public.ip(f"address add {PUBLIC_V6_GATEWAY}/64 dev br0 nodad")
        self.public.run(["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"])
        self.server.ip(f"address add {SERVER_V6_ADDRESS}/64 dev eth0 nodad", f"route add default via {PUBLIC_V6_GATEWAY}")
        self.server.ipv6_address = SERVER_V6_ADDRESS
        self.add_name(SERVER_V6_ADDRESS, self.server.name)

    def _attach(self, ns: Namespace, inside: str, port: str, address: str | None, gateway: str, mtu: int | None,
                ipv6: str | None = None) -> None:
        """A veth from `ns` (interface `inside`) to the public bridge (port `port`); `address` None: no IPv4,
        `ipv6`: an address in the segment's /64 (addresses are added without duplicate detection, usable at once)."""
        self._namespace(ns)
        ns.add_veth(inside, self.public, port)
        self.public.ip(f"link set {port} master br0", f"link set {port} up")
        ns.ip(
            *([f"address add {address}/24 dev {inside}"] if address else []),
            *([f"address add {ipv6}/64 dev {inside} nodad"] if ipv6 else []),
            *([f"link set {inside} mtu {mtu}"] if mtu else []),
            f"link set {inside} up",
            *([f"route add default via {gateway}"] if address else []),
            *([f"route add default via {PUBLIC_V6_GATEWAY}"] if ipv6 else []),
        )
        if isinstance(ns, Host):
            ns.address = ns.public_address = address or ipv6 or ""
            ns.ipv6_address = ipv6 or ""

    def _site(self, site: Site) -> Host:
        index = len(self.nodes) + 1
        if index > MAX_SITES:
            raise ValueError(f"at most {MAX_SITES} sites")
        node = self._host(f"node{index}")
        self.nodes.append(node)
        if site.nat == "none":
            self._attach(node, "eth0", node.name, f"198.51.100.{100 + index}" if site.ipv4 else None,
                         PUBLIC_GATEWAYS[1], site.mtu, ipv6=f"2001:db8::{100 + index}" if site.ipv6 else None)
            node.run(["nft", "-f", "-"], input=host_firewall(ipv4=site.ipv4, ipv6=site.ipv6))
            self.routers.append(None)
        else:
            self._behind_router(index, node, site)
        for address, names in self._names:  # the names every host knows
            node.add_hosts_entry(address, *names)
        if site.nat == "none" and site.ipv4:  # a host behind NAT has no address others could use
            self.add_name(node.address, node.name)
        if node.ipv6_address:
            self.add_name(node.ipv6_address, node.name)
        return node

    def _behind_router(self, index: int, node: Host, site: Site) -> None:
        router = Router(Namespace(f"{self.prefix}-r{index}"), f"198.51.100.{10 + index}", f"10.{index}.0.1", site.nat)
        self.routers.append(router)
        self._attach(router.namespace, "wan", f"r{index}", router.wan_address, PUBLIC_GATEWAYS[1], mtu=None)
        self._namespace(node)
        router.namespace.add_veth("lan", node, "eth0")
        mtu = [f"link set {{}} mtu {site.mtu}"] if site.mtu else []
        router.namespace.ip(
            f"address add {router.lan_address}/24 dev lan", *(m.format("lan") for m in mtu), "link set lan up"
        )
        node.ip(
            f"address add 10.{index}.0.2/24 dev eth0", *(m.format("eth0") for m in mtu), "link set eth0 up",
            f"route add default via {router.lan_address}",
        )  # fmt: skip
        node.address, node.public_address = f"10.{index}.0.2", router.wan_address
        router.namespace.run(["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        router.namespace.run(["nft", "-f", "-"], input=nat_ruleset(site.nat))
        if site.ipv6:
            self._routed_ipv6(index, router, node, site)

    def _routed_ipv6(self, index: int, router: Router, node: Host, site: Site) -> None:
        """The home router's IPv6: a routed /64 behind a stateful firewall, no NAT (RFC 6092)."""
        wan, lan = f"2001:db8::{10 + index}", f"2001:db8:{index}::1"
        router.namespace.ip(f"address add {wan}/64 dev wan nodad", f"address add {lan}/64 dev lan nodad",
                            f"route add default via {PUBLIC_V6_GATEWAY}")
        router.namespace.run(["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"])
        router.namespace.run(["nft", "-f", "-"], input=ipv6_firewall("wan", forward=True))
        self.public.ip(f"route add 2001:db8:{index}::/64 via {wan}")
        node.ipv6_address = f"2001:db8:{index}::2"
        node.ip(f"address add {node.ipv6_address}/64 dev eth0 nodad", f"route add default via {lan}")
        router.ipv6_address = wan

    # -- removing ------------------------------------------------------------------------------------

    def close(self) -> None:
        """End every process, delete the namespaces, files and mount points; idempotent, never raises
        for one step so that the next still runs."""
        started = time.monotonic()
        for host in reversed(self.hosts):
            _quietly(host.stop_processes)
        for ns in reversed(self._namespaces):
            _quietly(ns.end_processes)
            _quietly(ns.delete)
        self._namespaces.clear()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self._claimed:
            _quietly(lambda: self._mount_points.release(self.prefix))
            self._claimed = False
        self.teardown_seconds = time.monotonic() - started
        log.info("internet down prefix=%s in %.2f s", self.prefix, self.teardown_seconds)


# -- nftables ----------------------------------------------------------------------------------------------


def nat_ruleset(kind: NatKind) -> str:
    """A NAT router's ruleset; its WAN interface is "wan".

    eim: plain masquerade keeps the inside source port when free, so one inside socket has one outside
         address:port whatever the destination (endpoint-independent mapping: hole punching works).
    symmetric: `fully-random` draws a new port for every new connection (5-tuple), so each destination
         sees another mapping (hole punching fails; TURN is needed).
    """
    if kind == "none":
        raise ValueError("a site without NAT has no router")
    masquerade = "masquerade fully-random" if kind == "symmetric" else "masquerade"
    return (
        f"table ip {NFT_TABLE} {{\n"
        "  chain postrouting {\n"
        "    type nat hook postrouting priority srcnat; policy accept;\n"
        f'    oifname "wan" {masquerade}\n'
        "  }\n"
        "  chain input {\n"
        "    type filter hook input priority filter; policy accept;\n"
        '    iifname "wan" icmp type echo-request accept\n'
        '    iifname "wan" ct state new drop\n'
        "  }\n"
        "  chain forward {\n"
        "    type filter hook forward priority filter; policy accept;\n"
        '    iifname "wan" ct state new drop\n'
        "  }\n"
        "}\n"
    )


def host_firewall(ipv4: bool = True, ipv6: bool = False) -> str:
    """A public host's stateful firewall: replies and ping in, nothing unsolicited (per family it has)."""
    v4 = (
        f"table ip {NFT_TABLE} {{\n"
        "  chain input {\n"
        "    type filter hook input priority filter; policy drop;\n"
        '    iif "lo" accept\n'
        "    ct state established,related accept\n"
        "    icmp type echo-request accept\n"
        "  }\n"
        "}\n"
    )
    return (v4 if ipv4 else "") + (ipv6_firewall("eth0", forward=False) if ipv6 else "")


def ipv6_firewall(wan: str, forward: bool) -> str:
    """IPv6 in from `wan`: replies and ICMPv6 (neighbour discovery, packet too big, echo: RFC 4890), nothing
    unsolicited; `forward`: a router's, for the hosts behind it too (RFC 6092's simple security)."""
    chains = ["input", *(["forward"] if forward else [])]
    return (
        f"table ip6 {NFT_TABLE}6 {{\n"
        + "".join(
            f"  chain {chain} {{\n"
            f"    type filter hook {chain} priority filter; policy accept;\n"
            f'    iifname "{wan}" ct state established,related accept\n'
            f'    iifname "{wan}" meta l4proto ipv6-icmp accept\n'
            f'    iifname "{wan}" drop\n'
            "  }\n"
            for chain in chains
        )
        + "}\n"
    )


def _quietly(step: Callable[[], object]) -> None:
    try:
        step()
    except Exception:  # cleanup goes on; the failure is logged
        log.exception("cleanup step failed")
