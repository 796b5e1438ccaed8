"""``ModelClient`` for OpenAI Chat Completions and compatible endpoints (Ollama, vLLM, DeepSeek…).

Reasoning blocks are not sent back (the API has no place for them); ``reasoning_content`` /
``reasoning`` deltas that compatible servers stream are surfaced as ``ReasoningDelta``.
Usage follows Anthropic's meaning, so totals add up across providers: ``input_tokens`` excludes
the cached and cache-written prompt tokens that ``prompt_tokens`` includes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import httpx2
import openai
from openai.types import CompletionUsage
from openai.types import chat as sdk
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from openai.types.shared_params import FunctionDefinition

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

MaxTokensParameter = Literal["max_completion_tokens", "max_tokens"]

FINISH_REASONS: dict[str, ModelStopReason] = {
    "stop": "end_turn",
    "content_filter": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}
REASONING_DELTA_FIELDS = ("reasoning_content", "reasoning")


class OpenAIModelClient:
    """Streams chat completions.

    ``request.timeout_seconds`` overrides ``timeout_seconds`` per call; for a stream it bounds the
    wait for each chunk, not the whole answer.
    ``max_tokens_parameter``: OpenAI's current models take ``max_completion_tokens``; some compatible
    servers only understand the older ``max_tokens``.
    """

    def __init__(
        self,
        api_key: str,
        base_url: str | None = None,
        max_retries: int = 3,
        timeout_seconds: float = 120.0,
        *,
        max_tokens_parameter: MaxTokensParameter = "max_completion_tokens",
        transport: httpx2.BaseTransport | None = None,
    ) -> None:
        # ``transport``: where connections go (one pinned to a checked address), with the SDK's defaults.
        http_client = openai.DefaultHttpxClient(transport=transport, trust_env=False) if transport else None
        self._client = openai.OpenAI(
            api_key=api_key,
            base_url=base_url,
            max_retries=max_retries,
            timeout=timeout_seconds,
            http_client=http_client,
        )
        self._max_tokens_parameter = max_tokens_parameter

    def check_access(self) -> None:
        """One cheap authenticated call, the model list: ``ModelError`` when it fails."""
        try:
            self._client.models.list()
        except openai.APIError as error:
            raise _model_error(error) from error
        except httpx2.TransportError as error:
            raise model_error_for_transport(error) from error

    def stream(self, request: ModelRequest, *, should_stop: Callable[[], bool]) -> Iterator[ModelStreamEvent]:
        if should_stop():
            raise StreamCancelled()
        response = self._open_stream(request)
        accumulator = _ChunkAccumulator()
        with response:
            try:
                for chunk in response:
                    if should_stop():
                        raise StreamCancelled(accumulator.stopped_usage(request))
                    yield from map(storable_event, accumulator.apply(chunk))
            except openai.APIError as error:
                raise _model_error(error) from error
            except httpx2.TransportError as error:
                raise model_error_for_transport(error) from error
        yield from map(storable_event, accumulator.finish_tool_calls())
        yield storable_event(accumulator.completed())

    def _open_stream(self, request: ModelRequest) -> openai.Stream[sdk.ChatCompletionChunk]:
        """Send the request; the SDK's retries happen here, before the first chunk."""
        is_completion_tokens = self._max_tokens_parameter == "max_completion_tokens"
        try:
            return self._client.chat.completions.create(
                model=request.model,
                messages=_messages(request),
                tools=[_tool_param(spec) for spec in request.tools] or openai.omit,
                max_completion_tokens=request.max_tokens if is_completion_tokens else openai.omit,
                max_tokens=openai.omit if is_completion_tokens else request.max_tokens,
                temperature=request.temperature if request.temperature is not None else openai.omit,
                stream=True,
                stream_options={"include_usage": True},
                timeout=request.timeout_seconds,
            )
        except openai.APIError as error:
            raise _model_error(error) from error


# --- Request mapping --------------------------------------------------------------------------------


