"""Check a document against schema.json without the `jsonschema` library.

The daemon validates its config at start and on every reload, so whatever
does the checking stays loaded for the process's life. `jsonschema` with what
it imports (referencing, rpds, attrs) kept some 3 MB resident in every daemon
for a schema that uses a score of draft 2020-12's keywords, and a module once
imported cannot really be unloaded (its Rust extension stays mapped, its
objects scatter over arenas). This checks exactly those keywords, with the
draft's meaning (`integer` takes 3.0, `true` is not 1, patterns are searched,
not anchored, each keyword is checked on its own), and refuses a schema that
uses any other keyword, so a new one cannot be silently skipped. The tests
hold it against `jsonschema` itself (a test dependency) over the shipped
schema and many broken documents.

`failures(schema, document)` returns plain `Failure`s in the order the
schema lists its keywords; evio.config.loader words them as problems.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

# Keywords that say something about the schema, not the document.
ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "$comment", "title", "description", "default", "examples"})
ASSERTIONS = frozenset({
    "$ref", "type", "enum", "const", "pattern", "minLength", "maxLength", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "properties", "additionalProperties", "required",
    "minProperties", "propertyNames", "dependentRequired", "items", "uniqueItems", "if", "then", "else",
})  # fmt: skip


class UnsupportedSchema(ValueError):
    """The schema uses a keyword or a reference this checker does not implement."""


@dataclass(frozen=True)
class Failure:
    """One keyword the document breaks, like jsonschema's ValidationError.

    `parts` is the path of the value, `schema` the (sub)schema holding the keyword;
    `property_name` is set when the value is an object's key checked by `propertyNames`.
    """

    parts: tuple[str | int, ...]
    keyword: str
    value: Any  # the keyword's value in the schema
    instance: Any
    schema: Mapping[str, Any]
    property_name: bool = False


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise UnsupportedSchema unless every keyword and reference of `schema` is one checked here."""
    defs = schema.get("$defs", {})

    def walk(sub: Any, where: str) -> None:
        if not isinstance(sub, dict):
            raise UnsupportedSchema(f"{where}: a schema must be an object here")
        for key, value in sub.items():
            if key not in ANNOTATIONS and key not in ASSERTIONS:
                raise UnsupportedSchema(f"{where}: keyword {key!r} is not checked by evio.config.schema_check")
            if key == "$ref" and _def_name(value) not in defs:
                raise UnsupportedSchema(f"{where}: only references to #/$defs/NAME are followed, not {value!r}")
            if key in ("properties", "$defs"):
                for name, item in value.items():
                    walk(item, f"{where}/{key}/{name}")
            elif key in ("additionalProperties", "propertyNames", "items", "if", "then", "else") and value is not False:
                walk(value, f"{where}/{key}")

    walk(schema, "#")


def _def_name(ref: Any) -> str | None:
    return ref.removeprefix("#/$defs/") if isinstance(ref, str) and ref.startswith("#/$defs/") else None


def failures(schema: Mapping[str, Any], document: Any) -> list[Failure]:
    """Every keyword of `schema` (checked with check_schema) that `document` breaks."""
    return list(_Checker(schema).check(schema, document, ()))


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    kind = {"string": str, "object": dict, "array": list, "boolean": bool}.get(name)
    if kind is not None:
        return isinstance(value, kind)
    return name == "null" and value is None


def equal(one: Any, two: Any) -> bool:
    """JSON equality: true is not 1, 1 is 1.0, arrays and objects compared item by item."""
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(equal(a, b) for a, b in zip(one, two))
    if isinstance(one, dict) and isinstance(two, dict):
        return one.keys() == two.keys() and all(equal(one[k], two[k]) for k in one)
    if isinstance(one, bool) or isinstance(two, bool):
        return one is two
    return bool(one == two)


