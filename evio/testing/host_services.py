"""The init system of a simulated host: Open vSwitch, prosody, coturn, ejabberd as their Debian units run them.

Each `start_*` does what the package's systemd unit does (its user, working directory, runtime
directory and command line), in the foreground under `Host.spawn` so the harness owns the processes,
then waits until the service answers (a listening socket, or its control tool saying it runs) and
raises ServiceError quoting the service's logs if it exits first or never answers. Deviations from
the units, each because of this machine: Open vSwitch runs without ovs-ctl (it insists on the
openvswitch kernel module, absent here: bridges use datapath netdev), without --mlockall (a shared
2-core machine) and logs nothing to syslog (there is one syslog for all hosts).

    ovs = start_openvswitch(node)      # ovsdb-server + ovs-vswitchd; `ovs-vsctl show` works on `node`
    start_prosody(server)              # `prosody -F` as user prosody: reads /etc/prosody/prosody.cfg.lua
    start_coturn(server)               # `turnserver -c /etc/turnserver.conf` as user turnserver
    start_ejabberd(server)             # epmd, then `ejabberdctl foreground` as user ejabberd
"""

from __future__ import annotations

import os
import pwd
import secrets
import string
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from evio.testing.hosts import Host, HostProcess, Namespace
from evio.testing.waiting import wait_until_blocking

__all__ = ["Service", "ServiceError", "start_coturn", "start_ejabberd", "start_openvswitch", "start_prosody", "is_listening"]

VSWITCH_SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"
READY_TIMEOUT = 30.0


class ServiceError(RuntimeError):
    """A service exited while starting, or did not answer in time; the message quotes its logs."""


@dataclass
class Service:
    """A started service: its processes (in start order) and the host paths of its log files."""

    name: str
    host: Host
    processes: list[HostProcess] = field(default_factory=list)
    logs: tuple[str, ...] = ()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop it as its unit's ExecStop would end it: SIGTERM (then SIGKILL), newest process first."""
        for process in reversed(self.processes):
            process.stop(timeout)

    def log_tail(self, lines: int = 30) -> str:
        parts = [f"--- {p.log} ({' '.join(p.argv)})\n{p.tail(lines)}" for p in self.processes]
        for path in self.logs:
            real = self.host.path(path)
            if real.is_file():
                text = real.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path} on {self.host.name}\n" + "\n".join(text))
        return "\n".join(parts)


# -- Open vSwitch ------------------------------------------------------------------------------------------


def start_openvswitch(
    host: Host, timeout: float = READY_TIMEOUT, other_config: Mapping[str, str] | None = None
) -> Service:
    """ovsdb-server on a fresh /etc/openvswitch/conf.db (made from the schema, as ovs-ctl does on a first
    start), initialised with a random system-id, then ovs-vswitchd; the default socket
    /run/openvswitch/db.sock answers when this returns. `other_config` goes in before vswitchd starts
    (what vswitchd reads at start only, e.g. {"userspace-tso-enable": "true"}, which evio asks for)."""
    service = Service("openvswitch", host, logs=(
        "/var/log/openvswitch/ovsdb-server.log", "/var/log/openvswitch/ovs-vswitchd.log"))  # fmt: skip
    _runtime_directory(host, "/run/openvswitch", "root")
    db = "/etc/openvswitch/conf.db"  # a link to /var/lib/openvswitch/conf.db on Debian: created through it
    host.run(["sh", "-c", f"test -e {db} || ovsdb-tool create {db} {VSWITCH_SCHEMA}"])
    service.processes.append(host.spawn([
        "ovsdb-server", db, "-vconsole:emer", "-vsyslog:off", "-vfile:info",
        "--remote=punix:/var/run/openvswitch/db.sock",
        "--private-key=db:Open_vSwitch,SSL,private_key", "--certificate=db:Open_vSwitch,SSL,certificate",
        "--bootstrap-ca-cert=db:Open_vSwitch,SSL,ca_cert",
        "--no-chdir", "--log-file=/var/log/openvswitch/ovsdb-server.log",
        "--pidfile=/var/run/openvswitch/ovsdb-server.pid",
    ]))  # fmt: skip
    _wait_ready(service, lambda: _answers(host, ["ovs-vsctl", "--no-wait", "--timeout=2", "show"]), timeout)
    schema_version = host.run(["ovsdb-tool", "schema-version", VSWITCH_SCHEMA]).stdout.strip()
    host.run(["ovs-vsctl", "--no-wait", "--", "init", "--", "set", "Open_vSwitch", ".",
              f"db-version={schema_version}", f"external_ids:system-id={uuid.uuid4()}",
              f"external_ids:hostname={host.name}",
              *(f"other_config:{key}={value}" for key, value in (other_config or {}).items())])  # fmt: skip
    service.processes.append(host.spawn([
        "ovs-vswitchd", "unix:/var/run/openvswitch/db.sock", "-vconsole:emer", "-vsyslog:off", "-vfile:info",
        "--no-chdir", "--log-file=/var/log/openvswitch/ovs-vswitchd.log",
        "--pidfile=/var/run/openvswitch/ovs-vswitchd.pid",
    ], env={"HOME": "/var/run/openvswitch"}))  # fmt: skip
    _wait_ready(service, lambda: _answers(host, ["ovs-appctl", "-T", "2", "-t", "ovs-vswitchd", "version"]), timeout)
    # `init` without --no-wait returns once vswitchd has applied the database: it is serving, not just up.
    host.run(["ovs-vsctl", f"--timeout={int(timeout)}", "init"])
    return service


