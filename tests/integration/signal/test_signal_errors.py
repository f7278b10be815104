"""A real SignalClient driven into each way a login fails, against a real prosody (issue 20).

Each case asserts the step `last_error` names and that its message names the
thing to fix: the port, the name checked and the CA file, the account, the
group. One prosody (STARTTLS required, certificate from a CA of the test's own)
serves the module; the wrong-name case uses a TLS listener of the test's own
that presents a certificate for another name.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evio.lab import pki
from evio.node.sdn import free_tcp_port
from evio.signal.client import SignalClient, SignalSettings
from evio.signal.errors import LoginFailure, SignalStep
from evio.testing.prosody import running_prosody, write_config
from evio.testing.waiting import wait_until

pytestmark = pytest.mark.integration

DOMAIN = "overlay.test"
SLOW = 60.0  # a loaded 2-core machine


@dataclass
class Server:
    directory: Path
    port: int
    ca: pki.Certificate
    other_ca: pki.Certificate

    def settings(self, user: str, **kw: Any) -> SignalSettings:
        values: dict[str, Any] = dict(jid=f"{user}@{DOMAIN}", password=f"pw-{user}", server="127.0.0.1",
                                      port=self.port, ca_file=self.ca.cert_path, memberships={"ov1": 1},
                                      login_timeout=10, reconnect_base=0.05, reconnect_cap=0.2)
        values.update(kw)
        return SignalSettings(**values)

    def ctl(self, *args: str) -> str:
        return subprocess.run(["prosodyctl", "--config", str(self.directory / "prosody.cfg.lua"), *args], check=True,
                              capture_output=True, text=True, timeout=30).stdout


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("errors-prosody")
    now = datetime.datetime.now(datetime.UTC)
    ca = pki.make_ca(directory / "pki", "evio errors test CA", now)
    other_ca = pki.make_ca(directory / "other-pki", "someone else's CA", now)
    pki.make_server_cert(directory / "certs", ca, [DOMAIN], now, file_stem=DOMAIN)
    (directory / "data").mkdir()
    # n1 and n2 make overlay ov1; n3 has an account but is in no group.
    (directory / "groups.txt").write_text(f"[ov1]\nn1@{DOMAIN}\nn2@{DOMAIN}\n")
    port = free_tcp_port()
    config = write_config(directory, port, [
        f'certificates = "{directory}/certs"',
        'authentication = "internal_hashed"',
        "c2s_require_encryption = true",
        f'admin_socket = "{directory}/data/prosody.sock"',
        'modules_enabled = { "roster"; "saslauth"; "tls"; "disco"; "ping"; "groups"; "admin_socket"; "admin_shell" }',
    ])  # fmt: skip
    found = Server(directory, port, ca, other_ca)
    for user in ("n1", "n2", "n3", "n4", "gone"):
        found.ctl("register", user, DOMAIN, f"pw-{user}")
    found.ctl("deluser", f"gone@{DOMAIN}")  # an account that existed and was deleted
    with running_prosody(config, port):
        yield found


@pytest.fixture
async def clients() -> AsyncIterator[list[SignalClient]]:
    """Clients a test starts; all stopped at the end, whatever happened."""
    started: list[SignalClient] = []
    yield started
    for client in started:
        await client.stop()


async def failed(clients: list[SignalClient], settings: SignalSettings, step: SignalStep,
                 attempts: int = 1) -> LoginFailure:
    """Start a client with `settings`; its last_error once it has failed `attempts` times at `step`."""
    client = SignalClient(settings)
    clients.append(client)
    await client.start()
    await wait_until(lambda: (e := client.last_error("ov1")) is not None and e.step is step
                     and client.failed_logins >= attempts, SLOW, what=f"a {step.value} failure", interval=0.01)
    error = client.last_error("ov1")
    assert error is not None and not client.connected and client.sessions == 0
    return error


async def test_nothing_listening_is_a_tcp_failure_naming_the_port(server: Server, clients: list[SignalClient]) -> None:
    closed = free_tcp_port()
    error = await failed(clients, server.settings("n1", port=closed), SignalStep.TCP)
    assert error.message == (f"TCP connect to 127.0.0.1:{closed} failed: connection refused (nothing listens on port "
                             f"{closed} there, or a firewall rejects it)")


async def test_a_name_that_does_not_resolve_is_a_tcp_failure_naming_it(
        server: Server, clients: list[SignalClient]) -> None:
    name = "xmpp.nonexistent.invalid"  # RFC 6761: never resolves
    error = await failed(clients, server.settings("n1", server=name), SignalStep.TCP)
    assert error.message == (f"TCP connect to {name}:{server.port} failed: name '{name}' not resolved (no address in "
                             "DNS or /etc/hosts)")


async def test_a_server_certificate_from_another_ca_is_a_tls_failure_naming_the_name_and_the_ca(
        server: Server, clients: list[SignalClient]) -> None:
    error = await failed(clients, server.settings("n1", ca_file=server.other_ca.cert_path), SignalStep.TLS)
    assert f"127.0.0.1:{server.port}" in error.message
    assert f"for the name '{DOMAIN}'" in error.message and f"the CA file {server.other_ca.cert_path}" in error.message
    assert "unable to get local issuer certificate" in error.message


async def test_a_certificate_for_another_name_is_a_tls_failure_naming_the_name(
        server: Server, clients: list[SignalClient], tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    wrong = pki.make_server_cert(tmp_path / "certs", server.ca, ["wrong.test"], now, file_stem="wrong")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(wrong.cert_path, wrong.key_path)

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    listener = await asyncio.start_server(hang_up, "127.0.0.1", 0, ssl=context)
    port = listener.sockets[0].getsockname()[1]
    try:
        error = await failed(clients, server.settings("n1", port=port, tls="direct"), SignalStep.TLS)
    finally:
        listener.close()
    assert f"TLS: the certificate of 127.0.0.1:{port} was refused for the name '{DOMAIN}'" in error.message
    assert f"the CA file {server.ca.cert_path}" in error.message
    assert f"not valid for '{DOMAIN}'" in error.message  # the verifier's own words: Hostname mismatch


async def test_a_wrong_password_and_a_deleted_account_are_sasl_failures_told_apart(
        server: Server, clients: list[SignalClient], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="evio.signal")
    wrong = await failed(clients, server.settings("n1", password="not-the-password"), SignalStep.SASL, attempts=3)
    gone = await failed(clients, server.settings("gone"), SignalStep.SASL)
    # Both are not-authorized; prosody refuses a missing account's SCRAM login before its challenge.
    assert wrong.message == (f"SASL SCRAM-SHA-1 login as n1@{DOMAIN} refused (not-authorized): wrong password (the "
                             "server sent its SCRAM challenge for the account, so it knows it)")
    assert gone.message == (f"SASL SCRAM-SHA-1 login as gone@{DOMAIN} refused (not-authorized): no account "
                            f"gone@{DOMAIN} on the server, or it is disabled (refused before any password was checked)")
    # Logged once, not at every retry.
    lines = [r.getMessage() for r in caplog.records if "login failed (sasl)" in r.getMessage() and f"n1@{DOMAIN}" in r.getMessage()]
    assert len(lines) == 1, lines


async def test_a_certificate_login_where_external_is_not_offered_names_the_mechanisms(
        server: Server, clients: list[SignalClient], tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    mine = pki.make_server_cert(tmp_path / "client", server.ca, ["n1.client.test"], now, file_stem="n1")
    error = await failed(clients, server.settings("n1", password=None, client_cert=mine.cert_path,
                                                  client_key=mine.key_path), SignalStep.SASL)
    assert error.message.startswith(f"SASL: 127.0.0.1:{server.port} offers no login mechanism we accept (offered: ")
    assert "SCRAM-SHA-1" in error.message and "a client certificate login needs EXTERNAL" in error.message


async def test_an_account_outside_the_group_logs_in_but_is_not_a_member(
        server: Server, clients: list[SignalClient]) -> None:
    outsider = SignalClient(server.settings("n3"))
    member = SignalClient(server.settings("n1"))
    clients.extend([outsider, member])
    for client in (outsider, member):
        await client.start()
        await client.wait_connected(SLOW)
    error = outsider.last_error("ov1")
    assert error is not None and error.step is SignalStep.MEMBERSHIP
    assert error.message == (f"account n3@{DOMAIN} is not a member of overlay ov1 (no roster group 'ov1' on the "
                             "server lists it with another member)")
    assert member.last_error("ov1") is None  # n2 is in ov1 with it, online or not


async def test_an_account_deleted_while_online_is_told_at_its_next_login(
        server: Server, clients: list[SignalClient]) -> None:
    """The case reported as "No appropriate login method": the server deletes the account and ends its session."""
    client = SignalClient(server.settings("n4"))
    clients.append(client)
    await client.start()
    await client.wait_connected(SLOW)
    assert "OK" in await asyncio.to_thread(server.ctl, "shell", f"user:delete('n4@{DOMAIN}')")
    await wait_until(lambda: (e := client.last_error("ov1")) is not None and e.step is SignalStep.SASL, SLOW,
                     what="the next login refused", interval=0.01)
    error = client.last_error("ov1")
    assert error is not None and not client.connected
    assert error.message == (f"SASL SCRAM-SHA-1 login as n4@{DOMAIN} refused (not-authorized): no account "
                             f"n4@{DOMAIN} on the server, or it is disabled (refused before any password was checked)")
