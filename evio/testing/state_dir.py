"""In-memory StateDir (evio.config.state_dir) for tests."""

from __future__ import annotations


class MemoryStateDir:
    """Files in a dict; `writes` counts writes so tests can assert what was persisted."""

    def __init__(self, files: dict[str, str] | None = None) -> None:
        self.files: dict[str, str] = dict(files or {})
        self.writes = 0

    def read(self, name: str) -> str | None:
        return self.files.get(name)

    def write(self, name: str, text: str) -> None:
        self.files[name] = text
        self.writes += 1