def _tool_param(spec: ToolSpec) -> sdk.ChatCompletionFunctionToolParam:
    function = FunctionDefinition(name=spec.name, description=spec.description, parameters=spec.input_schema)
    return sdk.ChatCompletionFunctionToolParam(type="function", function=function)


def _messages(request: ModelRequest) -> list[sdk.ChatCompletionMessageParam]:
    messages: list[sdk.ChatCompletionMessageParam] = []
    if request.system:
        messages.append(sdk.ChatCompletionSystemMessageParam(role="system", content=request.system))
    for message in request.messages:
        if message.role == "user":
            messages.extend(_user_messages(message))
        else:
            messages.append(_assistant_message(message))
    return messages


def _user_messages(message: ChatMessage) -> list[sdk.ChatCompletionMessageParam]:
    """Tool results become ``tool`` messages, which must directly follow the assistant's tool calls."""
    messages: list[sdk.ChatCompletionMessageParam] = []
    for block in message.content:
        if block["type"] == "tool_result":
            content = f"Error: {block['content']}" if block.get("is_error") else block["content"]
            messages.append(
                sdk.ChatCompletionToolMessageParam(
                    role="tool", tool_call_id=block["tool_call_id"], content=content
                )
            )
    if any(block["type"] == "image" for block in message.content):
        messages.append(sdk.ChatCompletionUserMessageParam(role="user", content=_content_parts(message)))
    elif text := _joined_text(message):
        messages.append(sdk.ChatCompletionUserMessageParam(role="user", content=text))
    return messages


def _content_parts(message: ChatMessage) -> list[sdk.ChatCompletionContentPartParam]:
    """Text and images in their order: images need the list-of-parts form of a user message."""
    parts: list[sdk.ChatCompletionContentPartParam] = []
    for block in message.content:
        if block["type"] == "text" and block["text"]:
            parts.append(sdk.ChatCompletionContentPartTextParam(type="text", text=block["text"]))
        elif block["type"] == "image":
            url = f"data:{block['media_type']};base64,{block['data']}"
            parts.append(sdk.ChatCompletionContentPartImageParam(type="image_url", image_url={"url": url}))
    return parts


def _assistant_message(message: ChatMessage) -> sdk.ChatCompletionAssistantMessageParam:
    assistant = sdk.ChatCompletionAssistantMessageParam(
        role="assistant", content=_joined_text(message) or None
    )
    tool_calls = [
        sdk.ChatCompletionMessageFunctionToolCallParam(
            id=block["id"],
            type="function",
            function={
                "name": block["name"],
                "arguments": json.dumps(arguments_for_replay(block["arguments"])),
            },
        )
        for block in message.content
        if block["type"] == "tool_call"
    ]
    if tool_calls:
        assistant["tool_calls"] = tool_calls
    return assistant


def _joined_text(message: ChatMessage) -> str:
    return "\n\n".join(
        block["text"] for block in message.content if block["type"] == "text" and block["text"]
    )


# --- Stream accumulation ----------------------------------------------------------------------------


@dataclass
class _PendingToolCall:
    id: str = ""
    name: str = ""
    argument_parts: list[str] = field(default_factory=list)


