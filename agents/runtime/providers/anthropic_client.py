"""``ModelClient`` for the Anthropic Messages API, through the official SDK with streaming.

Thinking blocks come back as ``reasoning`` blocks with their signature and are sent back as
thinking blocks (redacted ones keep their opaque payload under ``redacted_data``). The SDK retries
429/5xx/529 itself, honouring ``retry-after``; what still fails becomes a ``ModelError``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import anthropic
import httpx2
from anthropic import types as sdk

from agents.runtime.providers.common import (
    arguments_for_replay,
    error_kind_for_status,
    model_error,
    model_error_for_transport,
    parse_tool_arguments,
    storable_event,
)
from agents.runtime.tokens import usage_of_stopped_stream
from agents.runtime.types import (
    ChatMessage,
    ContentBlock,
    ModelError,
    ModelRequest,
    ModelResponseCompleted,
    ModelStopReason,
    ModelStreamEvent,
    ReasoningDelta,
    StreamCancelled,
    TextDelta,
    ToolCallRequested,
    ToolSpec,
    Usage,
)

STOP_REASONS: dict[str, ModelStopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "pause_turn": "end_turn",
    "refusal": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
}
COUNT_TOKENS_TIMEOUT_SECONDS = 10.0
COUNT_TOKENS_MAX_RETRIES = 1


class AnthropicModelClient:
    """Streams Claude responses. Without ``base_url`` the SDK reads ``ANTHROPIC_BASE_URL``.

    ``request.timeout_seconds`` overrides ``timeout_seconds`` per call; for a stream it bounds the
    wait for each chunk, not the whole answer.
    """

    def __init__(
        self,
        api_key: str,
        base_url: str | None = None,
        max_retries: int = 3,
        timeout_seconds: float = 120.0,
        *,
        transport: httpx2.BaseTransport | None = None,
    ) -> None:
        # ``transport``: where connections go (one pinned to a checked address), with the SDK's defaults.
        http_client = (
            anthropic.DefaultHttpxClient(transport=transport, trust_env=False) if transport else None
        )
        self._client = anthropic.Anthropic(
            api_key=api_key,
            base_url=base_url,
            max_retries=max_retries,
            timeout=timeout_seconds,
            http_client=http_client,
        )
        # Counting only guides compaction, which has an estimate to fall back on: fail fast.
        self._counting_client = self._client.with_options(
            max_retries=COUNT_TOKENS_MAX_RETRIES, timeout=COUNT_TOKENS_TIMEOUT_SECONDS
        )

    def check_access(self) -> None:
        """One cheap authenticated call, the first entry of the model list: ``ModelError`` when it fails."""
        try:
            self._client.models.list(limit=1)
        except anthropic.APIError as error:
            raise _model_error(error) from error
        except httpx2.TransportError as error:
            raise model_error_for_transport(error) from error

    def count_tokens(self, request: ModelRequest) -> int:
        """The request's input tokens, from the Messages API's token-counting endpoint."""
        try:
            counted = self._counting_client.messages.count_tokens(
                model=request.model,
                system=request.system or anthropic.omit,
                messages=_messages_param(request),
                tools=[_tool_param(spec) for spec in request.tools] or anthropic.omit,
            )
        except anthropic.APIError as error:
            raise _model_error(error) from error
        except httpx2.TransportError as error:
            raise model_error_for_transport(error) from error
        return counted.input_tokens

    def stream(self, request: ModelRequest, *, should_stop: Callable[[], bool]) -> Iterator[ModelStreamEvent]:
        if should_stop():
            raise StreamCancelled()
        response = self._open_stream(request)
        accumulator = _MessageAccumulator()
        with response:
            try:
                for event in response:
                    if should_stop():
                        raise StreamCancelled(accumulator.stopped_usage(request))
                    yield from map(storable_event, accumulator.apply(event))
            except anthropic.APIError as error:
                raise _model_error(error) from error
            except httpx2.TransportError as error:
                raise model_error_for_transport(error) from error
        yield storable_event(accumulator.completed())

    def _open_stream(self, request: ModelRequest) -> anthropic.Stream[sdk.RawMessageStreamEvent]:
        """Send the request; the SDK's retries happen here, before the first event."""
        # This SDK version has no ``temperature`` argument, so it travels as an extra body field.
        extra_body = {"temperature": request.temperature} if request.temperature is not None else None
        try:
            return self._client.messages.create(
                model=request.model,
                max_tokens=request.max_tokens,
                system=request.system or anthropic.omit,
                messages=_messages_param(request),
                tools=[_tool_param(spec) for spec in request.tools] or anthropic.omit,
                extra_body=extra_body,
                timeout=request.timeout_seconds,
                stream=True,
            )
        except anthropic.APIError as error:
            raise _model_error(error) from error


# --- Request mapping --------------------------------------------------------------------------------


