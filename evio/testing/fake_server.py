"""Fakes of the server host's XMPP and coturn administration (evio.server.members.Accounts, RelayAccounts)."""

from __future__ import annotations


class FakeAccounts:
    def __init__(self) -> None:
        self.accounts: dict[str, str] = {}
        self.groups: dict[str, set[str]] = {}
        self.online: set[str] = set()
        self.fail_group = False
        self.delivered: list[tuple[str, str, str, str]] = []  # (group, namespace, element, text) sent to members

    def create_account(self, user: str, password: str) -> None:
        assert user not in self.accounts
        self.accounts[user] = password

    def delete_account(self, user: str) -> None:
        del self.accounts[user]

    def add_to_group(self, user: str, group: str) -> None:
        if self.fail_group:
            raise RuntimeError("the server said no")
        self.groups.setdefault(group, set()).add(user)

    def remove_from_group(self, user: str, group: str) -> None:
        self.groups[group].discard(user)

    def online_users(self) -> set[str]:
        return set(self.online)

    def deliver(self, group: str, namespace: str, name: str, text: str) -> int:
        self.delivered.append((group, namespace, name, text))
        return len(self.online & self.groups.get(group, set()))


class FakeRelay:
    def __init__(self) -> None:
        self.users: dict[str, str] = {}

    def add_user(self, user: str, password: str) -> None:
        self.users[user] = password

    def remove_user(self, user: str) -> None:
        del self.users[user]
