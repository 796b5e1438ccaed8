"""The Anthropic and OpenAI model clients, through the real SDKs, against the local fake model server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Literal

import pytest

from agents.runtime.providers.anthropic_client import AnthropicModelClient
from agents.runtime.providers.common import RAW_ARGUMENTS_KEY
from agents.runtime.providers.openai_client import OpenAIModelClient
from agents.runtime.tokens import estimate_request_tokens
from agents.runtime.types import (
    ChatMessage,
    ModelClient,
    ModelError,
    ModelRequest,
    ModelResponseCompleted,
    ModelStreamEvent,
    ReasoningDelta,
    StreamCancelled,
    TextDelta,
    ToolCallRequested,
    ToolSpec,
    Usage,
)
from tests.fake_model_server import FakeModelServer, Turn

Provider = Literal["anthropic", "openai"]
PROVIDERS: list[Provider] = ["anthropic", "openai"]
TOOL_CALL_ID_PREFIXES = {"anthropic": "toolu_", "openai": "call_"}

HELLO = ModelRequest(
    model="test-model",
    system="You are terse.",
    messages=[ChatMessage(role="user", content=[{"type": "text", "text": "Hi"}])],
    timeout_seconds=10.0,
)
WEATHER_TOOL = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as fake:
        yield fake


def client_for(
    provider: Provider, server: FakeModelServer, *, max_retries: int = 3, timeout_seconds: float = 10.0
) -> ModelClient:
    if provider == "anthropic":
        return AnthropicModelClient(
            "test-key", base_url=server.url, max_retries=max_retries, timeout_seconds=timeout_seconds
        )
    return OpenAIModelClient(
        "test-key", base_url=server.openai_base_url, max_retries=max_retries, timeout_seconds=timeout_seconds
    )


def never() -> bool:
    return False


def collect(
    client: ModelClient, request: ModelRequest = HELLO, should_stop: Callable[[], bool] = never
) -> list[ModelStreamEvent]:
    return list(client.stream(request, should_stop=should_stop))


def completed(events: list[ModelStreamEvent]) -> ModelResponseCompleted:
    last = events[-1]
    assert isinstance(last, ModelResponseCompleted)
    assert not any(isinstance(event, ModelResponseCompleted) for event in events[:-1])
    return last


@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_streams_as_deltas_that_concatenate_to_the_final_text(
    provider: Provider, server: FakeModelServer
) -> None:
    server.script(Turn(text="The quick brown fox jumps.", chunk_size=5, usage=(12, 7, 0, 0)))

    events = collect(client_for(provider, server))

    assert events[:-1] == [TextDelta(text) for text in ["The q", "uick ", "brown", " fox ", "jumps", "."]]
    assert completed(events) == ModelResponseCompleted(
        content=[{"type": "text", "text": "The quick brown fox jumps."}],
        stop_reason="end_turn",
        usage=Usage(input_tokens=12, output_tokens=7),
    )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_one_tool_call_is_requested_once_its_arguments_are_complete(
    provider: Provider, server: FakeModelServer
) -> None:
    server.script(Turn(tool_calls=[("get_weather", {"city": "Paris", "days": 3})]))

    events = collect(client_for(provider, server))

    assert len(events) == 2
    call = events[0]
    assert isinstance(call, ToolCallRequested)
    assert call.id.startswith(TOOL_CALL_ID_PREFIXES[provider])
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris", "days": 3})
    result = completed(events)
    assert result.content == [
        {"type": "tool_call", "id": call.id, "name": "get_weather", "arguments": {"city": "Paris", "days": 3}}
    ]
    assert result.stop_reason == "tool_use"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_two_tool_calls_in_one_turn_keep_their_order_and_ids(
    provider: Provider, server: FakeModelServer
) -> None:
    server.script(
        Turn(
            text="Checking both.",
            tool_calls=[("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})],
        )
    )

    events = collect(client_for(provider, server))

    calls = [event for event in events if isinstance(event, ToolCallRequested)]
    assert [(call.name, call.arguments) for call in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert calls[0].id != calls[1].id
    result = completed(events)
    assert result.content == [
        {"type": "text", "text": "Checking both."},
        {"type": "tool_call", "id": calls[0].id, "name": "get_weather", "arguments": {"city": "Paris"}},
        {"type": "tool_call", "id": calls[1].id, "name": "get_weather", "arguments": {"city": "Oslo"}},
    ]
    assert result.stop_reason == "tool_use"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_malformed_tool_arguments_are_kept_raw(provider: Provider, server: FakeModelServer) -> None:
    server.script(Turn(tool_calls=[("get_weather", '{"city": "Par')]))

    events = collect(client_for(provider, server))

    call = events[0]
    assert isinstance(call, ToolCallRequested)
    assert call.arguments == {RAW_ARGUMENTS_KEY: '{"city": "Par'}


def test_anthropic_thinking_streams_reasoning_and_keeps_its_signature(server: FakeModelServer) -> None:
    server.script(
        Turn(thinking="Paris is in France.", thinking_signature="sig-123", text="Sunny.", chunk_size=6)
    )

    events = collect(client_for("anthropic", server))

    assert events[:-1] == [
        ReasoningDelta("Paris "),
        ReasoningDelta("is in "),
        ReasoningDelta("France"),
        ReasoningDelta("."),
        TextDelta("Sunny."),
    ]
    assert completed(events).content == [
        {"type": "reasoning", "text": "Paris is in France.", "signature": "sig-123"},
        {"type": "text", "text": "Sunny."},
    ]


def test_openai_compatible_reasoning_content_becomes_an_unsigned_reasoning_block(
    server: FakeModelServer,
) -> None:
    server.script(Turn(thinking="Hmm.", text="Sunny."))

    events = collect(client_for("openai", server))

    assert events[:-1] == [ReasoningDelta("Hmm."), TextDelta("Sunny.")]
    assert completed(events).content == [
        {"type": "reasoning", "text": "Hmm.", "signature": None},
        {"type": "text", "text": "Sunny."},
    ]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_usage_is_exact_including_cache_tokens(provider: Provider, server: FakeModelServer) -> None:
    server.script(Turn(text="ok", usage=(1200, 345, 800, 64)))

    events = collect(client_for(provider, server))

    assert completed(events).usage == Usage(
        input_tokens=1200, output_tokens=345, cache_read_tokens=800, cache_write_tokens=64
    )


@pytest.mark.parametrize(("provider", "stop_reason"), [("anthropic", "max_tokens"), ("openai", "length")])
def test_a_truncated_answer_stops_with_max_tokens(
    provider: Provider, stop_reason: str, server: FakeModelServer
) -> None:
    server.script(Turn(text="Once upon a", stop_reason=stop_reason))

    events = collect(client_for(provider, server))

    assert completed(events).stop_reason == "max_tokens"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_rate_limit_is_retried_by_the_sdk(provider: Provider, server: FakeModelServer) -> None:
    server.script(Turn(error_status=429), Turn(text="ok"))

    events = collect(client_for(provider, server, max_retries=3))

    assert completed(events).content == [{"type": "text", "text": "ok"}]
    assert len(server.requests) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(("status", "kind"), [(529, "overloaded"), (500, "server"), (429, "rate_limited")])
def test_a_provider_that_keeps_failing_raises_a_retryable_error_after_the_retries(
    provider: Provider, status: int, kind: str, server: FakeModelServer
) -> None:
    server.set_default(Turn(error_status=status))

    with pytest.raises(ModelError) as raised:
        collect(client_for(provider, server, max_retries=1))

    assert (raised.value.kind, raised.value.is_retryable, raised.value.status_code) == (kind, True, status)
    assert len(server.requests) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_context_overflow_is_final_and_not_retried(provider: Provider, server: FakeModelServer) -> None:
    server.set_default(Turn(error_kind="context_overflow"))

    with pytest.raises(ModelError) as raised:
        collect(client_for(provider, server))

    assert (raised.value.kind, raised.value.is_retryable, raised.value.status_code) == (
        "context_overflow",
        False,
        400,
    )
    assert len(server.requests) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("status", "kind"), [(401, "authentication"), (403, "authentication"), (400, "bad_request")]
)
def test_client_errors_are_final(provider: Provider, status: int, kind: str, server: FakeModelServer) -> None:
    server.set_default(Turn(error_status=status))

    with pytest.raises(ModelError) as raised:
        collect(client_for(provider, server))

    assert (raised.value.kind, raised.value.is_retryable, raised.value.status_code) == (kind, False, status)
    assert len(server.requests) == 1


@pytest.mark.parametrize(("provider", "kind"), [("anthropic", "overloaded"), ("openai", "server")])
def test_an_error_event_mid_stream_raises_a_retryable_error(
    provider: Provider, kind: str, server: FakeModelServer
) -> None:
    server.script(Turn(text="partial answer", chunk_size=7, error_kind="mid_stream"))
    events: list[ModelStreamEvent] = []

    with pytest.raises(ModelError) as raised:
        for event in client_for(provider, server).stream(HELLO, should_stop=never):
            events.append(event)

    assert events == [TextDelta("partial"), TextDelta(" answer")]
    assert (raised.value.kind, raised.value.is_retryable, raised.value.status_code) == (kind, True, None)
    assert len(server.requests) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stalled_stream_times_out(provider: Provider, server: FakeModelServer) -> None:
    server.script(Turn(text="slow answer", chunk_size=2, chunk_delay=3.0))
    request = ModelRequest(model="test-model", system="", messages=HELLO.messages, timeout_seconds=0.3)

    started = time.monotonic()
    with pytest.raises(ModelError) as raised:
        collect(client_for(provider, server, max_retries=0), request)

    assert time.monotonic() - started < 2.0
    assert (raised.value.kind, raised.value.is_retryable) == ("timeout", True)


@pytest.mark.parametrize(
    ("provider", "input_tokens_so_far"),
    # Anthropic counts the input in its first event; OpenAI only in its last: estimated instead.
    [("anthropic", 10), ("openai", estimate_request_tokens(HELLO))],
)
def test_cancelling_mid_stream_closes_the_connection_and_counts_what_streamed(
    provider: Provider, input_tokens_so_far: int, server: FakeModelServer
) -> None:
    server.script(Turn(text="x" * 200, chunk_size=1, chunk_delay=0.05))
    stop = threading.Event()
    stop_requested_at: list[float] = []
    events: list[ModelStreamEvent] = []

    with pytest.raises(StreamCancelled) as raised:
        for event in client_for(provider, server).stream(HELLO, should_stop=stop.is_set):
            events.append(event)
            if len(events) == 12:
                stop_requested_at.append(time.monotonic())
                stop.set()

    assert time.monotonic() - stop_requested_at[0] < 1.0
    assert events == [TextDelta("x")] * 12
    # Twelve characters streamed: at least three tokens of output, whatever the provider said so far.
    assert raised.value.usage == Usage(input_tokens=input_tokens_so_far, output_tokens=3)
    assert server.wait_for_closed_streams(1, timeout=2.0) == 1
    time.sleep(0.1)
    assert server.closed_streams == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stop_requested_before_the_call_sends_nothing(provider: Provider, server: FakeModelServer) -> None:
    with pytest.raises(StreamCancelled):
        collect(client_for(provider, server), should_stop=lambda: True)

    assert server.requests == []


CONVERSATION = ModelRequest(
    model="test-model",
    system="You are a weather bot.",
    messages=[
        ChatMessage(role="user", content=[{"type": "text", "text": "Weather in Paris and Oslo?"}]),
        ChatMessage(
            role="assistant",
            content=[
                {"type": "reasoning", "text": "Two cities.", "signature": "sig-1"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_call", "id": "call-1", "name": "get_weather", "arguments": {"city": "Paris"}},
                {"type": "tool_call", "id": "call-2", "name": "get_weather", "arguments": {"city": "Oslo"}},
            ],
        ),
        ChatMessage(
            role="user",
            content=[
                {
                    "type": "tool_result",
                    "tool_call_id": "call-1",
                    "content": "18°C, sunny",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_call_id": "call-2",
                    "content": "city not found",
                    "is_error": True,
                },
            ],
        ),
    ],
    tools=[WEATHER_TOOL],
    max_tokens=321,
    temperature=0.3,
)


def sent_body(server: FakeModelServer, provider: Provider) -> dict[str, Any]:
    server.script(Turn(text="Paris is sunny."))
    collect(client_for(provider, server), CONVERSATION)
    (request,) = server.requests
    return request.body


def test_an_anthropic_request_without_tools_sends_earlier_tool_turns_as_text(server: FakeModelServer) -> None:
    """The Messages API refuses tool blocks in a request that defines no tools (a synthesis)."""
    server.script(Turn(text="Paris is sunny."))
    collect(client_for("anthropic", server), replace(CONVERSATION, tools=[]))

    (request,) = server.requests
    assert "tools" not in request.body
    assert request.body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Two cities.", "signature": "sig-1"},
                {"type": "text", "text": "Let me check."},
                {"type": "text", "text": '[called tool get_weather with {"city": "Paris"}]'},
                {"type": "text", "text": '[called tool get_weather with {"city": "Oslo"}]'},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "[tool result: 18°C, sunny]"},
                {"type": "text", "text": "[tool error: city not found]"},
            ],
        },
    ]


def test_anthropic_request_carries_system_tools_and_tool_results(server: FakeModelServer) -> None:
    body = sent_body(server, "anthropic")

    assert server.requests[0].path == "/v1/messages"
    assert server.requests[0].headers["authorization"] == "Bearer test-key"
    assert body == {
        "model": "test-model",
        "max_tokens": 321,
        "stream": True,
        "temperature": 0.3,
        "system": "You are a weather bot.",
        "tools": [
            {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "input_schema": WEATHER_TOOL.input_schema,
            }
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Oslo?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Two cities.", "signature": "sig-1"},
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "call-1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "call-2", "name": "get_weather", "input": {"city": "Oslo"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call-1",
                        "content": "18°C, sunny",
                        "is_error": False,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "call-2",
                        "content": "city not found",
                        "is_error": True,
                    },
                ],
            },
        ],
    }


def test_openai_request_carries_system_tools_and_tool_messages(server: FakeModelServer) -> None:
    body = sent_body(server, "openai")

    assert server.requests[0].path == "/v1/chat/completions"
    assert server.requests[0].headers["authorization"] == "Bearer test-key"
    assert body == {
        "model": "test-model",
        "max_completion_tokens": 321,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.3,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "parameters": WEATHER_TOOL.input_schema,
                },
            }
        ],
        "messages": [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": "Weather in Paris and Oslo?"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {
                        "id": "call-1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {
                        "id": "call-2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call-1", "content": "18°C, sunny"},
            {"role": "tool", "tool_call_id": "call-2", "content": "Error: city not found"},
        ],
    }


def test_openai_client_can_send_the_legacy_max_tokens_field(server: FakeModelServer) -> None:
    server.script(Turn(text="ok"))
    client = OpenAIModelClient("test-key", base_url=server.openai_base_url, max_tokens_parameter="max_tokens")

    collect(client, HELLO)

    body = server.requests[0].body
    assert (body["max_tokens"], "max_completion_tokens" in body) == (4096, False)
