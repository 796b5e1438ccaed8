"""Redis outages: requests answer 503 with the error envelope, never 500, and work again after.

The live test runs a uvicorn against a Redis of its own (``tests.redis_server.PrivateRedis``)
and bursts API requests at it while that Redis is stopped and started three times.
"""

import asyncio
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path
from django_q.brokers.redis_broker import Redis as RedisBroker
from django_q.conf import Conf
from rest_framework.test import APIClient

from core.api import throttling
from sessions import tasks
from sessions.models import Message, Run, RunEvent, RunStatus, Session
from tests.conftest import Cast
from tests.factories import make_agent, make_api_key
from tests.live import LiveStack, free_port, wait_until
from tests.redis_server import REDIS_SERVER, PrivateRedis

SERVICE_UNAVAILABLE = {
    "error": {
        "code": "service_unavailable",
        "message": "A service this request needs is unavailable; try again shortly.",
        "fields": {},
    }
}
RESTARTS = 3
BURST_REQUESTS = 300
OUTAGE_REQUESTS = 100
CONCURRENCY = 20
# Requests answered before the Redis under a burst is stopped.
ANSWERED_BEFORE_STOP = 60
READINESS_TIMEOUT_SECONDS = 30.0


def redis_timing_out_page(request: HttpRequest) -> HttpResponse:
    raise redis.TimeoutError("Timeout reading from 127.0.0.1:6399")


urlpatterns = [path("page-needing-redis/", redis_timing_out_page)]


@pytest.mark.django_db
def test_an_api_request_that_cannot_reach_redis_answers_503_with_the_envelope(
    bob_api: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6399. Connection refused.")

    monkeypatch.setattr(throttling, "count_in_windows", refused)

    response = bob_api.get("/api/v1/sessions/")

    assert (response.status_code, response.json()) == (503, SERVICE_UNAVAILABLE)


@pytest.mark.urls(__name__)
def test_a_page_that_cannot_reach_redis_answers_503_with_the_envelope(client: Client) -> None:
    response = client.get("/page-needing-redis/")

    assert (response.status_code, response.json()) == (503, SERVICE_UNAVAILABLE)


# --- live: a private Redis restarted under load ----------------------------------------------


@dataclass
class Burst:
    """Answers to GET requests sent ``concurrency`` at a time, as (status, JSON body); appended as
    they arrive, so another thread can watch the burst's progress."""

    base_url: str
    token: str
    answers: list[tuple[int, Any]] = field(default_factory=list)

    def run(self, requests: int, concurrency: int = CONCURRENCY) -> Counter[int]:
        asyncio.run(self._send_all(requests, concurrency))
        return Counter(status for status, _body in self.answers)

    def bodies_of(self, status: int) -> list[Any]:
        return [body for answer_status, body in self.answers if answer_status == status]

    async def _send_all(self, requests: int, concurrency: int) -> None:
        limits = httpx.Limits(max_connections=concurrency)
        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(
            base_url=self.base_url, headers=headers, limits=limits, timeout=30, trust_env=False
        ) as client:
            slots = asyncio.Semaphore(concurrency)

            async def send_one() -> None:
                async with slots:
                    response = await client.get("/api/v1/sessions/")
                self.answers.append((response.status_code, response.json()))

            await asyncio.gather(*(send_one() for _ in range(requests)))


def readiness(stack: LiveStack) -> tuple[int, dict[str, Any]]:
    response = httpx.get(f"{stack.base_url}/readyz", timeout=10, trust_env=False)
    body: dict[str, Any] = response.json()
    return response.status_code, body


def wait_until_readiness_is(stack: LiveStack, *, is_ready: bool) -> dict[str, Any]:
    """Poll /readyz until it answers 200 (ready) or reports redis failing (not ready)."""

    def body_when_as_expected() -> dict[str, Any] | None:
        status, body = readiness(stack)
        if is_ready:
            return body if status == 200 else None
        return body if status == 503 and not body["checks"]["redis"]["ok"] else None

    state = "ready" if is_ready else "reporting redis down"
    report: dict[str, Any] = wait_until(
        body_when_as_expected, timeout=READINESS_TIMEOUT_SECONDS, message=f"/readyz {state}"
    )
    return report


@pytest.fixture
def server_on_private_redis(private_redis: PrivateRedis, tmp_path: Path) -> Iterator[LiveStack]:
    """uvicorn against the test database and the private Redis; a throttle too high to answer 429,
    so every answer but an outage's is exactly 200."""
    stack = LiveStack(tmp_path, REDIS_URL=private_redis.url, API_THROTTLE_RATE="1000000/min")
    try:
        stack.start_server()
        yield stack
    finally:
        stack.stop()


def stop_during_burst(private_redis: PrivateRedis, burst: Burst) -> Counter[int]:
    """Run a burst and stop Redis once part of it is answered: requests in flight meet the outage."""
    with ThreadPoolExecutor(max_workers=1) as executor:
        running = executor.submit(burst.run, BURST_REQUESTS)
        wait_until(lambda: len(burst.answers) >= ANSWERED_BEFORE_STOP or running.done(), timeout=60)
        private_redis.stop()
        return running.result(timeout=120)


@pytest.mark.timeout(600)
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    not settings.REDIS_URL or connection.vendor != "postgresql",
    reason="runs with the suite on PostgreSQL + Redis (DATABASE_URL and REDIS_URL set)",
)
def test_requests_answer_503_while_redis_is_down_and_200_once_it_is_back(
    cast: Cast, private_redis: PrivateRedis, server_on_private_redis: LiveStack
) -> None:
    stack = server_on_private_redis
    token = make_api_key(tenant=cast.tenant_a, user=cast.bob)
    assert Burst(stack.base_url, token).run(BURST_REQUESTS) == {200: BURST_REQUESTS}

    for _restart in range(RESTARTS):
        spanning = Burst(stack.base_url, token)
        statuses = stop_during_burst(private_redis, spanning)
        assert set(statuses) == {200, 503}, statuses
        assert all(body == SERVICE_UNAVAILABLE for body in spanning.bodies_of(503))

        report = wait_until_readiness_is(stack, is_ready=False)
        assert report["status"] == "unavailable"
        assert report["checks"]["database"]["ok"] is True
        assert report["checks"]["redis"]["error"].startswith("ConnectionError: ")
        outage = Burst(stack.base_url, token)
        assert outage.run(OUTAGE_REQUESTS) == {503: OUTAGE_REQUESTS}
        assert outage.bodies_of(503) == [SERVICE_UNAVAILABLE] * OUTAGE_REQUESTS

        private_redis.start()
        wait_until_readiness_is(stack, is_ready=True)
        assert Burst(stack.base_url, token).run(BURST_REQUESTS) == {200: BURST_REQUESTS}


