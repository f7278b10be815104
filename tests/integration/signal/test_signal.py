"""Signaling against the lab's real prosody, with every client behind its own NAT.

One 8-node lab (mixed NAT kinds) serves the whole module; each node's
SignalClient runs on a thread inside the node's namespace (evio.lab.signal_bench).
The tests run in file order and the prosody restart comes last.

Run with -s to see the measured figures (logins, discovery, round trips).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import random
import secrets
import socket
import statistics
import string
import subprocess
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
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier
from slixmpp import ClientXMPP

from evio.lab import pki, services
from evio.lab.lab import Lab
from evio.lab.signal_bench import LabNode, NamespaceLoop, all_discovered, start_nodes, stop_nodes, wait_for
from evio.signal.client import SignalClient, SignalSettings  # also registers the <evio/> payload on Message
from evio.signal.drops import DropReason
from evio.signal.errors import ErrorReason, RequestError
from evio.signal.protocol import Body
from evio.testing.prosody import running_prosody, write_config
from evio.testing.waiting import wait_until

pytestmark = pytest.mark.integration

NODES = 8
SLOW = 60.0  # generous deadlines: a loaded 2-core machine


def _lab_name() -> str:
    return "evs" + "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(2))


class Overlay:
    def __init__(self, lab: Lab, nodes: list[LabNode]) -> None:
        self.lab = lab
        self.nodes = nodes
        self.overlay = lab.public.overlay
        self.echo_calls: list[tuple[int, int]] = []  # (callee index, caller node id)
        self.started = min(n.started_at for n in nodes)

    def node(self, index: int) -> LabNode:
        return self.nodes[index - 1]


@pytest.fixture(scope="module")
def overlay() -> Iterator[Overlay]:
    if os.geteuid() != 0:
        pytest.skip("integration test: needs root (network namespaces, nftables, prosody)")
    name = _lab_name()
    try:
        with Lab.up(name, nodes=NODES, nat="mixed") as lab:
            nodes = start_nodes(lab)
            try:
                ov = Overlay(lab, nodes)
                for i, node in enumerate(nodes, start=1):
                    node.call(_register_echo(node, i, ov.echo_calls))
                yield ov
            finally:
                stop_nodes(nodes)
    finally:
        Lab.down(name)


async def _register_echo(node: LabNode, index: int, calls: list[tuple[int, int]]) -> None:
    async def echo(overlay: str, peer: int, body: Body) -> Body:
        calls.append((index, peer))
        return {"echo": body, "by": index}

    node.client.register_handler("test.echo", echo)


def test_eight_nodes_behind_nats_discover_each_other(overlay: Overlay) -> None:
    nodes = overlay.nodes
    wait_for(lambda: all(n.client.connected for n in nodes), SLOW, "all logged in")
    wait_for(lambda: all_discovered(nodes, overlay.overlay), SLOW, "all peers known")
    kinds = {n.info.nat for n in nodes}
    assert len(kinds) > 1, "mixed NAT kinds expected"
    for node in nodes:
        peers = node.client.peers(overlay.overlay)
        assert set(peers) == {n.node_id for n in nodes} - {node.node_id}
        for other in nodes:
            if other is not node:
                assert peers[other.node_id].split("/")[0] == other.info.jid
        assert node.client.drops.total == 0
    logins = sorted(n.client.last_login_seconds or 0.0 for n in nodes)
    all_in = max(n.connected_at[0] for n in nodes) - overlay.started
    all_known = max(max(n.peer_added_at.values()) for n in nodes) - overlay.started
    print(f"\n[signal] {NODES} nodes ({', '.join(sorted(kinds))} NAT): login median "
          f"{statistics.median(logins) * 1e3:.0f} ms (max {logins[-1] * 1e3:.0f}); all logged in after "
          f"{all_in * 1e3:.0f} ms; all peers known after {all_known * 1e3:.0f} ms")


def test_remote_action_round_trip(overlay: Overlay) -> None:
    a, b = overlay.node(1), overlay.node(2)
    ov = overlay.overlay
    reply = a.request(ov, b.node_id, "test.echo", {"hello": [1, 2, 3]})
    assert reply == {"echo": {"hello": [1, 2, 3]}, "by": 2}
    assert (2, a.node_id) in overlay.echo_calls
    with pytest.raises(RequestError) as info:
        a.request(ov, b.node_id, "test.missing", {})
    assert info.value.reason is ErrorReason.UNKNOWN_ACTION
    rtts = []
    for i in range(50):
        src, dst = overlay.node(1 + i % NODES), overlay.node(1 + (i + 3) % NODES)
        t0 = time.monotonic()
        assert src.request(ov, dst.node_id, "test.echo", {"i": i})["echo"] == {"i": i}
        rtts.append(time.monotonic() - t0)
    print(f"\n[signal] remote action RTT over 50 requests: median {statistics.median(rtts) * 1e3:.2f} ms, "
          f"max {max(rtts) * 1e3:.2f} ms")


async def _raw_send(
    server: str, port: int, ca_file: str, jid: str, password: str, to: str, payloads: list[str]
) -> None:
    """Log in as `jid` with a plain slixmpp client and send raw <evio/> payloads to `to` (no presence)."""
    import ssl

    ctx = ssl.create_default_context(cafile=ca_file)
    xmpp = ClientXMPP(jid + "/raw", password, ssl_context=ctx)
    xmpp.enable_direct_tls = False
    xmpp.enable_plaintext = False
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_start(_: Any) -> None:
        for text in payloads:
            message = xmpp.make_message(mto=to, mtype="normal")
            message["evio"]["json"] = text
            message.send()
        done.set_result(None)

    xmpp.add_event_handler("session_start", on_start)
    xmpp.connect(server, port)
    try:
        await asyncio.wait_for(done, 30)
    finally:
        await asyncio.wait_for(xmpp.disconnect(wait=2.0), 5)
        task = getattr(xmpp, "_run_out_filters", None)
        if task is not None:
            task.cancel()


def _request_text(overlay: str, src: int, dst: int, **changes: Any) -> str:
    doc: dict[str, Any] = {"v": 1, "kind": "request", "overlay": overlay, "src": f"{src:032x}",
                           "dst": f"{dst:032x}", "txid": "raw-1", "action": "test.echo", "body": {"x": 1}}
    doc.update(changes)
    return json.dumps(doc)


def _send_from_pub(overlay: Overlay, jid: str, password: str, to: str, payloads: list[str]) -> None:
    pub = overlay.lab.public
    loop = NamespaceLoop(pub.netns).start()
    try:
        loop.call(_raw_send(str(pub.address), pub.xmpp_port, str(pub.ca_file), jid, password, to, payloads), 60)
    finally:
        loop.close()


def test_message_from_non_member_is_rejected(overlay: Overlay) -> None:
    target = overlay.node(3)
    outsider_jid, outsider_pw = overlay.lab.register_account("outsider" + secrets.token_hex(2))
    calls_before = len(overlay.echo_calls)
    before = target.client.drops.count(DropReason.NOT_MEMBER)
    target_jid = overlay.node(4).client.peers(overlay.overlay)[target.node_id]
    # A well-formed request claiming to come from node 1, sent by an account outside the overlay.
    text = _request_text(overlay.overlay, overlay.node(1).node_id, target.node_id)
    _send_from_pub(overlay, outsider_jid, outsider_pw, target_jid, [text])
    wait_for(lambda: target.client.drops.count(DropReason.NOT_MEMBER) > before, SLOW, "non-member message counted")
    assert len(overlay.echo_calls) == calls_before  # the handler never ran
    assert target.client.peers(overlay.overlay).keys() == {n.node_id for n in overlay.nodes} - {target.node_id}


def test_malformed_payload_is_counted_and_receiver_keeps_working(overlay: Overlay) -> None:
    target, sender = overlay.node(5), overlay.node(6)
    target_jid = sender.client.peers(overlay.overlay)[target.node_id]
    malformed_before = target.client.drops.count(DropReason.MALFORMED)
    oversized_before = target.client.drops.count(DropReason.OVERSIZED)
    payloads = [
        "{this is not json",
        json.dumps({"v": 1, "kind": "request"}),
        _request_text(overlay.overlay, sender.node_id, target.node_id, body={"pad": "x" * 20000}),
    ]
    # From node 6's own account (a member), through another session of it.
    _send_from_pub(overlay, sender.info.jid, sender.info.password, target_jid, payloads)
    wait_for(lambda: target.client.drops.count(DropReason.MALFORMED) >= malformed_before + 2, SLOW, "malformed")
    wait_for(lambda: target.client.drops.count(DropReason.OVERSIZED) >= oversized_before + 1, SLOW, "oversized")
    assert target.client.connected
    reply = sender.request(overlay.overlay, target.node_id, "test.echo", {"after": "garbage"})
    assert reply == {"echo": {"after": "garbage"}, "by": 5}


def test_prosody_restart_every_node_rejoins_and_rediscovers(overlay: Overlay) -> None:
    lab, nodes = overlay.lab, overlay.nodes
    sessions = {n.info.index: n.client.sessions for n in nodes}
    record = next(p for p in lab.processes if p.role == "prosody")
    lab.stop(record)
    wait_for(lambda: not any(n.client.connected for n in nodes), SLOW, "every node noticed prosody going away")
    assert all(n.client.peers(overlay.overlay) == {} for n in nodes)
    with pytest.raises(RequestError) as info:
        overlay.node(1).request(overlay.overlay, overlay.node(2).node_id, "test.echo", {})
    assert info.value.reason is ErrorReason.NOT_CONNECTED
    restarted = time.monotonic()
    config = services.ServicePaths(lab.directory).prosody_config
    lab.spawn("pub", ["prosody", "--config", str(config), "-F"], role="prosody")
    rejoined = wait_for(
        lambda: all(n.client.connected and n.client.sessions > sessions[n.info.index] for n in nodes),
        SLOW, "every node logged in again",
    )
    wait_for(lambda: all_discovered(nodes, overlay.overlay), SLOW, "every node rediscovered every other")
    rediscovered = time.monotonic() - restarted
    reply = overlay.node(7).request(overlay.overlay, overlay.node(8).node_id, "test.echo", {"again": True})
    assert reply["by"] == 8
    print(f"\n[signal] after prosody restart: all {NODES} logged in again within {rejoined:.2f} s, "
          f"all peers known within {rediscovered:.2f} s")


# ---------------------------------------------------------------------------------------------------------------
# Client certificates (SASL EXTERNAL) and CA verification, against a prosody of our own on loopback.
#
# Prosody 0.12 has the EXTERNAL mechanism but no c2s provider for it; the community module mod_auth_ccert
# (Debian package prosody-modules) supplies one. It replaces password logins on its VirtualHost, hence a
# separate server here rather than the lab's.

_CCERT = Path("/usr/lib/prosody/modules/mod_auth_ccert/mod_auth_ccert.lua")
_XMPP_ADDR = ObjectIdentifier("1.3.6.1.5.5.7.8.5")  # id-on-xmppAddr (RFC 6120 section 13.7.1.4)


@dataclass
class CertServer:
    port: int
    directory: Path
    ca: pki.Certificate

    def client_cert(self, jid: str, ca: pki.Certificate | None = None) -> tuple[Path, Path]:
        """A client certificate naming `jid` as xmppAddr, signed by `ca` (default: the server's CA)."""
        ca = ca or self.ca
        ca_cert = x509.load_pem_x509_certificate(ca.cert_path.read_bytes())
        ca_key = serialization.load_pem_private_key(ca.key_path.read_bytes(), password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        key = ec.generate_private_key(ec.SECP256R1())
        raw = jid.encode()
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, jid)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            # xmppAddr is a UTF8String inside otherName: DER tag 0x0c, short length.
            .add_extension(x509.SubjectAlternativeName([x509.OtherName(_XMPP_ADDR, bytes([0x0C, len(raw)]) + raw)]),
                           critical=False)
            # luasec checks a client's chain with the SSL *server* purpose: serverAuth must be allowed too.
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        stem = f"{jid}-{secrets.token_hex(4)}"
        cert_path, key_path = self.directory / f"{stem}.crt", self.directory / f"{stem}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        return cert_path, key_path

    def settings(self, jid: str, node_id: int, **kw: Any) -> SignalSettings:
        values: dict[str, Any] = dict(jid=jid, server="127.0.0.1", port=self.port, ca_file=self.ca.cert_path,
                                      memberships={"ov1": node_id}, login_timeout=10, reconnect_base=0.1,
                                      reconnect_cap=0.5)
        values.update(kw)
        return SignalSettings(**values)


def _free_port() -> int:
    for port in random.sample(range(15000, 16000), 1000):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 15000-15999")


@pytest.fixture
def cert_server(tmp_path: Path) -> Iterator[CertServer]:
    if os.geteuid() != 0:
        pytest.skip("integration test: needs root (prosody)")
    if not _CCERT.exists():
        pytest.skip(f"client-certificate login needs prosody's mod_auth_ccert ({_CCERT}): apt install prosody-modules")
    now = datetime.datetime.now(datetime.UTC)
    ca = pki.make_ca(tmp_path / "pki", "evio signal test CA", now)
    pki.make_server_cert(tmp_path / "certs", ca, ["overlay.test"], now, file_stem="overlay.test")
    port = _free_port()
    with _prosody(tmp_path, port, [
        'authentication = "ccert"',
        'certificate_match = "xmppaddr"',
        "c2s_require_encryption = true",
        f'c2s_ssl = {{ cafile = "{ca.cert_path}"; verify = {{ "peer"; "client_once" }}; }}',
        'modules_enabled = { "roster"; "saslauth"; "tls"; "disco"; "ping"; "groups" }',
    ]):
        yield CertServer(port, tmp_path, ca)


@contextmanager
def _prosody(directory: Path, port: int, settings: list[str], accounts: tuple[str, ...] = ()) -> Iterator[None]:
    """A prosody of our own on 127.0.0.1:`port`, host overlay.test, group ov1 = n1, n2 (password pw-<user>)."""
    (directory / "data").mkdir()
    (directory / "groups.txt").write_text("[ov1]\nn1@overlay.test\nn2@overlay.test\n")
    config = write_config(directory, port, [f'certificates = "{directory}/certs"', *settings])
    for user in accounts:
        subprocess.run(["prosodyctl", "--config", str(config), "register", user, "overlay.test", f"pw-{user}"],
                       check=True, capture_output=True, timeout=30)
    with running_prosody(config, port):
        yield


async def _until(condition: Any, timeout: float, what: str) -> None:
    await wait_until(condition, timeout, what=what, interval=0.01)


async def test_client_certificate_login_by_sasl_external(cert_server: CertServer) -> None:
    cert1, key1 = cert_server.client_cert("n1@overlay.test")
    cert2, key2 = cert_server.client_cert("n2@overlay.test")
    a = SignalClient(cert_server.settings("n1@overlay.test", 1, client_cert=cert1, client_key=key1))
    b = SignalClient(cert_server.settings("n2@overlay.test", 2, client_cert=cert2, client_key=key2))

    async def echo(overlay: str, peer: int, body: Body) -> Body:
        return {"peer": peer, **body}

    b.register_handler("test.echo", echo)
    try:
        for client in (a, b):
            await client.start()
        await _until(lambda: 2 in a.peers("ov1") and 1 in b.peers("ov1"), SLOW, "cert clients discover each other")
        assert await a.request("ov1", 2, "test.echo", {"by": "cert"}) == {"peer": 1, "by": "cert"}
    finally:
        for client in (a, b):
            await client.stop()


async def test_untrusted_certificates_are_refused(cert_server: CertServer, tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    other_ca = pki.make_ca(tmp_path / "other-pki", "someone else's CA", now)
    foreign_cert, foreign_key = cert_server.client_cert("n1@overlay.test", ca=other_ca)
    good_cert, good_key = cert_server.client_cert("n1@overlay.test")
    stolen_cert, stolen_key = cert_server.client_cert("n2@overlay.test")
    clients = [
        # our certificate from a CA the server does not trust
        SignalClient(cert_server.settings("n1@overlay.test", 1, client_cert=foreign_cert, client_key=foreign_key)),
        # a good certificate, but we do not trust the server's CA
        SignalClient(cert_server.settings("n1@overlay.test", 1, client_cert=good_cert, client_key=good_key,
                                          ca_file=other_ca.cert_path)),
        # n2's certificate used to log in as n1
        SignalClient(cert_server.settings("n1@overlay.test", 1, client_cert=stolen_cert, client_key=stolen_key)),
    ]
    try:
        for client in clients:
            await client.start()
        await _until(lambda: all(c.failed_logins >= 2 for c in clients), SLOW, "every attempt refused")
        assert all(c.sessions == 0 and not c.connected for c in clients)
    finally:
        for client in clients:
            await client.stop()


async def test_no_login_without_tls_unless_plaintext_is_allowed(tmp_path: Path) -> None:
    """A server (or a man in the middle) that offers no STARTTLS gets no credentials from us."""
    if os.geteuid() != 0:
        pytest.skip("integration test: needs root (prosody)")
    port = _free_port()
    plain = [
        'authentication = "internal_hashed"',
        "c2s_require_encryption = false",
        "allow_unencrypted_plain_auth = true",
        'modules_enabled = { "roster"; "saslauth"; "disco"; "ping"; "groups" }',  # no "tls": STARTTLS not offered
    ]
    with _prosody(tmp_path, port, plain, accounts=("n1", "n2")):
        def settings(user: str, node_id: int, **kw: Any) -> SignalSettings:
            return SignalSettings(jid=f"{user}@overlay.test", password=f"pw-{user}", server="127.0.0.1", port=port,
                                  memberships={"ov1": node_id}, reconnect_base=0.1, reconnect_cap=0.5, **kw)

        strict = SignalClient(settings("n1", 1))
        lenient = SignalClient(settings("n2", 2, insecure_plaintext=True))
        try:
            await strict.start()
            await lenient.start()
            await lenient.wait_connected(SLOW)
            await _until(lambda: strict.failed_logins >= 2, SLOW, "refused to log in without TLS")
            assert strict.sessions == 0 and not strict.connected
        finally:
            await strict.stop()
            await lenient.stop()
        log = (tmp_path / "prosody.log").read_text()
        assert "Authenticated as n2@overlay.test" in log and "n1@overlay.test" not in log


async def test_direct_tls_with_password(tmp_path: Path) -> None:
    """tls="direct": TLS from the first byte (XEP-0368 style port), verified against our CA."""
    if os.geteuid() != 0:
        pytest.skip("integration test: needs root (prosody)")
    now = datetime.datetime.now(datetime.UTC)
    ca = pki.make_ca(tmp_path / "pki", "evio signal test CA", now)
    pki.make_server_cert(tmp_path / "certs", ca, ["overlay.test"], now, file_stem="overlay.test")
    starttls_port, direct_port = _free_port(), _free_port()
    while direct_port == starttls_port:
        direct_port = _free_port()
    with _prosody(tmp_path, starttls_port, [
        f"c2s_direct_tls_ports = {{ {direct_port} }}",
        'authentication = "internal_hashed"',
        "c2s_require_encryption = true",
        'modules_enabled = { "roster"; "saslauth"; "tls"; "disco"; "ping"; "groups" }',
    ], accounts=("n1", "n2")):
        clients = [
            SignalClient(SignalSettings(jid=f"n{i}@overlay.test", password=f"pw-n{i}", server="127.0.0.1",
                                        port=direct_port, tls="direct", ca_file=ca.cert_path,
                                        memberships={"ov1": i}))
            for i in (1, 2)
        ]
        try:
            for client in clients:
                await client.start()
            await _until(lambda: 2 in clients[0].peers("ov1"), SLOW, "direct-TLS clients discover each other")
        finally:
            for client in clients:
                await client.stop()
        assert "TLS" in (tmp_path / "prosody.log").read_text()
