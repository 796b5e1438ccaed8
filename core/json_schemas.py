"""The one place where JSON Schemas that come from outside are checked and applied.

Tool input schemas are written by tenant admins and sent by MCP servers: the people who
write them are not the people whose processes run them. So every ``pattern`` and
``patternProperties`` regex runs on RE2, whose matching time grows linearly with the text
(Python's ``re`` backtracks: on a pattern such as ``(a+)+$`` its time doubles with each more
character of the argument, holding the process and its GIL), patterns RE2 cannot compile
(backreferences, lookaround) are refused, and a ``$ref`` may only point inside its own
schema: nothing is ever fetched.
"""

import functools
import json
from collections.abc import Iterator
from typing import Any

import re2
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import (
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
    FormatChecker,
)
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import extend

from core.storable import storable_text

DIALECTS: dict[str, type[Validator]] = {
    uri: draft
    for draft in (Draft6Validator, Draft7Validator, Draft201909Validator, Draft202012Validator)
    for uri in (draft.META_SCHEMA["$schema"], draft.META_SCHEMA["$schema"].rstrip("#"))
}
DEFAULT_DIALECT: type[Validator] = Draft202012Validator
REFERENCE_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
PATTERN_RULE = "Patterns use RE2 syntax: no backreferences and no lookahead or lookbehind."


class _PatternError(Exception):
    """RE2 cannot compile a pattern; the message says why."""


@functools.lru_cache(maxsize=1024)
def compiled_pattern(pattern: str) -> Any:
    options = re2.Options()
    options.log_errors = False  # the refusal is reported to the person who wrote the pattern
    try:
        return re2.compile(pattern, options=options)
    except (re2.error, UnicodeEncodeError) as error:
        reason = error.args[0] if error.args else ""
        raise _PatternError(reason.decode() if isinstance(reason, bytes) else str(reason)) from error


