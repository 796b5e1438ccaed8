"""``core.asgi_handler.SyncChainASGIHandler``: a request's sync work in one thread hop."""

import asyncio
import threading
from typing import Any

from asgiref.testing import ApplicationCommunicator
from django.core import signals

from core.asgi_handler import RequestThreads, SyncChainASGIHandler


def _scope(path: str, query_string: bytes = b"") -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query_string,
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


async def _exchange(handler: SyncChainASGIHandler, scope: dict[str, Any]) -> list[dict[str, Any]]:
    communicator = ApplicationCommunicator(handler, scope)
    await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await communicator.receive_output(timeout=10)
    body = await communicator.receive_output(timeout=10)
    await communicator.wait(timeout=10)
    return [start, body]


def _get(handler: SyncChainASGIHandler, path: str, query_string: bytes = b"") -> list[dict[str, Any]]:
    return asyncio.run(_exchange(handler, _scope(path, query_string)))


def _recording_threads(handler: SyncChainASGIHandler, before_response: Any = None) -> list[int]:
    """The thread of each request's view, in order; ``before_response`` runs there first."""
    threads: list[int] = []
    get_response = handler.get_response

    def recording_get_response(request: Any) -> Any:
        threads.append(threading.get_ident())
        if before_response is not None:
            before_response()
        return get_response(request)

    handler.get_response = recording_get_response  # type: ignore[method-assign]
    return threads


def test_request_started_and_the_view_run_in_one_thread_hop() -> None:
    handler = SyncChainASGIHandler()
    started_in: list[tuple[int, type]] = []
    responded_in: list[int] = []
    get_response = handler.get_response

    def record_start(sender: type, **kwargs: Any) -> None:
        started_in.append((threading.get_ident(), sender))

    def recording_get_response(request: Any) -> Any:
        responded_in.append(threading.get_ident())
        return get_response(request)

    handler.get_response = recording_get_response  # type: ignore[method-assign]
    signals.request_started.connect(record_start)
    try:
        start, body = _get(handler, "/healthz")
    finally:
        signals.request_started.disconnect(record_start)

    assert (start["type"], start["status"], body["type"]) == (
        "http.response.start",
        200,
        "http.response.body",
    )
    assert started_in == [(responded_in[0], SyncChainASGIHandler)]
    assert responded_in != [threading.get_ident()]  # not on the event loop's thread


def test_a_request_django_refuses_before_the_view_still_starts_and_answers() -> None:
    handler = SyncChainASGIHandler()
    senders: list[type] = []

    def record_start(sender: type, **kwargs: Any) -> None:
        senders.append(sender)

    signals.request_started.connect(record_start)
    try:
        # A query string that is not UTF-8: Django answers 400 before there is a request object.
        start, _body = _get(handler, "/healthz", query_string=b"probe=%s" % bytes([0xFF]))
    finally:
        signals.request_started.disconnect(record_start)
    assert (senders, start["status"]) == ([SyncChainASGIHandler], 400)


def test_one_request_after_another_reuses_the_request_thread() -> None:
    handler = SyncChainASGIHandler()
    threads = _recording_threads(handler)

    statuses = [_get(handler, "/healthz")[0]["status"] for _ in range(3)]

    assert statuses == [200, 200, 200]
    assert len(threads) == 3
    assert len(set(threads)) == 1


def test_requests_at_the_same_time_each_have_a_thread_of_their_own() -> None:
    handler = SyncChainASGIHandler()
    # The first two views wait for each other: two requests sharing one thread would time out here.
    both_in_views = threading.Barrier(2, timeout=10)
    threads: list[int] = _recording_threads(handler, lambda: len(threads) > 2 or both_in_views.wait())

    async def two_at_once() -> list[list[dict[str, Any]]]:
        return list(await asyncio.gather(*(_exchange(handler, _scope("/healthz")) for _ in range(2))))

    answers = asyncio.run(two_at_once())
    # Afterwards both threads are kept, and the next request takes one of them.
    after = _get(handler, "/healthz")[0]["status"]

    assert [start["status"] for start, _body in answers] == [200, 200]
    assert after == 200
    assert len(set(threads[:2])) == 2
    assert threads[2] in threads[:2]


def test_threads_beyond_the_kept_number_end_with_their_request() -> None:
    handler = SyncChainASGIHandler()
    handler.request_threads = RequestThreads(keep=1)
    both_in_views = threading.Barrier(2, timeout=10)
    _recording_threads(handler, before_response=both_in_views.wait)

    async def two_at_once() -> None:
        await asyncio.gather(*(_exchange(handler, _scope("/healthz")) for _ in range(2)))

    asyncio.run(two_at_once())

    assert len(handler.request_threads._idle) == 1
