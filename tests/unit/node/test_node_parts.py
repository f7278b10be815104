"""The daemon's pure parts and small adapters: plan, preflight, control API, `evio run` exit paths."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from evio.bridge.ovs_paths import DEFAULT_OVS_RUN_DIR
from evio.cli import main as cli_main
from evio.config.model import (
    BridgeConfig,
    Config,
    LoggingConfig,
    NatTraversalConfig,
    NodeConfig,
    OverlayConfig,
    SignalConfig,
    TopologyConfig,
)
from evio.node import preflight as pf
from evio.node.control import ControlError, ControlServer, query, respond
from evio.node.errors import DependencyError, NodeConfigError
from evio.node.logs import configure_logging
from evio.node.plain_loop_thread import PlainLoopThread
from evio.node.plan import plan_node

D = "x.test"


def overlay(name: str, jid: str, address: str, **signal: object) -> OverlayConfig:
    return OverlayConfig(
        id=name,
        signal=SignalConfig(jid=jid, server="198.51.100.1", password="pw", **signal),  # type: ignore[arg-type]
        bridge=BridgeConfig(name=f"evbr-{name}", address=ipaddress.IPv4Interface(address)),
        nat_traversal=NatTraversalConfig(stun=("198.51.100.1:3478",)),
        topology=TopologyConfig(successors=3),
    )


# -- plan --------------------------------------------------------------------------------------


def test_plan_one_overlay() -> None:
    config = Config(overlays={"ov1": overlay("ov1", f"a@{D}", "10.254.0.1/16")}, node=NodeConfig(id=7))
    plan = plan_node(config, 7, controller_port=16653, kernel_module_loaded=False)
    (account,) = plan.accounts
    assert account.jid == f"a@{D}" and account.settings.memberships == {"ov1": 7}
    assert account.settings.server == "198.51.100.1" and account.settings.password == "pw"
    (ov,) = plan.overlays
    assert ov.datapath == "netdev"
    assert ov.bridge.controller_port == 16653 and ov.bridge.overlay_address == "10.254.0.1/16"
    assert ov.bridge.datapath_id == ov.datapath_id != 0
    assert ov.tunnel.tap_prefix == "evt"
    assert ov.tunnel.ice.stun == (("198.51.100.1", 3478),)
    assert ov.tunnel.ice.exclude_networks == ("10.254.0.0/16",)
    # The bridge and the TAPs are one segment: the bridge's MTU is derived from the tunnels'.
    assert ov.bridge.mtu == ov.tunnel.tap_mtu == 1428
    assert plan_node(config, 7, controller_port=1, kernel_module_loaded=True).overlays[0].datapath == "system"


def test_plan_two_overlays_share_one_login_but_not_taps_bridges_or_datapath_ids() -> None:
    config = Config(overlays={
        "ova": overlay("ova", f"a@{D}", "10.254.0.1/16"),
        "ovb": overlay("ovb", f"a@{D}", "10.253.0.1/16"),
    })  # fmt: skip
    plan = plan_node(config, 7, controller_port=16653, kernel_module_loaded=False)
    (account,) = plan.accounts
    assert account.overlays == ("ova", "ovb") and account.settings.memberships == {"ova": 7, "ovb": 7}
    a, b = plan.overlays
    assert a.tunnel.tap_prefix != b.tunnel.tap_prefix
    assert a.datapath_id != b.datapath_id
    # Neither overlay's tunnels may run over either overlay's own addresses.
    assert set(a.tunnel.ice.exclude_networks) == set(b.tunnel.ice.exclude_networks) == {"10.254.0.0/16", "10.253.0.0/16"}


def test_one_account_with_two_servers_is_refused() -> None:
    config = Config(overlays={
        "ova": overlay("ova", f"a@{D}", "10.254.0.1/16"),
        "ovb": overlay("ovb", f"a@{D}", "10.253.0.1/16", port=5223),
    })  # fmt: skip
    with pytest.raises(NodeConfigError, match="ova and ovb use account"):
        plan_node(config, 7, controller_port=1, kernel_module_loaded=False)


# -- preflight ---------------------------------------------------------------------------------


class FakeProbe:
    def __init__(self, **changes: object) -> None:
        self.uid = 0
        self.programs = {"ovs-vsctl", "ip"}
        self.files = {pf.TUN_DEVICE}
        self.results: dict[str, tuple[int, str]] = {}
        self.broken_modules: dict[str, str] = {}
        self.texts = {DEFAULT_OVS_RUN_DIR / "ovs-vswitchd.pid": "4242\n", Path("/proc/4242/comm"): "ovs-vswitchd\n"}
        self.ran: list[list[str]] = []
        self.__dict__.update(changes)

    def euid(self) -> int:
        return self.uid

    def which(self, program: str) -> str | None:
        return f"/usr/bin/{program}" if program in self.programs else None

    def exists(self, path: Path) -> bool:
        return path in self.files

    def run(self, argv: Sequence[str]) -> tuple[int, str]:
        self.ran.append(list(argv))
        return self.results.get(argv[-1], (0, ""))

    def can_import(self, module: str) -> str | None:
        return self.broken_modules.get(module)

    def read_text(self, path: Path) -> str | None:
        return self.texts.get(path)


def test_preflight_passes_on_a_ready_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OVS_RUNDIR", raising=False)
    probe = FakeProbe()
    assert pf.preflight(probe) == []
    assert [argv[-1] for argv in probe.ran] == ["show"]


@pytest.mark.parametrize(
    ("changes", "what", "words"),
    [
        ({"uid": 1000}, "root", "must run as root"),
        ({"files": set()}, "tun", "/dev/net/tun"),
        ({"programs": {"ip"}}, "program", "ovs-vsctl not found"),
        ({"results": {"show": (1, "ovs-vsctl: unix:/x/db.sock: database connection failed (No such file)\n")}},
         "ovsdb", "database connection failed"),
        ({"texts": {}}, "vswitchd", "ovs-vswitchd is not running (no /var/run/openvswitch/ovs-vswitchd.pid)"),
        ({"texts": {Path("/var/run/openvswitch/ovs-vswitchd.pid"): "99\n"}}, "vswitchd", "pid 99 from"),
        ({"broken_modules": {"os_ken.base.app_manager": "ModuleNotFoundError: No module named 'os_ken'"}},
         "os-ken", "install os-ken"),
    ],
)
def test_preflight_names_each_missing_dependency(
    changes: dict[str, object], what: str, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OVS_RUNDIR", raising=False)
    problems = pf.preflight(FakeProbe(**changes))
    assert [p.what for p in problems] == [what]
    assert words in str(problems[0])


def test_no_ovs_vsctl_means_no_ovsdb_probe() -> None:
    probe = FakeProbe(programs={"ip"})
    pf.preflight(probe)
    assert probe.ran == []


# -- control API -------------------------------------------------------------------------------


def test_respond_to_requests() -> None:
    def broken() -> dict[str, Any]:
        raise ZeroDivisionError("division by zero")

    handlers = {"status": lambda: {"node_id": "ab"}, "broken": broken}
    assert respond(b'{"request": "status"}\n', handlers) == {"ok": True, "status": {"node_id": "ab"}}
    assert respond(b'{"request": "ping"}', handlers) == {"ok": True}
    assert respond(b"nonsense", handlers)["error"] == "request is not JSON"
    assert "expected" in respond(b"[1]", handlers)["error"]
    assert "known: broken, ping, status" in respond(b'{"request": "nope"}', handlers)["error"]
    assert "ZeroDivisionError" in respond(b'{"request": "broken"}', handlers)["error"]


async def test_control_server_round_trip_private_socket_and_stale_socket(tmp_path: Path) -> None:
    path = tmp_path / "state" / "control.sock"
    path.parent.mkdir()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))  # left by a daemon that died: nobody listens
    stale.close()
    server = ControlServer(path, {"status": lambda: {"x": 1}})
    await server.start()
    try:
        assert path.stat().st_mode & 0o777 == 0o600
        assert await asyncio.to_thread(query, path, "status") == {"x": 1}
        assert await asyncio.to_thread(query, path, "ping") == {}
        with pytest.raises(ControlError, match="unknown request"):
            await asyncio.to_thread(query, path, "other")
        with pytest.raises(ControlError, match="another daemon"):
            await ControlServer(path, {}).start()
    finally:
        await server.stop()
    assert not path.exists()
    with pytest.raises(ControlError, match="no daemon control socket"):
        query(path, "status")


# -- evio run ----------------------------------------------------------------------------------


def test_run_with_an_invalid_config_exits_1_with_the_loader_s_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"overlays": {"ov1": {"bridge": {"mtu": 1}}}, "typo": 1}))
    assert cli_main(["run", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert "$.typo" in err and "$.overlays.ov1" in err and "evio config check" in err


def test_run_with_an_unreadable_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["run", "--config", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_run_refuses_secrets_other_users_can_read_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    password_file = tmp_path / "pw"
    password_file.write_text("pw\n")
    password_file.chmod(0o644)
    path = tmp_path / "ok.json"
    path.write_text(json.dumps({"overlays": {"ov1": {"signal": {"jid": f"a@{D}", "password_file": str(password_file)}}}}))
    monkeypatch.setattr(pf, "LinuxProbe", lambda: FakeProbe(uid=1000, programs={"ip"}))
    assert cli_main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{password_file}: permissions 0644 are too open" in err and f"chmod 600 {password_file}" in err


def test_run_without_dependencies_exits_3_listing_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ok.json"
    path.write_text(json.dumps({
        "node": {"state_dir": str(tmp_path / "state")},
        "overlays": {"ov1": {"signal": {"jid": f"a@{D}", "password": "pw"}, "bridge": {"address": "10.254.0.1/16"}}},
    }))  # fmt: skip
    path.chmod(0o600)  # it holds a password inline
    monkeypatch.setattr(pf, "LinuxProbe", lambda: FakeProbe(uid=1000, programs={"ip"}))
    assert cli_main(["run", "--config", str(path)]) == 3
    err = capsys.readouterr().err
    assert "must run as root" in err and "ovs-vsctl not found" in err
    assert not (tmp_path / "state").exists()  # nothing was touched


# -- logging -----------------------------------------------------------------------------------


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    yield root
    for handler in list(root.handlers):
        root.removeHandler(handler)
        if handler not in saved[0]:
            handler.close()
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])


def test_log_to_a_file_at_the_configured_level(tmp_path: Path, root_logger: logging.Logger) -> None:
    path = tmp_path / "logs" / "evio.log"
    configure_logging(LoggingConfig(level="warning", destination="file", file=path))
    logging.getLogger("evio.test").info("not this")
    logging.getLogger("evio.test").warning("but this %s", "one")
    logging.getLogger("aioice.ice").warning("libraries too, at warning")
    for handler in root_logger.handlers:
        handler.flush()
    text = path.read_text()
    assert "but this one" in text and "not this" not in text and "libraries too" in text


def test_journald_without_the_systemd_module_is_a_missing_dependency(
    root_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "systemd", None)  # import systemd -> ImportError
    with pytest.raises(DependencyError, match="python3-systemd"):
        configure_logging(LoggingConfig(destination="journald"))


def test_verbose_lowers_the_level_but_never_raises_it(root_logger: logging.Logger) -> None:
    configure_logging(LoggingConfig(level="warning"), verbose=2)
    assert root_logger.level == logging.DEBUG
    configure_logging(LoggingConfig(level="debug"), verbose=1)
    assert root_logger.level == logging.DEBUG


# -- side loop ---------------------------------------------------------------------------------


def test_plain_loop_thread_runs_on_its_own_plain_loop_and_stops_on_request() -> None:
    seen: list[object] = []
    exits: list[BaseException | None] = []

    async def forever() -> None:
        seen.append(type(asyncio.get_running_loop()).__module__)
        await asyncio.Event().wait()

    side = PlainLoopThread("test-side", forever, on_exit=exits.append)
    side.start()
    side.stop(timeout=5)
    assert seen == ["asyncio.unix_events"] and exits == [None]


def test_plain_loop_thread_reports_a_crash() -> None:
    exits: list[BaseException | None] = []

    async def crash() -> None:
        raise RuntimeError("boom")

    side = PlainLoopThread("test-crash", crash, on_exit=exits.append)
    side.start()
    side.stop(timeout=5)
    assert len(exits) == 1 and isinstance(exits[0], RuntimeError)
