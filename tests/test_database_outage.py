"""Database outages: requests answer 503 with the error envelope (a plain page for people), fail
fast, and a run whose write met a dead connection goes back to the queue instead of failing.

The live test points a uvicorn at a TCP proxy in front of the test's PostgreSQL and closes the
proxy: the machine's PostgreSQL, which others use, keeps running.
"""

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.db import OperationalError, connection
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path
from rest_framework.test import APIClient

from sessions import services
from sessions.models import Message, MessageRole, Run, RunStatus, Session
from sessions.recorder import DjangoRunRecorder
from sessions.routing import websocket_application
from sessions.tasks import execute_run
from tests import live
from tests.conftest import Cast
from tests.factories import make_agent, make_api_key
from tests.live import LiveStack, wait_until
from tests.tcp_proxy import TcpProxy
from tests.test_runs_api import post_message, start_session
from tests.test_streaming import browser_cookie

DATABASE_UNAVAILABLE = {
    "error": {
        "code": "database_unavailable",
        "message": "The database is unavailable; try again shortly.",
        "fields": {},
    }
}


def database_gone_page(request: HttpRequest) -> HttpResponse:
    raise OperationalError("connection failed: Connection refused")


def api_database_gone(request: HttpRequest) -> HttpResponse:
    raise OperationalError("server closed the connection unexpectedly")


urlpatterns = [
    path("page-needing-the-database/", database_gone_page),
    path("api/v1/needing-the-database/", api_database_gone),
]


@pytest.mark.urls(__name__)
def test_an_api_request_that_cannot_reach_the_database_answers_503_with_the_envelope(client: Client) -> None:
    response = client.get("/api/v1/needing-the-database/")

    assert (response.status_code, response.json()) == (503, DATABASE_UNAVAILABLE)
    assert response["Retry-After"] == "5"


@pytest.mark.urls(__name__)
def test_a_page_that_cannot_reach_the_database_answers_a_plain_503_page(client: Client) -> None:
    response = client.get("/page-needing-the-database/")

    assert response.status_code == 503
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert b'<h1 id="error-title">Agentry is temporarily unavailable</h1>' in response.content


