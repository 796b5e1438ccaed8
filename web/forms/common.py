"""Helpers shared by the page forms: service errors shown inline, list and map inputs."""

import json
import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

SEPARATORS = re.compile(r"[,\n]")


def apply_service_errors(
    form: forms.BaseForm, error: ValidationError, field_map: dict[str, str] | None = None
) -> None:
    """Show a service's ValidationError next to the fields it names (else above the form)."""
    if not hasattr(error, "error_dict"):
        form.add_error(None, error.messages)
        return
    for name, messages in error.message_dict.items():
        field = (field_map or {}).get(name, name)
        form.add_error(field if field in form.fields else None, messages)


def split_names(raw: str) -> list[str]:
    """Names typed one per line or separated by commas."""
    return [name.strip() for name in SEPARATORS.split(raw or "") if name.strip()]


def join_names(names: list[str] | None) -> str:
    return "\n".join(names or [])


def parse_pairs(raw: str, *, separator: str, field_label: str) -> dict[str, str]:
    """``Name: value`` (or ``NAME=value``) lines as a dict; blank lines are skipped."""
    pairs: dict[str, str] = {}
    for number, line in enumerate((raw or "").splitlines(), start=1):
        if not line.strip():
            continue
        name, found, value = line.partition(separator)
        if not found or not name.strip():
            raise ValidationError(f'Line {number}: write each {field_label} as "name{separator} value".')
        pairs[name.strip()] = value.strip()
    return pairs


def join_pairs(pairs: dict[str, str] | None, *, separator: str) -> str:
    spacing = " " if separator == ":" else ""
    return "\n".join(f"{name}{separator}{spacing}{value}" for name, value in (pairs or {}).items())


def parse_json_object(raw: str, *, default: dict[str, Any]) -> dict[str, Any]:
    if not (raw or "").strip():
        return dict(default)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValidationError(
            f"Not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})."
        ) from error
    if not isinstance(value, dict):
        raise ValidationError("Must be a JSON object.")
    return value


class RangeInput(forms.NumberInput):
    """A slider; the field template shows its value next to it in an <output>."""

    input_type = "range"
