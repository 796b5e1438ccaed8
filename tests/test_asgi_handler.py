"""``core.asgi_handler.SyncChainASGIHandler``: a request's sync work in one thread hop."""

import asyncio
import threading
from typing import Any

from asgiref.testing import ApplicationCommunicator
from django.core import signals

from core.asgi_handler import SyncChainASGIHandler


def _get(handler: SyncChainASGIHandler, path: str, query_string: bytes = b"") -> list[dict[str, Any]]:
    scope = {
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

    async def exchange() -> list[dict[str, Any]]:
        communicator = ApplicationCommunicator(handler, scope)
        await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await communicator.receive_output(timeout=10)
        body = await communicator.receive_output(timeout=10)
        await communicator.wait(timeout=10)
        return [start, body]

    return asyncio.run(exchange())


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
