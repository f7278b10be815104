"""Read, check and type the daemon configuration.

Three stages, each reporting every problem it finds rather than the first:
1. text -> JSON: `//` line comments outside strings are removed (so the shipped
   example can be fully commented), then the JSON is parsed strictly
   (duplicate keys and NaN/Infinity are problems too);
2. JSON Schema (schema.json, draft 2020-12, checked by evio.config.schema_check, not the
   `jsonschema` library, which would stay loaded in the daemon);
3. rules the schema cannot express (credentials, files, uniqueness, addresses),
   in evio.config.semantic_checks.
Only a document with no problems becomes a `Config`.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import is_dataclass
from functools import cache
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from evio.config.model import (
    ETH_TYPE_NAMES,
    IP_PROTO_NAMES,
    BridgeConfig,
    Config,
    NodeConfig,
    OverlayConfig,
    PolicyRule,
    SignalConfig,
    TurnServer,
    default_bridge_name,
)
from evio.config.problems import Problem, json_path
from evio.config.schema_check import Failure, check_schema, failures
from evio.config.secrets import MAX_CONFIG_BYTES, FileCheckError, read_password_file, read_regular
from evio.config.semantic_checks import policy_number, resolve_path, semantic_problems
from evio.ids import parse_node_id

# Keys whose values are never echoed in a problem.
_SECRET_KEYS = frozenset({"password", "rest_secret"})
# A config nests about 6 levels; past a few hundred the loader's walks would exceed Python's recursion limit.
MAX_DEPTH = 64


class ConfigError(Exception):
    """The configuration is not usable; `problems` lists every reason found."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


class ConfigFileError(ConfigError):
    """The file could not be read or is not JSON; nothing was checked beyond that."""

    def __init__(self, reason: str, line: int | None = None, column: int | None = None) -> None:
        self.reason = reason
        self.line = line
        self.column = column
        super().__init__([Problem("$", reason)])

    @property
    def location(self) -> str:
        """"LINE:COL" when the error has a position, else ""."""
        return f"{self.line}:{self.column}" if self.line is not None else ""


# --- stage 1: text to JSON -------------------------------------------------


def strip_line_comments(text: str) -> str:
    """Remove `//` comments that start outside JSON strings.

    Only the comment text goes; newlines stay, so line and column numbers of
    everything left are unchanged and syntax errors point at the real file.
    """
    out: list[str] = []
    i = 0
    in_string = False
    length = len(text)
    while i < length:
        char = text[i]
        if in_string:
            if char == "\\":
                out.append(text[i : i + 2])
                i += 2
                continue
            # A raw newline ends a (malformed) string so later comments are still stripped.
            if char in '"\n':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            i = length if end == -1 else end
            continue
        out.append(char)
        i += 1
    return "".join(out)


class _JsonObject(dict[str, Any]):
    """A parsed JSON object that remembers keys given more than once."""

    duplicates: tuple[str, ...] = ()


def _object_from_pairs(pairs: list[tuple[str, Any]]) -> _JsonObject:
    obj = _JsonObject()
    duplicates = []
    for key, value in pairs:
        if key in obj:
            duplicates.append(key)
        obj[key] = value
    if duplicates:
        obj.duplicates = tuple(duplicates)
    return obj


def parse_json(text: str) -> Any:
    """Parse JSON with `//` comments; raise ConfigFileError with line:column on a syntax error."""
    stripped = strip_line_comments(text)
    try:
        document = json.loads(stripped, object_pairs_hook=_object_from_pairs)
    except RecursionError:  # no JSONDecodeError (review21i I8)
        raise ConfigFileError(f"invalid JSON: nested too deeply (more than {MAX_DEPTH} levels)") from None
    except json.JSONDecodeError as exc:
        reason = f"invalid JSON: {exc.msg}"
        before = stripped[: exc.pos].rstrip()
        if before.endswith(",") and exc.msg.startswith(("Expecting property name", "Expecting value")):
            reason += " (trailing comma?)"
        raise ConfigFileError(reason, exc.lineno, exc.colno) from None
    if _depth(document) > MAX_DEPTH:  # the checks below walk it recursively, as the schema's does
        raise ConfigFileError(f"invalid JSON: nested too deeply (more than {MAX_DEPTH} levels)")
    return document


def _depth(document: Any) -> int:
    """How deep arrays and objects nest in `document` (0 for a scalar), without recursion."""
    deepest, stack = 0, [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, depth)
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))
    return deepest


