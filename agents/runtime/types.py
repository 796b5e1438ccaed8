"""Data types and protocols shared by the agent loop, the model providers and the tools.

Content blocks are plain dicts so they can be stored as JSON unchanged:

* ``{"type": "text", "text": str}``
* ``{"type": "reasoning", "text": str, "signature": str | None}``
* ``{"type": "tool_call", "id": str, "name": str, "arguments": dict}``
* ``{"type": "tool_result", "tool_call_id": str, "content": str, "is_error": bool}``
* ``{"type": "image", "media_type": ImageMediaType, "data": str, "name": str, "width": int | None,
  "height": int | None, "size": int}``: ``data`` is the image's bytes in base64, ``size`` their length.
  Only user messages carry images; ``data`` goes to the model alone, transcripts and summaries show
  ``image_label`` and token estimates a fixed count.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

ContentBlock = dict[str, Any]
ChatRole = Literal["user", "assistant"]
ModelStopReason = Literal["end_turn", "tool_use", "max_tokens"]
# The image formats both Anthropic and OpenAI vision models accept.
ImageMediaType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]


def image_block(
    *, data: bytes, media_type: ImageMediaType, name: str, width: int | None = None, height: int | None = None
) -> ContentBlock:
    """An image content block from the image's bytes, encoded once here for every provider."""
    return {
        "type": "image",
        "media_type": media_type,
        "data": base64.b64encode(data).decode("ascii"),
        "name": name,
        "width": width,
        "height": height,
        "size": len(data),
    }


def image_label(block: ContentBlock) -> str:
    """An image block as text, without its data: ``[image: photo.png, 640x480, image/png]``."""
    width, height = block.get("width"), block.get("height")
    dimensions = f", {width}x{height}" if width and height else ""
    return f"[image: {block['name']}{dimensions}, {block['media_type']}]"


@dataclass(frozen=True)
class ChatMessage:
    """One turn of the conversation as the model sees it.

    Tool results travel in a ``user`` message, as both Anthropic and the loop expect.
    """

    role: ChatRole
    content: list[ContentBlock]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ModelRequest:
    model: str
    system: str
    messages: list[ChatMessage]
    tools: list[ToolSpec] = field(default_factory=list)
    max_tokens: int = 4096
    temperature: float | None = None
    timeout_seconds: float = 120.0


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }


# Events a model client yields while it streams one response.


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallRequested:
    """A complete tool call: yielded once its arguments have fully streamed."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ModelResponseCompleted:
    """Always the last event of a successful stream."""

    content: list[ContentBlock]
    stop_reason: ModelStopReason
    usage: Usage


ModelStreamEvent = TextDelta | ReasoningDelta | ToolCallRequested | ModelResponseCompleted

ModelErrorKind = Literal[
    "insufficient_credits",
    "no_price",
    "rate_limited",
    "overloaded",
    "server",
    "timeout",
    "connection",
    "context_overflow",
    "authentication",
    "bad_request",
]


class ModelError(Exception):
    """A model call that failed after the client's own retries.

    ``is_retryable`` tells transient failures (rate limits, overload, 5xx, timeouts)
    from final ones (bad request, authentication, context overflow).
    """

    def __init__(
        self, message: str, *, kind: ModelErrorKind, is_retryable: bool, status_code: int | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.is_retryable = is_retryable
        self.status_code = status_code


class StreamCancelled(Exception):
    """Raised by a model client when ``should_stop`` asked it to end its stream early.

    ``usage`` carries the tokens already spent when the provider reported them.
    """

    def __init__(self, usage: Usage | None = None) -> None:
        super().__init__("model stream cancelled")
        self.usage = usage or Usage()


class ModelClient(Protocol):
    """Streams one model response.

    ``should_stop`` is polled between chunks; when it returns True the client closes the
    HTTP stream (so the provider stops generating) and raises ``StreamCancelled``.
    Usage spent so far is reported through ``StreamCancelled.usage`` when known.
    """

    def stream(
        self, request: ModelRequest, *, should_stop: Callable[[], bool]
    ) -> Iterator[ModelStreamEvent]: ...


@runtime_checkable
class TokenCounter(Protocol):
    """A model client that can count a request's input tokens the way its provider does.

    Optional on a ``ModelClient``: ``agents.runtime.tokens`` estimates for clients without it.
    Raises ``ModelError`` when the provider cannot answer.
    """

    def count_tokens(self, request: ModelRequest) -> int: ...


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool call returns to the model. ``is_error`` results are shown to the model too."""

    content: str
    is_error: bool = False


