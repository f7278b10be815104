"""Review21t finding 2 (decision 0076, amended for review21s 1; decision 0045): the bridge's link-local address is
made by EUI-64 only when the host's default says so, and the DAD guard covers no other.

Decision 0076's limits say: "Addresses not made from a MAC (RFC 7217 stable privacy, RFC 8981 temporary, ...) are
judged as before: any member that sees their owner's probe can fail them ... The bridge makes its link-local address
by EUI-64 (0045), so the bridge's is covered." `OvsBridge._ipv6_link_local` sets `addrgenmode eui64` only on a port
an earlier release left at `none`; otherwise the internal port keeps whatever mode the kernel gave a new interface:
`net.ipv6.conf.default.addr_gen_mode` (2 stable_secret / 3 random, or stable privacy whenever
`net.ipv6.conf.default.stable_secret` is set, as hardening guides and some images do). Then the bridge's link-local
address is not made from its MAC, `neighbor_guard`'s holder judge (`holder_flows`, the DAD probe flow) cannot tell
whose it is, and any member seeing the bridge's DAD probe (flooded overlay-wide to the solicited-node group) fails it
with one NA or probe of its own. Stable privacy retries with the next DAD counter up to `idgen_retries` (3) and then
gives up: no link-local address, hence no router solicitation, no SLAAC, no IPv6 on the overlay for that node.
`ip -j -d link show` reports such a port as `"inet6_addr_gen_mode": "stable_secret"` or `"random"`. Measured on
this kernel in a fresh network namespace with `net.ipv6.conf.default.addr_gen_mode=3`: a new interface reads
`"random"` and its link-local address is `fe80::e68e:bae1:d241:7f1` (flag `stable-privacy`) for MAC
`ca:2a:e2:8d:91:70`: not its EUI-64. And (unit, fake network with the real switch and its flows, 6-node ring,
trust mode) member A's DAD probe for that address of V's, from A's own MAC, two hops away, is delivered to V's
interface with 0 drops, as 0076's limit says of addresses not made from a MAC.

Rated medium (conditional): a denial of a chosen member's IPv6 on the overlay by any member, each time its bridge
comes up, on hosts whose default address generation mode is not EUI-64; the accepted limit's premise does not hold
there. Suggested fix: set `addrgenmode eui64` on the internal port whenever it reads anything but `eui64` (before
it comes up, as for `none`), so the premise of 0076's limit is enforced rather than assumed.
"""

from __future__ import annotations

import pytest

from evio.bridge import BridgeSpec, OvsBridge
from tests.unit.bridge.test_bridge_ovs import RecordingRunner


@pytest.mark.parametrize("mode", ["stable_secret", "random"])
async def test_the_bridge_link_local_address_is_made_by_eui64_whatever_the_hosts_default(mode: str) -> None:
    shown = f'[{{"ifname": "evobr0", "flags": ["UP"], "inet6_addr_gen_mode": "{mode}"}}]'
    runner = RecordingRunner({"show": shown})
    await OvsBridge(BridgeSpec("evobr0", 6653, "10.10.0.5/24"), runner, "system").create()
    ip = [c for c in runner.calls if c[0] == "ip"]
    assert ["ip", "link", "set", "dev", "evobr0", "addrgenmode", "eui64"] in ip
    assert ip[-1] == ["ip", "link", "set", "evobr0", "up"]
