"""Accounts and overlay membership on the running XMPP server, effective at once for online members.

A member's overlay membership is a shared roster group named after the
overlay (see `evio.signal.client`). Adding or removing one must reach the
members that are online now, within seconds, without restarting anything:

* ejabberd (mod_shared_roster): ``srg_user_add`` / ``srg_user_del`` push the
  roster change to every online member themselves (measured: the members had
  it within 10 ms of the command returning; each ejabberdctl call starts an
  Erlang node, 0.4-0.9 s); ``unregister`` ends the account's sessions. A
  message to every member online goes through the XEP-0033 multicast service
  (mod_multicast, usable by the server's own JID alone) when `evio server
  init` enabled it: one ``send_stanza`` names the members (decision 0065, amended).
* prosody (mod_groups): the groups file stays the durable record, but a reload
  of mod_groups only affects rosters loaded afterwards. Online members keep
  their cached roster, and prosody answers the new member's presence probes
  with "unsubscribed" on their behalf. So after writing the file and reloading
  the module, one Lua chunk in the running server (`prosodyctl shell`, whose
  ``>`` prefix runs Lua in prosody's global environment) does what a login
  would: it puts the item, subscription ``both`` and the overlay's group, not
  persisted (as mod_groups' own items), into every online member's cached
  roster and pushes it (``rostermanager.roster_push``), the same for the new
  member's roster, and sends each side's current presence to the other (what
  a probe would have answered). Removal drops the items the same way, sends
  "unavailable" on the removed member's behalf and ends its sessions.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol
from xml.sax.saxutils import escape as _escape

from evio.server.commands import ServerAdminError, run_command
from evio.server.configs import groups_text, lua_string, parse_groups
from evio.server.settings import ServerSettings, write_private

__all__ = ["EjabberdAdmin", "ProsodyAdmin", "ServerAdminError", "XmppAdmin", "xmpp_admin"]

_LOCALPART = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}\Z")
_GROUP = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")  # overlay ids ([A-Za-z0-9_-]{1,32}) and more; never "+" (public)


class XmppAdmin(Protocol):
    def create_account(self, user: str, password: str) -> None:
        """Create the account `user`@domain, or set its password if it exists."""

    def delete_account(self, user: str) -> None:
        """Take the account out of every group (live), delete it and end its sessions. No account: nothing."""

    def add_to_group(self, user: str, group: str) -> None:
        """Put the account in the shared roster group; online members see it within seconds."""

    def remove_from_group(self, user: str, group: str) -> None:
        """Take it out of the group; online members drop it, and its own sessions end."""

    def online_users(self) -> set[str]:
        """Localparts with at least one session."""


def xmpp_admin(settings: ServerSettings) -> XmppAdmin:
    if settings.xmpp == "prosody":
        return ProsodyAdmin(settings.domain, Path(settings.prosody_config), Path(settings.groups_file))
    return EjabberdAdmin(settings.domain, shlex.split(settings.ejabberdctl), settings.ejabberd_multicast)


def xml_escape(text: str) -> str:
    return _escape(text, {'"': "&quot;"})


def check_localpart(user: str) -> None:
    if not _LOCALPART.match(user):
        raise ValueError(f"{user!r} is not an account name evio makes (lower-case letters, digits, . _ -)")


def check_group(group: str) -> None:
    if not _GROUP.match(group):
        raise ValueError(f"{group!r} is not an overlay group name (letters, digits, . _ -)")


# ---------------------------------------------------------------------------------------------- prosody


# Lua run in prosody's global environment. One line per shell request: no `--` comments in here.
_PROSODY_PRELUDE = """
local host, group = {host}, {group};
local rm = require "core.rostermanager";
local ok, err = require "core.modulemanager".reload(host, "groups");
if not ok then error("reloading mod_groups: " .. tostring(err)) end;
local h = prosody.hosts[host];
local presence = h.modules.presence;
local pushes = 0;
local function node(jid) return (jid:match("^([^@]+)@")) end;
local function link(owner, contact)
  local user = h.sessions[node(owner)];
  if not (user and user.roster) then return end;
  local item = user.roster[contact];
  if not item then item = {{ persist = false; groups = {{}} }}; user.roster[contact] = item end;
  item.subscription = "both"; item.groups = item.groups or {{}}; item.groups[group] = true;
  rm.roster_push(node(owner), host, contact); pushes = pushes + 1;
