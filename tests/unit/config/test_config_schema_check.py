"""evio.config.schema_check held against the `jsonschema` library (a test dependency only).

The daemon checks its config with schema_check so that jsonschema is not loaded for its
life; these tests make sure both find the same problems, worded by the same loader code,
over the shipped schema and thousands of broken documents.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evio.config.loader import _schema_problems, load_schema, parse_json, schema_problems
from evio.config.problems import Problem, json_path
from evio.config.schema_check import Failure, UnsupportedSchema, check_schema, equal, failures

EXAMPLE = Path(__file__).resolve().parents[3] / "evio" / "config" / "example.jsonc"

# Values of every JSON type and the edges the schema draws (empty, long, integral float, bool as int).
ODD_VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 3.0, 1.5, 70000, "", "x", "a" * 300, "ov 1", "10.0.0.1/33",
    "[::1]:80", "evbr-too-long-a-name", [], ["a", "a"], ["h:1", 5], [{}], {}, {"zz": 1},
]  # fmt: skip


def _reference(document: Any) -> list[Problem]:
    """The problems jsonschema finds, worded by the loader as they were before schema_check."""
    validator = jsonschema.Draft202012Validator(load_schema())
    problems: list[Problem] = []
    for error in validator.iter_errors(document):
        failure = Failure(
            parts=tuple(error.absolute_path),
            keyword=str(error.validator),
            value=error.validator_value,
            instance=error.instance,
            schema=error.schema if isinstance(error.schema, dict) else {},
            property_name="propertyNames" in error.absolute_schema_path,
        )
        problems.extend(_schema_problems(failure))
    return _ordered(problems)


def _ordered(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(sorted(problems, key=lambda p: p.path)))


def _full_document() -> Any:
    """The shipped example, with the keys it shows commented out set in a second overlay."""
    document = json.loads(json.dumps(parse_json(EXAMPLE.read_text())))  # plain dicts
    document["node"]["id"] = "0123456789abcdef0123456789ABCDEF"
    document["logging"] |= {"destination": "file", "file": "evio.log"}
    document["overlays"]["ov-2"] = {
        "signal": {"jid": "n2@overlay.test", "client_cert": "c.pem", "client_key": "k.pem", "ca_file": "ca.pem",
                   "tls": "direct"},
        "bridge": {"address_pool": "fd00::/64", "mtu": 1400},
        "trust": {"ca_file": "ca.pem", "cert_file": "n.pem", "key_file": "n.key"},
    }  # fmt: skip
    document["overlays"]["ov_3"] = {"signal": {"jid": "n3@overlay.test", "password_file": "pw"}}
    return document


def _paths(value: Any, parts: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    yield parts
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*parts, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*parts, index))


def _set(document: Any, parts: tuple[str | int, ...], value: Any) -> Any:
    if not parts:
        return value
    changed = copy.deepcopy(document)
    target = changed
    for part in parts[:-1]:
        target = target[part]
    target[parts[-1]] = value
    return changed


def _delete(document: Any, parts: tuple[str | int, ...]) -> Any:
    changed = copy.deepcopy(document)
    target = changed
    for part in parts[:-1]:
        target = target[part]
    del target[parts[-1]]
    return changed


def _mutations() -> Iterator[Any]:
    document = _full_document()
    yield document
    for parts in _paths(document):
        for value in ODD_VALUES:
            yield _set(document, parts, value)
        if parts:
            yield _delete(document, parts)
        target = document
        for part in parts:
            target = target[part]
        if isinstance(target, dict):
            yield _set(document, parts, {**target, "unknwn": 1, "Bad Key": 2})


def test_the_shipped_schema_uses_only_checked_keywords() -> None:
    check_schema(load_schema())
    jsonschema.Draft202012Validator.check_schema(load_schema())


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "patternProperties": {"^a": {}}},
        {"properties": {"a": {"oneOf": [{"type": "string"}]}}},
        {"$ref": "other.json#/x"},
        {"$ref": "#/$defs/missing", "$defs": {}},
    ],
)
def test_a_schema_with_a_keyword_or_reference_not_checked_is_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedSchema):
        check_schema(schema)


def test_every_mutation_of_the_example_gets_the_problems_jsonschema_finds() -> None:
    count = 0
    for document in _mutations():
        assert _ordered(schema_problems(document)) == _reference(document), json.dumps(document)[:400]
        count += 1
    assert count > 1900  # every value of the corpus at every path: the schema is covered


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 70000) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_value_anywhere_gets_the_problems_jsonschema_finds(data: st.DataObject) -> None:
    document = _full_document()
    paths = list(_paths(document))
    parts = data.draw(st.sampled_from(paths))
    changed = _set(document, parts, data.draw(_json))
    assert _ordered(schema_problems(changed)) == _reference(changed)


def test_json_equality_keeps_booleans_apart_from_numbers() -> None:
    assert equal(1, 1.0) and not equal(True, 1) and not equal(0, False) and equal([1, "a"], [1.0, "a"])
    assert not equal({"a": True}, {"a": 1}) and equal({"a": [2]}, {"a": [2.0]}) and not equal("1", 1)


def test_unique_items_are_found_in_one_pass_with_json_equality() -> None:
    schema = {"type": "array", "uniqueItems": True}
    for items, unique in (([1, 1.0], False), ([1, True], True), ([[1], [1.0]], False), ([{"a": 0}, {"a": False}], True),
                          (["a", "b"], True), ([None, None], False), ([str(i) for i in range(200_000)] + ["7"], False)):  # fmt: skip
        assert (failures(schema, items) == []) is unique, items[:4]


def test_the_problems_name_the_path_and_what_is_wrong() -> None:
    document = {"overlays": {"ov 1": {"signal": {"jid": "n@d", "password": "pw", "port": 0}}}, "extra": 1}
    found = [str(p) for p in _ordered(schema_problems(document))]
    assert found == [
        "$.extra: unknown key; allowed: logging, metrics, node, overlays",
        '$.overlays["ov 1"]: "ov 1" is not an overlay id (1 to 32 of A-Z a-z 0-9 _ -)',
        '$.overlays["ov 1"].signal.port: 0 out of range: must be >= 1',
    ]


def test_checking_a_config_does_not_load_jsonschema() -> None:
    probe = (
        "import sys\nfrom evio.config.loader import loads_config\n"
        "loads_config('{\"overlays\": {\"ov1\": {\"signal\": {\"jid\": \"n@d\", \"password\": \"pw\"}}}}')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jsonschema', 'referencing', 'rpds')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_json_path_of_a_failure_matches_the_loaders() -> None:
    (failure,) = failures(load_schema(), {"overlays": {"ov1": {"signal": {"jid": 5, "password": "pw"}}}})
    assert json_path(failure.parts) == "$.overlays.ov1.signal.jid" and failure.keyword == "type"
