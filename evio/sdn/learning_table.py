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

Entries learned from an FRB or a leaf announcement also keep the overlay
*hops* to their root (the FRB's hop count; 1 for an announcement), and the
table prefers the shortest way: while a path is confirmed (within
``path_hold`` of the last copy that taught it), a copy from the *same* root
arriving by another port with as many hops or more, or a plain unicast
packet-in on another port within ``unicast_hold`` of that copy, does not
move the MAC (``Change.HELD``). Bounded
Flood delivers each broadcast once per orientation, and one orientation may
come the long way round; a shorter copy, a different root (a host that
moved) or a path not confirmed for ``path_hold`` moves it as before.

Adjacent peers are not trusted with this table:

- an entry learned on a local (leaf) port is *pinned* while it is live: a
  non-local learn does not move it (``Change.REFUSED``), so a peer cannot
  pull a local host's traffic to itself by sending with its source address
  or announcing it. The one exception is ``may_move_local``, which the
  switch uses for a broadcast the host sends from its new place after it
  really moved (a migrated VM's gratuitous ARP); the host's next local frame
  moves it back if that broadcast was forged;
- a live remote entry whose place spoke for it within ``move_hold`` (it
  was learned or refreshed on its port, or a copy from its root came) is
  not moved by a claim naming another root, nor by one arriving by another
  port without naming its root (``Change.CONTESTED``): a member cannot
  pull another member's MAC to itself while that MAC's real place is
  heard here (issue 21, H4; docs/design.md, "Who may move a MAC");
- each port holds at most ``max_per_port`` MACs (a quarter of the table
  by default): a MAC new to a full port evicts the least recently seen of
  the root holding most of that port (roots that are no member, and MACs
  with no root, count as one), so a peer sending from invented addresses
  churns only its own share and never evicts what other ports taught
  (issue 21, H3), nor, two hops on, what other members behind the same
  port taught (review21e E2: the port its floods come in by is shared);
- the table holds at most ``max_entries`` MACs; when full, the least
  recently seen entry of the port holding most makes room (a remote MAC
  never evicts a local one), so the pins stay and the biggest user pays.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

# Far above any real overlay's hosts (one bridge MAC per node plus the hosts
# behind leaf ports; the paper's overlays have hundreds of nodes), and small
# enough that a peer inventing source MACs costs a few MB and a bounded number
# of flows. Each entry is ~200 bytes of Python objects.
MAX_ENTRIES = 8192
UNKNOWN_GROUP = -1  # the eviction group of MACs with no root or a root that is no member (node ids are >= 0)
# How long a path learned with a hop count holds against a longer one from the same root without being
# confirmed again. A host's broadcasts reconfirm it (both copies of one broadcast arrive within
# milliseconds); past it, the way the copies now come wins, so a path whose far part broke while this
# port stayed up is left within this time. It is also how long a member's lie about hop counts can hold
# against the truth after its last forged copy (docs/design.md, "Learning and unicast flows").
PATH_HOLD = 60.0
# How long after a copy confirmed it a path holds against plain unicast packet-ins by another port. The flap
# the lab showed came right after a broadcast (the ARP exchange, then the flow's first frames); much later,
# a packet-in by a new port is more likely a path that changed (a link cut beyond the next hop), and moving
# on it heals the path on the next frame, as before. Kept short: the flood that confirms a path does not
# cross the next hop's learned entries, so a path can be confirmed by copies while unicast on it is lost
# beyond the next hop; at 5 s, repeated confirmations held such a path for 8.9 s in one churn run.
UNICAST_HOLD = 1.0
# How long a MAC's place, once its root (or its port) spoke for it, holds against a claim that it moved
# to another root or arrived by another way (docs/design.md, "Who may move a MAC"). No frame proves who
# sent it, so a member could claim any MAC; this makes the claim wait until the real place fell silent
# here. A host that really moved is still reached meanwhile: its old node, which saw it announce itself
# elsewhere, passes its frames on.
MOVE_HOLD = 5.0


@dataclass(frozen=True, slots=True)
class LearnedMac:
    port: int
    root: int | None
    last_seen: float
    local: bool = False  # learned on a leaf port: pinned while live
    hops: int | None = None  # overlay hops to `root` as the FRB (or announcement) taught; None: not known
    hops_seen: float = 0.0  # when a copy last confirmed `hops` on this port
    # When the entry's own place last spoke for it: learned or refreshed on its port, or a copy from its root.
    confirmed: float = field(default=0.0, compare=False)


class Change(enum.Enum):
    NEW = "new"  # not in the table before
    REFRESHED = "refreshed"  # same port and root, only last_seen moved on
    MOVED = "moved"  # port or root changed: flows towards the old place are wrong now
    REFUSED = "refused"  # a tunnel claimed a live local MAC: the table is unchanged
    HELD = "held"  # a longer (or unmeasured) way to the same root: the shorter path stays, only last_seen moves
    CONTESTED = "contested"  # another root or way claimed a MAC whose place spoke within move_hold: unchanged


@dataclass(frozen=True, slots=True)
class Learned:
    mac: str
    change: Change
    entry: LearnedMac
    previous: LearnedMac | None  # the replaced entry when MOVED, else None
    evicted: tuple[str, ...] = ()  # MACs dropped to make room (the table was full)


@dataclass(frozen=True, slots=True)
class Announced:
    learned: tuple[Learned, ...]
    withdrawn: tuple[str, ...]  # MACs the root hosted before and no longer announces

    @property
    def refused(self) -> tuple[str, ...]:
        return tuple(item.mac for item in self.learned if item.change is Change.REFUSED)

    @property
    def evicted(self) -> tuple[str, ...]:
        return tuple(mac for item in self.learned for mac in item.evicted)


class LearningTable:
    def __init__(
        self, max_age: float, max_entries: int = MAX_ENTRIES, path_hold: float = PATH_HOLD,
        unicast_hold: float = UNICAST_HOLD, max_per_port: int | None = None, move_hold: float = MOVE_HOLD,
    ) -> None:
        if not max_age > 0:
            raise ValueError(f"max_age must be positive, got {max_age}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_age = max_age
        self.path_hold = min(path_hold, max_age)
        self.unicast_hold = min(unicast_hold, self.path_hold)
        self.max_entries = max_entries
        self.move_hold = move_hold
        self.max_per_port = max_per_port if max_per_port is not None else max(1, max_entries // 4)
        if self.max_per_port < 1:
            raise ValueError(f"max_per_port must be at least 1, got {max_per_port}")
        self._entries: dict[str, LearnedMac] = {}
        # The latest contested claim per MAC: (port, root, hops, when), taken by `settle` once due.
        self._claims: dict[str, tuple[int, int | None, int | None, float]] = {}
        # The latest copy `stay` held per MAC: (port, hops, when); taken if the MAC's own port's next copy, within
        # `unicast_hold`, comes longer. One per MAC in the table at most (`_remove` drops it).
        self._stayed: dict[str, tuple[int, int, float]] = {}
        # Each port's MACs in recency order (least recently seen first): eviction takes from the front.
        self._by_port: dict[int, dict[str, None]] = {}
        self._by_root: dict[int, set[str]] = {}
        # Who pays when a port is full: each MAC's group (its root, or UNKNOWN_GROUP: no root, or a root that is no
        # member) and each port's count per group (review21e E2).
        self._members: frozenset[int] | None = None
        self._group_of: dict[str, int] = {}
        self._port_groups: dict[int, Counter[int]] = {}
        # The member that announced each MAC (trust mode, decision 0055; the switch's `mac_owners`): in the group a
        # full port evicts from, a MAC its root did not announce pays first (review21f F6).
        self.owners: Mapping[str, int] = {}

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

    def hosts_any(self, root: int) -> bool:
        """Whether any MAC is known here under `root`."""
        return root in self._by_root

    def root_bridges(self) -> dict[int, frozenset[str]]:
        """The root bridge table: root node id -> its leaf MACs."""
        return {root: frozenset(macs) for root, macs in self._by_root.items()}

    def macs_on_port(self, port: int) -> frozenset[str]:
        return frozenset(self._by_port.get(port, ()))

    def set_members(self, members: frozenset[int] | None) -> None:
        """The overlay's members (None: not known, every root its own group): roots that are none share a group."""
        if members == self._members:
            return
        self._members = members
        for mac, entry in list(self._entries.items()):
            self._unindex(mac, entry)
            self._index(mac, entry)

    # ------------------------------------------------------------------ updates

    def learn(
        self,
        mac: str,
        port: int,
        root: int | None,
        now: float,
        local: bool = False,
        may_move_local: bool = False,
        hops: int | None = None,
        from_root: bool = False,
        stay: bool = False,
    ) -> Learned:
        """Record that `mac` was seen on `port`, hosted by `root` (None: local or not known), `hops` away.

        `local` says `port` is a leaf port. Seen again on the same port without
        a root (a plain packet-in), the root and hops learned earlier from an
        FRB are kept. A new port or a different root is a move, reported with
        the previous entry so the caller can fix the flows. A stale entry not
        yet expired still counts as the previous place: flows towards it may
        still be installed. A live local entry is not moved by a non-local
        learn unless `may_move_local`: that is REFUSED and changes nothing.
        A live remote entry with a confirmed hop count is not moved by a
        longer way to the same root or by a packet-in (HELD; see the module).
        A live remote entry whose place spoke within `move_hold` is not moved
        to another root, or to another port but by its own root (CONTESTED).
        With `stay` (the caller knows the entry's way still brings its root's floods) a live remote entry does not
        move to another port, however long ago its path was confirmed (HELD).
        """
        old = self._entries.get(mac)
        live = old is not None and now - old.last_seen < self.max_age
        if old is not None and live and old.local and not local and not may_move_local:
            return Learned(mac, Change.REFUSED, old, None)
        if old is not None and live and not local and self._holds(old, port, root, hops, now):
            if root is None:
                return Learned(mac, Change.HELD, old, None)  # a packet-in says nothing of where the host is
            held = LearnedMac(old.port, old.root, now, old.local, old.hops, old.hops_seen, confirmed=now)
            self._entries[mac] = held
            self._touch(mac, held.port)
            return Learned(mac, Change.HELD, held, None)
        if stay and old is not None and live and not local and not old.local and port != old.port:
            if hops is not None:
                self._stayed[mac] = (port, hops, now)
            held = replace(old, last_seen=now)  # its root spoke: live, as `_holds` keeps it
            self._entries[mac] = held
            self._touch(mac, held.port)
            return Learned(mac, Change.HELD, held, None)
        stayed = self._stayed.pop(mac, None)
        if (stayed is not None and old is not None and root == old.root and hops is not None
                and hops > stayed[1] and now - stayed[2] < self.unicast_hold):
            # The copy held just before (the other of one broadcast's two) is shorter than the way that now
            # places the MAC (its path grew, or its tree moved): the MAC takes the shorter, whichever came first.
            port, hops = stayed[0], stayed[1]
        if (old is not None and live and not local and not old.local
                and self._contested(old, port, root, now, from_root)):
            prev = self._claims.get(mac)
            if prev is None or prev[1] != root or (hops is not None and (prev[2] is None or hops <= prev[2])):
                self._claims[mac] = (port, root, hops, now)  # taken by `settle` if the place stays silent
            # else the same claim came a longer way round (both copies of one broadcast): the shorter stays
            return Learned(mac, Change.CONTESTED, old, None)
        self._claims.pop(mac, None)
        hops_seen = now
        if old is not None and port == old.port:
            if root is None:
                root = old.root
            if root == old.root and old.hops is not None and (hops is None or (
                    hops > old.hops and now - old.hops_seen < self.path_hold)):
                hops, hops_seen = old.hops, old.hops_seen  # unmeasured, or the longer of two ways by this port
        entry = LearnedMac(port, root, now, local, hops, hops_seen if hops is not None else 0.0, confirmed=now)
        evicted: list[str] = []
        if old is None or old.port != port:
            share = self._by_port.get(port, {})
            if len(share) >= self.max_per_port:
                victim = self._port_victim(port, share)  # of the port's own: it churns only its share
                self._remove(victim)
                evicted.append(victim)
        if old is None and len(self._entries) >= self.max_entries:
            victim_or_none = self._victim(local)
            if victim_or_none is None:
                return Learned(mac, Change.REFUSED, entry, None, tuple(evicted))  # full of pins, this one remote
            self._remove(victim_or_none)
            evicted.append(victim_or_none)
        self._entries[mac] = entry
        if old is None:
            self._index(mac, entry)
            return Learned(mac, Change.NEW, entry, None, tuple(evicted))
        if old.port == port and old.root == root:
            self._touch(mac, port)
            return Learned(mac, Change.REFRESHED, entry, None)
        self._unindex(mac, old)
        self._index(mac, entry)
        return Learned(mac, Change.MOVED, entry, old, tuple(evicted))

    def _contested(self, old: LearnedMac, port: int, root: int | None, now: float, from_root: bool) -> bool:
        """Whether a claim that `old` (a live remote entry) is elsewhere waits: its place spoke within
        `move_hold`, and the claim names another root, or another port without naming the same root (a
        copy from the same root by another way is the shortest-path rule's business, `_holds`). An
        entry whose root is not known yields to a root speaking for itself over its own link
        (`from_root`: an on-demand link's leaf announcement takes its MACs at once)."""
        if now - old.confirmed >= self.move_hold:
            return False
        if root is not None and old.root is not None:
            return root != old.root
        if old.root is None and from_root:
            return False
        return port != old.port

    def _holds(self, old: LearnedMac, port: int, root: int | None, hops: int | None, now: float) -> bool:
        """Whether `old`, a confirmed path by another port, stays against this (longer or unmeasured) way."""
        if old.port == port or old.hops is None or now - old.hops_seen >= self.path_hold:
            return False
        if root is None:  # a plain packet-in: no root, no hop count
            return now - old.hops_seen < self.unicast_hold
        return root == old.root and hops is not None and hops >= old.hops

    def _victim(self, local: bool) -> str | None:
        """The entry to evict for a new one: the least recently seen of the port holding most (a remote
        newcomer evicts only remote entries: a leaf port's are pinned)."""
        best: tuple[int, float, str] | None = None
        for macs in self._by_port.values():
            mac = next(iter(macs))  # a port's entries are all of one kind (leaf or tunnel)
            entry = self._entries[mac]
            if local or not entry.local:
                key = (-len(macs), entry.last_seen, mac)
                if best is None or key < best:
                    best = key
        return best[2] if best is not None else None

    def _port_victim(self, port: int, share: dict[str, None]) -> str:
        """The least recently seen MAC of the root holding most of `port` (review21e E2), one its root did not
        announce first: a member may name as its floods' root any member behind it on the ring, whose group then
        holds its invented MACs too, and its own hosts must not pay for them (review21f F6)."""
        counts = self._port_groups[port]
        most = max(counts.values())
        first = None
        for mac in share:
            group = self._group_of[mac]
            if counts[group] == most:
                if self.owners.get(mac) != group:
                    return mac
                if first is None:
                    first = mac
        assert first is not None
        return first

    def _group(self, root: int | None) -> int:
        if root is None or (self._members is not None and root not in self._members):
            return UNKNOWN_GROUP
        return root

    def _touch(self, mac: str, port: int) -> None:
        """`mac`, on `port`, is its port's most recently seen."""
        macs = self._by_port[port]
        del macs[mac]
        macs[mac] = None

    def vouch(self, mac: str, now: float) -> None:
        """`mac`'s place speaks for it now without a packet-in: flows from it on its port are live (a host in a
        steady conversation matches flows in the switch and never comes to the controller)."""
        entry = self._entries.get(mac)
        if entry is not None and not entry.local and now - entry.last_seen < self.max_age:
            self._entries[mac] = replace(entry, confirmed=now)

    def claimed(self) -> list[str]:
        """MACs with a contested claim waiting for their place to fall silent."""
        return list(self._claims)

    def claim_of(self, mac: str) -> tuple[int, int | None] | None:
        """The (port, root) of `mac`'s contested claim, if one waits."""
        claim = self._claims.get(mac)
        return None if claim is None else (claim[0], claim[1])

    def drop_claim(self, mac: str) -> None:
        """Forget `mac`'s contested claim (it names a place the MAC's owner never announced)."""
        self._claims.pop(mac, None)

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
        learned = tuple(self.learn(mac, port, root, now, hops=1, from_root=True) for mac in announced)
        return Announced(learned, tuple(withdrawn))

    def settle(self, now: float) -> list[Learned]:
        """Contested claims that are due: the MAC's place stayed silent for `move_hold` and the claim is
        younger than twice that (ticks come late; a claim still meant is made again anyway). A host that moved is then found where it said it went, with no frame of its
        own needed; a claim its old place answered (spoke after it) is dropped."""
        moved: list[Learned] = []
        for mac, (port, root, hops, at) in list(self._claims.items()):
            entry = self._entries.get(mac)
            if entry is None or entry.confirmed > at or now - at >= 2 * self.move_hold:
                del self._claims[mac]
                continue
            if now - entry.confirmed < self.move_hold:
                continue
            del self._claims[mac]
            moved.append(self.learn(mac, port, root, now, hops=hops))
        return moved

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
        for mac in [m for m, claim in self._claims.items() if claim[0] == port]:
            del self._claims[mac]  # claimed by a way that is gone
        for mac in [m for m, held in self._stayed.items() if held[0] == port]:
            del self._stayed[mac]
        return macs

    def forget(self, mac: str) -> LearnedMac | None:
        """Drop one MAC; return its entry if it had one."""
        return self._remove(mac)

    # ------------------------------------------------------------------ indexes

    def _remove(self, mac: str) -> LearnedMac | None:
        self._claims.pop(mac, None)
        self._stayed.pop(mac, None)
        entry = self._entries.pop(mac, None)
        if entry is not None:
            self._unindex(mac, entry)
        return entry

    def _index(self, mac: str, entry: LearnedMac) -> None:
        self._by_port.setdefault(entry.port, {})[mac] = None
        group = self._group_of[mac] = self._group(entry.root)
        self._port_groups.setdefault(entry.port, Counter())[group] += 1
        if entry.root is not None:
            self._by_root.setdefault(entry.root, set()).add(mac)

    def _unindex(self, mac: str, entry: LearnedMac) -> None:
        macs = self._by_port.get(entry.port)
        if macs is not None:
            macs.pop(mac, None)
            if not macs:
                del self._by_port[entry.port]
        group = self._group_of.pop(mac, None)
        counts = self._port_groups.get(entry.port)
        if group is not None and counts is not None:
            counts[group] -= 1
            if not counts[group]:
                del counts[group]
                if not counts:
                    del self._port_groups[entry.port]
        if entry.root is not None:
            _discard(self._by_root, entry.root, mac)


def _discard(index: dict[int, set[str]], key: int, mac: str) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(mac)
        if not members:
            del index[key]  # empty sets would make root_bridges() list departed roots
