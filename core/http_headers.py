"""What an HTTP header can carry: a name of RFC 9110 token characters, a value of ASCII text.

The HTTP clients encode header values as ASCII, so a value with any other character fails every
call made with it. Tenants' header names and values, tokens and keys are checked when they are
saved, and again before a call, for values stored before these checks.
"""

import re
from collections.abc import Iterable

HEADER_NAME_PATTERN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
HEADER_NAME_RULE = "Header names may hold only letters, digits and !#$%&'*+.^_`|~-."


def header_value_problem(value: str) -> str:
    """What keeps ``value`` out of a header ("control characters", "non-ASCII characters"), or ""."""
    if CONTROL_CHARACTERS.search(value):
        return "control characters"
    if not value.isascii():
        return "non-ASCII characters"
    return ""


def header_values_problem(values: Iterable[str]) -> str:
    """The field message for header values some of which cannot be sent, or ""."""
    problems = sorted({problem for value in values if (problem := header_value_problem(value))})
    return f"Header values must not contain {' or '.join(problems)}." if problems else ""
