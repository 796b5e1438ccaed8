"""Text both databases store alike.

PostgreSQL refuses NUL in text and in jsonb, and unpaired surrogates in jsonb; SQLite keeps both.
Text that comes from outside (a model's answer, a tool's result, a document's text) is made
storable where it enters, each such character replaced by U+FFFD, so that a run or an upload
never fails on one database for what the other keeps. What people type is refused instead, by
the API's and the forms' own checks.
"""

import re
from typing import Any

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"
# What people are told when they send such a character in a free-form JSON value.
UNSTORABLE_RULE = "Must not contain null characters or unpaired surrogates."


def storable_text(text: str) -> str:
    return UNSTORABLE.sub(REPLACEMENT, text)


def is_storable(value: Any) -> bool:
    return storable(value) == value


def storable(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with its keys and strings storable."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value
