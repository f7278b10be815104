"""A node's overlay address derived from its node id within a pool (`bridge.address_pool`). Pure.

For fleets where every node runs the same config (a Kubernetes DaemonSet), no
node may need its own `bridge.address`. With `address_pool` the address is

    host = 1 + node_id mod (usable host addresses of the pool)
    address = pool's network address + host, with the pool's prefix length

so it is the same on every start (the node id is kept in state_dir/node_id or
set as node.id), never the network or (IPv4) broadcast address, and a node
configured with ids 1, 2, 3 ... gets .1, .2, .3 .... Two node ids can still
map to one address (birthday odds: about n^2 / 2^(host bits + 1)); the daemon
compares every member's derived address with its own and reports a collision
(`conflicting_peers`, logged and shown in the status), and the fix is a bigger
pool or a set node.id.
"""

from __future__ import annotations

import ipaddress

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Interface = ipaddress.IPv4Interface | ipaddress.IPv6Interface

MIN_HOSTS = 2  # a pool of one host address could hold one node only


def usable_hosts(pool: Network) -> int:
    """Host addresses a pool can give: IPv4 without the network and broadcast addresses, IPv6 without the first."""
    return pool.num_addresses - (2 if pool.version == 4 else 1)


def pool_problem(text: str) -> str | None:
    """Why `text` is not a usable pool ("10.254.0.0/16"), or None."""
    try:
        pool = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        return f"{text!r} is not a network with prefix length (host bits must be zero): {exc}"
    if usable_hosts(pool) < MIN_HOSTS:
        return f"{pool} has fewer than {MIN_HOSTS} host addresses"
    if pool.is_multicast or pool.is_loopback or pool.is_unspecified:
        return f"{pool} is not a unicast network"
    return None


def derive_address(pool: Network, node_id: int) -> Interface:
    """This node's address in `pool` (see the module's doc)."""
    if node_id < 0:
        raise ValueError("node ids are not negative")
    host = 1 + node_id % usable_hosts(pool)
    return ipaddress.ip_interface(f"{pool.network_address + host}/{pool.prefixlen}")


def conflicting_peers(pool: Network, node_id: int, peers: list[int]) -> list[int]:
    """The peers whose derived address is this node's."""
    mine = derive_address(pool, node_id)
    return [peer for peer in peers if peer != node_id and derive_address(pool, peer) == mine]