# --- a run whose write fails on a dead connection ----------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_write_fails_on_a_dead_connection_is_queued_again_and_then_completes(
    cast: Cast, bob_api: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = start_session(bob_api, make_agent(tenant=cast.tenant_a).pk)
    run_id = str(post_message(bob_api, session_id, "hello")["run"]["id"])  # type: ignore[index]
    original_append = DjangoRunRecorder.append_message
    failures: list[int] = []

    def append_on_a_dead_connection(self: DjangoRunRecorder, *args: Any, **kwargs: Any) -> None:
        if not failures:
            failures.append(1)
            raise OperationalError("server closed the connection unexpectedly")
        original_append(self, *args, **kwargs)

    monkeypatch.setattr(DjangoRunRecorder, "append_message", append_on_a_dead_connection)

    execute_run(run_id)
    after_the_outage = Run.objects.get(pk=run_id)
    execute_run(run_id)  # the task run_dispatch_next queued again
    run = Run.objects.get(pk=run_id)

    assert failures == [1]
    assert (
        after_the_outage.status,
        after_the_outage.stop_reason,
        after_the_outage.lease_owner,
        after_the_outage.attempt,
    ) == (RunStatus.QUEUED, "", "", 2)
    assert (run.status, run.stop_reason, run.attempt) == (RunStatus.COMPLETED, "end_turn", 2)
    assert Message.objects.filter(run_id=run_id, role=MessageRole.ASSISTANT).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_writes_always_fail_ends_failed_after_its_attempts(
    cast: Cast, bob_api: APIClient, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.RUN_MAX_ATTEMPTS = 2
    session_id = start_session(bob_api, make_agent(tenant=cast.tenant_a).pk)
    run_id = str(post_message(bob_api, session_id, "hello")["run"]["id"])  # type: ignore[index]

    def always_on_a_dead_connection(self: DjangoRunRecorder, *args: Any, **kwargs: Any) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(DjangoRunRecorder, "append_message", always_on_a_dead_connection)

    execute_run(run_id)
    execute_run(run_id)
    execute_run(run_id)  # ended: nothing to claim
    run = Run.objects.get(pk=run_id)

    assert (run.status, run.stop_reason, run.attempt) == (RunStatus.FAILED, "error", 2)
    assert run.error == "the database failed the run 2 times; giving up"


# --- live: a server whose database goes away --------------------------------------------------

POOL_TIMEOUT_SECONDS = 1.0
# An answer during the outage comes within the pool's wait and a connection attempt, not 20 s.
FAST_ANSWER_SECONDS = 4.0
OUTAGE_REQUESTS = 8


@pytest.fixture
def database_proxy() -> Iterator[TcpProxy]:
    database = connection.settings_dict
    proxy = TcpProxy(
        target_host=database.get("HOST") or "127.0.0.1", target_port=int(database.get("PORT") or 5432)
    )
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
def server_behind_proxy(database_proxy: TcpProxy, tmp_path: Path) -> Iterator[LiveStack]:
    """uvicorn whose DATABASE_URL is the proxy: the test process itself keeps the real database."""
    database_url = live.test_database_url().replace(
        f":{connection.settings_dict.get('PORT') or 5432}/", f":{database_proxy.port}/"
    )
    stack = LiveStack(
        tmp_path,
        DATABASE_URL=database_url,
        DATABASE_POOL_TIMEOUT_SECONDS=str(POOL_TIMEOUT_SECONDS),
        DATABASE_POOL_MIN_SIZE="2",
        API_THROTTLE_RATE="1000000/min",
    )
    try:
        stack.start_server()
        yield stack
    finally:
        stack.stop()


def timed_get(url: str, **headers: str) -> tuple[int, float, httpx.Response]:
    started = time.monotonic()
    response = httpx.get(url, headers=headers, timeout=30, trust_env=False)
    return response.status_code, time.monotonic() - started, response


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the outage is PostgreSQL's (DATABASE_URL)")
def test_requests_answer_503_fast_while_the_database_is_unreachable_and_200_once_it_is_back(
    cast: Cast, database_proxy: TcpProxy, server_behind_proxy: LiveStack
) -> None:
    stack = server_behind_proxy
    api_url = f"{stack.base_url}/api/v1/sessions/"
    token = {"Authorization": f"Bearer {make_api_key(tenant=cast.tenant_a, user=cast.bob)}"}
    cookie = {"Cookie": browser_cookie(cast.bob)}
    assert timed_get(api_url, **token)[0] == 200
    assert timed_get(f"{stack.base_url}/agents/", **cookie)[0] == 200

    database_proxy.stop()
    with ThreadPoolExecutor(max_workers=4) as executor:
        outage = list(executor.map(lambda _: timed_get(api_url, **token), range(OUTAGE_REQUESTS)))
    page_status, page_seconds, page = timed_get(f"{stack.base_url}/agents/", **cookie)

    database_proxy.start()
    wait_until(lambda: timed_get(api_url, **token)[0] == 200, timeout=30, message="the API answering again")
    after = [timed_get(api_url, **token)[0] for _ in range(5)]

    assert [status for status, _seconds, _response in outage] == [503] * OUTAGE_REQUESTS
    assert [response.json() for _status, _seconds, response in outage] == [
        DATABASE_UNAVAILABLE
    ] * OUTAGE_REQUESTS
    assert max(seconds for _status, seconds, _response in outage) < FAST_ANSWER_SECONDS
    assert (page_status, page.headers["content-type"]) == (503, "text/html; charset=utf-8")
    assert "Agentry is temporarily unavailable" in page.text
    assert page_seconds < FAST_ANSWER_SECONDS
    assert after == [200] * 5


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's connection options")
def test_postgresql_connections_fail_fast_rather_than_wait_twenty_seconds() -> None:
    """A connection attempt gives up after 3 s, and a request waits at most 5 s for a pooled one."""
    options = connection.settings_dict["OPTIONS"]

    assert options["connect_timeout"] == 3
    assert options.get("pool", {"timeout": 5.0})["timeout"] == 5.0


@pytest.mark.django_db(transaction=True)
def test_a_socket_command_that_cannot_reach_the_database_answers_an_error_frame_and_stays_open(
    cast: Cast, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = Session.objects.create(
        tenant=cast.tenant_a, agent=make_agent(tenant=cast.tenant_a), created_by=cast.bob
    )
    key = make_api_key(tenant=cast.tenant_a, user=cast.bob)

    def post_on_a_dead_connection(**kwargs: Any) -> Any:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(services, "session_post_message", post_on_a_dead_connection)
    scope = {
        "type": "websocket",
        "path": f"/ws/sessions/{session.pk}/",
        "query_string": f"token={key}".encode(),
        "headers": [],
        "subprotocols": [],
    }

    async def scenario() -> list[dict[str, Any]]:
        socket = ApplicationCommunicator(websocket_application(), scope)
        await socket.send_input({"type": "websocket.connect"})
        accepted = await socket.receive_output(timeout=5)
        await socket.send_input(
            {"type": "websocket.receive", "text": '{"type": "message", "content": "hi", "id": 7}'}
        )
        reply = await socket.receive_output(timeout=5)
        await socket.send_input({"type": "websocket.disconnect", "code": 1000})
        await socket.wait(timeout=5)
        return [accepted, reply]

    accepted, reply = async_to_sync(scenario)()

    assert accepted == {"type": "websocket.accept", "subprotocol": None}
    assert reply["type"] == "websocket.send"
    assert json.loads(reply["text"]) == {
        "type": "error",
        "code": "database_unavailable",
        "message": "The database is unavailable; try again shortly.",
        "fields": {},
        "id": 7,
    }
