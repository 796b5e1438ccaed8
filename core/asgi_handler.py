"""Django's ASGI handler with one thread hop per request instead of three.

Django builds an ASGI handler's middleware chain in async mode. Every middleware here is
synchronous (Django's own, WhiteNoise, ours), so Django adapts around them: the request
goes from the event loop to the sync thread for the middleware, back to the loop for the
URL resolution, and to the thread again for a sync view, then the same way back. Each hop
wakes a thread or the loop, which on a small machine costs more than the work between.
This handler builds the chain in sync mode, as under WSGI, and calls it in one hop.

Async views (the SSE streams) still work: the sync chain runs them with ``async_to_sync``
on the server's loop, and their streaming bodies are sent by ``ASGIHandler`` as before.
"""

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.http import HttpRequest
from django.http.response import HttpResponseBase


class SyncChainASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        BaseHandler.__init__(self)
        self.load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = await sync_to_async(self.get_response, thread_sensitive=True)(request)
        return response