def _tool_param(spec: ToolSpec) -> sdk.ToolParam:
    return sdk.ToolParam(name=spec.name, description=spec.description, input_schema=spec.input_schema)


def _messages_param(request: ModelRequest) -> list[sdk.MessageParam]:
    """The API refuses tool blocks in a request that defines no tools (a synthesis, a summary):
    there, earlier tool calls and results travel as text."""
    if request.tools:
        return [_message_param(message) for message in request.messages]
    return [_message_param(message, block_param=_tool_block_as_text) for message in request.messages]


def _tool_block_as_text(block: ContentBlock) -> sdk.ContentBlockParam | None:
    if block["type"] == "tool_call":
        arguments = json.dumps(arguments_for_replay(block["arguments"]), ensure_ascii=False)
        return sdk.TextBlockParam(type="text", text=f"[called tool {block['name']} with {arguments}]")
    if block["type"] == "tool_result":
        outcome = "error" if block.get("is_error") else "result"
        return sdk.TextBlockParam(type="text", text=f"[tool {outcome}: {block['content']}]")
    return _content_block_param(block)


def _message_param(
    message: ChatMessage,
    block_param: Callable[[ContentBlock], sdk.ContentBlockParam | None] | None = None,
) -> sdk.MessageParam:
    convert = block_param or _content_block_param
    content = [param for param in map(convert, message.content) if param is not None]
    if message.role == "user":
        return sdk.UserMessageParam(role="user", content=content)
    return sdk.AssistantMessageParam(role="assistant", content=content)


def _content_block_param(block: ContentBlock) -> sdk.ContentBlockParam | None:
    """Our block in the API's shape; None for what the API would refuse (empty text, unsigned thinking)."""
    block_type = block["type"]
    if block_type == "text":
        return sdk.TextBlockParam(type="text", text=block["text"]) if block["text"] else None
    if block_type == "reasoning":
        return _reasoning_param(block)
    if block_type == "tool_call":
        arguments = arguments_for_replay(block["arguments"])
        return sdk.ToolUseBlockParam(type="tool_use", id=block["id"], name=block["name"], input=arguments)
    if block_type == "tool_result":
        return sdk.ToolResultBlockParam(
            type="tool_result",
            tool_use_id=block["tool_call_id"],
            content=block["content"],
            is_error=bool(block.get("is_error", False)),
        )
    if block_type == "image":
        source = sdk.Base64ImageSourceParam(type="base64", media_type=block["media_type"], data=block["data"])
        return sdk.ImageBlockParam(type="image", source=source)
    raise ValueError(f"unknown content block type: {block_type!r}")


def _reasoning_param(block: ContentBlock) -> sdk.ContentBlockParam | None:
    if block.get("redacted_data"):
        return sdk.RedactedThinkingBlockParam(type="redacted_thinking", data=block["redacted_data"])
    if block.get("signature"):
        return sdk.ThinkingBlockParam(type="thinking", thinking=block["text"], signature=block["signature"])
    return None


# --- Stream accumulation ----------------------------------------------------------------------------


@dataclass
class _OpenBlock:
    """A content block whose deltas are still streaming in."""

    kind: Literal["text", "reasoning", "tool_call"]
    parts: list[str] = field(default_factory=list)
    signature: str | None = None
    redacted_data: str | None = None
    tool_call_id: str = ""
    tool_name: str = ""
    initial_arguments: dict[str, object] = field(default_factory=dict)

    def to_content(self) -> ContentBlock:
        text = "".join(self.parts)
        if self.kind == "text":
            return {"type": "text", "text": text}
        if self.kind == "reasoning":
            block: ContentBlock = {"type": "reasoning", "text": text, "signature": self.signature}
            if self.redacted_data is not None:
                block["redacted_data"] = self.redacted_data
            return block
        arguments = parse_tool_arguments(text) if self.parts else dict(self.initial_arguments)
        return {"type": "tool_call", "id": self.tool_call_id, "name": self.tool_name, "arguments": arguments}


def _open_block(content_block: sdk.ContentBlock) -> _OpenBlock | None:
    if isinstance(content_block, sdk.TextBlock):
        return _OpenBlock(kind="text", parts=[content_block.text] if content_block.text else [])
    if isinstance(content_block, sdk.ThinkingBlock):
        return _OpenBlock(
            kind="reasoning", parts=[content_block.thinking], signature=content_block.signature or None
        )
    if isinstance(content_block, sdk.RedactedThinkingBlock):
        return _OpenBlock(kind="reasoning", redacted_data=content_block.data)
    if isinstance(content_block, sdk.ToolUseBlock):
        return _OpenBlock(
            kind="tool_call",
            tool_call_id=content_block.id,
            tool_name=content_block.name,
            initial_arguments=dict(content_block.input),
        )
    return None  # Server-side tool blocks: we define no server tools, so none should arrive.