def pattern_matches(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, in time linear in the text's length."""
    try:
        return compiled_pattern(pattern).search(text) is not None
    except UnicodeEncodeError:  # an unpaired surrogate: RE2 reads UTF-8
        return compiled_pattern(pattern).search(storable_text(text)) is not None


def schema_problem(schema: Any) -> str:
    """Why ``schema`` cannot be used to validate arguments; empty when it can."""
    if not isinstance(schema, dict):
        return "Must be a JSON Schema object."
    return _cached_problem(json.dumps(schema, sort_keys=True))


def instance_errors(schema: dict[str, Any], instance: Any) -> list[str]:
    """Each way ``instance`` breaks ``schema``, as ``path: message``; a schema that cannot be
    used is reported as one error rather than applied."""
    if problem := schema_problem(schema):
        return [f"(schema): the tool's schema cannot be used: {problem}"]
    validator = _validator(schema)
    try:
        return sorted(
            f"{'/'.join(str(part) for part in error.absolute_path) or '(arguments)'}: {error.message}"
            for error in validator.iter_errors(instance)
        )
    except (_PatternError, referencing.exceptions.Unresolvable) as error:
        # Only a schema stored before these checks existed gets here.
        return [f"(schema): the tool's schema cannot be used: {error}"]


@functools.lru_cache(maxsize=512)
def _cached_problem(schema_json: str) -> str:
    schema = json.loads(schema_json)
    dialect_uri = schema.get("$schema")
    if dialect_uri is not None and (not isinstance(dialect_uri, str) or dialect_uri not in DIALECTS):
        return "Unsupported $schema: use JSON Schema draft 6, 7, 2019-09 or 2020-12, or leave $schema out."
    dialect = DIALECTS[dialect_uri] if dialect_uri is not None else DEFAULT_DIALECT
    try:
        dialect.check_schema(schema, format_checker=_SCHEMA_FORMATS)
    except SchemaError as error:
        return _schema_error_text(error)
    return _structure_problem(schema, dialect)


def _schema_error_text(error: SchemaError) -> str:
    if error.validator == "format" and error.validator_value == "regex":
        return f'The pattern "{error.instance}" cannot be used: {error.cause}. {PATTERN_RULE}'
    return f"Not a valid JSON Schema: {error.message}"


def _structure_problem(schema: dict[str, Any], dialect: type[Validator]) -> str:
    specification = referencing.jsonschema.specification_with(str(dialect.META_SCHEMA["$schema"]))
    resolver = referencing.Registry().resolver_with_root(specification.create_resource(schema))
    keywords: set[str] = set()
    for subschema, subresolver, is_root in _subschemas(schema, resolver, specification, is_root=True):
        keywords.update(subschema)
        if "$schema" in subschema and not is_root:
            return "$schema is only allowed at the top of the schema."
        for keyword in REFERENCE_KEYWORDS:
            if problem := _reference_problem(subschema.get(keyword), subresolver):
                return problem
    if {"unevaluatedProperties", "patternProperties"} <= keywords:
        return "unevaluatedProperties cannot be combined with patternProperties; use additionalProperties."
    return ""


def _subschemas(
    value: Any, resolver: Any, specification: Any, *, is_root: bool = False
) -> Iterator[tuple[dict[str, Any], Any, bool]]:
    """Every object in the schema document, with the resolver its references are relative to.

    Data (``const``, ``enum``, property names) is walked too: telling it apart from schemas
    would take the dialect's whole grammar, and a refusal too many is safe where one too few
    would let a subschema switch to another validator class.
    """
    if isinstance(value, list):
        for item in value:
            yield from _subschemas(item, resolver, specification)
        return
    if not isinstance(value, dict):
        return
    if not is_root and isinstance(value.get("$id"), str):
        resolver = resolver.in_subresource(specification.create_resource(value))
    yield value, resolver, is_root
    for item in value.values():
        yield from _subschemas(item, resolver, specification)


def _reference_problem(reference: Any, resolver: Any) -> str:
    if not isinstance(reference, str):
        return ""
    if not reference.startswith("#"):
        return (
            f"The reference {reference!r} points outside the schema: "
            "only references starting with # are allowed."
        )
    try:
        resolver.lookup(reference)
    except referencing.exceptions.Unresolvable:
        return f"The reference {reference!r} points to nothing in the schema."
    return ""


def _regex_format(instance: object) -> bool:
    if isinstance(instance, str):
        compiled_pattern(instance)
    return True


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not pattern_matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            if pattern_matches(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = [name for name in instance if not _is_declared(name, schema)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif additional is False and extras:
        yield ValidationError(_extras_message(extras, schema))


def _is_declared(name: str, schema: dict[str, Any]) -> bool:
    return name in schema.get("properties", {}) or any(
        pattern_matches(pattern, name) for pattern in schema.get("patternProperties", {})
    )


def _extras_message(extras: list[str], schema: dict[str, Any]) -> str:
    if "patternProperties" in schema:
        names = ", ".join(repr(extra) for extra in sorted(extras))
        verb = "does" if len(extras) == 1 else "do"
        patterns = ", ".join(repr(pattern) for pattern in sorted(schema["patternProperties"]))
        return f"{names} {verb} not match any of the regexes: {patterns}"
    names = ", ".join(repr(extra) for extra in extras)
    verb = "was" if len(extras) == 1 else "were"
    return f"Additional properties are not allowed ({names} {verb} unexpected)"


_RE2_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}


def _schema_format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    checker.checks("regex", raises=_PatternError)(_regex_format)
    return checker


_SCHEMA_FORMATS = _schema_format_checker()


# Each dialect's validator class with the regex keywords on RE2.
_RE2_DIALECTS: dict[type[Validator], type[Validator]] = {
    dialect: extend(dialect, validators=_RE2_KEYWORDS) for dialect in set(DIALECTS.values())
}


def _validator(schema: dict[str, Any]) -> Validator:
    dialect = DIALECTS.get(schema.get("$schema", ""), DEFAULT_DIALECT)
    # The root's $schema is dropped once its dialect is chosen: when validation comes back to
    # the root through "#", jsonschema would otherwise switch to the dialect's own class.
    contents = {keyword: value for keyword, value in schema.items() if keyword != "$schema"}
    # An empty registry with no retrieval: a reference that does not resolve locally fails.
    return _RE2_DIALECTS[dialect](contents, registry=referencing.Registry())
