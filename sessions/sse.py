"""Server-sent events for integrations: a session's or a run's events, live and resumable.

``id:`` is the session seq, ``event:`` the type and ``data:`` the §4 envelope. A client
resumes with ``Last-Event-ID`` (browsers send it on reconnect) or ``?after=``. A stream is
authorized again every ``STREAM_REAUTHORIZE_SECONDS`` and ends once its client may no longer
read it (the reconnect then answers 401, 403 or 404). The JSON
list at the same URLs stays a DRF view; ``with_event_stream`` picks one per request.
"""

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from uuid import UUID

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.views.decorators.csrf import csrf_exempt

from core.api.errors import GENERIC_MESSAGES, error_body
from sessions.event_store import Envelope
from sessions.models import Run, Session
from sessions.selectors import run_get_for_actor, session_get_for_actor
from sessions.streams import (
    EventSource,
    authenticate_token,
    envelope_text,
    parse_after,
    run_events,
    stream_hub,
    while_authorized,
)
from tenants.actors import ACTIVE_TENANT_SESSION_KEY, Actor, actor_for_user
from tenants.authentication import TOO_MANY_WRONG_KEYS
from tenants.sign_in_throttle import client_address

EVENT_STREAM = "text/event-stream"
RECONNECT_MILLISECONDS = 2000

AsyncView = Callable[..., Awaitable[HttpResponseBase]]


def keepalive_seconds() -> float:
    return float(getattr(settings, "SSE_KEEPALIVE_SECONDS", 15.0))


def wants_event_stream(request: HttpRequest) -> bool:
    """True when the client lists ``text/event-stream`` in Accept (``*/*`` alone means JSON)."""
    accepted = request.headers.get("Accept", "")
    return any(part.split(";", 1)[0].strip().lower() == EVENT_STREAM for part in accepted.split(","))


class _Refusal(Exception):
    def __init__(self, response: HttpResponse) -> None:
        super().__init__(response.status_code)
        self.response = response


