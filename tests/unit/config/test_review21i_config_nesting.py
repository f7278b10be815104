"""Review21i I8 (the config file's part): a deeply nested config raised RecursionError out of the loader, a
traceback instead of `evio config check`'s one line per problem.

Found while grepping for the endpoint's pattern: `loader.parse_json` catches JSONDecodeError only, so 100,000
nested `[` raised RecursionError from json.loads; and a config nested 990 objects deep parses, then raised
RecursionError from the loader's own walk over it (`_structure_problems`). A config is the operator's, but a
config that `evio join` writes from a token, or one pasted from elsewhere, is still input: one clear line, exit 2.

Fixed: `parse_json` catches RecursionError and refuses a document nested deeper than `MAX_DEPTH` (64; a config
nests about 6), counted without recursion (after: both texts one line `invalid JSON: nested too deeply`, exit 2).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evio.cli import main
from evio.config import ConfigFileError, loads_config


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000,
                                  '{"overlays": {"ov1": ' + '{"x": ' * 990 + "1" + "}" * 990 + "}}"])  # fmt: skip
def test_a_deeply_nested_config_is_one_error_line(text: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    with pytest.raises(ConfigFileError, match="nested"):
        loads_config(text)
    path = tmp_path / "config.json"
    path.write_text(text)
    assert main(["config", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nested" in err, err[-2000:]
