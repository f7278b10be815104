"""The learning table of Bounded Flood (paper section 3.2.1; docs/design.md, "Learning and unicast flows").

Two views of one soft state, kept consistent by this class alone:

- Ethernet address learning: MAC -> (port it was last seen on, root node of
  the switch that hosts it, when it was last seen);
- the root bridge table: root node id -> the leaf MACs it hosts, as learned
  from FRBs; used to pick peers for on-demand links.

Pure: no clock, no I/O. `now` is any monotonic time in seconds, passed in.
An entry is live while `now - last_seen < max_age`; `lookup` ignores stale
entries and `expire` removes them. A root of None means the MAC is local or
its root is not known (learned from a packet-in, not from an FRB).

MACs are strings in the form os-ken uses, "aa:bb:cc:dd:ee:ff"; the table
compares them as given, so callers pass one canonical (lowercase) form.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LearnedMac:
    port: int
    root: int | None
    last_seen: float


class Change(enum.Enum):
    NEW = "new"  # not in the table before
    REFRESHED = "refreshed"  # same port and root, only last_seen moved on
    MOVED = "moved"  # port or root changed: flows towards the old place are wrong now


@dataclass(frozen=True, slots=True)
class Learned:
    mac: str
    change: Change
    entry: LearnedMac
    previous: LearnedMac | None  # the replaced entry when MOVED, else None


@dataclass(frozen=True, slots=True)
class Announced:
    learned: tuple[Learned, ...]
    withdrawn: tuple[str, ...]  # MACs the root hosted before and no longer announces


class LearningTable:
    def __init__(self, max_age: float) -> None:
        if not max_age > 0:
            raise ValueError(f"max_age must be positive, got {max_age}")
        self.max_age = max_age
        self._entries: dict[str, LearnedMac] = {}
        self._by_port: dict[int, set[str]] = {}
        self._by_root: dict[int, set[str]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    # ------------------------------------------------------------------ queries

    def lookup(self, mac: str, now: float) -> LearnedMac | None:
        """The live entry for `mac`, or None if unknown or stale."""
        entry = self._entries.get(mac)
        if entry is None or now - entry.last_seen >= self.max_age:
            return None
        return entry

    def leaf_macs(self, root: int) -> frozenset[str]:
        """MACs hosted by switch `root`, as far as this table knows (stale ones until expired)."""
        return frozenset(self._by_root.get(root, ()))

    def root_bridges(self) -> dict[int, frozenset[str]]:
        """The root bridge table: root node id -> its leaf MACs."""
        return {root: frozenset(macs) for root, macs in self._by_root.items()}

    def macs_on_port(self, port: int) -> frozenset[str]:
        return frozenset(self._by_port.get(port, ()))

    # ------------------------------------------------------------------ updates

    def learn(self, mac: str, port: int, root: int | None, now: float) -> Learned:
        """Record that `mac` was seen on `port`, hosted by `root` (None: local or not known).

        Seen again on the same port without a root (a plain packet-in), the
        root learned earlier from an FRB is kept. A new port or a different
        root is a move, reported with the previous entry so the caller can
        fix the flows. A stale entry not yet expired still counts as the
        previous place: flows towards it may still be installed.
        """
        old = self._entries.get(mac)
        if old is not None and root is None and port == old.port:
            root = old.root
        entry = LearnedMac(port, root, now)
        self._entries[mac] = entry
        if old is None:
            self._index(mac, entry)
            return Learned(mac, Change.NEW, entry, None)
        if old.port == port and old.root == root:
            return Learned(mac, Change.REFRESHED, entry, None)
        self._unindex(mac, old)
        self._index(mac, entry)
        return Learned(mac, Change.MOVED, entry, old)

    def announce(self, root: int, macs: Iterable[str], port: int, now: float) -> Announced:
        """Apply a leaf announcement from adjacent switch `root` received on `port`.

        The announcement is the whole list of `root`'s leaves: MACs attributed
        to `root` that it no longer lists are dropped.
        """
        announced = list(dict.fromkeys(macs))
        keep = set(announced)
        withdrawn = sorted(self._by_root.get(root, set()) - keep)
        for mac in withdrawn:
            self._remove(mac)
        learned = tuple(self.learn(mac, port, root, now) for mac in announced)
        return Announced(learned, tuple(withdrawn))

    def expire(self, now: float) -> list[tuple[str, LearnedMac]]:
        """Remove and return every stale entry."""
        stale = [(mac, e) for mac, e in self._entries.items() if now - e.last_seen >= self.max_age]
        for mac, _ in stale:
            self._remove(mac)
        return stale

    def forget_port(self, port: int) -> list[str]:
        """Drop every MAC learned on `port` (its tunnel went away); return them, sorted."""
        macs = sorted(self._by_port.get(port, ()))
        for mac in macs:
            self._remove(mac)
        return macs

    def forget(self, mac: str) -> LearnedMac | None:
        """Drop one MAC; return its entry if it had one."""
        return self._remove(mac)

    # ------------------------------------------------------------------ indexes

    def _remove(self, mac: str) -> LearnedMac | None:
        entry = self._entries.pop(mac, None)
        if entry is not None:
            self._unindex(mac, entry)
        return entry

    def _index(self, mac: str, entry: LearnedMac) -> None:
        self._by_port.setdefault(entry.port, set()).add(mac)
        if entry.root is not None:
            self._by_root.setdefault(entry.root, set()).add(mac)

    def _unindex(self, mac: str, entry: LearnedMac) -> None:
        _discard(self._by_port, entry.port, mac)
        if entry.root is not None:
            _discard(self._by_root, entry.root, mac)


def _discard(index: dict[int, set[str]], key: int, mac: str) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(mac)
        if not members:
            del index[key]  # empty sets would make root_bridges() list departed roots
