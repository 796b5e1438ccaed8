"""A tenant's outside service that never answers holds at most a quarter of the server's pooled
threads (``core.outside_waits``): everyone else's requests are still answered."""

import socket
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.test import Client
from rest_framework.test import APIClient

from core.api.errors import ServerBusy
from core.outside_waits import on_pooled_thread, outside_wait_slots, waiting_outside
from mcp_servers.models import McpHealth, McpServer
from tenants.models import ProviderKey
from tests.conftest import Cast
from tests.factories import make_api_key
from tests.fake_model_server import FakeModelServer
from tests.live import LiveStack

ANSWER_TIMEOUT = 10.0
# Longer than the test: the first check waits on the silent server until the test lets it go.
SILENT_SERVER_TIMEOUT_SECONDS = 120.0


@pytest.mark.parametrize(("threads", "slots"), [(1, 1), (2, 1), (7, 1), (8, 2), (16, 4)])
def test_a_quarter_of_the_pool_at_least_one_thread_may_wait_outside(threads: int, slots: int) -> None:
    assert outside_wait_slots(threads) == slots


def test_off_the_pool_waits_outside_are_not_counted() -> None:
    with waiting_outside(), waiting_outside(), waiting_outside():
        pass  # a task, or a request on a thread of its own: nothing to protect


def test_on_the_pool_a_wait_is_refused_while_other_requests_hold_the_share() -> None:
    share = threading.BoundedSemaphore(1)
    with on_pooled_thread(share):
        share.acquire()  # another request waits outside
        with pytest.raises(ServerBusy), waiting_outside():
            pass
        share.release()  # and is done: a later wait gets the share (raising ServerBusy fails this)
        with waiting_outside():
            pass
    share.acquire()
    with waiting_outside():  # this request over: off the pool again, nothing counted
        pass


def test_a_requests_waits_one_inside_the_other_take_one_share() -> None:
    share = threading.BoundedSemaphore(1)
    with on_pooled_thread(share), waiting_outside(), waiting_outside():  # a name resolved, then called
        assert share.acquire(blocking=False) is False  # the one share, held once
    assert share.acquire(blocking=False) is True  # and given back once


def unchecked_server(cast: Cast) -> McpServer:
    return McpServer.objects.create(
        tenant=cast.tenant_a, name="docs", transport="streamable_http", url="https://mcp.example.com/mcp"
    )


def health_of(server: McpServer) -> tuple[str, object, str]:
    server.refresh_from_db()
    return server.health_status, server.last_checked_at, server.last_error


@pytest.mark.usefixtures("outside_waits_taken")
def test_the_api_answers_a_check_503_with_retry_after_and_checks_nothing(
    cast: Cast, alice_api: APIClient
) -> None:
    server = unchecked_server(cast)

    response = alice_api.post(f"/api/v1/mcp-servers/{server.pk}/check/")

    assert (response.status_code, response["Retry-After"]) == (503, "5")
    assert response.json() == {
        "error": {"code": "server_busy", "message": ServerBusy.default_detail, "fields": {}}
    }
    assert health_of(server) == (McpHealth.UNKNOWN, None, "")


@pytest.mark.usefixtures("outside_waits_taken")
def test_the_api_answers_a_key_test_503_without_calling_the_provider(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer
) -> None:
    key = ProviderKey.objects.create(
        tenant=cast.tenant_a, provider="anthropic", api_key="tenant-key-0123456789"
    )

    response = alice_api.post(f"/api/v1/provider-keys/{key.pk}/test/")

    assert (response.status_code, response.json()["error"]["code"]) == (503, "server_busy")
    assert fake_model.model_list_requests == []


@pytest.mark.usefixtures("outside_waits_taken")
def test_the_api_answers_saving_a_key_with_a_base_url_503_and_stores_nothing(alice_api: APIClient) -> None:
    response = alice_api.post(
        "/api/v1/provider-keys/",
        {"provider": "openai", "api_key": "tenant-key-0123456789", "base_url": "https://llm.example.com/v1"},
        format="json",
    )

    assert (response.status_code, response.json()["error"]["code"]) == (503, "server_busy")
    assert ProviderKey.objects.count() == 0


@pytest.mark.usefixtures("outside_waits_taken")
def test_the_admins_check_action_says_which_servers_it_could_not_check(cast: Cast) -> None:
    server = unchecked_server(cast)
    client = Client()
    assert client.login(username="alice@a.test", password="alice-password")

    response = client.post(
        "/admin/mcp_servers/mcpserver/",
        {"action": "check_now", "_selected_action": [str(server.pk)]},
        follow=True,
    )

    assert response.status_code == 200
    assert [str(message) for message in response.context["messages"]] == [
        f"docs: not checked: {ServerBusy.default_detail}"
    ]
    assert health_of(server) == (McpHealth.UNKNOWN, None, "")


class SilentServer:
    """Accepts connections and never answers, as a tarpit a tenant could point a check at."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.accepted = threading.Event()
        self._connections: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed
            self._connections.append(connection)
            self.accepted.set()

    def close(self) -> None:
        """Closing the connections ends the waits on them at once."""
        self._listener.close()
        for connection in self._connections:
            connection.close()
        self._thread.join(timeout=ANSWER_TIMEOUT)


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def two_thread_server(tmp_path_factory: pytest.TempPathFactory, django_db_setup: None) -> Iterator[LiveStack]:
    """Two pooled threads: one may wait outside, the other stays for everyone else."""
    live = LiveStack(
        Path(tmp_path_factory.mktemp("two-threads")),
        SERVER_THREADS="2",
        MCP_ALLOWED_PRIVATE_HOSTS="127.0.0.1",
    )
    live.start_server()
    yield live
    live.stop()


@pytest.mark.django_db(transaction=True)
def test_checks_of_a_server_that_never_answers_leave_the_other_requests_a_thread(
    two_thread_server: LiveStack, silent_server: SilentServer, cast: Cast
) -> None:
    server = McpServer.objects.create(
        tenant=cast.tenant_a,
        name="silent",
        transport="streamable_http",
        url=f"http://127.0.0.1:{silent_server.port}/mcp",
        connect_timeout_seconds=SILENT_SERVER_TIMEOUT_SECONDS,
        call_timeout_seconds=SILENT_SERVER_TIMEOUT_SECONDS,
    )
    client = httpx.Client(
        base_url=two_thread_server.base_url,
        headers={"Authorization": f"Bearer {make_api_key(tenant=cast.tenant_a, user=cast.alice)}"},
        timeout=ANSWER_TIMEOUT,
    )
    check_url = f"/api/v1/mcp-servers/{server.pk}/check/"
    with client, ThreadPoolExecutor(max_workers=1) as background:
        first: Future[httpx.Response] = background.submit(
            client.post, check_url, timeout=SILENT_SERVER_TIMEOUT_SECONDS
        )
        try:
            assert silent_server.accepted.wait(ANSWER_TIMEOUT), "the first check never connected"

            second = client.post(check_url)
            health = client.get("/healthz")
            listed = client.get(f"/api/v1/mcp-servers/{server.pk}/")
        finally:
            silent_server.close()  # the first check now fails at once
        first_answer = first.result(timeout=ANSWER_TIMEOUT)

    assert (second.status_code, second.headers["Retry-After"]) == (503, "5")
    assert second.json()["error"]["code"] == "server_busy"
    assert health.status_code == 200
    # Nothing recorded by the refused check while the first one was still waiting.
    assert (listed.status_code, listed.json()["health_status"]) == (200, McpHealth.UNKNOWN)
    assert (first_answer.status_code, first_answer.json()["health_status"]) == (200, McpHealth.DOWN)
