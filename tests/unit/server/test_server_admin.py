"""The XMPP and TURN admin adapters against fakes: the groups file, the Lua they send, coturn's user table.

The fake prosodyctl records the admin-shell line it gets on stdin and
answers as prosody 0.12's shell does. Real servers: tests/integration/server/test_server_membership.py.
"""

from __future__ import annotations

import ast
import hashlib
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from evio.server import xmpp_admin as xmpp_admin_module
from evio.server.commands import ServerAdminError, run_command
from evio.server.settings import ServerSettings
from evio.server.turn_admin import TurnAdmin, long_term_key, turn_admin
from evio.server.xmpp_admin import EjabberdAdmin, ProsodyAdmin, xmpp_admin

DOMAIN = "overlay.example.net"

FAKE_PROSODYCTL = """\
import os, sys
line = sys.stdin.readline().rstrip("\\n")
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(line + "\\n")
reply = os.environ.get("FAKE_REPLY", "| Result: pushed 0")
print("prosody> " + reply)
print("prosody> ")
"""


@pytest.fixture
def prosody(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ProsodyAdmin:
    script = tmp_path / "fake_prosodyctl.py"
    script.write_text(FAKE_PROSODYCTL)
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "shell.log"))
    return ProsodyAdmin(DOMAIN, tmp_path / "prosody.cfg.lua", tmp_path / "groups.txt",
                        prosodyctl=[sys.executable, str(script)])  # fmt: skip


def _sent(admin: ProsodyAdmin) -> list[str]:
    return (admin.groups_file.parent / "shell.log").read_text().splitlines()


def test_add_and_remove_edit_the_groups_file_and_push(prosody: ProsodyAdmin) -> None:
    prosody.add_to_group("n1", "ov1")
    prosody.add_to_group("n2", "ov1")
    prosody.add_to_group("n2", "ov1")  # again: no duplicate line
    prosody.add_to_group("n1", "ov2")
    assert prosody.groups_file.read_text() == (f"[ov1]\nn1@{DOMAIN}\nn2@{DOMAIN}\n[ov2]\nn1@{DOMAIN}\n")
    sent = _sent(prosody)
    assert all(line.startswith(">") for line in sent)  # Lua in prosody's global environment
    # n2's push names n1 as the member to link with, in ov1.
    assert f'local host, group = "{DOMAIN}", "ov1"' in sent[1]
    assert f'local jid, others = "n2@{DOMAIN}", {{ "n1@{DOMAIN}" }}' in sent[1]
    prosody.remove_from_group("n1", "ov1")
    assert prosody.groups_file.read_text() == f"[ov1]\nn2@{DOMAIN}\n[ov2]\nn1@{DOMAIN}\n"
    assert "session:close" in _sent(prosody)[-1]


def test_delete_takes_the_account_out_of_every_group_first(prosody: ProsodyAdmin) -> None:
    prosody.groups_file.write_text(f"[ov1]\nn1@{DOMAIN}\nn2@{DOMAIN}\n[ov2]\nn1@{DOMAIN}\n")
    prosody.delete_account("n1")
    assert prosody.groups_file.read_text() == f"[ov1]\nn2@{DOMAIN}\n[ov2]\n"
    sent = _sent(prosody)
    assert len(sent) == 3 and "delete_user" in sent[-1] and "delete_user" not in sent[0]


def test_passwords_go_through_stdin_not_the_command_line(prosody: ProsodyAdmin) -> None:
    prosody.create_account("n1", 'pa"ss\\word')
    (line,) = _sent(prosody)
    assert 'create_user("n1", "pa\\"ss\\\\word", "overlay.example.net")' in line


@pytest.mark.skipif(shutil.which("luac") is None, reason="luac (lua5.4) is not installed")
def test_every_chunk_sent_is_valid_lua(prosody: ProsodyAdmin, tmp_path: Path) -> None:
    prosody.add_to_group("n1", "ov1")
    prosody.add_to_group("n2", "ov1")
    prosody.remove_from_group("n1", "ov1")
    prosody.create_account("n3", "pw")
    prosody.delete_account("n2")
    prosody.online_users()
    for i, line in enumerate(_sent(prosody)):
        chunk = tmp_path / f"chunk{i}.lua"
        chunk.write_text(line[1:])
        done = subprocess.run(["luac", "-p", str(chunk)], capture_output=True, text=True)
        assert done.returncode == 0, f"{line}\n{done.stderr}"


