"""The README's two commands are the project's contract; CI must run the test one verbatim."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```sh", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_starts_with_two_commands() -> None:
    commands = _readme_commands()
    assert len(commands) == 2
    assert all(c.startswith("./scripts/bootstrap && ") for c in commands)


def test_ci_runs_the_readme_test_command() -> None:
    test_command = _readme_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci
