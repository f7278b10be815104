"""`evio pki issue --address OVERLAY=IP`: the node's own overlay address in its certificate (decision 0062)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509

from evio.cli import main
from evio.signal.overlay_addresses import certified_addresses

NODE = "ab" * 16


def issue(tmp_path: Path, *extra: str) -> int:
    return main(["pki", "issue", "--ca", str(tmp_path / "ca"), "--overlay", "ov1", "--node", NODE,
                 "--out", str(tmp_path / "n1"), *extra])  # fmt: skip


def test_the_address_is_certified_for_its_overlay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pki", "ca", "--name", "ov1 CA", "--out", str(tmp_path / "ca")]) == 0
    assert issue(tmp_path, "--address", "ov1=10.254.0.5/16") == 0
    assert "evio-address:ov1:10.254.0.5" in capsys.readouterr().out
    cert = x509.load_pem_x509_certificate((tmp_path / "n1" / "node.crt").read_bytes())
    assert certified_addresses(cert, "ov1") == {ipaddress.IPv4Address("10.254.0.5")}


@pytest.mark.parametrize("bad", ["10.254.0.5", "ov2=10.254.0.5", "ov1=nonsense", "ov1=224.0.0.251", "ov1=0.0.0.0"])
def test_a_bad_address_is_one_error_line_and_nothing_written(tmp_path: Path, bad: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["pki", "ca", "--name", "ov1 CA", "--out", str(tmp_path / "ca")]) == 0
    capsys.readouterr()
    assert issue(tmp_path, "--address", bad) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected OVERLAY=IP" in err
    assert not (tmp_path / "n1").exists()
