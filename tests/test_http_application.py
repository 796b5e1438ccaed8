"""The server's two ways into Django (``core.http_application``): which requests take one of the
pool's threads, and that neither a client sending slowly nor an open event stream holds one."""

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from core.http_application import Message, body_replayed, stays_with_the_asgi_handler, whole_body
from sessions.models import Session
from tests.conftest import Cast
from tests.factories import make_agent, make_api_key
from tests.live import LiveStack

ANSWER_TIMEOUT = 10.0


def http_scope(method: str = "POST", path: str = "/api/v1/agents/", **headers: str) -> dict[str, Any]:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()],
    }


@pytest.mark.parametrize(
    ("scope", "stays"),
    [
        (http_scope(content_length="120", content_type="application/json"), False),
        (http_scope("GET", "/api/v1/sessions/"), False),
        (http_scope(content_length=str(settings.FILE_UPLOAD_MAX_MEMORY_SIZE)), False),
        (http_scope("GET", "/api/v1/sessions/1/events/", accept="text/event-stream"), True),
        (http_scope("GET", "/api/v1/sessions/1/events/", accept="application/json, Text/Event-Stream"), True),
        (http_scope("GET", "/api/v1/sessions/1/events/", accept="application/json"), False),
        (http_scope("GET", "/api/v1/files/1/download/"), True),
        (http_scope("HEAD", "/api/v1/files/1/download/"), True),
        (http_scope("POST", "/api/v1/files/1/download/", content_length="2"), False),
        (http_scope(transfer_encoding="chunked"), True),
        (http_scope(content_length=str(settings.FILE_UPLOAD_MAX_MEMORY_SIZE + 1)), True),
        (http_scope(content_length="-1"), True),
        (http_scope(content_length="twelve"), True),
    ],
    ids=[
        "small body",
        "no body",
        "body at the in-memory limit",
        "event stream",
        "event stream among others",
        "json events",
        "download",
        "download head",
        "post to a download path",
        "chunked body",
        "body over the in-memory limit",
        "negative length",
        "unreadable length",
    ],
)
def test_which_requests_stay_with_the_asgi_handler(scope: dict[str, Any], stays: bool) -> None:
    assert stays_with_the_asgi_handler(scope) is stays


def receiving(*messages: Message) -> Any:
    queue = list(messages)

    async def receive() -> Message:
        return queue.pop(0)

    return receive


def test_the_whole_body_is_read_then_replayed_before_the_clients_next_message() -> None:
    async def scenario() -> list[Message]:
        receive = receiving(
            {"type": "http.request", "body": b"ab", "more_body": True},
            {"type": "http.request", "body": b"", "more_body": True},
            {"type": "http.request", "body": b"c"},
            {"type": "http.disconnect"},
        )
        body = await whole_body(receive)
        assert body is not None
        replay = body_replayed(body, receive)
        return [await replay(), await replay()]

    assert asyncio.run(scenario()) == [
        {"type": "http.request", "body": b"abc", "more_body": False},
        {"type": "http.disconnect"},
    ]


def test_a_client_that_leaves_before_its_whole_body_has_none() -> None:
    receive = receiving(
        {"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.disconnect"}
    )

    assert asyncio.run(whole_body(receive)) is None


@pytest.fixture(scope="module")
def one_thread_server(tmp_path_factory: pytest.TempPathFactory, django_db_setup: None) -> Iterator[LiveStack]:
    """A server whose views share a single thread: anything that held it would stop the rest."""
    live = LiveStack(Path(tmp_path_factory.mktemp("one-thread")), SERVER_THREADS="1")
    live.start_server()
    yield live
    live.stop()


def status_line(connection: socket.socket) -> bytes:
    return connection.makefile("rb").readline().rstrip()


@pytest.mark.django_db(transaction=True)
def test_clients_sending_their_bodies_slowly_hold_no_thread(one_thread_server: LiveStack) -> None:
    # A sign-in form with its CSRF token in the form: the CSRF check reads the whole body.
    token = httpx.get(f"{one_thread_server.base_url}/login/", timeout=ANSWER_TIMEOUT).cookies["csrftoken"]
    body = f"csrfmiddlewaretoken={token}&email=slow%40a.test&password=slowly".encode()
    head = (
        "POST /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"Cookie: csrftoken={token}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    slow_clients = [socket.create_connection(("127.0.0.1", one_thread_server.port)) for _ in range(3)]
    try:
        for connection in slow_clients:
            connection.sendall(head + body[:5])

        health = httpx.get(f"{one_thread_server.base_url}/healthz", timeout=ANSWER_TIMEOUT)

        for connection in slow_clients:
            connection.settimeout(ANSWER_TIMEOUT)
            connection.sendall(body[5:])
        answers = [status_line(connection) for connection in slow_clients]
    finally:
        for connection in slow_clients:
            connection.close()

    assert health.status_code == 200
    assert answers == [b"HTTP/1.1 200 OK"] * 3


@pytest.mark.django_db(transaction=True)
def test_open_event_streams_hold_no_thread(one_thread_server: LiveStack, cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    session = Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.alice)
    bearer = {"Authorization": f"Bearer {make_api_key(tenant=cast.tenant_a, user=cast.alice)}"}
    url = f"{one_thread_server.base_url}/api/v1/sessions/{session.pk}/"
    stream = {**bearer, "Accept": "text/event-stream"}

    with (
        httpx.stream("GET", f"{url}events/", headers=stream, timeout=ANSWER_TIMEOUT) as first,
        httpx.stream("GET", f"{url}events/", headers=stream, timeout=ANSWER_TIMEOUT) as second,
    ):
        answer = httpx.get(url, headers=bearer, timeout=ANSWER_TIMEOUT)
        streams = [response.headers["content-type"] for response in (first, second)]

    assert (answer.status_code, answer.json()["id"]) == (200, str(session.pk))
    assert streams == ["text/event-stream"] * 2
