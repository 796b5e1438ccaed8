"""Websocket routes and the stack in front of them: origin check, cookies, session, user."""

from typing import Any
from urllib.parse import ParseResult

from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.security.websocket import OriginValidator
from django.conf import settings
from django.urls import path

from sessions.consumers import SessionEventsConsumer

websocket_urlpatterns = [
    path("ws/sessions/<str:session_id>/", SessionEventsConsumer.as_asgi()),
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


def websocket_application() -> Any:
    return BrowserOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)), allowed_origins())
