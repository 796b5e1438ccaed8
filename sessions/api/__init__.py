"""The sessions API: sessions (with their messages) and runs."""

from sessions.api.runs import RunViewSet
from sessions.api.sessions import IDEMPOTENCY_KEY_MAX_LENGTH, SessionViewSet

__all__ = ["IDEMPOTENCY_KEY_MAX_LENGTH", "RunViewSet", "SessionViewSet"]
