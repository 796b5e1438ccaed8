"""A local fake of the Anthropic Messages and OpenAI Chat Completions APIs, for tests and benchmarks.

It speaks real HTTP/1.1 and server-sent events on 127.0.0.1, so the official SDKs run unchanged
against it. Tests script the model's turns; see ``FakeModelServer``. Run standalone for benchmarks:
``python tests/fake_model_server.py --port 0 --default-text "Hello"`` prints the base URL.
Anthropic's ``/v1/messages/count_tokens`` answers deterministically (``anthropic_token_count``).
``GET /v1/models`` lists one model, in the format of the API the request's headers name. With
``accept_api_keys``, a request with any other key is answered 401 as the real APIs do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import select
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

Api = Literal["anthropic", "openai"]
ErrorKind = Literal["context_overflow", "mid_stream"]
JsonObject = dict[str, Any]

# Our neutral stop reasons, as each API spells them. Anything else is sent unchanged.
OPENAI_FINISH_REASONS = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
ANTHROPIC_CONTEXT_OVERFLOW_MESSAGE = "prompt is too long: 250000 tokens > 200000 maximum"
OPENAI_CONTEXT_OVERFLOW_MESSAGE = (
    "This model's maximum context length is 128000 tokens. However, your messages resulted in "
    "250000 tokens. Please reduce the length of the messages."
)
ANTHROPIC_MID_STREAM_ERROR = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
OPENAI_MID_STREAM_ERROR = {
    "error": {"message": "The server had an error while processing your request.", "type": "server_error"}
}
CHUNKED_BODY_END = b"0\r\n\r\n"
COUNT_TOKENS_PATH_SUFFIX = "/messages/count_tokens"
MODELS_PATH_SUFFIX = "/models"
FAKE_MODEL_ID = "fake-model"
# The parts of a Messages request that count as input, as the token-counting endpoint takes them.
COUNTED_FIELDS = ("system", "messages", "tools")


@dataclass
class Turn:
    """One scripted model answer (or failure).

    ``tool_calls`` holds ``(name, arguments)``; string arguments are streamed verbatim (malformed JSON).
    ``usage`` is ``(input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)`` in Anthropic's
    sense: input excludes cached tokens. OpenAI's ``prompt_tokens`` is reported as the sum of the three.
    ``error_kind="context_overflow"`` answers 400 "prompt is too long" / ``context_length_exceeded``;
    ``error_kind="mid_stream"`` streams the first block, then an error event (Anthropic ``overloaded_error``,
    OpenAI ``server_error``) instead of the rest.
    ``stop_reason`` takes our neutral names (``end_turn``, ``tool_use``, ``max_tokens``) or a raw
    provider value. Retryable errors carry ``retry-after: 0`` and ``retry-after-ms: retry_after_ms``
    (the SDKs only skip their ~0.5 s backoff for a positive delay).
    ``response_delay`` holds the answer back this many seconds before its first byte (status line
    included), as a real model's time to first token, for streamed and whole answers alike.
    """

    text: str = ""
    tool_calls: list[tuple[str, JsonObject | str]] = field(default_factory=list)
    thinking: str = ""
    thinking_signature: str = "fake-signature"
    usage: tuple[int, int, int, int] = (10, 5, 0, 0)
    stop_reason: str | None = None
    error_status: int | None = None
    error_kind: ErrorKind | None = None
    retry_after_ms: int | None = 1
    chunk_delay: float = 0.0
    chunk_size: int = 8
    response_delay: float = 0.0

    @property
    def is_error(self) -> bool:
        """Answered with an HTTP error status (a ``mid_stream`` failure starts as a normal stream)."""
        return self.error_status is not None or self.error_kind == "context_overflow"

    @property
    def status(self) -> int:
        return self.error_status if self.error_status is not None else 400

    def neutral_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if self.tool_calls else "end_turn"


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: JsonObject

    @property
    def api(self) -> Api:
        return "openai" if self.path.endswith("/chat/completions") else "anthropic"

    @property
    def images(self) -> list[JsonObject]:
        """The images of its messages as sent: Anthropic ``image`` blocks, OpenAI ``image_url`` parts."""
        image_type = "image_url" if self.api == "openai" else "image"
        return [
            part
            for message in self.body.get("messages", [])
            if isinstance(message.get("content"), list)
            for part in message["content"]
            if part.get("type") == image_type
        ]


def anthropic_token_count(body: JsonObject) -> int:
    """The fake's deterministic token count of a Messages (or count_tokens) request body.

    A quarter of the characters of its counted fields as compact JSON: tests measure a recorded
    ``/v1/messages`` request with this to see what the counting endpoint would have answered.
    """
    counted = {name: body[name] for name in COUNTED_FIELDS if name in body}
    return -(-len(json.dumps(counted, sort_keys=True, separators=(",", ":"))) // 4)


def _api_for_path(path: str) -> Api | None:
    path = path.split("?", 1)[0]
    if path.endswith("/chat/completions"):
        return "openai"
    if path.endswith("/messages"):
        return "anthropic"
    return None


def _split(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[start : start + size] for start in range(0, len(text), size)]


def _split_in_parts(text: str, parts: int) -> list[str]:
    return _split(text, -(-len(text) // parts)) if text else []


def _arguments_json(arguments: JsonObject | str) -> str:
    """Tool arguments as streamed: a string is sent verbatim, to script malformed JSON."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


