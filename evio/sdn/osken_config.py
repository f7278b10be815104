"""What os-ken asks of its configuration, without oslo_config: stands in for `os_ken.cfg` in the daemon.

os-ken keeps its options in an oslo_config `ConfigOpts` (`os_ken.cfg.CONF`). Of the modules a daemon
loads, only its controller registers any (the listen host and ports, TLS files, switch addresses, the
socket timeout, echo requests), and evio sets at most two of them, on the command line it hands
`CONF(args=...)` (evio.sdn.ofapp.run_controller). oslo_config with what it imports (glob, pickle, its
types' netaddr checks, iniparser, its sources) is 0.9 MB traced in every daemon, for that.
`evio.sdn.osken_imports.trim_os_ken` puts this module in the place of `os_ken.cfg` before os-ken is first
imported. It keeps the names os_ken.cfg exports, each option's default and type, and
`--name value` / `--name=value` on the command line (an unknown option, or a value that does not convert,
raises ValueError). What it leaves out, because no daemon uses it: configuration files (oslo_config
would read /etc/os_ken/os_ken.conf or ~/.os_ken/os_ken.conf if either existed: os-ken in a daemon is
configured by evio alone), environment sources, `--help` and option groups' own command-line options.
A BoolOpt is a flag on the command line (`--name`, `--noname`), as in oslo_config.
Figures: docs/performance.md, "A fifth pass: os-ken without oslo_config or netaddr (issue 25)".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any


class Opt:
    """An option: its name (dashes or underscores), default and how a command-line value converts."""

    convert: Callable[[str], object] = str

    # oslo_config's order of the first arguments (os_ken.flags passes a type by position).
    def __init__(self, name: str, type: Callable[[str], object] | None = None, dest: str | None = None,
                 short: str | None = None, default: object = None, *, help: str | None = None, **_: object) -> None:
        self.name = name
        self.dest = dest or name.replace("-", "_")
        self.default = default
        self.help = help
        if type is not None:
            self.convert = type

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opt) and type(other) is type(self) and (other.dest, other.default) == (self.dest, self.default)

    def __hash__(self) -> int:
        return hash((type(self), self.dest))


class _TypedOpt(Opt):
    """oslo_config's typed options take their other arguments by keyword."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        kwargs.pop("type", None)
        super().__init__(name, **kwargs)


class StrOpt(_TypedOpt):
    pass


class IntOpt(_TypedOpt):
    convert = int


class FloatOpt(_TypedOpt):
    convert = float


class BoolOpt(_TypedOpt):
    @staticmethod
    def convert(text: str) -> bool:
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"not a boolean: {text!r}")


class ListOpt(_TypedOpt):
    def __init__(self, name: str, item_type: Callable[[str], object] | None = None, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.item_type = item_type or str

    def convert(self, text: str) -> list[object]:
        return [self.item_type(item.strip()) for item in text.split(",") if item.strip()]


class MultiStrOpt(_TypedOpt):
    """Given on the command line any number of times: the list of its values."""


class RequiredOptError(ValueError):
    pass


class ConfigFilesNotFoundError(ValueError):
    pass


class _Group:
    """The options of one group, looked up as attributes (`CONF.group.option`)."""

    def __init__(self) -> None:
        self._opts: dict[str, Opt] = {}
        self._values: dict[str, object] = {}

    def _register(self, opt: Opt) -> bool:
        known = self._opts.get(opt.dest)
        if known is not None:
            if known != opt:
                raise ValueError(f"option {opt.name} registered twice, differently")
            return False  # as oslo_config: the same option again is no error
        self._opts[opt.dest] = opt
        return True

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._values:
            return self._values[name]
        opt = self._opts.get(name)
        if opt is None:
            raise AttributeError(f"no such option: {name}")
        return opt.default


class ConfigOpts(_Group):
    """os-ken's `CONF`: options registered by its modules, set by `CONF(args=...)`."""

    def __init__(self) -> None:
        super().__init__()
        self._cli: set[str] = set()
        self._groups: dict[str, _Group] = {}

    def register_opt(self, opt: Opt, group: str | None = None, cli: bool = False) -> bool:
        if group is not None:
            return self._groups.setdefault(str(group), _Group())._register(opt)
        registered = self._register(opt)
        if cli:
            self._cli.add(opt.dest)
        return registered

    def register_opts(self, opts: Iterable[Opt], group: str | None = None) -> None:
        for opt in opts:
            self.register_opt(opt, group)

    def register_cli_opt(self, opt: Opt, group: str | None = None) -> bool:
        return self.register_opt(opt, group, cli=True)

    def register_cli_opts(self, opts: Iterable[Opt], group: str | None = None) -> None:
        for opt in opts:
            self.register_cli_opt(opt, group)

    def __call__(self, args: Sequence[str] | None = None, project: str | None = None, **_: object) -> None:
        """Set the command-line options from `args` (`--name value` or `--name=value`); the rest keep their defaults."""
        values: dict[str, object] = {}
        multiple: dict[str, list[object]] = {}
        remaining = list(args or ())
        while remaining:
            word = remaining.pop(0)
            name, equals, text = word.partition("=")
            dest = name.removeprefix("--").replace("-", "_")
            opt = self._opts.get(dest)
            if opt is None and dest.startswith("no") and isinstance(self._opts.get(dest[2:]), BoolOpt) and not equals:
                dest, opt, equals, text = dest[2:], self._opts[dest[2:]], "=", "false"  # as oslo_config: --noNAME
            elif isinstance(opt, BoolOpt) and not equals:
                equals, text = "=", "true"  # a flag, as in oslo_config
            if not name.startswith("--") or dest not in self._cli or opt is None:
                raise ValueError(f"os-ken: unknown option {word!r}")
            if not equals:
                if not remaining:
                    raise ValueError(f"os-ken: option {name} needs a value")
                text = remaining.pop(0)
            value = opt.convert(text)
            if isinstance(opt, MultiStrOpt):
                values[dest] = multiple.setdefault(dest, [])
                multiple[dest].append(value)
            else:
                values[dest] = value
        self._values = values

    def __getattr__(self, name: str) -> object:
        if not name.startswith("_") and name in self._groups:
            return self._groups[name]
        return super().__getattr__(name)


CONF = ConfigOpts()
