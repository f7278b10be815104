"""config/evio.service: checked by systemd's own tools (`systemd-analyze verify` and `security --offline`)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "config" / "evio.service"
MAX_EXPOSURE = 4.0  # systemd-analyze's scale: 10 is unprotected; the unit before hardening scored 8.9


@pytest.fixture
def installed_unit(tmp_path: Path) -> Path:
    """The unit as installed here: its /opt/evio/.venv paths pointing at this checkout's evio."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    evio = Path(sys.executable).with_name("evio")
    unit = tmp_path / "evio.service"
    unit.write_text(UNIT.read_text().replace("/opt/evio/.venv/bin/evio", str(evio)))
    return unit


def test_unit_verifies_without_a_warning(installed_unit: Path) -> None:
    done = subprocess.run(["systemd-analyze", "verify", str(installed_unit)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    ours = [line for line in done.stderr.splitlines() if "evio.service" in line]
    assert ours == [], done.stderr


def test_unit_is_notify_with_reload_and_watchdog_and_hardened(installed_unit: Path) -> None:
    text = UNIT.read_text()
    for line in ("Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "WatchdogSec=", "NotifyAccess=main",
                 "CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW CAP_SYS_PTRACE", "ProtectSystem=strict",
                 "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK AF_PACKET", "DeviceAllow=/dev/net/tun rw"):
        assert re.search(rf"^{re.escape(line)}", text, re.MULTILINE), line
    done = subprocess.run(["systemd-analyze", "security", "--offline=true", str(installed_unit)],
                          capture_output=True, text=True, timeout=60, check=False)
    match = re.search(r"Overall exposure level for evio.service: ([0-9.]+)", done.stdout)
    assert match is not None, done.stdout + done.stderr
    assert float(match.group(1)) <= MAX_EXPOSURE, done.stdout
