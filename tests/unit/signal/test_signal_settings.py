"""SignalSettings validation and SignalClient behaviour before any connection (no network)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from slixmpp.exceptions import IqTimeout

from evio.signal.client import SignalClient, SignalSettings
from evio.signal.errors import ErrorReason, RequestError, SignalSettingsError


def settings(**changes: Any) -> SignalSettings:
    values: dict[str, Any] = dict(jid="n1@x.test", server="127.0.0.1", password="pw", memberships={"ov1": 1})
    values.update(changes)
    return SignalSettings(**values)


def test_defaults() -> None:
    s = settings()
    assert s.tls == "starttls" and not s.insecure_plaintext and s.port == 5222
    assert s.domain == "x.test"
    assert s.effective_resource() == "evio-" + "0" * 31 + "1"
    assert s.group_of("ov1") == "ov1"
    assert settings(overlay_groups={"ov1": "Overlay One"}).group_of("ov1") == "Overlay One"


@pytest.mark.parametrize(
    "changes",
    [
        {"jid": "no-domain"},
        {"jid": "n1@x.test/resource"},
        {"password": None},  # no credential at all
        {"client_cert": Path("/c.pem"), "client_key": Path("/k.pem")},  # both credentials
        {"password": None, "client_cert": Path("/c.pem")},  # cert without key
        {"password": None, "client_cert": Path("/c.pem"), "client_key": Path("/k.pem"), "insecure_plaintext": True},
        {"tls": "ssl"},
        {"memberships": {}},
        {"memberships": {"bad overlay": 1}},
        {"memberships": {"ov1": 1 << 128}},
        {"memberships": {"ov1": -1}},
    ],
)
def test_invalid_settings_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(SignalSettingsError):
        settings(**changes)


async def test_missing_files_refused_at_start(tmp_path: Path) -> None:
    client = SignalClient(settings(ca_file=tmp_path / "nope.crt"))
    with pytest.raises(SignalSettingsError):
        await client.start()
    await client.stop()


async def test_request_before_login_is_not_connected() -> None:
    client = SignalClient(settings())
    assert not client.connected and client.peers("ov1") == {}
    with pytest.raises(RequestError) as info:
        await client.request("ov1", 2, "x", {})
    assert info.value.reason is ErrorReason.NOT_CONNECTED
    with pytest.raises(RequestError) as info:
        await client.request("ov2", 2, "x", {})
    assert info.value.reason is ErrorReason.UNKNOWN_PEER
    assert client.node_id("ov1") == 1


class FakePing:
    """xep_0199 that never answers; stanzas arrive at the client during the wait when `busy`."""

    def __init__(self, client: SignalClient, busy: int) -> None:
        self.client, self.busy, self.pings = client, busy, 0

    async def ping(self, jid: Any, timeout: float) -> None:
        self.pings += 1
        if self.pings <= self.busy:
            self.client._count_in(object())  # the server sent something meanwhile
        raise IqTimeout(None)


class FakeXmpp:
    def __init__(self, ping: FakePing) -> None:
        self.plugin = {"xep_0199": ping}
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


async def test_a_late_ping_keeps_the_session_while_the_server_sends_and_ends_it_when_it_is_silent() -> None:
    client = SignalClient(settings(keepalive_interval=0.001, keepalive_timeout=0.001))
    ping = FakePing(client, busy=2)
    xmpp = FakeXmpp(ping)
    ended: list[str] = []
    await client._keepalive(xmpp, ended.append)  # type: ignore[arg-type]
    assert client.late_pings == 2  # two late answers while stanzas came in: kept
    assert ping.pings == 3 and ended == ["server ping timed out"] and xmpp.aborted  # then silence: ended
