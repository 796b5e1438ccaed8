"""Django's ASGI handler with one thread hop per request instead of four.

Django builds an ASGI handler's middleware chain in async mode. Every middleware here is
synchronous (Django's own, WhiteNoise, ours), so Django adapts around them: the request
goes from the event loop to the sync thread for the middleware, back to the loop for the
URL resolution, and to the thread again for a sync view, then the same way back. Before
all that, ``request_started`` goes to its sync receivers (closing stale database
connections) in a hop of its own. Each hop wakes a thread or the loop, which on a small
machine costs more than the work between. This handler builds the chain in sync mode, as
under WSGI, and sends ``request_started`` and runs the chain in one hop.

Async views (the SSE streams) still work: the sync chain runs them with ``async_to_sync``
on the server's loop, and their streaming bodies are sent by ``ASGIHandler`` as before.

Django also gives every request a thread of its own (a new single-thread executor), and a
second thread to join it afterwards: two thread starts per request. This handler keeps the
request threads of finished requests and hands them to the next ones (``RequestThreads``);
one request still has one thread to itself while it runs, as in Django.
"""

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.urls import set_script_prefix

# Threads kept for the next requests; more requests than this at once get threads that end
# with them, as every request's did before.
IDLE_REQUEST_THREADS = 16


class RequestThreads:
    """Single-thread executors for requests, each lent to one request at a time (event loop only)."""

    def __init__(self, keep: int = IDLE_REQUEST_THREADS) -> None:
        self._keep = keep
        self._idle: list[ThreadPoolExecutor] = []

    def lend(self) -> ThreadPoolExecutor:
        # The most recently returned first: its thread's database connection is the warmest.
        return self._idle.pop() if self._idle else ThreadPoolExecutor(1, thread_name_prefix="request")

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        """Called when the request is done: every thread-sensitive call of it has returned."""
        if len(self._idle) < self._keep:
            self._idle.append(executor)
        else:
            executor.shutdown(wait=False)


class SyncChainASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        BaseHandler.__init__(self)
        self.load_middleware(is_async=False)
        self.request_threads = RequestThreads()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """``ASGIHandler.__call__`` with a lent request thread instead of a new one."""
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self.request_threads.lend()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            # sync_to_async waits for its thread even when cancelled: the thread is free now.
            self.request_threads.give_back(executor)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = await sync_to_async(self._start_and_get_response, thread_sensitive=True)(
            request
        )
        return response

    def _start_and_get_response(self, request: HttpRequest) -> HttpResponseBase:
        signals.request_started.send(sender=self.__class__, scope=request.scope)  # type: ignore[attr-defined]
        return self.get_response(request)

    async def handle(self, scope: Any, receive: Any, send: Any) -> None:
        """``ASGIHandler.handle`` (Django 5.2), except that ``request_started`` is sent by
        ``get_response_async``, in the thread hop of the view, instead of in a hop of its own."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            assert error_response is not None
            await signals.request_started.asend(sender=self.__class__, scope=scope)
            body_file.close()
            await self.send_response(error_response, send)
            await sync_to_async(error_response.close)()
            return

        async def process_request(request: HttpRequest, send: Any) -> HttpResponseBase:
            response: HttpResponseBase = await self.run_get_response(request)
            with contextlib.suppress(asyncio.CancelledError):  # the client left during send_response
                await self.send_response(response, send)
            return response

        # Catch a disconnect while the response is made; the listener is checked first.
        listener = asyncio.create_task(self.listen_for_disconnect(receive))
        responder = asyncio.create_task(process_request(request, send))
        tasks: list[asyncio.Task[Any]] = [listener, responder]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass  # client disconnects are ignored
                except AssertionError:
                    body_file.close()
                    raise
            else:
                task.cancel()  # views may handle the cancellation
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            response = responder.result()
        except asyncio.CancelledError:
            await signals.request_finished.asend(sender=self.__class__)
        else:
            await sync_to_async(response.close)()
        body_file.close()
