"""`evio lab` argument parsing and the hook for more lab subcommands. No root."""

from __future__ import annotations

import argparse
import sys
import types

import pytest

from evio.cli import build_parser, lab_cmd


def test_lab_subcommands_parse() -> None:
    parser = build_parser()
    up = parser.parse_args(["lab", "up", "--nodes", "8", "--nat", "mixed", "--rate", "20"])
    assert (up.name, up.nodes, up.nat, up.rate, up.overlay) == ("lab", 8, "mixed", 20.0, "ov1")
    down = parser.parse_args(["lab", "down", "--name", "t1"])
    assert down.name == "t1" and callable(down.handler)
    ex = parser.parse_args(["lab", "exec", "--name", "t1", "node2", "--", "ping", "-c", "1", "198.51.100.1"])
    assert ex.node == "node2" and ex.cmd[-4:] == ["ping", "-c", "1", "198.51.100.1"]
    with pytest.raises(SystemExit):
        parser.parse_args(["lab", "up", "--nodes", "2", "--nat", "full-cone"])


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