# --- posting while the broker is down: all or nothing ----------------------------------------------


@pytest.fixture
def stopped_redis(tmp_path: Path) -> PrivateRedis:
    """A private Redis that ran and was stopped: nothing answers on its port any more."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed: the test starts a Redis of its own")
    server = PrivateRedis(port=free_port(), log_path=tmp_path / "redis.log")
    server.start()
    server.stop()
    return server


def run_queue_on(url: str, monkeypatch: pytest.MonkeyPatch) -> RedisBroker:
    """The run queue as a django-q2 Redis broker at ``url``, whichever broker the suite configured."""
    monkeypatch.setattr(Conf, "REDIS", url)
    broker = RedisBroker(list_key="agentry-test-runs")
    monkeypatch.setattr(tasks, "run_queue_broker", lambda: broker)
    return broker


@pytest.mark.django_db(transaction=True)
def test_a_message_posted_while_the_broker_is_down_answers_503_and_stores_nothing(
    cast: Cast, bob_api: APIClient, stopped_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_queue_on(stopped_redis.url, monkeypatch)
    session = Session.objects.create(
        tenant=cast.tenant_a, agent=make_agent(tenant=cast.tenant_a), created_by=cast.bob
    )

    response = bob_api.post(f"/api/v1/sessions/{session.pk}/messages/", {"content": "hello"}, format="json")

    assert (response.status_code, response.json()) == (503, SERVICE_UNAVAILABLE)
    assert (Message.objects.count(), Run.objects.count(), RunEvent.objects.count()) == (0, 0, 0)
    assert Session.objects.get(pk=session.pk).title == ""


@pytest.mark.django_db(transaction=True)
def test_a_message_posted_while_the_broker_is_up_is_stored_and_its_task_queued(
    cast: Cast, bob_api: APIClient, private_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = run_queue_on(private_redis.url, monkeypatch)
    session = Session.objects.create(
        tenant=cast.tenant_a, agent=make_agent(tenant=cast.tenant_a), created_by=cast.bob
    )

    response = bob_api.post(f"/api/v1/sessions/{session.pk}/messages/", {"content": "hello"}, format="json")

    assert response.status_code == 202
    assert (Message.objects.count(), Run.objects.filter(status=RunStatus.QUEUED).count()) == (1, 1)
    assert broker.queue_size() == 1


@pytest.mark.django_db
def test_readyz_names_the_dependency_that_is_down(
    client: Client, stopped_redis: PrivateRedis, settings: Any
) -> None:
    settings.REDIS_URL = stopped_redis.url  # the broker check's Redis; the cache keeps its own

    response = client.get("/readyz")

    body = response.json()
    assert (response.status_code, body["status"]) == (503, "unavailable")
    assert {name: check["ok"] for name, check in body["checks"].items()} == {
        "database": True,
        **({"redis": True} if "redis" in body["checks"] else {}),
        "broker": False,
        "channel_layer": True,
    }
    assert body["checks"]["broker"]["error"].startswith("ConnectionError: ")


@pytest.mark.django_db(transaction=True)
def test_a_message_posted_to_a_server_whose_redis_is_stopped_answers_503_and_stores_nothing(
    cast: Cast, private_redis: PrivateRedis, server_on_private_redis: LiveStack
) -> None:
    token = make_api_key(tenant=cast.tenant_a, user=cast.bob)
    session = Session.objects.create(
        tenant=cast.tenant_a, agent=make_agent(tenant=cast.tenant_a), created_by=cast.bob
    )
    private_redis.stop()

    response = httpx.post(
        f"{server_on_private_redis.base_url}/api/v1/sessions/{session.pk}/messages/",
        json={"content": "hello"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
        trust_env=False,
    )
    status, report = readiness(server_on_private_redis)

    assert (response.status_code, response.json()) == (503, SERVICE_UNAVAILABLE)
    assert (Message.objects.count(), Run.objects.count(), RunEvent.objects.count()) == (0, 0, 0)
    assert (status, report["status"]) == (503, "unavailable")
    assert {name: check["ok"] for name, check in report["checks"].items()} == {
        "database": True,
        "redis": False,
        "broker": False,
        "channel_layer": False,
    }
