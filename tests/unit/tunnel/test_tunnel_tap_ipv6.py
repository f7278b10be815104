"""A bridge-port TAP gets no IPv6 of its own, also where /proc/sys is read-only (a container)."""

from __future__ import annotations

import errno
import logging
from typing import Any

import pytest
from pyroute2.netlink.exceptions import NetlinkError

from evio.tunnel.datapath import tap


class FakeNetlink:
    """Stands in for the rtnetlink fallback: records the TAPs it was asked about."""

    def __init__(self, fails: bool = False) -> None:
        self.calls: list[str] = []
        self.fails = fails

    def __call__(self, name: str) -> None:
        self.calls.append(name)
        if self.fails:
            raise NetlinkError(errno.EOPNOTSUPP, "not supported")


def read_only(*args: Any, **kwargs: Any) -> Any:
    raise OSError(errno.EROFS, "Read-only file system")


def test_a_read_only_proc_sys_turns_address_generation_off_through_netlink(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tap, "open", read_only, raising=False)
    netlink = FakeNetlink()
    tap._disable_ipv6("evt0", netlink)
    assert netlink.calls == ["evt0"]


def test_when_netlink_fails_too_the_tap_still_comes_up_and_it_is_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tap, "open", read_only, raising=False)
    monkeypatch.setattr(tap, "_ipv6_warned", False)
    with caplog.at_level(logging.WARNING, logger=tap.logger.name):
        for name in ("evt0", "evt1"):
            tap._disable_ipv6(name, FakeNetlink(fails=True))
    warnings = [r for r in caplog.records if "cannot switch IPv6 off" in r.getMessage()]
    assert len(warnings) == 1


def test_no_ipv6_in_the_kernel_is_nothing_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise FileNotFoundError(errno.ENOENT, "No such file")

    monkeypatch.setattr(tap, "open", missing, raising=False)
    netlink = FakeNetlink()
    tap._disable_ipv6("evt0", netlink)
    assert netlink.calls == []


def test_a_bridge_port_tap_refuses_ipv4_by_strict_reverse_path_filtering(monkeypatch: pytest.MonkeyPatch) -> None:
    written: dict[str, str] = {}

    class Knob:
        def __init__(self, path: str, mode: str) -> None:
            self.path = path

        def __enter__(self) -> Knob:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def write(self, text: str) -> None:
            written[self.path] = text

    monkeypatch.setattr(tap, "open", Knob, raising=False)
    tap._refuse_ipv4("evt0")
    assert written == {"/proc/sys/net/ipv4/conf/evt0/rp_filter": "1"}


def test_a_read_only_proc_sys_leaves_ipv4_as_it_is_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tap, "open", read_only, raising=False)
    monkeypatch.setattr(tap, "_ipv4_warned", False)
    with caplog.at_level(logging.WARNING, logger=tap.logger.name):
        for name in ("evt0", "evt1"):
            tap._refuse_ipv4(name)
    assert len([r for r in caplog.records if "rp_filter" in r.getMessage()]) == 1