# --- Anthropic Messages ---------------------------------------------------------------------------


def _anthropic_usage(turn: Turn, *, output_tokens: int) -> JsonObject:
    input_tokens, _, cache_read, cache_write = turn.usage
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_write,
    }


def _anthropic_blocks(turn: Turn) -> list[JsonObject]:
    blocks: list[JsonObject] = []
    if turn.thinking:
        blocks.append({"type": "thinking", "thinking": turn.thinking, "signature": turn.thinking_signature})
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    for name, arguments in turn.tool_calls:
        blocks.append({"type": "tool_use", "id": _new_id("toolu_"), "name": name, "input": arguments})
    return blocks


def _anthropic_message(turn: Turn, model: str) -> JsonObject:
    return {
        "id": _new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _anthropic_blocks(turn),
        "stop_reason": turn.neutral_stop_reason(),
        "stop_sequence": None,
        "usage": _anthropic_usage(turn, output_tokens=turn.usage[1]),
    }


def _anthropic_block_deltas(block: JsonObject, chunk_size: int) -> list[JsonObject]:
    if block["type"] == "thinking":
        deltas = [
            {"type": "thinking_delta", "thinking": part} for part in _split(block["thinking"], chunk_size)
        ]
        return [*deltas, {"type": "signature_delta", "signature": block["signature"]}]
    if block["type"] == "text":
        return [{"type": "text_delta", "text": part} for part in _split(block["text"], chunk_size)]
    arguments = _arguments_json(block["input"])
    return [
        {"type": "input_json_delta", "partial_json": part} for part in ["", *_split_in_parts(arguments, 3)]
    ]


def _anthropic_block_start(block: JsonObject) -> JsonObject:
    if block["type"] == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}
    if block["type"] == "text":
        return {"type": "text", "text": ""}
    return {**block, "input": {}}


def _anthropic_events(turn: Turn, model: str) -> Iterator[tuple[str, JsonObject]]:
    start = _anthropic_message(turn, model)
    blocks = start["content"]
    start.update(content=[], stop_reason=None, usage=_anthropic_usage(turn, output_tokens=1))
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(blocks):
        yield (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": _anthropic_block_start(block),
            },
        )
        for delta in _anthropic_block_deltas(block, turn.chunk_size):
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": turn.neutral_stop_reason(), "stop_sequence": None},
            "usage": _anthropic_usage(turn, output_tokens=turn.usage[1]),
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _anthropic_error(turn: Turn) -> JsonObject:
    if turn.error_kind == "context_overflow":
        error_type, message = "invalid_request_error", ANTHROPIC_CONTEXT_OVERFLOW_MESSAGE
    else:
        error_type = ANTHROPIC_ERROR_TYPES.get(turn.status, "api_error")
        message = f"fake model server: scripted {turn.status} {error_type}"
    return {"type": "error", "error": {"type": error_type, "message": message}, "request_id": _new_id("req_")}


