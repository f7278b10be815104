"""The design's one picture of the packages is the import-linter layers contract (docs/design.md, "Packages").

The picture in docs/design.md and the `layers` contract in pyproject.toml say the same thing
twice; this holds them together, so the picture a newcomer reads is the one the build enforces.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"

# A layer line of the picture: modules joined by `|`, then (after spaces) what they are.
LAYER_LINE = re.compile(r"^\s*(evio\.\w+(?:\s*\|\s*evio\.\w+)*)")


def _picture() -> list[frozenset[str]]:
    """The layers of the picture under "## Packages", top to bottom."""
    text = DESIGN.read_text(encoding="utf-8")
    section = text.split("\n## Packages\n", 1)[1]
    block = section.split("```", 2)[1]
    layers = []
    for line in block.splitlines():
        match = LAYER_LINE.match(line)
        if match:
            layers.append(frozenset(name.strip() for name in match.group(1).split("|")))
    return layers


def _contract() -> list[frozenset[str]]:
    """The layers of the contract over the top-level packages (not one inside a package), top to bottom."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = [
        c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers" and not c.get("containers")
    ]
    assert len(contracts) == 1, [c["name"] for c in contracts]
    return [frozenset(name.strip() for name in layer.split("|")) for layer in contracts[0]["layers"]]


def test_the_picture_is_the_layers_contract() -> None:
    picture, contract = _picture(), _contract()
    assert picture, "no layer found in the picture under docs/design.md's Packages: has its format changed?"
    assert picture == contract, (
        "docs/design.md's package picture and the layers contract in pyproject.toml differ:\n"
        f"picture:  {[sorted(layer) for layer in picture]}\ncontract: {[sorted(layer) for layer in contract]}"
    )


def test_every_top_level_package_is_in_the_picture() -> None:
    named = set().union(*_picture())
    here = {
        f"evio.{p.stem}"
        for p in (ROOT / "evio").iterdir()
        if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and not p.stem.startswith("__"))
    }
    assert here <= named, f"not in docs/design.md's package picture: {sorted(here - named)}"


def test_a_layer_out_of_order_fails() -> None:
    """The check can fail: the picture with two layers swapped is not the contract."""
    picture = _picture()
    swapped = [picture[1], picture[0], *picture[2:]]
    assert swapped != _contract()
