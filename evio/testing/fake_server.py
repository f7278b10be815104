"""Fakes of the server host's XMPP and coturn administration (evio.server.members.Accounts, RelayAccounts),
and a server host made of them (`fake_server_host`) for the member commands' tests."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from evio.server.members import Registry
from evio.server.settings import ServerSettings
from evio.tunnel.path.overlay_ca import make_overlay_ca, write_certificate

if TYPE_CHECKING:
    from evio.signal.client import SignalSettings


class FakeAccounts:
    def __init__(self) -> None:
        self.accounts: dict[str, str] = {}
        self.groups: dict[str, set[str]] = {}
        self.online: set[str] = set()
        self.fail_group = False
        self.delivered: list[tuple[str, str, str, str]] = []  # (group, namespace, element, text) sent to members
        # (group, namespace, element, whole text, how many): what the first members online got instead (0065)
        self.seeded: list[tuple[str, str, str, str, int]] = []

    def create_account(self, user: str, password: str) -> None:
        assert user not in self.accounts
        self.accounts[user] = password

    def delete_account(self, user: str) -> None:
        del self.accounts[user]

    def change_password(self, settings: SignalSettings, new_password: str) -> None:
        """The XMPP server's side of `SignalClient.change_password`: log in as `settings`, then change (0083)."""
        from evio.signal.errors import PasswordChangeError

        user = settings.jid.partition("@")[0]
        if self.accounts.get(user) != settings.password:
            raise PasswordChangeError(f"the server refused the login of {settings.jid}", refused=True)
        self.accounts[user] = new_password

    def add_to_group(self, user: str, group: str) -> None:
        if self.fail_group:
            raise RuntimeError("the server said no")
        self.groups.setdefault(group, set()).add(user)

    def remove_from_group(self, user: str, group: str) -> None:
        self.groups[group].discard(user)

    def online_users(self) -> set[str]:
        return set(self.online)

    def deliver(self, group: str, namespace: str, name: str, text: str, members: Sequence[str] | None = None,
                seeds: int = 0, seed_text: str = "") -> int:  # fmt: skip
        self.delivered.append((group, namespace, name, text))
        if seeds:
            self.seeded.append((group, namespace, name, seed_text, seeds))
        return len(self.online & self.groups.get(group, set()))


class FakeRelay:
    def __init__(self) -> None:
        self.users: dict[str, str] = {}

    def add_user(self, user: str, password: str) -> None:
        self.users[user] = password

    def remove_user(self, user: str) -> None:
        del self.users[user]


def fake_server_host(
    directory: Path, now: datetime.datetime, address: str = "203.0.113.1"
) -> tuple[Registry, ServerSettings, FakeAccounts, FakeRelay]:
    """A server host's member registry under `directory`/state, its settings (prosody at `address`) and
    fake accounts and relay. Any certificate will do as the XMPP CA here: a join token carries it as text."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = directory / "xmpp-ca.crt"
    write_certificate(ca, make_overlay_ca("xmpp CA", now, 10)[1])
    settings = ServerSettings(domain="xmpp.example.net", xmpp="prosody", address=address, xmpp_tls_ca=str(ca))
    return Registry(directory / "state"), settings, FakeAccounts(), FakeRelay()