# --- OpenAI Chat Completions ----------------------------------------------------------------------


def _openai_usage(turn: Turn) -> JsonObject:
    input_tokens, output_tokens, cache_read, cache_write = turn.usage
    prompt_tokens = input_tokens + cache_read + cache_write
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": prompt_tokens + output_tokens,
        "prompt_tokens_details": {"cached_tokens": cache_read, "cache_write_tokens": cache_write},
    }


def _openai_finish_reason(turn: Turn) -> str:
    reason = turn.neutral_stop_reason()
    return OPENAI_FINISH_REASONS.get(reason, reason)


def _openai_tool_calls(turn: Turn) -> list[JsonObject]:
    return [
        {
            "id": _new_id("call_"),
            "type": "function",
            "function": {"name": name, "arguments": _arguments_json(arguments)},
        }
        for name, arguments in turn.tool_calls
    ]


def _openai_completion(turn: Turn, model: str) -> JsonObject:
    message: JsonObject = {"role": "assistant", "content": turn.text or None, "refusal": None}
    if turn.tool_calls:
        message["tool_calls"] = _openai_tool_calls(turn)
    choice = {"index": 0, "message": message, "finish_reason": _openai_finish_reason(turn), "logprobs": None}
    return {
        "id": _new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _openai_usage(turn),
    }


def _openai_deltas(turn: Turn) -> Iterator[JsonObject]:
    yield {"role": "assistant", "content": ""}
    for part in _split(turn.thinking, turn.chunk_size):
        yield {"reasoning_content": part}
    for part in _split(turn.text, turn.chunk_size):
        yield {"content": part}
    for index, call in enumerate(_openai_tool_calls(turn)):
        function = call["function"]
        yield {
            "tool_calls": [{**call, "index": index, "function": {"name": function["name"], "arguments": ""}}]
        }
        for part in _split_in_parts(function["arguments"], 3):
            yield {"tool_calls": [{"index": index, "function": {"arguments": part}}]}


