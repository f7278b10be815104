"""coturn's long-term credentials (a TURN account per member) in its sqlite user database.

What ``turnadmin -a -b DB -u USER -r REALM -p PASSWORD`` stores, written
directly: a row of ``turnusers_lt`` with the RFC 5389 long-term key
MD5(user:realm:password), never the password. Not turnadmin itself, because it
takes the password only as an argument (world-readable in /proc for as long
as it runs), exits 0 when it fails, and leaves a log file in /var/log per
call. coturn reads the table at every allocation, so a change applies to the
running server at once. The table is created with coturn's own definition
when the file is new; coturn adds its other tables when it starts.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import sqlite3
from contextlib import closing
from pathlib import Path

from evio.server.commands import ServerAdminError
from evio.server.settings import ServerSettings

TURN_USER = "turnserver"  # the Debian package runs coturn as this user
_TABLE = (
    "CREATE TABLE IF NOT EXISTS turnusers_lt ( realm varchar(127) default '', name varchar(512), "
    "hmackey char(128), PRIMARY KEY (realm,name))"
)


def long_term_key(user: str, realm: str, password: str) -> str:
    """RFC 5389 section 15.4: the key of a long-term credential, as coturn stores it (hex)."""
    return hashlib.md5(f"{user}:{realm}:{password}".encode()).hexdigest()


class TurnAdmin:
    def __init__(self, db: Path, realm: str, owner: str | None = TURN_USER):
        self.db = db
        self.realm = realm
        self.owner = owner  # made the file's owner when it is created (if that user exists)

    def add_user(self, user: str, password: str) -> None:
        """Add the account, or set its password if it exists."""
        self._execute("INSERT OR REPLACE INTO turnusers_lt (realm, name, hmackey) VALUES (?, ?, ?)",
                      (self.realm, user, long_term_key(user, self.realm, password)))  # fmt: skip

    def remove_user(self, user: str) -> None:
        """Remove the account (no account: nothing). Allocations made before live until they expire."""
        self._execute("DELETE FROM turnusers_lt WHERE realm = ? AND name = ?", (self.realm, user))

    def users(self) -> set[str]:
        if not self.db.exists():
            return set()
        with closing(self._connect()) as db:
            rows = db.execute("SELECT name FROM turnusers_lt WHERE realm = ?", (self.realm,)).fetchall()
        return {str(name) for (name,) in rows}

    def ensure_database(self) -> bool:
        """Create the database with its user table if it does not exist; True if it was created."""
        if self.db.exists():
            return False
        self.db.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.db, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        self._execute(_TABLE, ())
        if self.owner is not None and os.geteuid() == 0:
            try:
                entry = pwd.getpwnam(self.owner)
            except KeyError:
                return True  # no such user here (a test host): root keeps it
            os.chown(self.db, entry.pw_uid, entry.pw_gid)
        return True

    def _connect(self) -> sqlite3.Connection:
        # coturn may hold the database open: wait for its lock rather than fail.
        return sqlite3.connect(self.db, timeout=10)

    def _execute(self, sql: str, parameters: tuple[str, ...]) -> None:
        if not self.db.exists() and not sql.startswith("CREATE"):
            self.ensure_database()
        try:
            with closing(self._connect()) as db, db:
                db.execute(_TABLE)
                db.execute(sql, parameters)
        except sqlite3.Error as exc:
            raise ServerAdminError(["sqlite3", str(self.db)], str(exc)) from None


def turn_admin(settings: ServerSettings) -> TurnAdmin:
    return TurnAdmin(Path(settings.turn_db), settings.realm)