def test_online_users_and_shell_errors(prosody: ProsodyAdmin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_REPLY", "| Result: online:n1 n3")
    assert prosody.online_users() == {"n1", "n3"}
    monkeypatch.setenv("FAKE_REPLY", "! console:1: reloading mod_groups: no such file")
    with pytest.raises(ServerAdminError, match="reloading mod_groups: no such file"):
        prosody.add_to_group("n1", "ov1")


def test_names_that_are_not_evio_accounts_or_groups_are_refused(prosody: ProsodyAdmin) -> None:
    with pytest.raises(ValueError):
        prosody.add_to_group('n1"); os.exit(', "ov1")
    with pytest.raises(ValueError):
        prosody.add_to_group("n1", "ov 1")
    assert not prosody.groups_file.exists()


def test_run_command_hides_a_secret_argument() -> None:
    with pytest.raises(ServerAdminError) as caught:
        run_command([sys.executable, "-c", "import sys; print(sys.argv[1]); sys.exit(3)", "s3cret"], secret="s3cret")
    assert "s3cret" not in str(caught.value) and "***" in str(caught.value) and "exit 3" in str(caught.value)
    with pytest.raises(ServerAdminError, match="not found"):
        run_command(["/nonexistent/ejabberdctl"])


def test_ejabberd_commands(tmp_path: Path) -> None:
    log = tmp_path / "ctl.log"
    script = tmp_path / "fake_ejabberdctl.py"
    script.write_text(f"""\
import sys
with open({str(log)!r}, "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
if sys.argv[1] == "connected_users":
    print("n1@{DOMAIN}/r1\\nn1@{DOMAIN}/r2\\nx@elsewhere.org/r")
if sys.argv[1] == "srg_list":
    print("ov1")
""")
    admin = EjabberdAdmin(DOMAIN, [sys.executable, str(script)])
    admin.add_to_group("n2", "ov1")
    admin.add_to_group("n2", "ov2")
    admin.remove_from_group("n2", "ov1")
    assert admin.online_users() == {"n1"}
    assert log.read_text().splitlines() == [
        f"srg_list {DOMAIN}", f"srg_user_add n2 {DOMAIN} ov1 {DOMAIN}",
        f"srg_list {DOMAIN}", f"srg_create ov2 {DOMAIN} ov2 evio overlay ov2 ov2", f"srg_user_add n2 {DOMAIN} ov2 {DOMAIN}",
        f"srg_user_del n2 {DOMAIN} ov1 {DOMAIN}", f"kick_user n2 {DOMAIN}",
        "connected_users",
    ]  # fmt: skip


def test_ejabberd_delivers_through_the_multicast_service_in_batches(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Decision 0065 (amended): the seeds' text in one send_stanza, the others' in as few as fit one argument each; a text
    too long to name anyone beside it goes one session at a time, as without the service."""
    log = tmp_path / "ctl.log"
    script = tmp_path / "fake_ejabberdctl.py"
    script.write_text(f"""\
import sys
with open({str(log)!r}, "a") as f:
    f.write(repr(sys.argv[1:]) + "\\n")
if sys.argv[1] == "connected_users":
    print("\\n".join(f"n{{i}}@{DOMAIN}/r" for i in range(10)) + "\\nn1@{DOMAIN}/r2\\nx@elsewhere.org/r")
""")
    admin = EjabberdAdmin(DOMAIN, [sys.executable, str(script)], multicast=f"multicast.{DOMAIN}")
    members = [f"n{i}" for i in range(10)]

    def sent() -> list[list[str]]:
        rows = [ast.literal_eval(row) for row in log.read_text().splitlines()]
        log.write_text("")
        return [row for row in rows if row[0] == "send_stanza"]

    assert admin.deliver("ov1", "urn:x-evio:members:1", "members", "<change>", members=members, seeds=3,
                         seed_text="whole") == 11  # fmt: skip
    rows = sent()
    assert [(row[1], row[2]) for row in rows] == [(DOMAIN, f"multicast.{DOMAIN}")] * 2
    seeds, rest = (re.findall(r'<address type="bcc" jid="([^"]+)"/>', row[3]) for row in rows)
    assert seeds == [f"n0@{DOMAIN}/r", f"n1@{DOMAIN}/r", f"n2@{DOMAIN}/r"]  # three members, one session each
    assert rest == [f"n1@{DOMAIN}/r2"] + [f"n{i}@{DOMAIN}/r" for i in range(3, 10)]
    assert rows[0][3].endswith('</addresses><members xmlns="urn:x-evio:members:1">whole</members></message>')
    assert rows[1][3].endswith('<members xmlns="urn:x-evio:members:1">&lt;change&gt;</members></message>')
    assert '<addresses xmlns="http://jabber.org/protocol/address">' in rows[1][3]

    # Room for three addresses beside the text: the 8 others in 3 calls.
    payload = len('<members xmlns="urn:x-evio:members:1">&lt;change&gt;</members>')
    monkeypatch.setattr(xmpp_admin_module, "MAX_ARGUMENT_BYTES", payload + 200 + 3 * (len(f"n1@{DOMAIN}/r2") + 32))
    admin.deliver("ov1", "urn:x-evio:members:1", "members", "<change>", members=members)
    assert [len(re.findall("<address ", row[3])) for row in sent()] == [3, 3, 3, 2]
    # A text that leaves no room: one call per session, no addresses.
    admin.deliver("ov1", "urn:x-evio:members:1", "members", "x" * 400, members=members)
    rows = sent()
    assert len(rows) == 11 and not any("<addresses" in row[3] for row in rows)
    assert rows[0][2] == f"n0@{DOMAIN}/r"


def test_settings_choose_the_adapter() -> None:
    prosody = xmpp_admin(ServerSettings(domain=DOMAIN, xmpp="prosody", address="192.0.2.1"))
    assert isinstance(prosody, ProsodyAdmin) and prosody.groups_file == Path("/etc/prosody/evio-groups.txt")
    ejabberd = xmpp_admin(ServerSettings(domain=DOMAIN, xmpp="ejabberd", address="192.0.2.1",
                                         ejabberdctl="ejabberdctl --node e@localhost"))  # fmt: skip
    assert isinstance(ejabberd, EjabberdAdmin) and ejabberd.ejabberdctl == ["ejabberdctl", "--node", "e@localhost"]
    assert ejabberd.multicast == ""  # a server.json from before decision 0065, amended: one call per member
    ejabberd = xmpp_admin(ServerSettings(domain=DOMAIN, xmpp="ejabberd", address="192.0.2.1",
                                         ejabberd_multicast=f"multicast.{DOMAIN}"))  # fmt: skip
    assert isinstance(ejabberd, EjabberdAdmin) and ejabberd.multicast == f"multicast.{DOMAIN}"


def test_turn_users_are_long_term_keys_in_coturns_table(tmp_path: Path) -> None:
    db = tmp_path / "turndb"
    admin = TurnAdmin(db, DOMAIN, owner=None)
    admin.add_user("n1", "pw1")
    admin.add_user("n2", "pw2")
    admin.add_user("n1", "pw1b")  # again: the new password
    assert admin.users() == {"n1", "n2"}
    with sqlite3.connect(db) as conn:
        rows = dict(conn.execute("SELECT name, hmackey FROM turnusers_lt WHERE realm = ?", (DOMAIN,)).fetchall())
    # What `turnadmin -a -u n1 -r REALM -p pw1b` stores (RFC 5389 15.4), never the password.
    assert rows["n1"] == hashlib.md5(f"n1:{DOMAIN}:pw1b".encode()).hexdigest() == long_term_key("n1", DOMAIN, "pw1b")
    admin.remove_user("n1")
    admin.remove_user("nobody")
    assert admin.users() == {"n2"}
    assert oct(db.stat().st_mode & 0o777) == "0o600"


def test_turn_admin_from_settings_uses_the_realm() -> None:
    settings = ServerSettings(domain=DOMAIN, xmpp="prosody", address="192.0.2.1", turn_realm="turn.example.net")
    admin = turn_admin(settings)
    assert admin.realm == "turn.example.net" and admin.db == Path("/var/lib/turn/turndb")


def test_deliver_sends_one_element_to_every_online_session_of_the_group(prosody: ProsodyAdmin, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """What `evio member remove` uses to hand a revocation list to the online members (issue 21, M2)."""
    prosody.add_to_group("n1", "ov1")
    prosody.add_to_group("n2", "ov1")
    monkeypatch.setenv("FAKE_REPLY", "| Result: sent 3")
    assert prosody.deliver("ov1", "urn:x-evio:identity:1", "identity", '{"v":1,"a":"]] \\" \\n"}') == 3
    line = _sent(prosody)[-1]
    assert f'ipairs({{ "n1@{DOMAIN}", "n2@{DOMAIN}" }})' in line and 'xmlns = "urn:x-evio:identity:1"' in line
    if shutil.which("luac"):
        chunk = tmp_path / "deliver.lua"
        chunk.write_text(line[1:])
        done = subprocess.run(["luac", "-p", str(chunk)], capture_output=True, text=True)
        assert done.returncode == 0, f"{line}\n{done.stderr}"
    log = tmp_path / "ctl.log"
    script = tmp_path / "fake_ejabberdctl.py"
    script.write_text(f"""\
import sys
with open({str(log)!r}, "a") as f:
    f.write(repr(sys.argv[1:]) + "\\n")
if sys.argv[1] == "connected_users":
    print("n1@{DOMAIN}/r1\\nn1@{DOMAIN}/r2\\nn9@{DOMAIN}/r")
if sys.argv[1] == "srg_get_members":
    print("n1@{DOMAIN}\\nn2@{DOMAIN}")
""")
    admin = EjabberdAdmin(DOMAIN, [sys.executable, str(script)])
    assert admin.deliver("ov1", "urn:x-evio:identity:1", "identity", '{"a":"<&>"}') == 2
    sent = [ast.literal_eval(row) for row in log.read_text().splitlines() if "send_stanza" in row]
    assert [row[2] for row in sent] == [f"n1@{DOMAIN}/r1", f"n1@{DOMAIN}/r2"]
    assert sent[0][3].endswith('<identity xmlns="urn:x-evio:identity:1">{"a":"&lt;&amp;&gt;"}</identity></message>')
    # Decision 0065: the first `seeds` sessions get the whole list, the others the change.
    log.write_text("")
    assert admin.deliver("ov1", "urn:x-evio:members:1", "members", "change", seeds=1, seed_text="whole") == 2
    sent = [ast.literal_eval(row) for row in log.read_text().splitlines() if "send_stanza" in row]
    assert [row[3].split(">")[2].split("<")[0] for row in sent] == ["whole", "change"]
    monkeypatch.setenv("FAKE_REPLY", "| Result: sent 2")
    assert prosody.deliver("ov1", "urn:x-evio:members:1", "members", "change", seeds=3, seed_text="whole") == 2
    line = _sent(prosody)[-1]
    assert 'local seeds, seed_text, text = 3, "whole", "change";' in line and "if seed then" in line


def _fake_ejabberdctl(tmp_path: Path, sessions: list[str]) -> tuple[EjabberdAdmin, Path]:
    log = tmp_path / "ctl.log"
    script = tmp_path / "fake_ejabberdctl.py"
    printed = "\n".join(sessions)
    script.write_text(f"""\
import sys
with open({str(log)!r}, "a") as f:
    f.write(repr(sys.argv[1:]) + "\\n")
if sys.argv[1] == "connected_users":
    print({printed!r})
""")
    return EjabberdAdmin(DOMAIN, [sys.executable, str(script)]), log


def test_ejabberd_a_resource_with_spaces_is_one_session_not_several_targets(tmp_path: Path) -> None:
    """A member picks its own resource; XMPP allows spaces in it. `connected_users` prints one full JID a line: split on
    whitespace, "n1@D/my laptop" became a target "n1@D/my" (no such session: the real one got nothing), and a resource
    naming another member's JID made a session of it that took a seed's whole list."""
    admin, log = _fake_ejabberdctl(tmp_path, [f"n1@{DOMAIN}/my laptop", f"n2@{DOMAIN}/x n3@{DOMAIN}/forged",
                                              f"n0@{DOMAIN}/r"])  # fmt: skip
    assert admin.online_users() == {"n0", "n1", "n2"}  # not n3, offline
    # n3 first in the members' order: its forged session took the seed's whole list, which reached nobody.
    assert admin.deliver("ov1", "urn:x-evio:members:1", "members", "change", members=["n3", "n0", "n1", "n2"], seeds=1,
                         seed_text="whole") == 3  # fmt: skip
    sent = [ast.literal_eval(row) for row in log.read_text().splitlines() if "send_stanza" in row]
    assert [(row[2], row[3].split(">")[2].split("<")[0]) for row in sent] == [
        (f"n0@{DOMAIN}/r", "whole"), (f"n1@{DOMAIN}/my laptop", "change"), (f"n2@{DOMAIN}/x n3@{DOMAIN}/forged", "change")]  # fmt: skip


_LUA_SESSIONS = """
package.preload["util.stanza"] = function() return { message = function(attrs)
  local m = { attrs = attrs }; function m:tag() return self end; function m:text(t) self.body = t; return self end
  return m end } end
local function user(name, ...) local s = {}
  for _, r in ipairs({ ... }) do s[r] = { full_jid = name .. "@D/" .. r,
    send = function(st) print(st.attrs.to .. " " .. st.body) end } end
  return { sessions = s } end
prosody = { hosts = { [%s] = { sessions = { n0 = user("n0", "a", "b", "c"), n1 = user("n1", "a"), n2 = user("n2", "a"),
  n3 = user("n3", "a") } } } }
"""


def test_the_seeds_are_three_members_not_one_members_three_sessions(prosody: ProsodyAdmin, tmp_path: Path) -> None:
    """Decision 0065: the whole list goes to `seeds` members so that a member the server missed has three floods to
    get it from; three sessions of one member (a node signed in twice, or a member wanting the list alone) were one."""
    # ejabberd: connected_users in the members' order
    sessions = [f"n0@{DOMAIN}/a", f"n0@{DOMAIN}/b", f"n0@{DOMAIN}/c", f"n1@{DOMAIN}/a", f"n2@{DOMAIN}/a", f"n3@{DOMAIN}/a"]
    admin, log = _fake_ejabberdctl(tmp_path, sessions)
    assert admin.deliver("ov1", "urn:x-evio:members:1", "members", "change", members=["n0", "n1", "n2", "n3"], seeds=3,
                         seed_text="whole") == 6  # fmt: skip
    sent = [ast.literal_eval(row) for row in log.read_text().splitlines() if "send_stanza" in row]
    whole = {row[2] for row in sent if row[3].split(">")[2].split("<")[0] == "whole"}
    assert whole == {f"n0@{DOMAIN}/a", f"n1@{DOMAIN}/a", f"n2@{DOMAIN}/a"} and len(sent) == 6
    # prosody: the shell chunk itself, run by Lua on sessions of the same shape
    lua = shutil.which("lua") or shutil.which("lua5.4") or shutil.which("lua5.1")
    if lua is None:
        pytest.skip("no lua to run prosody's chunk")
    for name in ("n0", "n1", "n2", "n3"):
        prosody.add_to_group(name, "ov1")
    prosody.deliver("ov1", "urn:x-evio:members:1", "members", "change", seeds=3, seed_text="whole")
    chunk = tmp_path / "deliver.lua"
    chunk.write_text(_sent(prosody)[-1][1:])
    done = subprocess.run([lua, "-e", _LUA_SESSIONS % f'"{DOMAIN}"', str(chunk)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = [line.split() for line in done.stdout.splitlines()]
    assert sorted(to.split("/")[0] for to, body in got if body == "whole") == ["n0@D", "n1@D", "n2@D"]
    assert len(got) == 6
