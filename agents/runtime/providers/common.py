"""What both model clients share: tool-argument parsing and the classification of failures."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import httpx2

from agents.runtime.types import (
    ModelError,
    ModelErrorKind,
    ModelResponseCompleted,
    ModelStreamEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallRequested,
)
from core.storable import storable, storable_text

RAW_ARGUMENTS_KEY = "_raw_arguments"
"""Tool arguments that are not a JSON object arrive as ``{RAW_ARGUMENTS_KEY: "<the raw text>"}``.

The call still reaches the tool layer, whose schema validation reports the problem back to the model.
"""

RETRYABLE_KINDS: frozenset[ModelErrorKind] = frozenset(
    {"rate_limited", "overloaded", "server", "timeout", "connection"}
)
CONTEXT_OVERFLOW_MARKERS = ("prompt is too long", "context_length_exceeded", "maximum context length")


def parse_tool_arguments(raw_arguments: str) -> dict[str, Any]:
    """The arguments as a dict; an empty string means no arguments."""
    if not raw_arguments.strip():
        return {}
    try:
        arguments = json.loads(raw_arguments)
    except ValueError:
        return {RAW_ARGUMENTS_KEY: raw_arguments}
    return arguments if isinstance(arguments, dict) else {RAW_ARGUMENTS_KEY: raw_arguments}


def arguments_for_replay(arguments: dict[str, Any]) -> dict[str, Any]:
    """Arguments to send back to a provider: unparseable ones are replayed as no arguments."""
    return {} if RAW_ARGUMENTS_KEY in arguments else arguments


def model_error(message: str, *, kind: ModelErrorKind, status_code: int | None = None) -> ModelError:
    return ModelError(message, kind=kind, is_retryable=kind in RETRYABLE_KINDS, status_code=status_code)


def error_kind_for_status(status_code: int, *, error_type: str | None, description: str) -> ModelErrorKind:
    """Classify an HTTP error answer (or an error event inside a stream, which has status 200)."""
    lowered = description.lower()
    if status_code in (400, 413) and any(marker in lowered for marker in CONTEXT_OVERFLOW_MARKERS):
        return "context_overflow"
    if error_type == "insufficient_quota":  # OpenAI answers 429 for an exhausted balance: not transient.
        return "bad_request"
    if status_code == 429 or error_type in ("rate_limit_error", "rate_limit_exceeded"):
        return "rate_limited"
    if status_code == 529 or error_type == "overloaded_error":
        return "overloaded"
    if status_code in (401, 403) or error_type in ("authentication_error", "permission_error"):
        return "authentication"
    if status_code == 408:
        return "timeout"
    if status_code >= 500:
        return "server"
    if status_code >= 400 or error_type == "invalid_request_error":
        return "bad_request"
    return "server"


def model_error_for_transport(error: httpx2.TransportError) -> ModelError:
    """A network failure while reading a stream that the SDK did not wrap."""
    kind: ModelErrorKind = "timeout" if isinstance(error, httpx2.TimeoutException) else "connection"
    return model_error(f"model stream interrupted: {error!r}", kind=kind)


def storable_event(event: ModelStreamEvent) -> ModelStreamEvent:
    """The event with the text it carries storable on both databases (core.storable): a model's
    answer can hold a NUL that PostgreSQL would refuse, failing the run at its next write."""
    if isinstance(event, TextDelta | ReasoningDelta):
        return replace(event, text=storable_text(event.text))
    if isinstance(event, ToolCallRequested):
        return replace(event, arguments=storable(event.arguments))
    if isinstance(event, ModelResponseCompleted):
        return replace(event, content=storable(event.content))
    return event