def _canonical(value: Any) -> Any:
    """A hashable stand-in equal for values `equal` calls equal (a megabyte's list is not compared pairwise)."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, list):
        return ("array", tuple(_canonical(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, _canonical(item)) for key, item in value.items()))
    return value  # strings, numbers (1 and 1.0 hash and compare equal), null


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(_ecma_anchors(pattern))


def _ecma_anchors(pattern: str) -> str:
    """`pattern` with each `$` outside a class made `\\Z`: in JSON Schema (ECMA 262) `$` is the end of the text,
    in Python also the place before a final newline, which let "ov1\\n" pass as an overlay id (review21h H11)."""
    out: list[str] = []
    escaped = in_class = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "$" and not in_class:
            out.append("\\Z")
            continue
        out.append(char)
    return "".join(out)


class _Checker:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self._defs: Mapping[str, Any] = root.get("$defs", {})

    def check(self, schema: Mapping[str, Any], value: Any, parts: tuple[str | int, ...]) -> Iterator[Failure]:
        for keyword, rule in schema.items():
            yield from self._keyword(schema, keyword, rule, value, parts)

    def _valid(self, schema: Mapping[str, Any], value: Any) -> bool:
        return next(iter(self.check(schema, value, ())), None) is None

    def _keyword(self, schema: Mapping[str, Any], keyword: str, rule: Any, value: Any,
                 parts: tuple[str | int, ...]) -> Iterator[Failure]:  # fmt: skip
        def failed() -> Failure:
            return Failure(parts, keyword, rule, value, schema)

        if keyword == "$ref":
            yield from self.check(self._defs[rule.removeprefix("#/$defs/")], value, parts)
        elif keyword == "type":
            names = rule if isinstance(rule, list) else [rule]
            if not any(_is_type(value, name) for name in names):
                yield failed()
        elif keyword == "enum":
            if not any(equal(value, choice) for choice in rule):
                yield failed()
        elif keyword == "const":
            if not equal(value, rule):
                yield failed()
        elif keyword == "if":
            branch = "then" if self._valid(rule, value) else "else"
            if branch in schema:
                yield from self.check(schema[branch], value, parts)
        elif isinstance(value, str):
            if ((keyword == "pattern" and _regex(rule).search(value) is None)
                    or (keyword == "minLength" and len(value) < rule)
                    or (keyword == "maxLength" and len(value) > rule)):  # fmt: skip
                yield failed()
        elif _is_type(value, "number"):
            if ((keyword == "minimum" and value < rule) or (keyword == "maximum" and value > rule)
                    or (keyword == "exclusiveMinimum" and value <= rule)
                    or (keyword == "exclusiveMaximum" and value >= rule)):  # fmt: skip
                yield failed()
        elif isinstance(value, dict):
            yield from self._object(schema, keyword, rule, value, parts)
        elif isinstance(value, list):
            if keyword == "items":
                for index, item in enumerate(value):
                    yield from self.check(rule, item, (*parts, index))
            elif keyword == "uniqueItems" and rule and len(set(map(_canonical, value))) < len(value):
                yield failed()

    def _object(self, schema: Mapping[str, Any], keyword: str, rule: Any, value: dict[str, Any],
                parts: tuple[str | int, ...]) -> Iterator[Failure]:  # fmt: skip
        failed = Failure(parts, keyword, rule, value, schema)
        if keyword == "properties":
            for key, sub in rule.items():
                if key in value:
                    yield from self.check(sub, value[key], (*parts, key))
        elif keyword == "additionalProperties":
            extra = [key for key in value if key not in schema.get("properties", {})]
            if rule is False and extra:
                yield failed
            elif rule is not False:
                for key in extra:
                    yield from self.check(rule, value[key], (*parts, key))
        elif keyword == "required":
            if any(key not in value for key in rule):
                yield failed
        elif keyword == "dependentRequired":
            if any(key in value and other not in value for key, needed in rule.items() for other in needed):
                yield failed
        elif keyword == "minProperties":
            if len(value) < rule:
                yield failed
        elif keyword == "propertyNames":
            for key in value:
                for failure in self.check(rule, key, parts):
                    yield Failure(parts, failure.keyword, failure.value, key, failure.schema, property_name=True)