class _ChunkAccumulator:
    """Builds our content blocks and usage from the chunks, yielding our events as they happen.

    Tool calls are complete once the choice reports its finish reason (or the stream ends without one).
    """

    def __init__(self) -> None:
        self.usage = Usage()
        self._text_parts: list[str] = []
        self._reasoning_parts: list[str] = []
        self._pending_tool_calls: dict[int, _PendingToolCall] = {}
        self._tool_calls: list[ContentBlock] = []
        self._finish_reason: str | None = None

    def stopped_usage(self, request: ModelRequest) -> Usage:
        """The usage of a stream stopped now: the usage chunk comes last, so it has not come yet."""
        streamed = [*self._reasoning_parts, *self._text_parts]
        for pending in self._pending_tool_calls.values():
            streamed.extend(pending.argument_parts)
        for block in self._tool_calls:
            streamed.append(json.dumps(block["arguments"], ensure_ascii=False))
        return usage_of_stopped_stream(self.usage, request=request, streamed_text="".join(streamed))

    def apply(self, chunk: sdk.ChatCompletionChunk) -> Iterator[ModelStreamEvent]:
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        for choice in chunk.choices:
            if choice.index == 0:
                yield from self._apply_delta(choice.delta)
                if choice.finish_reason is not None:
                    self._finish_reason = choice.finish_reason
                    yield from self.finish_tool_calls()

    def finish_tool_calls(self) -> Iterator[ToolCallRequested]:
        for index in sorted(self._pending_tool_calls):
            pending = self._pending_tool_calls[index]
            arguments = parse_tool_arguments("".join(pending.argument_parts))
            self._tool_calls.append(
                {"type": "tool_call", "id": pending.id, "name": pending.name, "arguments": arguments}
            )
            yield ToolCallRequested(id=pending.id, name=pending.name, arguments=arguments)
        self._pending_tool_calls.clear()

    def completed(self) -> ModelResponseCompleted:
        content: list[ContentBlock] = []
        if self._reasoning_parts:
            content.append({"type": "reasoning", "text": "".join(self._reasoning_parts), "signature": None})
        if self._text_parts:
            content.append({"type": "text", "text": "".join(self._text_parts)})
        content.extend(self._tool_calls)
        return ModelResponseCompleted(content=content, stop_reason=self._stop_reason(), usage=self.usage)

    def _stop_reason(self) -> ModelStopReason:
        stop_reason = FINISH_REASONS.get(self._finish_reason or "stop", "end_turn")
        # Some compatible servers answer "stop" even when the turn ends in tool calls.
        if stop_reason == "end_turn" and self._tool_calls:
            return "tool_use"
        return stop_reason

    def _apply_delta(self, delta: ChoiceDelta) -> Iterator[ModelStreamEvent]:
        reasoning = _reasoning_text(delta)
        if reasoning:
            self._reasoning_parts.append(reasoning)
            yield ReasoningDelta(text=reasoning)
        if delta.content:
            self._text_parts.append(delta.content)
            yield TextDelta(text=delta.content)
        for tool_call_delta in delta.tool_calls or []:
            pending = self._pending_tool_calls.setdefault(tool_call_delta.index, _PendingToolCall())
            pending.id = tool_call_delta.id or pending.id
            function = tool_call_delta.function
            if function is not None:
                pending.name = function.name or pending.name
                if function.arguments:
                    pending.argument_parts.append(function.arguments)


def _reasoning_text(delta: ChoiceDelta) -> str:
    extra = delta.model_extra or {}
    for field_name in REASONING_DELTA_FIELDS:
        value = extra.get(field_name)
        if isinstance(value, str) and value:
            return value
    return ""


def _usage(usage: CompletionUsage) -> Usage:
    details = usage.prompt_tokens_details
    cache_read = (details.cached_tokens or 0) if details else 0
    cache_write = (details.cache_write_tokens or 0) if details else 0
    return Usage(
        input_tokens=max(0, usage.prompt_tokens - cache_read - cache_write),
        output_tokens=usage.completion_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


# --- Errors -----------------------------------------------------------------------------------------


def _model_error(error: openai.APIError) -> ModelError:
    if isinstance(error, openai.APITimeoutError):
        return model_error(error.message, kind="timeout")
    if isinstance(error, openai.APIConnectionError):
        return model_error(error.message, kind="connection")
    # An error object inside a stream raises a plain APIError: no status, classified by its type.
    status_code = error.status_code if isinstance(error, openai.APIStatusError) else None
    description = f"{error.code or ''} {error.message}".strip()
    error_type = error.code if error.code in ("insufficient_quota", "rate_limit_exceeded") else error.type
    kind = error_kind_for_status(status_code or 200, error_type=error_type, description=description)
    return model_error(error.message, kind=kind, status_code=status_code)