class _MessageAccumulator:
    """Builds our content blocks and usage from the raw event stream, yielding our events as they happen."""

    def __init__(self) -> None:
        self.usage = Usage()
        self._open_blocks: dict[int, _OpenBlock] = {}
        self._content: dict[int, ContentBlock] = {}
        self._stop_reason: str | None = None
        self._is_finished = False
        self._streamed: list[str] = []

    def stopped_usage(self, request: ModelRequest) -> Usage:
        """The usage of a stream stopped now: ``message_delta``'s counts have not come yet."""
        return usage_of_stopped_stream(self.usage, request=request, streamed_text="".join(self._streamed))

    def apply(self, event: sdk.RawMessageStreamEvent) -> Iterator[ModelStreamEvent]:
        if isinstance(event, sdk.RawMessageStartEvent):
            self._start_usage(event.message.usage)
        elif isinstance(event, sdk.RawContentBlockStartEvent):
            block = _open_block(event.content_block)
            if block is not None:
                self._open_blocks[event.index] = block
        elif isinstance(event, sdk.RawContentBlockDeltaEvent):
            yield from self._apply_delta(event)
        elif isinstance(event, sdk.RawContentBlockStopEvent):
            yield from self._close_block(event.index)
        elif isinstance(event, sdk.RawMessageDeltaEvent):
            self._stop_reason = event.delta.stop_reason
            self._update_usage(event.usage)
        elif isinstance(event, sdk.RawMessageStopEvent):
            self._is_finished = True

    def completed(self) -> ModelResponseCompleted:
        if not self._is_finished:
            raise model_error("the model stream ended before message_stop", kind="connection")
        for index in list(self._open_blocks):
            for _ in self._close_block(index):
                pass
        content = [self._content[index] for index in sorted(self._content)]
        stop_reason = STOP_REASONS.get(self._stop_reason or "end_turn", "end_turn")
        return ModelResponseCompleted(content=content, stop_reason=stop_reason, usage=self.usage)

    def _apply_delta(self, event: sdk.RawContentBlockDeltaEvent) -> Iterator[ModelStreamEvent]:
        block = self._open_blocks.get(event.index)
        delta = event.delta
        if block is None:
            return
        self._streamed.append(_delta_text(delta))
        if isinstance(delta, sdk.TextDelta):
            block.parts.append(delta.text)
            yield TextDelta(text=delta.text)
        elif isinstance(delta, sdk.ThinkingDelta):
            block.parts.append(delta.thinking)
            yield ReasoningDelta(text=delta.thinking)
        elif isinstance(delta, sdk.SignatureDelta):
            block.signature = delta.signature
        elif isinstance(delta, sdk.InputJSONDelta):
            block.parts.append(delta.partial_json)

    def _close_block(self, index: int) -> Iterator[ModelStreamEvent]:
        block = self._open_blocks.pop(index, None)
        if block is None:
            return
        content = block.to_content()
        self._content[index] = content
        if content["type"] == "tool_call":
            yield ToolCallRequested(id=content["id"], name=content["name"], arguments=content["arguments"])

    def _start_usage(self, usage: sdk.Usage) -> None:
        self.usage = Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_input_tokens or 0,
            cache_write_tokens=usage.cache_creation_input_tokens or 0,
        )

    def _update_usage(self, usage: sdk.MessageDeltaUsage) -> None:
        """``message_delta`` counts are cumulative; absent ones keep their ``message_start`` value."""
        self.usage.output_tokens = usage.output_tokens
        if usage.input_tokens is not None:
            self.usage.input_tokens = usage.input_tokens
        if usage.cache_read_input_tokens is not None:
            self.usage.cache_read_tokens = usage.cache_read_input_tokens
        if usage.cache_creation_input_tokens is not None:
            self.usage.cache_write_tokens = usage.cache_creation_input_tokens


def _delta_text(delta: sdk.RawContentBlockDelta) -> str:
    """The characters a delta adds to the output (a signature is no output)."""
    if isinstance(delta, sdk.TextDelta):
        return delta.text
    if isinstance(delta, sdk.ThinkingDelta):
        return delta.thinking
    if isinstance(delta, sdk.InputJSONDelta):
        return delta.partial_json
    return ""


# --- Errors -----------------------------------------------------------------------------------------


def _model_error(error: anthropic.APIError) -> ModelError:
    if isinstance(error, anthropic.APITimeoutError):
        return model_error(error.message, kind="timeout")
    if isinstance(error, anthropic.APIConnectionError):
        return model_error(error.message, kind="connection")
    if isinstance(error, anthropic.APIStatusError):
        # An ``error`` event inside a stream arrives with the stream's own status, 200.
        description = error.api_message or error.message
        kind = error_kind_for_status(error.status_code, error_type=error.type, description=description)
        status_code = error.status_code if error.status_code >= 400 else None
        return model_error(description, kind=kind, status_code=status_code)
    return model_error(error.message, kind="server")
