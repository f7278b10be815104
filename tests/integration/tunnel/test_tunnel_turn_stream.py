"""TURN over TCP and TLS for sites that drop UDP, and several TURN servers (issue 22; decision 0049).

Real parts: the lab's NAT routers (nftables), its coturn (STUN and TURN on UDP and TCP), extra coturns
with TLS certificates made here, tunnel endpoint processes with TAPs, iperf3 through the tunnel.
Printed with -s: the TCP rate through a tunnel relayed over TURN/TCP.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from evio.lab.lab import Lab
from evio.lab.tunnel_testbed import iperf, ping_rtt
from evio.testing.labs import LabFactory
from tests.integration.tunnel.test_tunnel import Pair, endpoints

pytestmark = pytest.mark.integration


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="evt-") as d:
        yield Path(d)


def block_udp(lab: Lab, node: int) -> None:
    """Node ``node``'s router drops every UDP datagram it would forward, both ways (a site that blocks UDP)."""
    ruleset = (
        "table inet evio_no_udp {\n"
        "  chain forward { type filter hook forward priority -10; policy accept; meta l4proto udp drop; }\n"
        "}\n"
    )
    subprocess.run(["ip", "netns", "exec", lab.node(node).router_netns, "nft", "-f", "-"], input=ruleset, text=True,
                   check=True, timeout=10)  # fmt: skip


def turn_endpoints(lab: Lab, workdir: Path, turn: list[str], extra: list[str] | None = None, **kwargs: object) -> AbstractContextManager[Pair]:
    n1, n2 = lab.node(1), lab.node(2)
    pub = lab.public
    args = ["--stun", f"{pub.address}:{pub.stun_port}", *(a for t in turn for a in ("--turn", t)), "--turn-secret", pub.turn_secret,
            *(extra or [])]  # fmt: skip
    return endpoints(n1.netns, n2.netns, (n1.node_id, n2.node_id), (str(n1.overlay_address), str(n2.overlay_address)),
                     args, workdir, **kwargs)  # type: ignore[arg-type]  # fmt: skip


def ping_both(lab: Lab) -> None:
    n1, n2 = lab.node(1), lab.node(2)
    for a, b in ((n1, n2), (n2, n1)):
        _, received = ping_rtt(a.netns, str(b.overlay_address.ip), 5, 0.05)
        assert received == 5, (a.name, b.name)


@pytest.mark.parametrize("datapath", ["native", "python"])
def test_a_site_that_drops_udp_tunnels_over_turn_tcp(lab_factory: LabFactory, workdir: Path, datapath: str) -> None:
    lab = lab_factory(nodes=2, nat="eim")
    block_udp(lab, 1)
    pub = lab.public
    with turn_endpoints(lab, workdir, [f"{pub.address}:{pub.stun_port}"], ["--datapath", datapath]) as pair:
        # Node 1 reaches the TURN server over TCP (UDP got no answer); node 2 over UDP as before.
        assert (pair.up_a["path"], pair.up_a["transport"]) == ("relay", "tcp"), pair.up_a
        assert pair.up_a["setup"] < 5.0, pair.up_a
        assert pair.up_b["transport"] == "udp", pair.up_b
        assert "allocated over tcp (udp: no allocation first)" in pair.a.log_path.read_text()  # said by name
        ping_both(lab)
        n1, n2 = lab.node(1), lab.node(2)
        result = iperf(n1.netns, n2.netns, str(n2.overlay_address.ip), seconds=3)
        back = iperf(n2.netns, n1.netns, str(n1.overlay_address.ip), seconds=3)
        load = os.getloadavg()[0]
        print(f"\n[{datapath}] TCP through a tunnel relayed over TURN/TCP: {result['mbit']:.0f} Mbit/s out of the "
              f"UDP-blocked site, {back['mbit']:.0f} Mbit/s into it (load {load:.2f})")  # fmt: skip
        assert result["mbit"] > 1 and back["mbit"] > 1, (result, back)
        stats = pair.a.stats()
        assert stats["transport"] == "tcp" and stats["path"] == "relay", stats
