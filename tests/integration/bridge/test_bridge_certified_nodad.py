"""The kernel's side of decision 0076 (review21n N3): a member's duplicate address detection probe fails an IPv6
address added with DAD while it is tentative, and not one added as the bridge adds a certified address (`nodad`).

One namespace, a veth pair: the address goes on v0 with `BridgeSpec.address_flags`, and at once a probe for it
(an NS from ::, no nonce, as another member floods it) comes in by v1. Without `nodad` the kernel gives the address
up (`dadfailed`); with it, it answers the probe (an NA to all nodes) and keeps the address.

Needs root and `ip`; removes its namespace, pass or fail.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from evio.bridge import BridgeSpec
from evio.testing.frames import dad_probe
from evio.testing.waiting import wait_until_blocking

pytestmark = pytest.mark.integration

ADDRESS = "fd00:76::3/64"
PROBER = "02:00:00:00:00:0a"
# Sends the probe by v1 and says whether an NA for its target came back within 3 s.
_SEND = """
import select, socket, sys, time
frame = bytes.fromhex(sys.argv[1])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x86DD))
s.bind(("v1", 0x86DD))
s.send(frame)
end = time.monotonic() + 3
while (left := end - time.monotonic()) > 0 and select.select([s], [], [], left)[0]:
    got = s.recv(2048)
    if got[20] == 58 and got[54] == 136 and got[62:78] == frame[62:78]:
        print("answered")
        break
"""


def _ns(netns: str, *argv: str) -> str:
    return subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True, timeout=30,
                          check=True).stdout  # fmt: skip


@pytest.fixture
def netns() -> Iterator[str]:
    if shutil.which("ip") is None:
        pytest.skip("needs ip")
    name = f"evdad{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        _ns(name, "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
        for dev in ("v0", "v1"):
            _ns(name, "sysctl", "-q", "-w", f"net/ipv6/conf/{dev}/accept_dad=1")
            _ns(name, "ip", "link", "set", dev, "up")
        wait_until_blocking(lambda: "LOWER_UP" in _ns(name, "ip", "link", "show", "v0"), 10, what="v0 up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


@pytest.mark.parametrize("certified", [False, True])
def test_a_members_probe_fails_the_address_only_where_dad_runs(netns: str, certified: bool) -> None:
    spec = BridgeSpec("v0", 6653, ADDRESS, address_certified=certified)
    _ns(netns, "ip", "address", "replace", ADDRESS, "dev", "v0", *spec.address_flags)
    probe = dad_probe(PROBER, ADDRESS.split("/")[0])
    answered = "answered" in _ns(netns, sys.executable, "-c", _SEND, probe.hex())

    def flags() -> str:  # "global nodad", "global dadfailed tentative", ...
        line = _ns(netns, "ip", "-6", "-o", "address", "show", "dev", "v0", "to", ADDRESS)
        return line.split(" scope ", 1)[1].split("\\", 1)[0].strip()

    if certified:
        print(f"nodad: answered the probe: {answered}; {flags()}")
        assert answered
        assert "tentative" not in flags() and "dadfailed" not in flags()
    else:
        wait_until_blocking(lambda: "dadfailed" in flags(), 5, what="the address given up")
        print(f"with DAD: answered the probe: {answered}; {flags()}")
        assert not answered
