"""The fake model server itself: wire format, scripting, and standalone mode."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.fake_model_server import FakeModelServer, Turn

FAKE_SERVER_SCRIPT = Path(__file__).resolve().parents[1] / "fake_model_server.py"


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as fake:
        yield fake


def post(connection: http.client.HTTPConnection, path: str, body: dict[str, Any]) -> http.client.HTTPResponse:
    connection.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json"})
    return connection.getresponse()


def connect(server: FakeModelServer) -> http.client.HTTPConnection:
    host, port = server.url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=5)


def sse_events(response: http.client.HTTPResponse) -> list[tuple[str | None, str]]:
    """(event name, data) pairs of a whole SSE body."""
    events = []
    for frame in response.read().decode().split("\n\n"):
        if not frame:
            continue
        fields = dict(line.split(": ", 1) for line in frame.split("\n"))
        events.append((fields.get("event"), fields["data"]))
    return events


def user_says(text: str) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": text}]}


def test_anthropic_stream_follows_the_real_event_sequence(server: FakeModelServer) -> None:
    server.script(Turn(thinking="Hm.", text="Hi!", tool_calls=[("lookup", {"query": "weather in Paris"})]))

    response = post(connect(server), "/v1/messages", {**user_says("hello"), "stream": True})
    events = sse_events(response)

    assert response.getheader("content-type") == "text/event-stream; charset=utf-8"
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "ping",
        *["content_block_start", "content_block_delta", "content_block_delta", "content_block_stop"],
        *["content_block_start", "content_block_delta", "content_block_stop"],
        *["content_block_start", *["content_block_delta"] * 4, "content_block_stop"],
        "message_delta",
        "message_stop",
    ]
    deltas = [json.loads(data)["delta"] for name, data in events if name == "content_block_delta"]
    assert deltas[:3] == [
        {"type": "thinking_delta", "thinking": "Hm."},
        {"type": "signature_delta", "signature": "fake-signature"},
        {"type": "text_delta", "text": "Hi!"},
    ]
    partial_json = [delta["partial_json"] for delta in deltas[3:]]
    assert partial_json[0] == ""
    assert json.loads("".join(partial_json)) == {"query": "weather in Paris"}
    assert json.loads(events[-2][1])["delta"]["stop_reason"] == "tool_use"


def test_openai_stream_splits_tool_arguments_and_ends_with_usage_and_done(server: FakeModelServer) -> None:
    server.script(Turn(tool_calls=[("a", {"x": 1}), ("b", {"y": 2})], usage=(5, 3, 2, 0)))

    body = {**user_says("hi"), "stream": True, "stream_options": {"include_usage": True}}
    events = sse_events(post(connect(server), "/v1/chat/completions", body))

    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(data) for _, data in events[:-1]]
    tool_deltas = [chunk["choices"][0]["delta"]["tool_calls"][0] for chunk in chunks[1:-2]]
    assert [delta["index"] for delta in tool_deltas] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert "".join(delta["function"]["arguments"] for delta in tool_deltas[:4]) == '{"x": 1}'
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens"] == 7
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 2


def test_openai_stream_has_no_usage_chunk_unless_asked(server: FakeModelServer) -> None:
    server.script(Turn(text="ok"))

    events = sse_events(post(connect(server), "/v1/chat/completions", {**user_says("hi"), "stream": True}))

    chunks = [json.loads(data) for _, data in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in chunk for chunk in chunks)


def test_matched_scripts_serve_only_their_requests_and_come_before_the_global_one(
    server: FakeModelServer,
) -> None:
    server.script(Turn(text="global"))
    server.script(Turn(text="for A"), match="session-A")
    server.script(Turn(text="for B"), match="session-B")
    connection = connect(server)

    answers = [
        json.loads(post(connection, "/v1/messages", user_says(text)).read())["content"][0]["text"]
        for text in ["session-B?", "anything", "session-A?"]
    ]

    assert answers == ["for B", "global", "for A"]


def test_the_default_turn_answers_once_the_script_is_used_up(server: FakeModelServer) -> None:
    server.script(Turn(text="first"))
    server.set_default(Turn(text="again"))
    connection = connect(server)

    answers = [json.loads(post(connection, "/v1/messages", user_says("hi")).read()) for _ in range(3)]

    assert [answer["content"][0]["text"] for answer in answers] == ["first", "again", "again"]


def test_without_a_scripted_turn_the_server_answers_500_and_asks_not_to_retry(
    server: FakeModelServer,
) -> None:
    response = post(connect(server), "/v1/messages", user_says("hi"))

    assert (response.status, response.getheader("x-should-retry")) == (500, "false")
    error = json.loads(response.read())["error"]
    assert error == {
        "type": "api_error",
        "message": "fake model server: no scripted turn for this request and no default turn",
    }


def test_requests_are_recorded_with_path_headers_and_body(server: FakeModelServer) -> None:
    server.set_default(Turn(text="ok"))

    post(connect(server), "/v1/chat/completions", user_says("hi")).read()

    (request,) = server.wait_for_requests(1, timeout=1.0)
    assert (request.path, request.api, request.body) == ("/v1/chat/completions", "openai", user_says("hi"))
    assert request.headers["content-type"] == "application/json"


def test_completed_streams_are_not_counted_as_closed(server: FakeModelServer) -> None:
    server.set_default(Turn(text="a fairly long answer", chunk_size=1))
    connection = connect(server)

    for _ in range(2):
        sse_events(post(connection, "/v1/messages", {**user_says("hi"), "stream": True}))

    assert server.closed_streams == 0


@pytest.mark.parametrize("is_stream", [False, True])
def test_response_delay_holds_back_the_first_byte(server: FakeModelServer, is_stream: bool) -> None:
    server.script(Turn(text="late", response_delay=0.3))

    started = time.monotonic()
    response = post(connect(server), "/v1/messages", {**user_says("hi"), "stream": is_stream})
    waited = time.monotonic() - started
    body = response.read()

    assert 0.3 <= waited < 1.5
    assert (response.status, b"late" in body) == (200, True)


def test_a_client_leaving_during_the_response_delay_counts_as_a_closed_stream(
    server: FakeModelServer,
) -> None:
    server.script(Turn(text="too late", response_delay=5.0))
    connection = connect(server)
    connection.request(
        "POST",
        "/v1/messages",
        body=json.dumps({**user_says("hi"), "stream": True}),
        headers={"content-type": "application/json"},
    )
    server.wait_for_requests(1, timeout=1.0)

    connection.close()

    assert server.wait_for_closed_streams(1, timeout=2.0) == 1


def test_both_sdks_accept_non_streaming_answers(server: FakeModelServer) -> None:
    server.set_default(Turn(text="Bonjour", usage=(9, 4, 1, 2)))
    anthropic_client = anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0)
    openai_client = openai.OpenAI(api_key="k", base_url=server.openai_base_url, max_retries=0)

    message = anthropic_client.messages.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )
    completion = openai_client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )

    assert (message.content[0].type, message.usage.cache_read_input_tokens) == ("text", 1)
    assert completion.choices[0].message.content == "Bonjour"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 12


def test_standalone_mode_prints_its_url_and_serves_the_default_text() -> None:
    process = subprocess.Popen(
        [sys.executable, str(FAKE_SERVER_SCRIPT), "--port", "0", "--default-text", "Bench says hi"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        client = anthropic.Anthropic(api_key="k", base_url=url, max_retries=0)
        message = client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    finally:
        process.terminate()
        process.wait(timeout=5)

    assert url.startswith("http://127.0.0.1:")
    assert message.content[0].type == "text"
    assert message.content[0].text == "Bench says hi"
