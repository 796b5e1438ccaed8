"""Who is acting and from where, for the audit entries a request's writes record.

The interfaces know it (a browser or admin request, an API key) and the services that
write do not take a request, so it travels beside the call in a ``ContextVar``: the
middleware sets it for every request and clears it at the end, the API-key authentication
narrows it to the key. A context variable is local to a thread and to an asyncio task, and a
request's middleware and view run in one context (``core.http_application``). Writes
outside a request (management commands, django-q2 tasks) find none and record ``system``.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from django.http import HttpRequest, HttpResponse

from audit.models import AuditSource


@dataclass(frozen=True)
class AuditContext:
    source: str
    # The request's user; may be a lazy object, read only when an entry is written.
    user: Any = None
    api_key_prefix: str = ""
    remote_address: str = ""


SYSTEM_CONTEXT = AuditContext(source=AuditSource.SYSTEM)
_current: ContextVar[AuditContext] = ContextVar("audit_context", default=SYSTEM_CONTEXT)


def audit_context() -> AuditContext:
    return _current.get()


@contextmanager
def audit_context_set(context: AuditContext) -> Iterator[AuditContext]:
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


def audit_context_use_api_key(*, user: Any, api_key_prefix: str) -> None:
    """The request authenticated with an API key: its writes are the key creator's, from the API.

    Replaces the value for the rest of the request; the middleware's reset still restores
    what was there before the request. Without the middleware's context (a view called
    directly) there is no request to narrow, and a value set here would outlive it.
    """
    current = _current.get()
    if current is SYSTEM_CONTEXT:
        return
    _current.set(replace(current, source=AuditSource.API, user=user, api_key_prefix=api_key_prefix))


def source_of_path(path: str) -> str:
    if path.startswith("/admin/"):
        return AuditSource.ADMIN
    if path.startswith("/api/"):
        return AuditSource.API
    return AuditSource.UI


class AuditContextMiddleware:
    """Sets the request's audit context (after AuthenticationMiddleware, which provides the user)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        context = AuditContext(
            source=source_of_path(request.path),
            user=getattr(request, "user", None),
            remote_address=request.META.get("REMOTE_ADDR", "") or "",
        )
        with audit_context_set(context):
            return self.get_response(request)
