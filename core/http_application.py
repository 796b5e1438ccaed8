"""The server's HTTP side: one uvicorn process, two of Django's handlers.

Django's ASGI handler runs each request of sync middleware and views (all of this project's but
the event streams) on a thread started for that request, and crosses between the event loop and
that thread several times. In a burst of posts, hundreds of such threads hand the interpreter
lock around across the cores, and the server spent about a third more CPU a post than Django's
WSGI handler on a small pool of threads (a2wsgi, docs/benchmarks.md). So most requests go to the
WSGI handler on a bounded pool (``SERVER_THREADS``). Three kinds stay with the ASGI handler,
which holds no thread while it waits on a client:

- event streams (SSE, ``Accept: text/event-stream``): they last as long as their client;
- file downloads: a slow client would hold a pooled thread for the whole file;
- bodies larger than Django keeps in memory (``FILE_UPLOAD_MAX_MEMORY_SIZE``), or of unknown
  length: the ASGI handler spools them to disk, or refuses them as it did before.

Any other body is read whole before the request takes a thread, so a client that sends slowly
holds none. At most a quarter of the pool may wait on services outside this deployment at once
(``core.outside_waits``).
"""

import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from a2wsgi import WSGIMiddleware
from a2wsgi.wsgi_typing import Environ, StartResponse
from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.wsgi import get_wsgi_application

from core.outside_waits import on_pooled_thread, outside_wait_slots

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
# Django's and a2wsgi's ASGI signatures differ in their types only (Mapping against TypedDicts).
AsgiApplication = Callable[[Any, Any, Any], Awaitable[None]]

DOWNLOAD_PATH_END = "/download/"


class HttpApplication:
    def __init__(self, *, threads: int) -> None:
        self._asgi_handler: AsgiApplication = get_asgi_application()
        # The WSGI handler returns Django's response, which is its own iterable of bytes.
        wsgi_handler: Any = get_wsgi_application()
        outside_waits = threading.BoundedSemaphore(outside_wait_slots(threads))

        def pooled(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
            with on_pooled_thread(outside_waits):
                return wsgi_handler(environ, start_response)

        self._pooled_wsgi_handler: AsgiApplication = WSGIMiddleware(pooled, workers=threads)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Any) -> None:
        if stays_with_the_asgi_handler(scope):
            await self._asgi_handler(scope, receive, send)
            return
        body = await whole_body(receive)
        if body is None:
            return  # the client left before sending its body: nobody to answer
        await self._pooled_wsgi_handler(scope, body_replayed(body, receive), send)


def stays_with_the_asgi_handler(scope: dict[str, Any]) -> bool:
    """Either handler answers any request the same; this picks those that must not hold a thread."""
    if scope["method"] in ("GET", "HEAD") and scope["path"].endswith(DOWNLOAD_PATH_END):
        return True
    length = 0
    for name, value in scope["headers"]:
        if name == b"accept" and b"text/event-stream" in value.lower():
            return True
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return True
    return not 0 <= length <= settings.FILE_UPLOAD_MAX_MEMORY_SIZE


async def whole_body(receive: Receive) -> bytes | None:
    """The request's body, or None when the client disconnected first."""
    parts = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


def body_replayed(body: bytes, receive: Receive) -> Receive:
    """``receive`` for the WSGI side: the body read already, then the client's next message."""
    is_body_sent = False

    async def replay() -> Message:
        nonlocal is_body_sent
        if is_body_sent:
            return await receive()
        is_body_sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