def _error(status: int, code: str, message: str, fields: dict[str, list[str]] | None = None) -> JsonResponse:
    response = JsonResponse(error_body(code, message, fields), status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


def _actor_for_request(request: HttpRequest) -> Actor:
    """Bearer API key, else the browser session, the same rules as the REST API."""
    keyword, _, token = request.headers.get("Authorization", "").partition(" ")
    if keyword.lower() == "bearer":
        result = authenticate_token(token.strip(), address=client_address(request))
        if result.retry_after:
            refused = _error(
                429, "throttled", f"{TOO_MANY_WRONG_KEYS} Try again in {result.retry_after} seconds."
            )
            refused["Retry-After"] = str(result.retry_after)
            raise _Refusal(refused)
        if not result.is_valid_key:
            raise _Refusal(_error(401, "authentication_failed", "Invalid, expired or revoked API key."))
        if result.actor is None:
            raise _Refusal(_error(403, "permission_denied", GENERIC_MESSAGES["permission_denied"]))
        return result.actor
    user = getattr(request, "user", AnonymousUser())
    if not user.is_authenticated:
        raise _Refusal(_error(401, "not_authenticated", GENERIC_MESSAGES["not_authenticated"]))
    actor = actor_for_user(user, preferred_tenant_id=request.session.get(ACTIVE_TENANT_SESSION_KEY))
    if actor is None:
        raise _Refusal(_error(403, "permission_denied", GENERIC_MESSAGES["permission_denied"]))
    return actor


def _resume_point(request: HttpRequest) -> int:
    """``Last-Event-ID`` wins over ``?after=``: a reconnecting browser keeps its original URL."""
    for name, raw in (
        ("Last-Event-ID", request.headers.get("Last-Event-ID")),
        ("after", request.GET.get("after")),
    ):
        if raw is None:
            continue
        try:
            return parse_after(raw.strip())
        except ValueError:
            raise _Refusal(
                _error(
                    400,
                    "invalid",
                    f"{name}: Must be a non-negative integer.",
                    {name: ["Must be a non-negative integer."]},
                )
            ) from None
    return 0


@database_sync_to_async
def _authorized_session(request: HttpRequest, session_id: str) -> Session:
    actor = _actor_for_request(request)
    try:
        return session_get_for_actor(actor=actor, session_id=session_id)
    except Http404:
        raise _Refusal(_error(404, "not_found", GENERIC_MESSAGES["not_found"])) from None


@database_sync_to_async
def _authorized_run(request: HttpRequest, run_id: str) -> Run:
    actor = _actor_for_request(request)
    try:
        return run_get_for_actor(actor=actor, run_id=run_id)
    except Http404:
        raise _Refusal(_error(404, "not_found", GENERIC_MESSAGES["not_found"])) from None


def format_event(envelope: Envelope) -> str:
    # JSON text never holds a raw newline, so one data: line carries the whole envelope.
    return f"id: {envelope['seq']}\nevent: {envelope['type']}\ndata: {envelope_text(envelope)}\n\n"


async def _frames(events: AsyncIterator[Envelope | None]) -> AsyncIterator[str]:
    # The first bytes go out at once, so clients and proxies see the stream open.
    yield f"retry: {RECONNECT_MILLISECONDS}\n\n"
    async for envelope in events:
        yield ": keep-alive\n\n" if envelope is None else format_event(envelope)


def _session_events(session_id: UUID, after: int) -> EventSource:
    async def events(idle_seconds: float) -> AsyncGenerator[Envelope | None, None]:
        async with stream_hub().subscribe(session_id, after) as subscription:
            async for envelope in subscription.events(idle_seconds=idle_seconds):
                yield envelope

    return events


def _run_events(run: Run, after: int) -> EventSource:
    def events(idle_seconds: float) -> AsyncGenerator[Envelope | None, None]:
        return run_events(run.pk, run.session_id, after, idle_seconds=idle_seconds)

    return events


def _still_authorized(authorize: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[bool]]:
    """Whether the request's credentials still pass ``authorize``, asked while its stream is open."""

    async def is_authorized() -> bool:
        try:
            await authorize()
        except _Refusal:
            return False
        return True

    return is_authorized


def _authorized_stream(
    open_events: EventSource, authorize: Callable[[], Awaitable[object]]
) -> AsyncGenerator[Envelope | None, None]:
    """The stream ends once its client may no longer read it (a revoked key, a removed member)."""
    return while_authorized(
        open_events, is_authorized=_still_authorized(authorize), heartbeat_seconds=keepalive_seconds()
    )


def _stream_response(events: AsyncIterator[Envelope | None]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(_frames(events), content_type=EVENT_STREAM)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx would otherwise hold events back
    return response


async def session_event_stream(request: HttpRequest, session_id: str) -> HttpResponseBase:
    """``GET /api/v1/sessions/{id}/events/`` with ``Accept: text/event-stream``."""
    try:
        after = _resume_point(request)
        session = await _authorized_session(request, session_id)
    except _Refusal as refusal:
        return refusal.response
    return _stream_response(
        _authorized_stream(
            _session_events(session.pk, after), lambda: _authorized_session(request, session_id)
        )
    )


async def run_event_stream(request: HttpRequest, run_id: str) -> HttpResponseBase:
    """``GET /api/v1/runs/{id}/events/`` with ``Accept: text/event-stream``; ends after the run does."""
    try:
        after = _resume_point(request)
        run = await _authorized_run(request, run_id)
    except _Refusal as refusal:
        return refusal.response
    return _stream_response(
        _authorized_stream(_run_events(run, after), lambda: _authorized_run(request, run_id))
    )


def with_event_stream(json_view: Callable[..., HttpResponseBase], stream_view: AsyncView) -> AsyncView:
    """One URL, two faces: ``stream_view`` for ``Accept: text/event-stream``, else the DRF ``json_view``.

    ``urls.py``: ``path("sessions/<str:pk>/events/", with_event_stream(
    SessionViewSet.as_view({"get": "events"}), session_event_stream))`` ahead of the router.
    """
    sync_json_view = sync_to_async(json_view)

    async def view(request: HttpRequest, pk: str) -> HttpResponseBase:
        if wants_event_stream(request):
            return await stream_view(request, pk)
        response: HttpResponseBase = await sync_json_view(request, pk=pk)
        return response

    view.__name__ = getattr(json_view, "__name__", "event_view")
    return csrf_exempt(view)
