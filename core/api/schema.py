"""OpenAPI additions: the shared error body and the 4xx (and 503) answers every endpoint can give."""

from typing import Any

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

COMMON_ERRORS = {
    "400": "Invalid input; `fields` names each bad field.",
    "401": "Missing or invalid credentials.",
    "403": "Your role does not allow this action.",
    "404": "Not found (also for another tenant's objects).",
    "429": "Too many requests; see Retry-After.",
    "503": "A service the request needs (Redis) is unreachable; try again shortly.",
}


def add_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    reference = {"$ref": "#/components/schemas/Error"}
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