def _structure_problems(value: Any, parts: tuple[str | int, ...] = ()) -> Iterator[Problem]:
    """Duplicate keys and non-finite numbers, which json.loads accepts silently."""
    if isinstance(value, dict):
        for key in getattr(value, "duplicates", ()):
            yield Problem(json_path((*parts, key)), "key given more than once (only the last would count)")
        for key, item in value.items():
            yield from _structure_problems(item, (*parts, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _structure_problems(item, (*parts, index))
    elif isinstance(value, float) and not math.isfinite(value):
        yield Problem(json_path(parts), f"{value} is not a JSON number")


# --- stage 2: the schema ----------------------------------------------------


@cache
def load_schema() -> dict[str, Any]:
    # Beside this module (importlib.resources would bring tempfile, shutil and the archive modules).
    text = Path(__file__).with_name("schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _checked_schema() -> dict[str, Any]:
    schema = load_schema()
    check_schema(schema)
    return schema


_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
               (list, "array"), (dict, "object"), (type(None), "null"))  # fmt: skip


def _json_type(value: Any) -> str:
    for python_type, name in _JSON_TYPES:
        if isinstance(value, python_type):
            return name
    return type(value).__name__


def _shown(parts: Sequence[str | int], value: Any) -> str:
    """The value for a message, unless it sits under a secret key."""
    if parts and parts[-1] in _SECRET_KEYS:
        return "(hidden)"
    return json.dumps(value)


def _schema_problems(error: Failure) -> Iterator[Problem]:
    """One or more readable problems for a broken schema keyword, at the most precise path."""
    parts = error.parts
    kind = error.keyword
    instance = error.instance
    if error.property_name:
        # The error sits on the object; point at the key itself.
        title = error.schema.get("title", "a valid key")
        yield Problem(json_path((*parts, instance)), f"{json.dumps(instance)} is not {title}")
    elif kind == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        for key in instance:
            if key not in allowed:
                import difflib  # only for a config with an unknown key

                near = difflib.get_close_matches(key, allowed, n=1)
                hint = f"did you mean {near[0]!r}? " if near else ""
                yield Problem(json_path((*parts, key)), f"unknown key; {hint}allowed: {', '.join(allowed)}")
    elif kind == "required":
        for key in error.value:
            if key not in instance:
                yield Problem(json_path((*parts, key)), "required key is missing")
    elif kind == "dependentRequired":
        for key, needed in error.value.items():
            if key in instance:
                for other in needed:
                    if other not in instance:
                        yield Problem(json_path((*parts, other)), f"required together with {key!r}")
    elif kind == "type":
        expected = error.value
        expected_text = " or ".join(expected) if isinstance(expected, list) else expected
        got = _json_type(instance) if isinstance(instance, dict | list) else f"{_json_type(instance)} {_shown(parts, instance)}"
        yield Problem(json_path(parts), f"expected {expected_text}, got {got}")
    elif kind == "pattern":
        title = error.schema.get("title", f"matching {error.value}")
        yield Problem(json_path(parts), f"{_shown(parts, instance)} is not {title}")
    elif kind == "enum":
        choices = ", ".join(json.dumps(c) for c in error.value)
        yield Problem(json_path(parts), f"{_shown(parts, instance)} is not one of {choices}")
    elif kind == "minProperties":
        yield Problem(json_path(parts), f"needs at least {error.value} entry")
    elif kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        relation = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[kind]
        yield Problem(json_path(parts), f"{instance} out of range: must be {relation} {error.value}")
    elif kind == "uniqueItems":
        yield Problem(json_path(parts), "entries must be unique")
    elif kind == "minLength":
        yield Problem(json_path(parts), "must not be empty")
    elif kind == "maxLength":
        yield Problem(json_path(parts), f"{instance!r} is too long")
    else:
        yield Problem(json_path(parts), f"{_shown(parts, instance)} breaks {kind} {json.dumps(error.value)}")


def schema_problems(document: Any) -> list[Problem]:
    problems: list[Problem] = []
    for error in failures(_checked_schema(), document):
        problems.extend(_schema_problems(error))
    return problems


def _policy_rule(rule: Mapping[str, Any]) -> PolicyRule:
    """A checked rule as the model holds it: names as numbers, MACs in lower case."""
    return PolicyRule(
        action=rule["action"],
        name=rule.get("name", ""),
        in_port=rule.get("in_port", "any"),
        eth_src=rule["eth_src"].lower() if "eth_src" in rule else None,
        eth_dst=rule["eth_dst"].lower() if "eth_dst" in rule else None,
        eth_type=policy_number(rule.get("eth_type"), ETH_TYPE_NAMES),
        vlan=int(rule["vlan"]) if "vlan" in rule else None,
        ip_proto=policy_number(rule.get("ip_proto"), IP_PROTO_NAMES),
        src_port=int(rule["src_port"]) if "src_port" in rule else None,
        dst_port=int(rule["dst_port"]) if "dst_port" in rule else None,
    )


# --- typed model ---------------------------------------------------------------
# Each section becomes its dataclass field by field: a key the document gives is converted to the
# field's type; a key it leaves out takes the model's default (config/model.py holds every default).


def _build(document: Mapping[str, Any], base_dir: Path) -> Config:
    """The typed config of a document that passed every check."""
    node = document.get("node", {})
    return _section(
        Config, document, base_dir,
        node=_section(NodeConfig, node, base_dir, id=parse_node_id(node["id"]) if "id" in node else None),
        overlays={overlay_id: _build_overlay(overlay_id, overlay, base_dir)
                  for overlay_id, overlay in document["overlays"].items()},
    )  # fmt: skip


def _build_overlay(overlay_id: str, overlay: Mapping[str, Any], base_dir: Path) -> OverlayConfig:
    bridge = overlay.get("bridge", {})
    # The one default that depends on another value: the bridge is named after the overlay.
    name = bridge.get("name", default_bridge_name(overlay_id))
    return _section(OverlayConfig, overlay, base_dir, id=overlay_id,
                    bridge=_section(BridgeConfig, bridge, base_dir, name=name),
                    policy=tuple(_policy_rule(rule) for rule in overlay.get("policy", ())),
                    ipv6_routers=tuple(parse_node_id(nid) for nid in overlay.get("ipv6_routers", ())),
                    ipv6_router_addresses=tuple(
                        (parse_node_id(nid), ipaddress.IPv6Address(address))
                        for nid, addresses in overlay.get("ipv6_router_addresses", {}).items() for address in addresses))


T = TypeVar("T")


def _section(model: type[T], section: Mapping[str, Any], base_dir: Path, **given: Any) -> T:
    """`model` (a dataclass) from one checked JSON object; the fields in `given` are taken as they are.

    The schema let no unknown key through, so every key names a field of the model."""
    types = get_type_hints(model)
    values = {key: _value(types[key], value, base_dir) for key, value in section.items() if key not in given}
    return model(**values, **given)


def _value(hint: Any, value: Any, base_dir: Path) -> Any:
    """A JSON value as the model's field type `hint` holds it."""
    if get_origin(hint) in (Union, UnionType):
        kinds = [arg for arg in get_args(hint) if arg is not NoneType]
        if value is None:
            return None
        if all(issubclass(kind, ipaddress.IPv4Interface | ipaddress.IPv6Interface) for kind in kinds):
            return ipaddress.ip_interface(value)
        if all(issubclass(kind, ipaddress.IPv4Network | ipaddress.IPv6Network) for kind in kinds):
            return ipaddress.ip_network(value)
        (hint,) = kinds
    if get_origin(hint) is tuple:
        item, _ = get_args(hint)  # tuple[X, ...]
        return tuple(_value(item, entry, base_dir) for entry in value)
    if get_origin(hint) is Literal:
        return value
    if is_dataclass(hint):
        return _section(hint, value, base_dir)  # type: ignore[arg-type]
    if hint is Path:
        return resolve_path(base_dir, value)
    # int: the schema allows 3.0 as an integer, the model holds real ints; enums from their values.
    return hint(value)


# --- entry points -------------------------------------------------------------


def check_document(document: Any, base_dir: Path) -> Config:
    """Check a parsed document; return its Config or raise ConfigError with every problem."""
    problems = list(_structure_problems(document))
    problems.extend(schema_problems(document))
    problems.extend(semantic_problems(document, base_dir))
    if problems:
        # Stable order by path; a path with several problems keeps their order.
        problems.sort(key=lambda p: p.path)
        raise ConfigError(_unique(problems))
    return _build(document, base_dir)


def _unique(problems: Iterable[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def loads_config(text: str, base_dir: Path | None = None) -> Config:
    """Config from text; relative paths are taken from `base_dir` (default: the working directory)."""
    return check_document(parse_json(text), (base_dir or Path.cwd()).absolute())


def load_config(path: str | os.PathLike[str]) -> Config:
    """Config from a file; relative paths in it are relative to the file's directory."""
    file = Path(path)
    try:
        text = read_regular(file, MAX_CONFIG_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except FileCheckError as exc:
        raise ConfigFileError(str(exc).removeprefix(f"{file}: ")) from None
    except OSError as exc:
        raise ConfigFileError(f"cannot read: {exc.strerror or exc}") from None
    return loads_config(text, file.absolute().parent)


def turn_password(turn: TurnServer) -> str | None:
    """A TURN server's static password from `password` or `password_file`; None with a REST secret."""
    if turn.password_file is not None:
        return read_password_file(turn.password_file)
    return turn.password


def signal_password(signal: SignalConfig) -> str | None:
    """The XMPP password from `password` or `password_file`; None with a client certificate."""
    if signal.password is not None:
        return signal.password
    if signal.password_file is not None:
        return read_password_file(signal.password_file)
    return None
