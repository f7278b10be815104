"""A small internet of simulated hosts: a public segment, a server, and sites behind NAT routers.

    public segment (namespace P-pub, bridge br0: 203.0.113.1/24 and 198.51.100.1/24, routes between them)
      |- server        203.0.113.10                  host "server"
      |- router r1     198.51.100.11  NAT  10.1.0.1  -- node1 10.1.0.2    (site 1, "eim" or "symmetric")
      |- router r2     198.51.100.12  NAT  10.2.0.1  -- node2 10.2.0.2
      '- node3         198.51.100.103, no NAT, its own stateful firewall  (site 3, "none")

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
NFT_TABLE = "evio_site"
MAX_SITES = 80  # site N: router 198.51.100.(10+N), public host 198.51.100.(100+N), LAN 10.N.0.0/24


@dataclass(frozen=True)
class Site:
    """One site: a node host behind a NAT router ("eim": endpoint-independent mapping, "symmetric": a
    new port per destination), or ("none") a host on the public segment with a stateful firewall.
    `mtu` lowers the MTU of the site's access link (router to node, or the host's own interface)."""

    nat: NatKind = "eim"
    mtu: int | None = None


@dataclass
class Router:
    namespace: Namespace
    wan_address: str
    lan_address: str
    nat: NatKind

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

    def __init__(self, sites: list[Site], *, workdir: Path | None = None, prefix: str | None = None) -> None:
        if len(sites) > MAX_SITES:
            raise ValueError(f"at most {MAX_SITES} sites")
        self.sites = list(sites)
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

    def _attach(self, ns: Namespace, inside: str, port: str, address: str, gateway: str, mtu: int | None) -> None:
        """A veth from `ns` (interface `inside`) to the public bridge (port `port`)."""
        self._namespace(ns)
        ns.add_veth(inside, self.public, port)
        self.public.ip(f"link set {port} master br0", f"link set {port} up")
        ns.ip(
            f"address add {address}/24 dev {inside}",
            *([f"link set {inside} mtu {mtu}"] if mtu else []),
            f"link set {inside} up",
            f"route add default via {gateway}",
        )
        if isinstance(ns, Host):
            ns.address = ns.public_address = address

    def _site(self, site: Site) -> Host:
        index = len(self.nodes) + 1
        if index > MAX_SITES:
            raise ValueError(f"at most {MAX_SITES} sites")
        node = self._host(f"node{index}")
        self.nodes.append(node)
        if site.nat == "none":
            self._attach(node, "eth0", node.name, f"198.51.100.{100 + index}", PUBLIC_GATEWAYS[1], site.mtu)
            node.run(["nft", "-f", "-"], input=host_firewall())
            self.routers.append(None)
        else:
            self._behind_router(index, node, site)
        for address, names in self._names:  # the names every host knows
            node.add_hosts_entry(address, *names)
        if site.nat == "none":  # a host behind NAT has no address others could use
            self.add_name(node.address, node.name)
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


def host_firewall() -> str:
    """A public host's stateful firewall: replies and ping in, nothing unsolicited."""
    return (
        f"table ip {NFT_TABLE} {{\n"
        "  chain input {\n"
        "    type filter hook input priority filter; policy drop;\n"
        '    iif "lo" accept\n'
        "    ct state established,related accept\n"
        "    icmp type echo-request accept\n"
        "  }\n"
        "}\n"
    )


def _quietly(step: Callable[[], object]) -> None:
    try:
        step()
    except Exception:  # cleanup goes on; the failure is logged
        log.exception("cleanup step failed")