def _openai_events(turn: Turn, model: str, *, include_usage: bool) -> Iterator[JsonObject]:
    envelope = {"id": _new_id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time())}
    envelope.update(model=model, system_fingerprint=None)
    if include_usage:
        envelope["usage"] = None
    for delta in _openai_deltas(turn):
        yield {**envelope, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
    finish = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": _openai_finish_reason(turn)}
    yield {**envelope, "choices": [finish]}
    if include_usage:
        yield {**envelope, "choices": [], "usage": _openai_usage(turn)}


def _openai_error(turn: Turn) -> JsonObject:
    if turn.error_kind == "context_overflow":
        error = {"message": OPENAI_CONTEXT_OVERFLOW_MESSAGE, "type": "invalid_request_error"}
        error.update(param="messages", code="context_length_exceeded")
        return {"error": error}
    if turn.status == 429:
        error_type, code = "requests", "rate_limit_exceeded"
    elif turn.status >= 500:
        error_type, code = "server_error", None
    else:
        error_type, code = "invalid_request_error", None
    message = f"fake model server: scripted {turn.status} {error_type}"
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


# --- HTTP -----------------------------------------------------------------------------------------


def _sse_frame(event: tuple[str, JsonObject] | JsonObject | str) -> bytes:
    if isinstance(event, str):
        return f"data: {event}\n\n".encode()
    if isinstance(event, tuple):
        name, data = event
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
    return f"data: {json.dumps(event)}\n\n".encode()


def _stream_frames(api: Api, turn: Turn, body: JsonObject) -> list[bytes]:
    """The SSE frames of one answer; a ``mid_stream`` turn breaks off with an error after its first block."""
    model = str(body.get("model", "fake-model"))
    is_broken = turn.error_kind == "mid_stream"
    if api == "anthropic":
        events = list(_anthropic_events(turn, model))
        if is_broken:
            cut = next(
                i for i, (name, _) in enumerate(events) if name in ("content_block_stop", "message_delta")
            )
            events = [*events[:cut], ("error", ANTHROPIC_MID_STREAM_ERROR)]
        return [_sse_frame(event) for event in events]
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    chunks = list(_openai_events(turn, model, include_usage=include_usage))
    if is_broken:
        cut = next(
            i for i, chunk in enumerate(chunks) if chunk["choices"] and chunk["choices"][0]["finish_reason"]
        )
        return [*(_sse_frame(chunk) for chunk in chunks[:cut]), _sse_frame(OPENAI_MID_STREAM_ERROR)]
    return [*(_sse_frame(chunk) for chunk in chunks), _sse_frame("[DONE]")]


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.fake._track_connection(self.connection, is_open=True)

    def finish(self) -> None:
        self.server.fake._track_connection(self.connection, is_open=False)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: the fake runs inside test and benchmark output."""

    def do_GET(self) -> None:
        fake = self.server.fake
        recorded = RecordedRequest(self.path, {k.lower(): v for k, v in self.headers.items()}, {})
        api: Api = "anthropic" if "anthropic-version" in recorded.headers else "openai"
        if not self.path.split("?", 1)[0].endswith(MODELS_PATH_SUFFIX):
            self._send_json(404, {"error": {"type": "not_found_error", "message": f"no route {self.path}"}})
            return
        fake._record_model_list(recorded)
        if not fake._is_accepted(recorded):
            self._send_error(api, Turn(error_status=401))
            return
        if api == "anthropic":
            model: JsonObject = {
                "type": "model",
                "id": FAKE_MODEL_ID,
                "display_name": "Fake model",
                "created_at": "2025-01-01T00:00:00Z",
            }
            self._send_json(
                200, {"data": [model], "has_more": False, "first_id": FAKE_MODEL_ID, "last_id": FAKE_MODEL_ID}
            )
        else:
            model = {"id": FAKE_MODEL_ID, "object": "model", "created": 0, "owned_by": "tests"}
            self._send_json(200, {"object": "list", "data": [model]})

    def do_POST(self) -> None:
        raw_body = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
        body = json.loads(raw_body) if raw_body else {}
        fake = self.server.fake
        recorded = RecordedRequest(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        if not fake._is_accepted(recorded):
            self._send_error(_api_for_path(self.path) or "anthropic", Turn(error_status=401))
            return
        if self.path.split("?", 1)[0].endswith(COUNT_TOKENS_PATH_SUFFIX):
            fake._record_token_count(recorded)
            self._send_token_count(body, error_status=fake._token_count_error_status)
            return
        api = _api_for_path(self.path)
        if api is None:
            self._send_json(404, {"error": {"type": "not_found_error", "message": f"no route {self.path}"}})
            return
        fake._record(recorded)
        turn = fake._next_turn(raw_body, body)
        if turn is not None and turn.response_delay and self._client_left_before(turn.response_delay):
            self.close_connection = True
            if body.get("stream") and not fake._is_stopping.is_set():
                fake._count_closed_stream()
            return
        if turn is None:
            self._send_no_scripted_turn(api)
        elif turn.is_error:
            self._send_error(api, turn)
        elif body.get("stream"):
            self._send_stream(api, turn, body)
        else:
            model = str(body.get("model", "fake-model"))
            answer = (
                _anthropic_message(turn, model) if api == "anthropic" else _openai_completion(turn, model)
            )
            self._send_json(200, answer)

    def _send_json(self, status: int, payload: JsonObject, headers: dict[str, str] | None = None) -> None:
        encoded = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(encoded)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(encoded)

    def _send_token_count(self, body: JsonObject, *, error_status: int | None) -> None:
        if error_status is not None:
            error_type = ANTHROPIC_ERROR_TYPES.get(error_status, "api_error")
            message = f"fake model server: scripted {error_status} {error_type}"
            payload = {"type": "error", "error": {"type": error_type, "message": message}}
            self._send_json(error_status, payload, headers={"x-should-retry": "false"})
            return
        self._send_json(200, {"input_tokens": anthropic_token_count(body)})

    def _send_no_scripted_turn(self, api: Api) -> None:
        message = "fake model server: no scripted turn for this request and no default turn"
        if api == "anthropic":
            payload: JsonObject = {"type": "error", "error": {"type": "api_error", "message": message}}
        else:
            payload = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
        self._send_json(500, payload, headers={"x-should-retry": "false"})

    def _send_error(self, api: Api, turn: Turn) -> None:
        headers: dict[str, str] = {}
        if (turn.status == 429 or turn.status >= 500) and turn.retry_after_ms is not None:
            headers = {"retry-after": "0", "retry-after-ms": str(turn.retry_after_ms)}
        self._send_json(
            turn.status, _anthropic_error(turn) if api == "anthropic" else _openai_error(turn), headers
        )

    def _send_stream(self, api: Api, turn: Turn, body: JsonObject) -> None:
        frames = _stream_frames(api, turn, body)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        if not self._write_frames(frames, turn.chunk_delay):
            self.close_connection = True
            if not self.server.fake._is_stopping.is_set():
                self.server.fake._count_closed_stream()

    def _write_frames(self, frames: list[bytes], delay: float) -> bool:
        """Write each frame as one HTTP chunk; False when the client went away first."""
        for position, frame in enumerate(frames):
            if position and delay and self._client_left_within(delay):
                return False
            # The last frame travels with the end of the body, so a finished stream is never "closed early".
            payload = _chunk(frame) + (CHUNKED_BODY_END if position == len(frames) - 1 else b"")
            try:
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                return False
        return True

    def _client_left_before(self, seconds: float) -> bool:
        """Wait the whole ``seconds`` (bytes the client sends meanwhile do not cut it short); True as
        soon as the client closes its end (or the server stops)."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([self.connection], [], [], remaining)
            if self.server.fake._is_stopping.is_set():
                return True
            if readable:
                try:
                    if not self.connection.recv(1, socket.MSG_PEEK):
                        return True
                except OSError:
                    return True
                time.sleep(max(0.0, deadline - time.monotonic()))
        return False

    def _client_left_within(self, seconds: float) -> bool:
        """Wait ``seconds``, returning early with True if the client closes its end (or the server stops)."""
        readable, _, _ = select.select([self.connection], [], [], seconds)
        if self.server.fake._is_stopping.is_set():
            return True
        if not readable:
            return False
        try:
            return not self.connection.recv(1, socket.MSG_PEEK)
        except OSError:
            return True


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # Hundreds of runs may call the model at the same moment (bench/concurrency.py); socketserver's
    # backlog of 5 would drop their connection attempts, and each retry costs the client a second.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], fake: FakeModelServer) -> None:
        self.fake = fake
        super().__init__(address, _Handler)


class FakeModelServer:
    """Scripted fake of both model APIs. ``url`` is a base URL for either SDK.

    The Anthropic SDK posts to ``{url}/v1/messages``; the OpenAI SDK posts to ``{base_url}/chat/completions``,
    so both ``url`` and ``openai_base_url`` (``{url}/v1``) work: routing goes by path suffix.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, record_requests: bool = True) -> None:
        self._address = (host, port)
        self._is_recording = record_requests
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._matched_scripts: list[tuple[str, deque[Turn]]] = []
        self._script: deque[Turn] = deque()
        self._default: Turn | None = None
        self._requests: list[RecordedRequest] = []
        self._token_count_requests: list[RecordedRequest] = []
        self._token_count_error_status: int | None = None
        self._model_list_requests: list[RecordedRequest] = []
        self._accepted_api_keys: frozenset[str] | None = None
        self._closed_streams = 0
        self._connections: set[socket.socket] = set()
        self._is_stopping = threading.Event()
        self._http: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # Lifecycle

    def start(self) -> FakeModelServer:
        self._is_stopping.clear()
        self._http = _HTTPServer(self._address, self)
        self._thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="fake-model-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._http is None:
            return
        self._is_stopping.set()
        self._http.shutdown()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._http.server_close()
        self._http = None

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._http is None:
            raise RuntimeError("FakeModelServer is not started")
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    # Scripting

    def script(self, *turns: Turn, match: str | None = None) -> None:
        """Queue turns, consumed in order.

        With ``match``, only requests whose JSON body contains that substring use these turns; such
        scripts are tried before the unmatched one, so concurrent runs can each have their own.
        """
        with self._lock:
            if match is None:
                self._script.extend(turns)
            else:
                self._matched_scripts.append((match, deque(turns)))

    def set_default(self, turn: Turn | None) -> None:
        """The answer once no scripted turn is left; without one the server answers 500."""
        with self._lock:
            self._default = turn

    def fail_token_counts(self, status: int | None) -> None:
        """Answer ``/v1/messages/count_tokens`` with this error status (None: count again)."""
        with self._lock:
            self._token_count_error_status = status

    def accept_api_keys(self, *keys: str) -> None:
        """Answer 401 to requests whose API key is not one of ``keys`` (none given: accept any)."""
        with self._lock:
            self._accepted_api_keys = frozenset(keys) if keys else None

    def reset(self) -> None:
        """Forget scripts, the default turn, accepted keys, recorded requests and counters."""
        with self._lock:
            self._model_list_requests.clear()
            self._accepted_api_keys = None
            self._matched_scripts.clear()
            self._script.clear()
            self._default = None
            self._requests.clear()
            self._token_count_requests.clear()
            self._token_count_error_status = None
            self._closed_streams = 0

    # Observations

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def token_count_requests(self) -> list[RecordedRequest]:
        """Requests to the token-counting endpoint, kept apart from ``requests`` (model calls)."""
        with self._lock:
            return list(self._token_count_requests)

    @property
    def model_list_requests(self) -> list[RecordedRequest]:
        """``GET …/models`` requests, kept apart from ``requests`` (model calls)."""
        with self._lock:
            return list(self._model_list_requests)

    @property
    def closed_streams(self) -> int:
        """Streams whose client disconnected before the last event was written."""
        with self._lock:
            return self._closed_streams

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._requests) >= count, timeout):
                raise TimeoutError(f"expected {count} requests within {timeout}s, got {len(self._requests)}")
            return list(self._requests)

    def wait_for_closed_streams(self, count: int, timeout: float = 5.0) -> int:
        with self._changed:
            if not self._changed.wait_for(lambda: self._closed_streams >= count, timeout):
                raise TimeoutError(
                    f"expected {count} closed streams within {timeout}s, got {self._closed_streams}"
                )
            return self._closed_streams

    # Called from handler threads

    def _record(self, request: RecordedRequest) -> None:
        with self._changed:
            if self._is_recording:
                self._requests.append(request)
            self._changed.notify_all()

    def _record_token_count(self, request: RecordedRequest) -> None:
        with self._lock:
            if self._is_recording:
                self._token_count_requests.append(request)

    def _record_model_list(self, request: RecordedRequest) -> None:
        with self._lock:
            if self._is_recording:
                self._model_list_requests.append(request)

    def _is_accepted(self, request: RecordedRequest) -> bool:
        with self._lock:
            accepted = self._accepted_api_keys
        if accepted is None:
            return True
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        return request.headers.get("x-api-key", bearer) in accepted

    def _count_closed_stream(self) -> None:
        with self._changed:
            self._closed_streams += 1
            self._changed.notify_all()

    def _track_connection(self, connection: socket.socket, *, is_open: bool) -> None:
        with self._lock:
            if is_open:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def _next_turn(self, raw_body: str, body: JsonObject) -> Turn | None:
        searchable = (raw_body, json.dumps(body, ensure_ascii=False))
        with self._lock:
            for match, turns in self._matched_scripts:
                if turns and any(match in text for text in searchable):
                    return turns.popleft()
            if self._script:
                return self._script.popleft()
            return self._default


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a fake Anthropic/OpenAI model API on 127.0.0.1.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--default-text", default="Hello from the fake model server.")
    parser.add_argument("--chunk-size", type=int, default=8)
    parser.add_argument("--chunk-delay", type=float, default=0.0)
    arguments = parser.parse_args(argv)
    server = FakeModelServer(host=arguments.host, port=arguments.port, record_requests=False)
    default = Turn(
        text=arguments.default_text, chunk_size=arguments.chunk_size, chunk_delay=arguments.chunk_delay
    )
    server.set_default(default)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    with server:
        print(server.url, flush=True)
        stopped.wait()


if __name__ == "__main__":
    main()
