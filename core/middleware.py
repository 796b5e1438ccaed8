"""Keeps API answers JSON even when Django itself answers (unknown URL, server error, a body too
large, of unknown length or with too many fields or files), and answers 503 rather than 500 while
Redis or the database is unreachable."""

import logging
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import (
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.api.errors import error_body
from core.errors import DATABASE_UNAVAILABLE_ERRORS

logger = logging.getLogger(__name__)

# Redis (cache, rate limit, task broker) could not be reached or did not answer in time. redis-py's
# pools replace a failed connection on their next use, so the requests after an outage succeed.
REDIS_UNAVAILABLE_ERRORS = (RedisConnectionError, RedisTimeoutError)


def service_unavailable() -> JsonResponse:
    return JsonResponse(
        error_body("service_unavailable", "A service this request needs is unavailable; try again shortly."),
        status=503,
    )


DATABASE_RETRY_AFTER_SECONDS = 5


def database_unavailable(request: HttpRequest) -> HttpResponse:
    """503 while the database is unreachable: the error envelope for API clients, a plain page
    (rendered without the request, so without anything that reads the database) for people."""
    response: HttpResponse
    if request.path.startswith("/api/"):
        message = "The database is unavailable; try again shortly."
        response = JsonResponse(error_body("database_unavailable", message), status=503)
    else:
        response = HttpResponse(render_to_string("503.html"), status=503)
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
    return response


def payload_too_large() -> JsonResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return JsonResponse(
        error_body("payload_too_large", f"The request body is larger than {limit} bytes."), status=413
    )


def length_required() -> JsonResponse:
    message = "Send the request body with a Content-Length header; chunked bodies are not accepted."
    return JsonResponse(error_body("length_required", message), status=411)


def refused_body(exception: SuspiciousOperation) -> JsonResponse:
    """400 for a body Django refuses to parse, as Django itself answers such a request."""
    if isinstance(exception, TooManyFieldsSent):
        message = f"The request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields."
    elif isinstance(exception, TooManyFilesSent):
        message = f"The request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FILES} files."
    else:
        message = "The request is malformed."
    return JsonResponse(error_body("bad_request", message), status=400)


def _declared_length(request: HttpRequest) -> int | None:
    try:
        return int(request.META.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None


def refuse_unreadable_body(request: HttpRequest) -> JsonResponse | None:
    """A body of unknown length or over the limit, refused before anything reads it.

    DRF reads a body only up to its Content-Length, so a chunked body would silently read as
    empty; Django refuses a large body only once something reads it, deep inside a view.
    """
    length = _declared_length(request)
    if length is None and "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
        return length_required()
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if length is not None and limit is not None and length > limit:
        return payload_too_large()
    return None


class JsonApiErrorsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        is_api = request.path.startswith("/api/")
        refusal = refuse_unreadable_body(request) if is_api else None
        if refusal is not None:
            return refusal
        response = self.get_response(request)
        if (
            is_api
            and response.status_code == 404
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            return JsonResponse(error_body("not_found", "Not found."), status=404)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, REDIS_UNAVAILABLE_ERRORS):
            # A warning without the traceback: an outage fails every request the same way.
            logger.warning("redis unavailable in %s %s: %s", request.method, request.path, exception)
            return service_unavailable()
        if isinstance(exception, DATABASE_UNAVAILABLE_ERRORS):
            logger.warning("database unavailable in %s %s: %s", request.method, request.path, exception)
            return database_unavailable(request)
        if not request.path.startswith("/api/"):
            return None
        if isinstance(exception, RequestDataTooBig):
            return payload_too_large()
        if isinstance(exception, SuspiciousOperation):
            # Django's own handler logs these to django.security.* and answers 400: the same here.
            security_logger = logging.getLogger(f"django.security.{type(exception).__name__}")
            security_logger.warning("%s %s: %s", request.method, request.path, exception)
            return refused_body(exception)
        logger.exception("unhandled error in %s %s", request.method, request.path)
        return JsonResponse(error_body("server_error", "Internal error; it has been logged."), status=500)
