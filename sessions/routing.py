"""Websocket routes and the stack in front of them: origin check, cookies, session, user."""

from importlib import import_module
from typing import Any
from urllib.parse import ParseResult

from channels.auth import get_user
from channels.routing import URLRouter
from channels.security.websocket import OriginValidator
from django.conf import settings
from django.http.cookie import parse_cookie
from django.urls import path, re_path

from sessions.consumers import SessionEventsConsumer, UnknownPathConsumer

websocket_urlpatterns = [
    path("ws/sessions/<str:session_id>/", SessionEventsConsumer.as_asgi()),
    # Any other path: closed with 4404 after the handshake, where the router would raise (a 500).
    re_path(r"", UnknownPathConsumer.as_asgi()),
]


class BrowserOriginValidator(OriginValidator):
    """A browser always sends Origin, and it must be one of ours (no cross-site hijacking).

    Clients that are not browsers (integrations with an API key) send none and pass:
    without a browser there is no ambient cookie for another site to abuse.
    """

    def valid_origin(self, parsed_origin: ParseResult | None) -> bool:
        if parsed_origin is None:
            return True
        return bool(self.validate_origin(parsed_origin))


def allowed_origins() -> list[str]:
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:
        hosts = ["localhost", "127.0.0.1", "[::1]"]
    return [*hosts, *settings.CSRF_TRUSTED_ORIGINS]


class BrowserSessionMiddleware:
    """The browser's session and user (``scope["session"]``, ``scope["user"]``), read once at connect.

    Channels' ``AuthMiddlewareStack`` does the same but also wraps every outgoing message to
    save a modified session. These sockets never write the session, and with a hundred
    watchers of one session that wrapper was a seventh of the server's time per event
    (``bench/stream_fanout.py``).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        cookie_header = next((value for name, value in scope.get("headers", []) if name == b"cookie"), b"")
        session_key = parse_cookie(cookie_header.decode("latin-1")).get(settings.SESSION_COOKIE_NAME)
        session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
        scope = {**scope, "session": session}
        scope["user"] = await get_user(scope)
        return await self.inner(scope, receive, send)


def websocket_application() -> Any:
    return BrowserOriginValidator(
        BrowserSessionMiddleware(URLRouter(websocket_urlpatterns)), allowed_origins()
    )