end;
local function unlink(owner, contact)
  local user = h.sessions[node(owner)];
  if not (user and user.roster and user.roster[contact]) then return end;
  local item = user.roster[contact];
  if item.groups then item.groups[group] = nil end;
  if item.persist == false and next(item.groups or {{}}) == nil then user.roster[contact] = nil end;
  rm.roster_push(node(owner), host, contact); pushes = pushes + 1;
end;
local st = require "util.stanza";
"""

# The new member and each other member: items both ways, then each one's presence to the other.
_PROSODY_ADD = """
local jid, others = {jid}, {{ {others} }};
for _, other in ipairs(others) do link(other, jid); link(jid, other) end;
for _, other in ipairs(others) do
  presence.send_presence_of_available_resources(node(other), host, jid);
  presence.send_presence_of_available_resources(node(jid), host, other);
end;
return "pushed " .. pushes;
"""

# "unavailable" on the removed member's behalf first (what prosody's own roster-item-removed sends).
_PROSODY_REMOVE = """
local jid, others = {jid}, {{ {others} }};
for _, other in ipairs(others) do
  presence.send_presence_of_available_resources(node(jid), host, other, nil, st.presence({{ type = "unavailable" }}));
end;
for _, other in ipairs(others) do unlink(other, jid); unlink(jid, other) end;
"""

_PROSODY_END_SESSIONS = """
local user = h.sessions[node(jid)];
if user then
  for _, session in pairs(user.sessions) do
    session:close({ condition = "reset"; text = "evio: overlay membership changed" });
  end;
end;
return "pushed " .. pushes;
"""

_PROSODY_DELETE = """
local um = require "core.usermanager";
if um.user_exists(node(jid), host) then
  local ok, err = um.delete_user(node(jid), host);
  if not ok then error("deleting " .. jid .. ": " .. tostring(err)) end;
end;
return "pushed " .. pushes;
"""

# One element in a message from the server's own JID to every session of the listed accounts (issue 21:
# a revocation list; the members verify it against their CA, so the server only carries it). The seed text goes
# to one session each of the first `seeds` accounts online: three members flood it, not one member's sessions.
_PROSODY_DELIVER = """
local st = require "util.stanza"; local h = prosody.hosts[{host}]; local sent, seeded = 0, 0;
local seeds, seed_text, text = {seeds}, {seed_text}, {text};
for _, jid in ipairs({{ {jids} }}) do
  local user = h.sessions[jid:match("^([^@]+)@")];
  if user then
    local seed = seeded < seeds;
    for _, s in pairs(user.sessions) do
      local body = text; if seed then body = seed_text; seed = false; seeded = seeded + 1 end;
      s.send(st.message({{ from = {host}, to = s.full_jid, type = "normal" }}):tag({name}, {{ xmlns = {ns} }}):text(body));
      sent = sent + 1;
    end;
  end;
