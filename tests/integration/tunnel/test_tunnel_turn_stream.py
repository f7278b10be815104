"""TURN over TCP and TLS for sites that drop UDP, and several TURN servers (issue 22; decision 0049).

Real parts: the lab's NAT routers (nftables), its coturn (STUN and TURN on UDP and TCP), extra coturns
with TLS certificates made here, tunnel endpoint processes with TAPs, iperf3 through the tunnel.
Printed with -s: the TCP rate through a tunnel relayed over TURN/TCP; with two TURN servers and the one under the
tunnel killed (SIGKILL), how long until a ping crossed the tunnel again (decision 0057).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from evio.lab.lab import Lab
from evio.lab.tunnel_testbed import EndpointProcess, iperf, ping_rtt, run
from evio.testing.labs import LabFactory
from evio.testing.waiting import wait_until_blocking

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


@dataclass
class Pair:
    a: EndpointProcess
    b: EndpointProcess
    up_a: dict[str, Any]
    up_b: dict[str, Any]


@contextmanager
def turn_endpoints(lab: Lab, workdir: Path, turn: list[str], extra: list[str] | None = None) -> Iterator[Pair]:
    """Node 2's endpoint waits for the offer, node 1's connects (as test_tunnel.py's ``endpoints``); both stopped on exit."""
    n1, n2 = lab.node(1), lab.node(2)
    pub = lab.public
    common = ["--signal-dir", str(workdir), "-v", "--stun", f"{pub.address}:{pub.stun_port}",
              *(a for t in turn for a in ("--turn", t)), "--turn-secret", pub.turn_secret, *(extra or [])]  # fmt: skip
    procs: list[EndpointProcess] = []
    try:
        b = EndpointProcess(n2.netns, ["--node", n2.node_id, "--peer", n1.node_id, "--address", str(n2.overlay_address),
                                       "--exit-on-down", *common], workdir / "b.log")  # fmt: skip
        procs.append(b)
        b.wait_event("ready")
        a = EndpointProcess(n1.netns, ["--node", n1.node_id, "--peer", n2.node_id, "--connect", "--address",
                                       str(n1.overlay_address), *common], workdir / "a.log")  # fmt: skip
        procs.append(a)
        yield Pair(a, b, a.wait_event("up", timeout=15), b.wait_event("up", timeout=15))
    finally:
        for p in procs:
            p.stop()


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


# -- TURN over TLS: extra coturns in the lab's public namespace, with certificates made here ------------


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def make_certificates(directory: Path, address: str) -> dict[str, Path]:
    """A CA (ca.pem), a server certificate for ``address`` (good.pem/.key) and one for another name (wrong.pem/.key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "evio test TURN CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))  # fmt: skip
    files = {"ca": directory / "ca.pem"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    names: dict[str, x509.GeneralName] = {"good": x509.IPAddress(ipaddress.ip_address(address)),
                                          "wrong": x509.DNSName("turn.elsewhere.example")}  # fmt: skip
    for label, name in names.items():
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, label)]))
                .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([name]), critical=False)
                .sign(ca_key, hashes.SHA256()))  # fmt: skip
        files[f"{label}_cert"] = directory / f"{label}.pem"
        files[f"{label}_key"] = directory / f"{label}.key"
        files[f"{label}_cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files[f"{label}_key"].write_bytes(_key_pem(key))
    return files


@contextmanager
def extra_coturn(lab: Lab, directory: Path, port: int, relay_ports: tuple[int, int],
                 cert: tuple[Path, Path] | None = None) -> Iterator[subprocess.Popen[bytes]]:  # fmt: skip
    """Another coturn in the public namespace: STUN and TURN on ``port`` (UDP, TCP) and, with ``cert``, TLS on
    ``port + 1``; the lab's REST secret; stopped (by its pid) on exit."""
    pub = lab.public
    directory.mkdir(parents=True, exist_ok=True)
    argv = ["turnserver", "-n", f"--listening-ip={pub.address}", f"--listening-port={port}", f"--relay-ip={pub.address}",
            f"--min-port={relay_ports[0]}", f"--max-port={relay_ports[1]}", f"--realm={pub.domain}", "--use-auth-secret",
            f"--static-auth-secret={pub.turn_secret}", "--fingerprint", "--no-dtls", "--no-cli", "--no-rfc5780",
            "--no-software-attribute", f"--userdb={directory / 'turndb'}", f"--pidfile={directory / 'pid'}",
            "--log-file=stdout", "--simple-log", "--denied-peer-ip=10.0.0.0-10.255.255.255"]  # fmt: skip
    if cert is not None:
        argv += [f"--tls-listening-port={port + 1}", f"--cert={cert[0]}", f"--pkey={cert[1]}"]
    else:
        argv += ["--no-tls"]
    with open(directory / "coturn.log", "wb") as log:
        process = subprocess.Popen(["ip", "netns", "exec", pub.netns, *argv], stdout=log, stderr=subprocess.STDOUT)
    try:
        ports = [("tcp", port), *([("tcp", port + 1)] if cert is not None else [])]
        wait_until_blocking(lambda: all(f":{p} " in run(["ss", "-Hltn"], pub.netns).stdout for _, p in ports), 10,
                            what=f"coturn on {port}")  # fmt: skip
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def test_turn_over_tls_carries_a_udp_blocked_site_and_a_wrong_tls_name_is_reported_and_skipped(
    lab_factory: LabFactory, workdir: Path
) -> None:
    lab = lab_factory(nodes=2, nat="eim")
    block_udp(lab, 1)
    pub = lab.public
    certs = make_certificates(workdir, str(pub.address))
    # Ports of their own, and relay ports below the lab coturn's range (49152-65535).
    good, wrong = pub.stun_port + 10, pub.stun_port + 20
    with extra_coturn(lab, workdir / "wrong", wrong, (40000, 40999), (certs["wrong_cert"], certs["wrong_key"])), \
            extra_coturn(lab, workdir / "good", good, (41000, 41999), (certs["good_cert"], certs["good_key"])):  # fmt: skip
        # Two servers over TLS only; the one whose certificate names another host is named and skipped.
        turn = [f"turns:{pub.address}:{wrong + 1}", f"turns:{pub.address}:{good + 1}"]
        with turn_endpoints(lab, workdir, turn, ["--turn-ca", str(certs["ca"])]) as pair:
            assert (pair.up_a["path"], pair.up_a["transport"]) == ("relay", "tls"), pair.up_a
            assert pair.up_a["setup"] < 5.0, pair.up_a
            ping_both(lab)
            n1, n2 = lab.node(1), lab.node(2)
            result = iperf(n1.netns, n2.netns, str(n2.overlay_address.ip), seconds=3)
            print(f"\nTCP through a tunnel relayed over TURN/TLS: {result['mbit']:.0f} Mbit/s out of the UDP-blocked site "
                  f"(load {os.getloadavg()[0]:.2f})")  # fmt: skip
            assert result["mbit"] > 1, result
            assert pair.a.stats()["transport"] == "tls"
        log = pair.a.log_path.read_text()
        assert f"turn/tls server {pub.address}:{wrong + 1} gave no candidate: TLS certificate not accepted" in log, log[-3000:]


# -- two TURN servers, the one under the tunnel killed: the standby on the other carries on (decision 0057) ----

FAILOVER_WITHIN = 2.0  # issue 22: every relayed link carries traffic again within this


def _pings(netns: str, address: str) -> bool:
    return run(["ping", "-c1", "-W0.2", address], netns, check=False, timeout=5).returncode == 0


@pytest.mark.parametrize("ends", ["tcp+udp", "udp+udp"])
def test_the_tunnel_moves_to_its_standby_when_the_turn_server_under_it_is_killed(lab_factory: LabFactory, workdir: Path,
                                                                                 ends: str) -> None:  # fmt: skip
    """tcp+udp: node 1's site drops UDP, its stream to the killed server closes and it moves; node 2 follows.
    udp+udp: relay only, both ends on UDP: the server's death shows only as silence, and a probe unanswered moves both."""
    lab = lab_factory(nodes=2, nat="eim")
    if ends == "tcp+udp":
        block_udp(lab, 1)
    pub = lab.public
    ports = (pub.stun_port + 30, pub.stun_port + 40)
    with extra_coturn(lab, workdir / "t1", ports[0], (42000, 42999)) as first, \
            extra_coturn(lab, workdir / "t2", ports[1], (43000, 43999)) as second:  # fmt: skip
        coturns = {f"{pub.address}:{ports[0]}": first, f"{pub.address}:{ports[1]}": second}
        with turn_endpoints(lab, workdir, list(coturns), [] if ends == "tcp+udp" else ["--relay", "only"]) as pair:
            assert (pair.up_a["path"], pair.up_a["transport"]) == ("relay", ends.split("+")[0]), pair.up_a
            ping_both(lab)

            def standbys() -> bool:
                return all((e.stats().get("relay") or {}).get("standby") == "ready" for e in (pair.a, pair.b))

            wait_until_blocking(standbys, 20, what="both ends' standby answered", interval=0.2)
            relay_a, relay_b = pair.a.stats()["relay"], pair.b.stats()["relay"]
            # Both ends on one server, their standbys on the other; nothing allocated beyond the two.
            assert relay_a["server"] == relay_b["server"] and relay_a["standby_server"] == relay_b["standby_server"], (relay_a, relay_b)
            assert relay_a["server"] != relay_a["standby_server"], relay_a
            assert relay_a["allocations"] == relay_b["allocations"] == 2, (relay_a, relay_b)

            n1, n2 = lab.node(1), lab.node(2)
            under = coturns[relay_a["server"]]
            under.kill()  # SIGKILL: the TCP stream from node 1 closes, node 2's UDP allocation just goes silent
            killed = time.monotonic()
            print(f"\nkilled at {time.strftime('%H:%M:%S')},{int(time.time() * 1000) % 1000:03d}")
            wait_until_blocking(lambda: _pings(n1.netns, str(n2.overlay_address.ip)), 30, what="a ping across again", interval=0.01)
            again = time.monotonic() - killed
            print(f"\n[{ends}] TURN server under the tunnel killed: a ping crossed again after {again:.3f} s"
                  f" (load {os.getloadavg()[0]:.2f})")  # fmt: skip
            for end in (pair.a, pair.b):  # what each end saw, and when (with -s)
                print(*(line for line in end.log_path.read_text().splitlines()
                        if any(w in line for w in ("TURN server", "standby", "probed", "moved", "silent", "dead"))), sep="\n")
            ping_both(lab)
            after_a, after_b = pair.a.stats(), pair.b.stats()
            assert after_a["relay"]["server"] == after_b["relay"]["server"] == relay_a["standby_server"], (after_a, after_b)
            assert after_a["relay"]["failovers"] == after_b["relay"]["failovers"] == 1, (after_a, after_b)
            assert not [e for e in (*pair.a.events, *pair.b.events) if e["event"] == "down"]  # moved, never re-made
            assert after_a["path"] == after_b["path"] == "relay", (after_a, after_b)
            _, received = ping_rtt(n2.netns, str(n1.overlay_address.ip), 20, 0.02)
            assert received == 20
            assert pair.a.proc.poll() is None and pair.b.proc.poll() is None
            assert again < FAILOVER_WITHIN, again
