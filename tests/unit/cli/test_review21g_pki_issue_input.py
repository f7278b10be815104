"""Review21g G7 (low): `evio pki issue` certifies what no node can use, and a large --days is a traceback.

Bad input should be one clear error line, a non-zero exit and nothing written. Measured: `--overlay ../x` and
`--overlay ov:1` (not overlay ids: 1-32 of A-Z a-z 0-9 _ -, as `evio member` and the config require) each wrote
node.crt and node.key naming `evio:../x:<id>` and `evio:ov:1:<id>` and exited 0 (a colon in an overlay makes its SAN
URIs ambiguous to `named_node_ids` and `certified_addresses`, which split on the prefix); `--address ov1=127.0.0.1`
certified loopback, which a switch would then answer ARP for at once; `--days 99999999` ended in an OverflowError
traceback. Operator input, hence low.

Fixed as proposed: `pki issue` checks each --overlay with the overlay id pattern, refuses loopback (and the unspecified
and multicast addresses it already refuses) in --address, and bounds --days (`certificate_builder` raising
ValueError for a date out of range, reported as one line).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evio.cli import main

NODE = "ab" * 16


@pytest.mark.parametrize("extra", [("--overlay", "../x"), ("--overlay", "ov:1"),
                                   ("--overlay", "ov1", "--address", "ov1=127.0.0.1"),
                                   ("--overlay", "ov1", "--days", "99999999")])  # fmt: skip
def test_bad_issue_input_is_one_error_line_and_nothing_written(
    tmp_path: Path, extra: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pki", "ca", "--name", "ov1 CA", "--out", str(tmp_path / "ca")]) == 0
    capsys.readouterr()
    code = main(["pki", "issue", "--ca", str(tmp_path / "ca"), "--node", NODE, "--out", str(tmp_path / "n1"), *extra])
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1 and err.startswith("evio pki: ")
    assert not (tmp_path / "n1").exists()