end;
return "sent " .. sent;
"""

_PROSODY_ONLINE = """
local h = prosody.hosts[{host}];
local names = {{}};
for name, user in pairs(h.sessions) do if next(user.sessions) then names[#names + 1] = name end end;
return "online:" .. table.concat(names, " ");
"""


class ProsodyAdmin:
    """prosody 0.12: accounts and mod_groups membership through ``prosodyctl shell`` on the running server."""

    def __init__(self, domain: str, config: Path, groups_file: Path, prosodyctl: Sequence[str] = ("prosodyctl",)):
        self.domain = domain
        self.config = config
        self.groups_file = groups_file
        self.prosodyctl = list(prosodyctl)

    def create_account(self, user: str, password: str) -> None:
        check_localpart(user)
        try:
            self._create_online(user, password)
        except _NotRunning:
            self._create_offline(user, password)

    def _create_online(self, user: str, password: str) -> None:
        self._shell(f'local um = require "core.usermanager"; local ok, err = um.create_user('
                    f'{lua_string(user)}, {lua_string(password)}, {lua_string(self.domain)}); '
                    f'if not ok then error(tostring(err)) end; return "created"')  # fmt: skip

    def delete_account(self, user: str) -> None:
        check_localpart(user)
        jid = self._jid(user)
        with self._groups() as groups:
            left = {name: [m for m in members if m != jid] for name, members in groups.items() if jid in members}
            for name in left:
                groups[name].remove(jid)
        try:
            for name, others in left.items():
                chunk = _PROSODY_REMOVE.format(jid=lua_string(jid), others=_lua_list(others))
                self._shell(self._prelude(name) + chunk + 'return "pushed " .. pushes;')
            # mod_c2s ends its sessions; mod_roster unsubscribes it from whatever contacts remain.
            self._shell(self._prelude("") + f"local jid = {lua_string(jid)};" + _PROSODY_DELETE)
        except _NotRunning:
            try:
                self._ctl("deluser", jid)
            except ServerAdminError as exc:
                if "no such user" not in exc.output.lower():
                    raise

    def add_to_group(self, user: str, group: str) -> None:
        check_localpart(user)
        check_group(group)
        jid = self._jid(user)
        with self._groups() as groups:
            members = groups.setdefault(group, [])
            if jid not in members:
                members.append(jid)
            others = [m for m in members if m != jid]
        self._push(self._prelude(group) + _PROSODY_ADD.format(jid=lua_string(jid), others=_lua_list(others)))

    def remove_from_group(self, user: str, group: str) -> None:
        check_localpart(user)
        check_group(group)
        jid = self._jid(user)
        with self._groups() as groups:
            members = groups.get(group, [])
            if jid in members:
                members.remove(jid)
            others = list(members)
        chunk = _PROSODY_REMOVE.format(jid=lua_string(jid), others=_lua_list(others))
        self._push(self._prelude(group) + chunk + _PROSODY_END_SESSIONS)

    def deliver(self, group: str, namespace: str, name: str, text: str, members: Sequence[str] | None = None,
                seeds: int = 0, seed_text: str = "") -> int:  # fmt: skip
        """Send <name xmlns=namespace>text</name> from the server to every online session of `group`'s members;
        how many sessions it reached (0 when prosody is stopped); one session each of the first `seeds` members
        online gets `seed_text` instead. `members` (the caller's record of the group) is not needed: one shell call
        does it all."""
        check_group(group)
        with self._groups() as groups:
            jids = list(groups.get(group, []))
        lua = _PROSODY_DELIVER.format(host=lua_string(self.domain), jids=_lua_list(jids), name=lua_string(name),
                                      ns=lua_string(namespace), text=lua_string(text), seeds=int(seeds),
                                      seed_text=lua_string(seed_text if seeds > 0 else ""))  # fmt: skip
        try:
            out = self._shell(lua)
        except _NotRunning:
            return 0
        match = re.search(r"sent (\d+)", out)
        return int(match.group(1)) if match else 0

    def online_users(self) -> set[str]:
        try:
            out = self._shell(_PROSODY_ONLINE.format(host=lua_string(self.domain)))
        except _NotRunning:
            return set()
        return set(out.split("online:", 1)[1].split()) if "online:" in out else set()

    # ------------------------------------------------------------------ the parts

    def _jid(self, user: str) -> str:
        return f"{user}@{self.domain}"

    def _prelude(self, group: str) -> str:
        return _PROSODY_PRELUDE.format(host=lua_string(self.domain), group=lua_string(group))

    @contextmanager
    def _groups(self) -> Iterator[dict[str, list[str]]]:
        """The groups file, locked against a concurrent `evio member`, written back if changed."""
        lock_path = self.groups_file.with_name(f".{self.groups_file.name}.lock")
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                old = self.groups_file.read_text()
                stat: os.stat_result | None = self.groups_file.stat()
            except FileNotFoundError:
                old, stat = "", None
            groups = parse_groups(old)
            yield groups
            new = groups_text(groups)
            if new != old:
                write_private(self.groups_file, new, stat.st_mode & 0o777 if stat else 0o640)
                if stat is not None:
                    os.chown(self.groups_file, stat.st_uid, stat.st_gid)

    def _create_offline(self, user: str, password: str) -> None:
        """prosody is stopped: prosodyctl writes the account itself (the password asked twice, on stdin)."""
        try:
            self._ctl("adduser", self._jid(user), stdin=f"{password}\n{password}\n")
        except ServerAdminError as exc:
            if "exists" not in exc.output.lower():
                raise
            self._ctl("passwd", self._jid(user), stdin=f"{password}\n{password}\n")

    def _push(self, lua: str) -> None:
        """Tell the online members; if prosody is stopped nobody is online, and the groups file is read at start."""
        try:
            self._shell(lua)
        except _NotRunning:
            pass

    def _ctl(self, *args: str, stdin: str | None = None) -> str:
        return run_command([*self.prosodyctl, "--config", str(self.config), *args], stdin=stdin)

    def _shell(self, lua: str) -> str:
        """One Lua chunk in the running prosody (admin shell, ``>``: the global environment); its result."""
        line = ">" + " ".join(part.strip() for part in lua.splitlines() if part.strip())
        argv = [*self.prosodyctl, "--config", str(self.config), "shell", "--quiet"]
        # Through stdin, not argv: the chunk may hold a password.
        try:
            out = run_command(argv, stdin=line + "\n")
        except ServerAdminError as exc:
            if "Unable to connect to server" in exc.output:
                raise _NotRunning([*argv, "<lua>"], exc.output) from None
            raise
        replies = [r.strip() for r in out.replace("prosody> ", "\n").splitlines() if r.strip()]
        errors = [r[2:] for r in replies if r.startswith("! ")]
        if errors or not any(r.startswith("| ") for r in replies):
            shown = [*argv, "<lua>"]
            raise ServerAdminError(shown, "; ".join(errors) or out.strip() or "no reply from the admin shell")
        return "\n".join(r[2:] for r in replies if r.startswith("| "))


class _NotRunning(ServerAdminError):
    """The admin shell's socket is not there: prosody is stopped."""


def _lua_list(jids: Sequence[str]) -> str:
    return ", ".join(lua_string(j) for j in jids)


# ---------------------------------------------------------------------------------------------- ejabberd


class EjabberdAdmin:
    """ejabberd 23.01: ``ejabberdctl`` commands (mod_admin_extra); mod_shared_roster pushes to online members."""

    def __init__(self, domain: str, ejabberdctl: Sequence[str] = ("ejabberdctl",), multicast: str = ""):
        self.domain = domain
        self.ejabberdctl = list(ejabberdctl)
        self.multicast = multicast  # mod_multicast's service JID ("": none, one send_stanza per session)

    def create_account(self, user: str, password: str) -> None:
        check_localpart(user)
        # ejabberdctl takes the password only as an argument (visible in the process list for a second).
        try:
            self._ctl("register", user, self.domain, password, secret=password)
        except ServerAdminError as exc:
            if "already registered" not in exc.output:
                raise
            self._ctl("change_password", user, self.domain, password, secret=password)

    def delete_account(self, user: str) -> None:
        check_localpart(user)
        for group in self._groups_of(user):
            self._ctl("srg_user_del", user, self.domain, group, self.domain)
        # unregister ends its sessions (contacts see it leave) and succeeds for an unknown account too, so
        # no registered_users call first: each ejabberdctl call is an Erlang start (0.4-0.9 s, more loaded).
        self._ctl("unregister", user, self.domain)

    def add_to_group(self, user: str, group: str) -> None:
        check_localpart(user)
        check_group(group)
        if group not in self._ctl("srg_list", self.domain).split():
            # Label = the overlay id (what members' rosters show as the group); displayed to its own members.
            self._ctl("srg_create", group, self.domain, group, f"evio overlay {group}", group)
        self._ctl("srg_user_add", user, self.domain, group, self.domain)

    def remove_from_group(self, user: str, group: str) -> None:
        check_localpart(user)
        check_group(group)
        self._ctl("srg_user_del", user, self.domain, group, self.domain)
        self._ctl("kick_user", user, self.domain)

    def _sessions(self) -> list[str]:
        """The full JIDs online, one a line: a member picks its resource, and XMPP allows spaces in it (issue 24)."""
        return [line.strip() for line in self._ctl("connected_users").splitlines() if line.strip()]

    def online_users(self) -> set[str]:
        users = set()
        for line in self._sessions():
            bare = line.split("/", 1)[0]
            node, _, host = bare.partition("@")
            if host == self.domain:
                users.add(node)
        return users

    def deliver(self, group: str, namespace: str, name: str, text: str, members: Sequence[str] | None = None,
                seeds: int = 0, seed_text: str = "") -> int:  # fmt: skip
        """Send <name xmlns=namespace>text</name> from the server to every online session of `group`'s members;
        one session each of the first `seeds` members online gets `seed_text` instead. `members`: the group's
        users as the caller knows them, in the order to send: one ejabberdctl call (a second or more each) fewer
        before the first member has it. With the multicast service, a few calls in all (decision 0065, amended); without, one per session."""
        check_group(group)
        if members is None:
            order = {jid: i for i, jid in enumerate(self._ctl("srg_get_members", group, self.domain).split())}
        else:
            order = {f"{user}@{self.domain}": i for i, user in enumerate(members)}
        online = [line for line in self._sessions() if line.split("/", 1)[0] in order]
        sessions = sorted(online, key=lambda full: order[full.split("/", 1)[0]])
        seeded = _one_each(sessions, seeds)
        others = [full for full in sessions if full not in seeded]
        for part, body in (([full for full in sessions if full in seeded], seed_text), (others, text)):
            payload = f'<{name} xmlns="{namespace}">{_escape(body)}</{name}>'
            done = 0
            for batch in _batches(part, MAX_ARGUMENT_BYTES - len(payload.encode()) - 200) if self.multicast else []:
                addresses = "".join(f'<address type="bcc" jid="{xml_escape(full)}"/>' for full in batch)
                self._ctl("send_stanza", self.domain, self.multicast,
                          f'<message type="normal" from="{self.domain}" to="{self.multicast}">'
                          f'<addresses xmlns="{ADDRESS_NS}">{addresses}</addresses>{payload}</message>')  # fmt: skip
                done += len(batch)
            for full in part[done:]:  # no multicast service, or a text too long to name members beside it
                self._ctl("send_stanza", self.domain, full, f'<message type="normal" from="{self.domain}" '
                          f'to="{xml_escape(full)}">{payload}</message>')  # fmt: skip
        return len(sessions)

    def _groups_of(self, user: str) -> list[str]:
        jid = f"{user}@{self.domain}"
        return [g for g in self._ctl("srg_list", self.domain).split()
                if jid in self._ctl("srg_get_members", g, self.domain).split()]  # fmt: skip

    def _ctl(self, *args: str, secret: str | None = None) -> str:
        return run_command([*self.ejabberdctl, *args], secret=secret)


# XEP-0033's namespace; the members' addresses go as "bcc", so no copy lists the others.
ADDRESS_NS = "http://jabber.org/protocol/address"
# One stanza is one ejabberdctl argument: Linux takes at most 128 KiB in one (MAX_ARG_STRLEN). About 1,700
# sessions' addresses fit beside a change, 700 beside a whole list of 1,000 members.
MAX_ARGUMENT_BYTES = 120_000


def _one_each(sessions: Sequence[str], accounts: int) -> set[str]:
    """The first session of each of the first `accounts` accounts in `sessions` (decision 0065's seeds: members, so
    that one member's several sessions do not take every whole list)."""
    chosen: dict[str, str] = {}
    for full in sessions:
        if len(chosen) >= accounts:
            break
        chosen.setdefault(full.split("/", 1)[0], full)
    return set(chosen.values())


def _batches(sessions: Sequence[str], room: int) -> Iterator[list[str]]:
    """`sessions` in consecutive runs whose addresses take at most `room` bytes; stops at one that alone would not
    fit (the caller sends it and the rest one by one)."""
    batch: list[str] = []
    used = 0
    for full in sessions:
        size = len(xml_escape(full).encode()) + 32  # <address type="bcc" jid=""/>
        if size > room:
            break
        if used + size > room:
            yield batch
            batch, used = [], 0
        batch.append(full)
        used += size
    if batch:
        yield batch
