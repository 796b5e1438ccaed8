"""One error body for every API 4xx: {"error": {"code", "message", "fields"}}."""

from typing import Any

from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

GENERIC_MESSAGES = {
    "invalid": "The request has invalid fields.",
    "parse_error": "The request body is not valid JSON.",
    "not_authenticated": "Authentication credentials were not provided or are invalid.",
    "authentication_failed": "Authentication credentials were not provided or are invalid.",
    "permission_denied": "Your role does not allow this action.",
    "not_found": "Not found.",
    "method_not_allowed": "Method not allowed.",
    "unsupported_media_type": "Unsupported media type; send application/json.",
    "throttled": "Too many requests.",
}


class ServerBusy(exceptions.APIException):
    """Every one of the server's threads that may wait on a service outside this deployment is
    waiting (``core.outside_waits.waiting_outside``): the request can succeed in a moment."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "server_busy"
    default_detail = "The server is busy waiting on other outside services; try again in a few seconds."
    # DRF answers it with Retry-After.
    wait = 5


def error_body(code: str, message: str, fields: dict[str, list[str]] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def _flatten_field_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """Turn DRF's nested ValidationError detail into {"field.path": ["message", …]}."""
    if isinstance(detail, dict):
        fields: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = "non_field_errors" if key in ("non_field_errors", "__all__") and not prefix else str(key)
            fields.update(_flatten_field_errors(value, f"{prefix}.{name}" if prefix else name))
        return fields
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return {prefix or "non_field_errors": [str(item) for item in detail]}
        fields = {}
        for index, item in enumerate(detail):
            fields.update(_flatten_field_errors(item, f"{prefix}.{index}" if prefix else str(index)))
        return fields
    return {prefix or "non_field_errors": [str(detail)]}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    # A row the view found can be gone by the time a service reads it again (deleted meanwhile).
    if isinstance(exc, Http404 | ObjectDoesNotExist):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten_field_errors(exc.detail)
        message = "; ".join(f"{name}: {' '.join(errors)}" for name, errors in fields.items())
        response.data = error_body("invalid", message or GENERIC_MESSAGES["invalid"], fields)
        response.status_code = status.HTTP_400_BAD_REQUEST
        return response
    code = exc.get_codes() if isinstance(exc.get_codes(), str) else exc.default_code
    detail = exc.detail if isinstance(exc.detail, str) else GENERIC_MESSAGES.get(str(code), str(exc.detail))
    response.data = error_body(str(code), str(detail))
    return response
