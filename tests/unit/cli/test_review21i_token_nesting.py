"""Review21i I8 (the join token's part): a token whose payload is deeply nested JSON raised RecursionError out of
`evio join`, a traceback instead of one error line.

Attack (whoever hands an operator a token, or a token changed in a paste: the payload is read before the CA's
signature is checked): `token.decode` inflates the payload and parses it with `json.loads`, catching ValueError
only. 100,000 `[` and as many `]` (200 KB, about 300 bytes once compressed) make CPython's decoder raise
RecursionError, which is no ValueError: `evio join` printed a traceback of some 20 lines and exited 1 through
the interpreter, not through its one error line.

Fixed: `decode` catches RecursionError as a damaged token (after: exit 1, one line `evio join: the token is
damaged (cut short or changed in a paste?): nested too deeply`, nothing written).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from evio.cli import join_cmd, main
from evio.server import token as join_token

NESTED = b"[" * 100_000 + b"]" * 100_000


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    etc = tmp_path / "etc-evio"
    monkeypatch.setattr(join_cmd, "CONFIG_DIR", etc)
    monkeypatch.setattr(join_cmd, "STATE_DIR", tmp_path / "var-lib-evio")
    monkeypatch.setattr(join_cmd, "SYSTEMD_RUN_DIR", tmp_path / "no-systemd")
    monkeypatch.setattr(join_cmd, "_open_vswitch_problems", lambda: [])
    monkeypatch.setattr(join_cmd.os, "geteuid", lambda: 0)
    return etc


def test_a_deeply_nested_token_is_one_error_line_and_nothing_written(
        node: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    body = zlib.compress(NESTED, 9)
    assert len(body) < 4096 and len(NESTED) <= join_token.MAX_PAYLOAD_BYTES
    nested = ".".join((join_token.PREFIX, join_token._b64(body), join_token._b64(bytes(64))))
    assert main(["join", nested]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("evio join: "), err[-2000:]
    assert "damaged" in err
    assert not node.exists() and not (tmp_path / "var-lib-evio").exists()
