"""API keys never reach a log line: not uvicorn's access log, not its websocket handshake lines."""

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from core.logging import MaskRequestLineSecretsFilter, mask_secrets
from sessions.models import Run, RunStatus, Session
from tests.conftest import Cast
from tests.factories import make_agent, make_api_key
from tests.live import LiveStack, wait_until

RECEIVE_TIMEOUT = 5.0


@pytest.mark.django_db(transaction=True)
def test_a_websocket_session_authenticated_by_query_token_leaves_no_key_in_any_log(
    tmp_path: Path, cast: Cast
) -> None:
    key = make_api_key(tenant=cast.tenant_a, user=cast.alice)
    session = Session.objects.create(
        tenant=cast.tenant_a, agent=make_agent(tenant=cast.tenant_a), created_by=cast.alice
    )
    stack = LiveStack(tmp_path)
    try:
        stack.start_server(access_log=True)
        stack.start_worker(workers=1)
        url = f"{stack.websocket_url}/ws/sessions/{session.pk}/?token={key}&after=0"
        with connect(url, proxy=None, open_timeout=RECEIVE_TIMEOUT) as ws:
            ws.send(json.dumps({"type": "message", "content": "Hello", "id": "m1"}))
            wait_until(
                lambda: Run.objects.filter(session=session, status=RunStatus.COMPLETED).exists(),
                timeout=30,
                message="the run to complete",
            )
        # The same query string on plain HTTP requests, answered and refused.
        httpx.get(f"{stack.base_url}/api/v1/sessions/?token={key}")
        httpx.get(f"{stack.base_url}/healthz?token={key}")
    finally:
        stack.stop()
    logs = {path.name: path.read_text(errors="replace") for path in tmp_path.glob("*.log")}

    assert set(logs) == {"server.log", "worker-0.log"}
    assert f'"WebSocket /ws/sessions/{session.pk}/?token=***&after=0" [accepted]' in logs["server.log"]
    assert '"GET /healthz?token=*** HTTP/1.1" 200' in logs["server.log"]
    assert [name for name, text in logs.items() if key in text] == []
    secret = key.split("_", 2)[2]  # the part after the key's name and prefix (it may hold "_" itself)
    assert [name for name, text in logs.items() if secret in text] == []


@pytest.mark.parametrize(
    ("line", "masked"),
    [
        ("/ws/sessions/1/?token=agt_abcdef_0123456789", "/ws/sessions/1/?token=***"),
        ("/ws/sessions/1/?after=3&token=short", "/ws/sessions/1/?after=3&token=***"),
        ("/ws/sessions/1/?token=agt%5Fabc%5Fdef&after=0", "/ws/sessions/1/?token=***&after=0"),
        ("/api/v1/agents/?search=token", "/api/v1/agents/?search=token"),
    ],
)
def test_query_string_credentials_are_masked_whatever_their_shape(line: str, masked: str) -> None:
    assert mask_secrets(line) == masked


def test_the_request_line_filter_keeps_uvicorns_access_arguments() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/ws/sessions/1/?token=agt_abcdef_0123456789", "1.1", 101),
        None,
    )

    MaskRequestLineSecretsFilter().filter(record)

    assert record.args == ("127.0.0.1:5000", "GET", "/ws/sessions/1/?token=***", "1.1", 101)


def test_the_server_loggers_carry_the_filter_once_django_is_set_up() -> None:
    def filters(name: str) -> list[Any]:
        installed = logging.getLogger(name).filters
        return [item for item in installed if isinstance(item, MaskRequestLineSecretsFilter)]

    assert (len(filters("uvicorn.access")), len(filters("uvicorn.error"))) == (1, 1)
