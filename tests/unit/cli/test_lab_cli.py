"""`evio lab` argument parsing and the hook for more lab subcommands. No root."""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import pytest

from evio.cli import build_parser, lab_cmd


def test_lab_subcommands_parse() -> None:
    parser = build_parser()
    up = parser.parse_args(["lab", "up", "--nodes", "8", "--nat", "mixed", "--rate", "20"])
    assert (up.name, up.nodes, up.nat, up.rate, up.overlay) == ("lab", 8, "mixed", 20.0, "ov1")
    assert up.trust is False and parser.parse_args(["lab", "up", "--nodes", "4", "--trust"]).trust is True
    down = parser.parse_args(["lab", "down", "--name", "t1"])
    assert down.name == "t1" and callable(down.handler)
    ex = parser.parse_args(["lab", "exec", "--name", "t1", "node2", "--", "ping", "-c", "1", "198.51.100.1"])
    assert ex.node == "node2" and ex.cmd[-4:] == ["ping", "-c", "1", "198.51.100.1"]
    with pytest.raises(SystemExit):
        parser.parse_args(["lab", "up", "--nodes", "2", "--nat", "full-cone"])
    assert up.xmpp == "prosody"
    assert parser.parse_args(["lab", "up", "--nodes", "4", "--xmpp", "ejabberd-cluster"]).xmpp == "ejabberd-cluster"
    with pytest.raises(SystemExit):
        parser.parse_args(["lab", "up", "--nodes", "4", "--xmpp", "openfire"])


def test_other_modules_can_add_lab_subcommands(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("evio_test_lab_extra")

    def register(lab_sub: argparse._SubParsersAction) -> None:
        p = lab_sub.add_parser("ping", help="ping between two nodes")
        lab_cmd.add_name_option(p)
        p.add_argument("a")
        p.add_argument("b")
        p.set_defaults(handler=lambda args: 0)

    module.register = register  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "evio_test_lab_extra", module)
    monkeypatch.setattr(lab_cmd, "LAB_COMMANDS", ("evio_test_lab_extra",))
    args = build_parser().parse_args(["lab", "ping", "--name", "t1", "1", "2"])
    assert (args.name, args.a, args.b, args.handler(args)) == ("t1", "1", "2", 0)


def test_full_node_lab_commands_parse() -> None:
    parser = build_parser()
    up = parser.parse_args(["lab", "up", "--nodes", "16", "-s", "1", "-k", "0", "--no-daemons"])
    assert (up.successors, up.long_distance, up.no_daemons) == (1, 0, True)
    assert lab_cmd.topology_section(up) == {"successors": 1, "long_distance": 0}
    default = parser.parse_args(["lab", "up", "--nodes", "4"])
    assert lab_cmd.topology_section(default) == {"successors": 2} and not default.no_daemons
    with pytest.raises(SystemExit):
        parser.parse_args(["lab", "up", "--nodes", "4", "--successors", "0"])
    topo = parser.parse_args(["lab", "topology", "--wait", "30", "--json"])
    assert (topo.wait, topo.json) == (30.0, True)
    iperf = parser.parse_args(["lab", "iperf", "1", "node3", "-t", "2", "-P", "4", "-R"])
    assert (iperf.a, iperf.b, iperf.time, iperf.parallel, iperf.reverse) == ("1", "node3", 2.0, 4, True)
    daemon = parser.parse_args(["lab", "daemon", "restart", "2"])
    assert (daemon.action, daemon.node) == ("restart", "2")
    demo = parser.parse_args(["lab", "demo"])
    assert (demo.name, demo.nodes, demo.nat, demo.keep) == ("demo", 8, "mixed", False)
    for command in (["lab", "ping", "1", "2"], ["lab", "arping", "1", "2"], ["lab", "pingall"]):
        assert callable(parser.parse_args(command).handler)


def test_run_command_parses() -> None:
    args = build_parser().parse_args(["run", "--config", "/etc/evio/config.json"])
    assert args.config == "/etc/evio/config.json" and not args.no_uvloop and callable(args.handler)


def test_lab_tools_that_take_over_nodes_refuse_while_their_daemons_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from evio.cli import lab_signal_cmd, lab_tunnel_cmd
    from evio.lab.lab import Lab
    from evio.testing.lab_host import FakeHost

    def must_not_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the tool ran beside a daemon")

    def run(*argv: str) -> int:
        args = build_parser().parse_args(["lab", *argv])
        status: int = args.handler(args)
        return status

    host = FakeHost()
    lab = Lab.up("t1", nodes=3, root=tmp_path, host=host)
    try:
        lab.start_daemon(2)
        for module in (lab_tunnel_cmd, lab_signal_cmd):
            monkeypatch.setattr(module, "attach", lambda args: lab)
        monkeypatch.setattr("evio.lab.tunnel_tool.open_lab_tunnel", must_not_run)
        monkeypatch.setattr("evio.lab.signal_bench.run_bench", must_not_run)
        assert run("tunnel", "--name", "t1", "1", "2") == 2
        assert run("signal-bench", "--name", "t1") == 1
        out = capsys.readouterr()
        for text in (out.err, out.out):
            assert "stop the daemons first: evio lab daemon stop N --name t1 (N = 2), or evio lab up --no-daemons" in text
        lab.require_no_daemons([1, 3])  # nodes without a daemon are the tunnel tool's to use
    finally:
        Lab.down("t1", root=tmp_path, host=host)
