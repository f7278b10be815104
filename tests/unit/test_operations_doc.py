"""docs/operations.md says exactly what tests/integration/test_operations.py types (or says how it stands in)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "operations.md"
README = ROOT / "README.md"
TEST = ROOT / "tests" / "integration" / "test_operations.py"
# Values the guide shows where the test fills in its own.
PLACEHOLDERS = {"NAME": r"node\d+", "TOKEN": r"TOKEN"}


def _test_constants() -> tuple[tuple[str, ...], dict[str, str], dict[str, str]]:
    """TYPED and SUBSTITUTED from the test, and the names they use (read, not imported: it needs root's tools)."""
    tree = ast.parse(TEST.read_text())
    names: dict[str, str] = {"SERVER_ADDRESS": "203.0.113.10"}
    typed: tuple[str, ...] = ()
    substituted: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                names[target] = node.value.value
            elif target == "TYPED":
                typed = tuple(_render(element, names) for element in node.value.elts)  # type: ignore[attr-defined]
            elif target == "SUBSTITUTED":
                substituted = {_render(k, names): "" for k in node.value.keys if k is not None}  # type: ignore[attr-defined]
    return typed, substituted, names


def _render(node: ast.expr, names: dict[str, str]) -> str:
    if isinstance(node, ast.Constant):
        return str(node.value)
    assert isinstance(node, ast.JoinedStr), ast.dump(node)
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value))
        else:
            assert isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name)
            parts.append(names[value.value.id])
    return "".join(parts)


def _guide_commands() -> list[str]:
    """The commands of the guide's sh blocks and of the README's (after its first, the two commands that
    test_readme.py holds to CI), comments taken off."""
    blocks = re.findall(r"```sh\n(.*?)```", GUIDE.read_text(), flags=re.S)
    blocks += re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S)[1:]
    lines = [line.split("  #", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _matches(template: str, command: str) -> bool:
    pattern = re.escape(template)
    for placeholder, value in PLACEHOLDERS.items():
        pattern = pattern.replace(placeholder, value)
    return re.fullmatch(pattern, command) is not None


def test_every_command_of_the_guide_is_typed_by_the_test_or_stood_in_for() -> None:
    typed, substituted, _ = _test_constants()
    assert typed and substituted
    for command in _guide_commands():
        assert command in substituted or any(_matches(t, command) for t in typed), (
            f"docs/operations.md tells the operator to type {command!r}, which test_operations.py does not"
        )


def test_every_command_the_test_types_is_in_the_guide() -> None:
    typed, substituted, _ = _test_constants()
    commands = _guide_commands()
    for template in typed:
        assert any(_matches(template, c) for c in commands), f"test_operations.py types {template!r}; the guide does not say it"
    for command in substituted:
        assert command in commands, f"test_operations.py stands in for {command!r}, which the guide no longer says"
