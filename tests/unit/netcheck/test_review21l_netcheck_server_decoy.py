"""Review21l L3: `evio netcheck --server` takes any local user's process for the XMPP server, and reports that
process's open-files limit as the server's: a decoy hides the 1,024-descriptor server the check exists to find.

Attack (a local unprivileged user on the server host): ejabberd runs as a systemd or ejabberdctl node whose
command line does not name its config file (the usual `beam.smp ... -sname ejabberd@host ... -s ejabberd`). The
user copies any binary to `~/beam.smp` and runs `~/beam.smp -s ejabberd /etc/ejabberd/ejabberd.yml` with
`ulimit -n` raised to its hard limit (65,536 or more on most distributions). `server._find_process` prefers a
matching process whose argv *contains the config path* over the first match, and checks neither the process's
owner nor its executable: the decoy is chosen whatever the pids. (For prosody the pidfile comes first, but a
stale one whose pid a user's process took, or a config without `pidfile`, leads to the same search, which
matches `prosody` anywhere in argv[:3]: `exec -a prosody sleep inf`.)

Impact: medium (a diagnostic, but the one issue 24 relies on): `ejabberd open files: ok, process <decoy> may open
65536 files` while the real server has 1,024 and fails every accept in a loop at 1,000 members; the reverse
(a decoy with `ulimit -n 16`) makes a healthy server look broken. One command by any local account.

Suggested fix: take the server's process from its service manager (`systemctl show -p MainPID ejabberd` /
`prosody`) or the pidfile, and when searching /proc accept only processes owned by root or the service's user
(`/proc/PID/status` Uid) whose executable is the installed one (`/proc/PID/exe`); when several match, report
each (or the lowest limit), never silently one.
"""

from __future__ import annotations

from pathlib import Path

from evio.netcheck.server import check_server
from tests.unit.netcheck.test_netcheck_server import BEAM, LIMITS, FakeHost, _init

STATUS = "Name:\tbeam.smp\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"


def test_a_local_users_decoy_does_not_stand_in_for_the_ejabberd_node(tmp_path: Path) -> None:
    target = _init(tmp_path, "ejabberd")
    real = [BEAM, "--", "-sname", "ejabberd@localhost", "--", "-mnesia", "dir", '"/var/lib/ejabberd"', "-s", "ejabberd",
            "-noinput"]  # fmt: skip
    decoy = ["/home/mallory/beam.smp", "-s", "ejabberd", target.ejabberd_config]
    host = FakeHost({5151: real, 6100: decoy})
    host.proc["/proc/5151/limits"] = LIMITS.format(soft="1024")  # started by hand as root: the failure to find
    host.proc["/proc/5151/status"] = STATUS.format(uid=0)
    host.proc["/proc/6100/status"] = STATUS.format(uid=1000)  # mallory's, `ulimit -n 65536`
    opened = next(v for v in check_server(target, host).verdicts if v.subject == "ejabberd open files")
    print(f"{opened.level}: {opened.text}")
    assert opened.level == "problem" and "process 5151" in opened.text
