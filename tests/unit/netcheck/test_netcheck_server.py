"""`evio netcheck --server`: the settings `evio server init` wrote, checked from files in tmp_path and a fake /proc."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evio.cli import main
from evio.netcheck.findings import Verdict
from evio.netcheck.server import ServerTarget, check_server, open_files_soft_limit, render_text, to_json
from evio.server.configs import DENIED_PEER_RANGES
from evio.server.init import InitOptions, run_init

STATUS = "Name:\tserver\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
LIMITS = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            {soft}                {soft}                files\n"


class FakeHost:
    """Real files; /proc and the kernel's sysctl from dictionaries. Every process is root's, started by init, and
    runs its argv[0] (a bare name from /usr/bin), unless a test says otherwise."""

    def __init__(self, processes: dict[int, list[str]], soft: str = "65536", somaxconn: str = "4096") -> None:
        self.processes = processes
        self.environs: dict[int, dict[str, str]] = {}
        self.proc = {"/proc/sys/net/core/somaxconn": somaxconn + "\n"}
        self.proc.update({f"/proc/{pid}/limits": LIMITS.format(soft=soft) for pid in processes})
        self.proc.update({f"/proc/{pid}/status": STATUS.format(uid=0, ppid=1) for pid in processes})
        self.executables = {pid: argv[0] if argv[0].startswith("/") else f"/usr/bin/{argv[0]}"
                            for pid, argv in processes.items()}  # fmt: skip
        self.users = {"ejabberd": 109, "prosody": 106}
        self.services: dict[str, int] = {}  # unit -> MainPID: systemd runs here

    def read_text(self, path: str) -> str | None:
        if path.startswith("/proc/"):
            return self.proc.get(path)
        try:
            return Path(path).read_text()
        except OSError:
            return None

    def pids(self) -> list[int]:
        return sorted(self.processes)

    def cmdline(self, pid: int) -> list[str]:
        return self.processes.get(pid, [])

    def environ(self, pid: int) -> dict[str, str]:
        return self.environs.get(pid, {})

    def executable(self, pid: int) -> str | None:
        return self.executables.get(pid)

    def user_id(self, name: str) -> int | None:
        return self.users.get(name)

    def service_main_pid(self, unit: str) -> int | None:
        return self.services.get(unit)


def _init(d: Path, xmpp: str = "prosody") -> ServerTarget:
    options = InitOptions(
        domain="evio.example.net", address="203.0.113.7", xmpp=xmpp, state_dir=d / "state",  # type: ignore[arg-type]
        prosody_config=d / "prosody.cfg.lua", groups_file=d / "groups.txt", prosody_certs=d / "certs",
        ejabberd_config=d / "ejabberd.yml", turn_config=d / "turnserver.conf", turn_db=d / "turndb",
        systemd_dir=d / "systemd",
    )  # fmt: skip
    settings = run_init(options).settings
    assert settings is not None
    return ServerTarget(settings.xmpp, settings.xmpp_port, settings.prosody_config, settings.ejabberd_config,
                        settings.turn_config, DENIED_PEER_RANGES, members=1000)  # fmt: skip


PROSODY = {4242: ["lua5.4", "/usr/bin/prosody", "-F"], 7: ["sshd"]}
BEAM = "/usr/lib/erlang/erts-13.1.5/bin/beam.smp"
EJABBERD = {5151: [BEAM, "--", "-sname", "ejabberd@localhost", "--", "-mnesia", "dir", '"/var/lib/ejabberd"', "-s", "ejabberd", "-noinput"]}
CTL = [BEAM, "--", "-sname", "ctl-1-ejabberd", "--", "-hidden", "-noinput", "-s", "ejabberd_ctl", "-extra", "status"]


def test_what_init_writes_is_ok_on_prosody(tmp_path: Path) -> None:
    report = check_server(_init(tmp_path), FakeHost(PROSODY))
    assert [v.level for v in report.verdicts] == ["ok"] * 5, render_text(report)
    assert report.exit_status == 0
    assert "tcp_backlog = 1024" in render_text(report) and "process 4242 may open 65536 files" in render_text(report)


def test_what_init_writes_is_ok_on_ejabberd(tmp_path: Path) -> None:
    report = check_server(_init(tmp_path, "ejabberd"), FakeHost(EJABBERD))
    assert [v.level for v in report.verdicts] == ["ok"] * 6, render_text(report)
    assert "c2s listener backlog 1024" in render_text(report)


def test_the_backlog_edited_out_of_prosody_is_a_problem(tmp_path: Path) -> None:
    target = _init(tmp_path)
    config = Path(target.prosody_config)
    config.write_text(config.read_text().replace("tcp_backlog = 1024; ", ""))
    report = check_server(target, FakeHost(PROSODY))
    assert report.exit_status == 1
    [problem] = report.problems
    assert problem.subject == "prosody listen backlog" and "no tcp_backlog in network_settings" in problem.text


def test_a_commented_out_backlog_and_a_small_one_are_problems(tmp_path: Path) -> None:
    target = _init(tmp_path)
    config = Path(target.prosody_config)
    original = config.read_text()
    config.write_text(original.replace("network_settings", "-- network_settings"))
    assert "no tcp_backlog" in check_server(target, FakeHost(PROSODY)).problems[0].text
    config.write_text(original.replace("tcp_backlog = 1024", "tcp_backlog = 128"))
    assert "tcp_backlog = 128, below the 1024" in check_server(target, FakeHost(PROSODY)).problems[0].text


def test_prosody_without_the_limits_is_a_warning(tmp_path: Path) -> None:
    target = _init(tmp_path)
    config = Path(target.prosody_config)
    config.write_text(config.read_text().replace("limits = {", "-- limits = {"))
    report = check_server(target, FakeHost(PROSODY))
    assert report.exit_status == 0 and [v.level for v in report.verdicts].count("warning") == 1


def test_ejabberd_packaged_listener_shaper_and_caches(tmp_path: Path) -> None:
    target = _init(tmp_path, "ejabberd")
    config = Path(target.ejabberd_config)
    edited = config.read_text().replace("    backlog: 1024\n", "").replace("    shaper: c2s_shaper\n", "")
    config.write_text(edited.replace("cache_size: 10000", "cache_size: 1000"))
    report = check_server(target, FakeHost(EJABBERD))
    [problem] = report.problems
    assert "has no backlog (ejabberd keeps 5 pending connections)" in problem.text
    assert [v.level for v in report.verdicts].count("warning") == 2, render_text(report)



@pytest.mark.parametrize("text", ["listen: 5222\n", "listen:\n  - port: 5222\n    module: ejabberd_c2s\n    shaper: [a]\n",
                                  "- just\n- a list\n", "cache_size: {a: 1}\nlisten: {x: 1}\n"])
def test_an_ejabberd_config_of_any_shape_is_a_verdict_not_a_traceback(tmp_path: Path, text: str) -> None:
    target = _init(tmp_path, "ejabberd")
    Path(target.ejabberd_config).write_text(text)
    report = check_server(target, FakeHost(EJABBERD))
    assert report.problems, render_text(report)  # (review21l: `listen: 5222` and `shaper: [a]` raised TypeError)

def test_the_open_files_limit_against_the_members(tmp_path: Path) -> None:
    target = _init(tmp_path, "ejabberd")
    # ejabberdctl started by hand as root: 1,024 descriptors for 1,000 members.
    [problem] = check_server(target, FakeHost(EJABBERD, soft="1024")).problems
    assert problem.subject == "ejabberd open files" and "fewer than its 1000 members" in problem.text
    assert "systemd" in problem.text
    few = ServerTarget(**{**target.__dict__, "members": 50})
    report = check_server(few, FakeHost(EJABBERD, soft="1024"))
    assert report.exit_status == 0 and any(v.level == "warning" and "open files" in v.subject for v in report.verdicts)
    assert check_server(few, FakeHost(EJABBERD, soft="unlimited")).verdicts[3].level == "ok"


def test_no_running_server_is_a_problem(tmp_path: Path) -> None:
    report = check_server(_init(tmp_path), FakeHost({7: ["sshd"]}))
    [problem] = report.problems
    assert problem.text.startswith("no running prosody process found")


def test_somaxconn_below_the_backlog_is_a_problem(tmp_path: Path) -> None:
    [problem] = check_server(_init(tmp_path), FakeHost(PROSODY, somaxconn="128")).problems
    assert problem.subject == "kernel net.core.somaxconn" and "net.core.somaxconn=1024" in problem.text


def test_coturn_without_its_relay_limits_is_a_problem(tmp_path: Path) -> None:
    target = _init(tmp_path)
    conf = Path(target.turn_config)
    conf.write_text(conf.read_text().replace("no-tcp-relay\n", "").replace("denied-peer-ip=10.0.0.0-10.255.255.255\n", ""))
    [problem] = check_server(target, FakeHost(PROSODY)).problems
    assert "no-tcp-relay" in problem.text and "10.0.0.0-10.255.255.255" in problem.text
    conf.unlink()
    assert "cannot be read" in check_server(target, FakeHost(PROSODY)).problems[0].text


def test_json_has_netchecks_verdict_shape(tmp_path: Path) -> None:
    document = json.loads(to_json(check_server(_init(tmp_path), FakeHost(PROSODY, somaxconn="128"))))
    assert document["ok"] is False and document["exit_status"] == 1
    assert set(document["verdicts"][0]) == {"level", "subject", "text"}


def test_limits_parsing() -> None:
    assert open_files_soft_limit(LIMITS.format(soft="1024")) == 1024
    assert open_files_soft_limit(LIMITS.format(soft="unlimited")) is None
    assert open_files_soft_limit(Path("/proc/self/limits").read_text()) is not None


def test_missing_settings_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["netcheck", "--server", "--state-dir", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"evio netcheck: {tmp_path}/server.json does not exist: run `evio server init` on this host first\n"


def test_the_ejabberd_node_of_this_config_not_an_ejabberdctl_call_nor_another_node(tmp_path: Path) -> None:
    target = _init(tmp_path, "ejabberd")
    host = FakeHost({**EJABBERD, 5000: CTL, 6000: EJABBERD[5151]}, soft="65536")
    host.environs[6000] = {"EJABBERD_CONFIG_PATH": target.ejabberd_config}
    opened = [v for v in check_server(target, host).verdicts if v.subject == "ejabberd open files"]
    assert opened[0].text.startswith("process 6000 may open")
    assert check_server(target, FakeHost({5000: CTL})).problems[0].text.startswith("no running ejabberd process")


# -- which process is the server (review21l L3) -----------------------------------------------------------


def _opened(target: ServerTarget, host: FakeHost) -> Verdict:
    return next(v for v in check_server(target, host).verdicts if v.subject == f"{target.xmpp} open files")


def test_a_stale_pidfile_taken_by_a_users_process_does_not_stand_in_for_prosody(tmp_path: Path) -> None:
    target = _init(tmp_path)
    pidfile = tmp_path / "prosody.pid"
    config = Path(target.prosody_config)
    config.write_text(config.read_text().replace('"/run/prosody/prosody.pid"', f'"{pidfile}"'))
    pidfile.write_text("6100\n")  # prosody restarted meanwhile as 4242; mallory's `exec -a prosody sleep inf` took 6100
    host = FakeHost({**PROSODY, 6100: ["prosody"]}, soft="1024")
    host.proc["/proc/4242/limits"] = LIMITS.format(soft="65536")
    host.proc["/proc/6100/status"] = STATUS.format(uid=1000, ppid=1)
    host.executables[6100] = "/usr/bin/sleep"
    opened = _opened(target, host)
    assert opened.level == "ok" and opened.text.startswith("process 4242 may open 65536 files"), opened.text
    assert opened.text.endswith(f"passed over: process 6100 of pidfile {pidfile} (owned by uid 1000)"), opened.text
    # run as root, the look-alike is still no prosody: its executable is not
    host.proc["/proc/6100/status"] = STATUS.format(uid=0, ppid=1)
    opened = _opened(target, host)
    assert opened.text.endswith("(runs /usr/bin/sleep, not an installed prosody)") and opened.text.count("6100") == 1
    pidfile.write_text("4242\n")
    assert _opened(target, host).text.startswith("process 4242 may open 65536 files")


def test_a_copy_of_the_server_binary_outside_the_system_directories_is_passed_over(tmp_path: Path) -> None:
    target = _init(tmp_path, "ejabberd")
    copy = ["/srv/mallory/beam.smp", "-s", "ejabberd", target.ejabberd_config]
    host = FakeHost({6100: copy})  # root's, say: a program a user placed in a directory of its own
    opened = _opened(target, host)
    assert opened.level == "problem" and opened.text.startswith("no running ejabberd process found"), opened.text
    assert "passed over: process 6100 (runs /srv/mallory/beam.smp, not an installed ejabberd)" in opened.text
    host.executables[6100] = BEAM + " (deleted)"  # the installed one, upgraded under the running server
    assert _opened(target, host).text.startswith("process 6100 may open 65536 files")


def test_the_servers_own_user_may_run_it(tmp_path: Path) -> None:
    target = _init(tmp_path, "ejabberd")
    host = FakeHost(EJABBERD)
    host.proc["/proc/5151/status"] = STATUS.format(uid=109, ppid=1)  # ejabberdctl's su to the ejabberd user
    assert _opened(target, host).text.startswith("process 5151 may open")
    host.users = {}  # no such user on this host: root alone
    assert "passed over: process 5151 (owned by uid 109)" in _opened(target, host).text


def test_several_servers_none_of_this_config_the_fewest_files_judged_and_each_named(tmp_path: Path) -> None:
    target = _init(tmp_path, "ejabberd")
    host = FakeHost({5151: EJABBERD[5151], 6000: EJABBERD[5151]})
    host.proc["/proc/6000/limits"] = LIMITS.format(soft="1024")
    opened = _opened(target, host)
    assert opened.level == "problem" and opened.text.startswith("process 6000 may open 1024 files"), opened.text
    assert "(the fewest of 2 ejabberd processes: 5151 65536, 6000 1024)" in opened.text


def test_the_service_managers_process_or_the_server_below_it(tmp_path: Path) -> None:
    target = _init(tmp_path, "ejabberd")
    unit_sh = ["/bin/sh", "-c", "/usr/sbin/ejabberdctl foreground"]
    host = FakeHost({300: unit_sh, 310: ["/bin/sh", "/usr/sbin/ejabberdctl", "foreground"],
                     320: EJABBERD[5151], 5151: EJABBERD[5151]}, soft="1024")  # fmt: skip
    host.proc["/proc/310/status"] = STATUS.format(uid=109, ppid=300)
    host.proc["/proc/320/status"] = STATUS.format(uid=109, ppid=310)
    host.proc["/proc/320/limits"] = LIMITS.format(soft="65536")
    host.services["ejabberd"] = 300
    assert _opened(target, host).text.startswith("process 320 may open 65536 files")  # not 5151, started by hand
    del host.processes[320]
    assert _opened(target, host).text.startswith("process 300 may open 1024 files")  # the unit's limits
    host.environs[5151] = {"EJABBERD_CONFIG_PATH": target.ejabberd_config}  # this config's, though
    assert _opened(target, host).text.startswith("process 5151 may open")


def test_an_executable_that_cannot_be_read_is_a_warning_to_run_as_root(tmp_path: Path) -> None:
    target = _init(tmp_path, "ejabberd")
    host = FakeHost(EJABBERD)
    del host.executables[5151]
    opened = _opened(target, host)
    assert opened.level == "warning" and opened.text.startswith("cannot tell which process is ejabberd"), opened.text
    assert "its executable cannot be read: run as root" in opened.text
