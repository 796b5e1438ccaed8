"""Masking secret-looking values in data that is logged, stored as events or shown."""

import re
from typing import Any

# Whole field names (optionally prefixed, e.g. access_token, x-api-key), so that
# max_tokens or input_tokens stay readable.
SECRET_KEY_PATTERN = re.compile(
    r"^(.*[_-])?(password|passwd|passphrase|secret|client[_-]?secret|token|api[_-]?key|apikey|authorization"
    r"|auth|credentials?|private[_-]?key|cookie|access[_-]?key|session[_-]?id)$",
    re.IGNORECASE,
)
MASK = "***"


def redact_secrets(value: Any) -> Any:
    """A copy of ``value`` where every field named like a secret has its value masked."""
    if isinstance(value, dict):
        return {
            key: MASK
            if isinstance(key, str) and SECRET_KEY_PATTERN.search(key) and item
            else redact_secrets(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact_secrets(item) for item in value]
    return value


def redact_tool_arguments(value: Any) -> Any:
    """A copy of ``value`` where secret fields inside any ``arguments`` object are masked."""
    if isinstance(value, dict):
        return {
            key: redact_secrets(item) if key == "arguments" else redact_tool_arguments(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact_tool_arguments(item) for item in value]
    return value