class ToolProvider(Protocol):
    """The tools one run may use. Built-in, HTTP and MCP tools all arrive through this."""

    def specs(self) -> list[ToolSpec]: ...

    def timeout_for(self, name: str) -> float:
        """Seconds the loop waits for one call of tool ``name``."""
        ...

    def is_read_only(self, name: str) -> bool:
        """Whether tool ``name`` changes nothing, so running a call of it again is harmless."""
        ...

    def execute(self, call: ToolCallRequested, *, should_stop: Callable[[], bool]) -> ToolOutcome:
        """Run one call. May raise; the loop turns any exception into an error outcome."""
        ...


StepKind = Literal["model_call", "tool_call"]
StopRequestReason = Literal["cancelled", "timeout", "lease_lost", "shutdown"]


class RunRecorder(Protocol):
    """Where the loop records what happens. The Django side persists and publishes it."""

    def emit(self, event_type: str, data: dict[str, Any]) -> None:
        """Store and announce one event of the wire contract (DESIGN.md §4)."""
        ...

    def batch(self) -> AbstractContextManager[None]:
        """What is recorded inside is stored together when the block ends (one transaction).

        Only around code that does not wait: subscribers see batched events at the block's end.
        """
        ...

    def start_step(self, *, kind: StepKind, input: dict[str, Any]) -> str:
        """Open a Step and return its id."""
        ...

    def complete_step(self, step_id: str, *, output: dict[str, Any], usage: Usage | None = None) -> None: ...

    def fail_step(self, step_id: str, *, error: str, usage: Usage | None = None) -> None:
        """End a step that failed or stopped; ``usage``: the tokens a stopped model call spent."""
        ...

    def append_message(
        self, message: ChatMessage, *, usage: Usage | None = None, is_stopped: bool = False
    ) -> None:
        """Persist one transcript message (assistant turns and tool results); ``is_stopped``: an
        answer the run stopped while it streamed."""
        ...

    def completed_tool_result(self, tool_call_id: str) -> ToolOutcome | None:
        """The stored outcome of a tool call that already completed (crash recovery), if any."""
        ...

    def tool_call_was_interrupted(self, tool_call_id: str) -> bool:
        """An earlier attempt of the run started this call and never recorded its end."""
        ...

    def stop_requested(self) -> StopRequestReason | None:
        """Polled at every boundary and while waiting; must be cheap (no database read)."""
        ...

    def loop_ends(self, stop_reason: str) -> None:
        """Called inside the batch that records the loop's last model response, when that response
        ends the loop (``end_turn``, ``max_tokens``): nothing waits before the loop returns, so a
        recorder may store the run's end in the same transaction."""
        ...


ApprovalState = Literal["not_required", "approved", "denied", "refused", "pending", "asking", "waiting"]


@dataclass(frozen=True)
class ApprovalCheck:
    """``denied``: a person said no; ``refused``: the tool policy said no (``reason`` says why);
    ``asking``: the call's answer is the user's, who has not given it yet (ask_user);
    ``waiting``: the call's answer comes from work elsewhere (a sub-agent) that has not finished."""

    state: ApprovalState
    reason: str = ""


class ApprovalGate(Protocol):
    """Decides which tool calls may run now, before any runs.

    A ``pending`` call pauses the run until someone decides, an ``asking`` one until the user
    answers, a ``waiting`` one until its
    sub-agent ends; ``denied`` and ``refused`` calls are answered with an error result the
    model sees, and the run continues.
    """

    def check(self, calls: list[ToolCallRequested]) -> dict[str, ApprovalCheck]:
        """The state of each call by id; calls missing from the answer need no approval."""
        ...


CompactionReason = Literal["threshold", "overflow", "manual"]


@dataclass(frozen=True)
class CompactionRecord:
    """One compaction of the context (see ``agents.runtime.compaction``).

    ``kept_tail`` holds the newest messages of the old context, kept verbatim after the summary:
    the store maps them to its own rows to know which stored messages the summary replaces.
    ``summary`` is empty when summarizing failed and the oldest turns were dropped instead.
    """

    reason: CompactionReason
    summary: str
    is_fallback: bool
    kept_tail: list[ChatMessage]
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    usage: Usage
    error: str | None = None


@runtime_checkable
class CompactionRecorder(Protocol):
    """Optional on a ``RunRecorder``: persists each compaction (a snapshot) before its event is emitted."""

    def record_compaction(self, record: CompactionRecord) -> None: ...
