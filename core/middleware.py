"""Keeps API answers JSON even when Django itself answers (unknown URL, server error), and
answers 503 rather than 500 while Redis is unreachable."""

import logging
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.api.errors import error_body

logger = logging.getLogger(__name__)

# Redis (cache, rate limit, task broker) could not be reached or did not answer in time. redis-py's
# pools replace a failed connection on their next use, so the requests after an outage succeed.
REDIS_UNAVAILABLE_ERRORS = (RedisConnectionError, RedisTimeoutError)


def service_unavailable() -> JsonResponse:
    return JsonResponse(
        error_body("service_unavailable", "A service this request needs is unavailable; try again shortly."),
        status=503,
    )


class JsonApiErrorsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            request.path.startswith("/api/")
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
        if not request.path.startswith("/api/"):
            return None
        logger.exception("unhandled error in %s %s", request.method, request.path)
        return JsonResponse(error_body("server_error", "Internal error; it has been logged."), status=500)
