"""Bad input answers a clear 4xx with the error envelope (or a websocket close code), never a 500.

HTTP cases run in process where Django alone decides the answer, and against a live uvicorn where
the server's framing matters (chunked bodies, websocket handshakes and frames).
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

from agents.models import Agent
from files.models import KnowledgeBase, StoredFile
from sessions.models import Session
from tests.conftest import Cast
from tests.factories import make_agent, make_api_key
from tests.live import LiveStack

pytestmark = pytest.mark.django_db(transaction=True)

RECEIVE_TIMEOUT = 5.0
DEPTH = 5000


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def envelope(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": {}}}


NESTED_TOO_DEEPLY = envelope("parse_error", "The request body is nested too deeply.")
TOO_LARGE = envelope(
    "payload_too_large", f"The request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes."
)
CHUNKED = envelope(
    "length_required",
    "Send the request body with a Content-Length header; chunked bodies are not accepted.",
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, django_db_setup: None) -> Iterator[LiveStack]:
    live = LiveStack(Path(tmp_path_factory.mktemp("bad-input")))
    live.start_server()
    yield live
    live.stop()


@pytest.fixture
def session(cast: Cast) -> Session:
    agent = make_agent(tenant=cast.tenant_a)
    return Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.alice, title="bad input")


@pytest.fixture
def alice_key(cast: Cast) -> str:
    return make_api_key(tenant=cast.tenant_a, user=cast.alice)


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("post", "/api/v1/agents/"),
        ("post", "/api/v1/sessions/"),
        ("post", "/api/v1/sessions/{session}/messages/"),
        ("patch", "/api/v1/agents/{agent}/"),
        ("post", "/api/v1/tools/"),
    ],
)
def test_a_json_body_nested_5000_deep_answers_400(
    alice_api: APIClient, session: Session, method: str, url: str
) -> None:
    path = url.format(session=session.pk, agent=session.agent_id)

    response = getattr(alice_api, method)(path, nested(DEPTH), content_type="application/json")

    assert (response.status_code, response.json()) == (400, NESTED_TOO_DEEPLY)
    assert Agent.objects.count() == 1


def test_a_multipart_body_with_too_many_fields_answers_400(alice_api: APIClient, session: Session) -> None:
    fields = {"name": "kb", "agent_ids": [str(session.agent_id)] * settings.DATA_UPLOAD_MAX_NUMBER_FIELDS}

    response = alice_api.post("/api/v1/knowledge-bases/", fields, format="multipart")

    too_many = f"The request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields."
    assert (response.status_code, response.json()) == (400, envelope("bad_request", too_many))
    assert KnowledgeBase.objects.count() == 0


def test_a_multipart_body_with_too_many_files_answers_400(alice_api: APIClient) -> None:
    files = [
        SimpleUploadedFile(f"note-{index}.txt", b"hello", content_type="text/plain")
        for index in range(settings.DATA_UPLOAD_MAX_NUMBER_FILES + 1)
    ]

    response = alice_api.post("/api/v1/files/", {"file": files}, format="multipart")

    too_many = f"The request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FILES} files."
    assert (response.status_code, response.json()) == (400, envelope("bad_request", too_many))
    assert StoredFile.objects.count() == 0


def test_a_body_over_the_upload_limit_answers_413(alice_api: APIClient) -> None:
    body = json.dumps({"name": "big", "description": "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE})

    response = alice_api.post("/api/v1/agents/", body, content_type="application/json")

    assert (response.status_code, response.json()) == (413, TOO_LARGE)
    assert Agent.objects.count() == 0


def test_a_live_body_over_the_upload_limit_answers_413(stack: LiveStack, alice_key: str) -> None:
    body = json.dumps({"name": "big", "description": "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE})

    response = httpx.post(
        f"{stack.base_url}/api/v1/agents/",
        content=body,
        headers={"Authorization": f"Bearer {alice_key}", "Content-Type": "application/json"},
    )

    assert (response.status_code, response.json()) == (413, TOO_LARGE)
    assert Agent.objects.count() == 0


def test_a_chunked_body_answers_411_rather_than_reading_as_empty(
    stack: LiveStack, alice_key: str, session: Session
) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"content": '
        yield b'"hello"}'

    response = httpx.post(
        f"{stack.base_url}/api/v1/sessions/{session.pk}/messages/",
        content=chunks(),
        headers={"Authorization": f"Bearer {alice_key}", "Content-Type": "application/json"},
    )

    assert response.request.headers["Transfer-Encoding"] == "chunked"
    assert (response.status_code, response.json()) == (411, CHUNKED)
    assert session.messages.count() == 0


def test_a_live_json_body_nested_5000_deep_answers_400(stack: LiveStack, alice_key: str) -> None:
    response = httpx.post(
        f"{stack.base_url}/api/v1/agents/",
        content=nested(DEPTH),
        headers={"Authorization": f"Bearer {alice_key}", "Content-Type": "application/json"},
    )

    assert (response.status_code, response.json()) == (400, NESTED_TOO_DEEPLY)


def receive(ws: ClientConnection) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(ws.recv(timeout=RECEIVE_TIMEOUT))
    return frame


@pytest.mark.parametrize("path", ["/ws/nowhere/", "/ws/sessions/", "/api/v1/agents/"])
def test_a_websocket_to_an_unknown_path_is_closed_4404(stack: LiveStack, path: str) -> None:
    url = f"{stack.websocket_url}{path}"
    with (
        connect(url, proxy=None, open_timeout=RECEIVE_TIMEOUT) as ws,
        pytest.raises(ConnectionClosed) as closed,
    ):
        ws.recv(timeout=RECEIVE_TIMEOUT)

    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4404


def test_a_websocket_frame_nested_5000_deep_answers_an_error_and_keeps_the_socket(
    stack: LiveStack, alice_key: str, session: Session
) -> None:
    url = f"{stack.websocket_url}/ws/sessions/{session.pk}/"
    with connect(
        url,
        subprotocols=[Subprotocol("bearer"), Subprotocol(alice_key)],
        proxy=None,
        open_timeout=RECEIVE_TIMEOUT,
    ) as ws:
        ws.send(nested(DEPTH))
        refusal = receive(ws)
        ws.send(json.dumps({"type": "nonsense", "id": "after"}))
        next_reply = receive(ws)

    assert refusal == {
        "type": "error",
        "code": "invalid_json",
        "message": "The frame is nested too deeply.",
        "fields": {},
    }
    assert (next_reply["code"], next_reply["id"]) == ("unknown_command", "after")
