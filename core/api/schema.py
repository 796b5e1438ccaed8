"""OpenAPI additions: the shared error body, the 4xx (and 503) answers every endpoint can give, and
request bodies that refuse unknown fields (registered by ``core.apps``)."""

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "fields"],
            "properties": {
                "code": {"type": "string", "example": "invalid"},
                "message": {"type": "string"},
                "fields": {
                    "type": "object",
                    "additionalProperties": {"type": "array", "items": {"type": "string"}},
                },
            },
        }
    },
}

ERROR_REFERENCE = {"$ref": "#/components/schemas/Error"}

# Path ids of routes whose view reads another model than the id's (nested routes, actions): the
# generator cannot tell their type, so they are named here.
AGENT_IN_PATH = OpenApiParameter(
    "agent_pk", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The agent's id."
)
SESSION_IN_PATH = OpenApiParameter(
    "session_pk", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The session's id."
)
SESSION_ID_IN_PATH = OpenApiParameter(
    "id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The session's id."
)
DOCUMENT_IN_PATH = OpenApiParameter(
    "document_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The document's id."
)

COMMON_ERRORS = {
    "400": "Invalid input; `fields` names each bad field.",
    "401": "Missing or invalid credentials.",
    "403": "Your role does not allow this action.",
    "404": "Not found (also for another tenant's objects).",
    "429": "Too many requests; see Retry-After.",
    "503": (
        "A service the request needs (Redis) is unreachable, or (`server_busy`, with Retry-After) the"
        " server's threads for waiting on outside services are all waiting; try again shortly."
    ),
}


# Query parameters whose empty value is refused; every other one (filters, search, ordering) reads
# an empty value as "not given", which the schema states with allowEmptyValue.
NON_EMPTY_QUERY_PARAMETERS = {"page_size", "after"}


def allow_empty_filters(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "query" and parameter["name"] not in NON_EMPTY_QUERY_PARAMETERS:
                    parameter["allowEmptyValue"] = True
    return result


def add_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    reference = ERROR_REFERENCE
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            responses = operation.setdefault("responses", {})
            for code, description in COMMON_ERRORS.items():
                if code == "400" and method in {"get", "delete"} and "parameters" not in operation:
                    continue
                responses.setdefault(
                    code, {"description": description, "content": {"application/json": {"schema": reference}}}
                )
    return result


class StrictSerializerExtension(OpenApiSerializerExtension):
    """A strict serializer's request body says what it enforces: no field beyond those listed."""

    target_class = "core.api.serializers.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> Any:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request":
            schema["additionalProperties"] = False
        return schema
