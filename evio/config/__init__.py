"""Daemon configuration: JSON schema, loading and validation.

`load_config(path)` returns a typed, immutable `Config` or raises `ConfigError`
listing every problem as a JSON path and a reason.
"""

from evio.config.loader import ConfigError, ConfigFileError, Problem, load_config, loads_config
from evio.config.model import Config
from evio.config.state_dir import FileStateDir, StateDir, resolve_node_id

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