# -- XMPP and TURN -----------------------------------------------------------------------------------------


def start_prosody(host: Host, port: int = 5222, timeout: float = READY_TIMEOUT) -> Service:
    """`prosody -F` as user prosody in /var/lib/prosody (prosody.service); ready when `port` listens."""
    service = Service("prosody", host, logs=("/var/log/prosody/prosody.err", "/var/log/prosody/prosody.log"))
    _runtime_directory(host, "/run/prosody", "prosody")
    service.processes.append(host.spawn(["prosody", "-F"], user="prosody", cwd="/var/lib/prosody"))
    _wait_ready(service, lambda: is_listening(host, "tcp", port), timeout)
    return service


def start_coturn(host: Host, port: int = 3478, timeout: float = READY_TIMEOUT) -> Service:
    """`turnserver -c /etc/turnserver.conf --pidfile=` as user turnserver (coturn.service); ready when
    UDP `port` listens."""
    service = Service("coturn", host)
    service.processes.append(
        host.spawn(["turnserver", "-c", "/etc/turnserver.conf", "--pidfile="], user="turnserver", cwd="/")
    )
    _wait_ready(service, lambda: is_listening(host, "udp", port), timeout)
    return service


def start_ejabberd(host: Host, port: int = 5222, timeout: float = 60.0) -> Service:
    """epmd (epmd.service, which ejabberd.service requires), then `ejabberdctl foreground` as user ejabberd
    with the host's /etc/ejabberd; ready when `ejabberdctl status` says started and `port` listens."""
    if not os.path.exists("/usr/sbin/ejabberdctl"):
        raise ServiceError("ejabberd is not installed (apt-get install ejabberd)")
    service = Service("ejabberd", host, logs=("/var/log/ejabberd/error.log", "/var/log/ejabberd/ejabberd.log"))
    _runtime_directory(host, "/run/ejabberd", "ejabberd")  # tmpfiles.d/ejabberd.conf
    service.processes.append(host.spawn(["epmd"], user="epmd", cwd="/"))
    _wait_ready(service, lambda: is_listening(host, "tcp", 4369), timeout)
    _erlang_cookie(host)
    service.processes.append(
        host.spawn(["ejabberdctl", "foreground"], user="ejabberd", cwd="/var/lib/ejabberd")
    )

    def started() -> bool:
        return _answers(host, ["ejabberdctl", "status"], user="ejabberd") and is_listening(host, "tcp", port)

    _wait_ready(service, started, timeout)
    return service


def _erlang_cookie(host: Host) -> None:
    """The Erlang cookie the package's postinst makes, made before the first node starts: otherwise the server
    and the first `ejabberdctl status` each create it and one may read it empty ("Too short cookie string")."""
    cookie = host.path("/var/lib/ejabberd") / ".erlang.cookie"
    if cookie.exists():
        return
    cookie.write_text("".join(secrets.choice(string.ascii_uppercase) for _ in range(20)))
    account = pwd.getpwnam("ejabberd")
    os.chown(cookie, account.pw_uid, account.pw_gid)
    cookie.chmod(0o400)


# -- waiting -------------------------------------------------------------------------------------------------


def _wait_ready(service: Service, ready: Callable[[], bool], timeout: float) -> None:
    """Until `ready()`; ServiceError with the logs if a process of the service exits first, or on timeout."""

    def check() -> bool:
        for process in service.processes:
            if not process.alive():
                raise ServiceError(
                    f"{service.name} on {service.host.name}: {' '.join(process.argv)} exited "
                    f"{process.returncode} while starting\n{service.log_tail()}"
                )
        return ready()

    try:
        wait_until_blocking(check, timeout, what=f"{service.name} on {service.host.name} answering", interval=0.05)
    except AssertionError as exc:
        raise ServiceError(f"{exc}\n{service.log_tail()}") from None


def _answers(host: Host, argv: Sequence[str], user: str | None = None) -> bool:
    return host.run(argv, check=False, timeout=15, user=user).returncode == 0


def is_listening(host: Host, protocol: Literal["tcp", "udp"], port: int) -> bool:
    """A socket listens on `port` in the host's namespace (`ss` needs no private file system)."""
    flags = "-Hltn" if protocol == "tcp" else "-Hlun"
    return bool(Namespace.run(host, ["ss", flags, f"sport = :{port}"], check=False).stdout.strip())


def _runtime_directory(host: Host, path: str, user: str) -> None:
    """What a unit's RuntimeDirectory= (or tmpfiles.d) makes: the directory, owned by the service's user."""
    real = host.path(path)
    real.mkdir(parents=True, exist_ok=True)
    account = pwd.getpwnam(user)
    os.chown(real, account.pw_uid, account.pw_gid)
    real.chmod(0o755)
