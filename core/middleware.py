"""Keeps API answers JSON even when Django itself answers (unknown URL, server error)."""

import logging
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from core.api.errors import error_body

logger = logging.getLogger(__name__)


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
        if not request.path.startswith("/api/"):
            return None
        logger.exception("unhandled error in %s %s", request.method, request.path)
        return JsonResponse(error_body("server_error", "Internal error; it has been logged."), status=500)
