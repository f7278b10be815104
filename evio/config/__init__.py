"""Daemon configuration: JSON schema, loading and validation.

`load_config(path)` returns a typed, immutable `Config` or raises `ConfigError`
listing every problem as a JSON path and a reason.
"""

from typing import Any

# Loaded on first use (PEP 562): the loader pulls in cryptography, which `evio status`
# and other light users of evio.config.model do not need.
_EXPORTS = {
    "ConfigError": "evio.config.loader",
    "ConfigFileError": "evio.config.loader",
    "Problem": "evio.config.problems",
    "load_config": "evio.config.loader",
    "loads_config": "evio.config.loader",
    "Config": "evio.config.model",
    "FileStateDir": "evio.config.state_dir",
    "StateDir": "evio.config.state_dir",
    "resolve_node_id": "evio.config.state_dir",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evio.config' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)

__all__ = [
    "Config",
    "ConfigError",
    "ConfigFileError",
    "FileStateDir",
    "Problem",
    "StateDir",
    "load_config",
    "loads_config",
    "resolve_node_id",
]
