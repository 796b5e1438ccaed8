"""Tenant-defined HTTP tools: a URL template, a method and headers, called through the SSRF guard.

Arguments named in the template (``{name}``) are URL-encoded into it; the others become
the JSON body (POST, PUT, PATCH) or the query string (GET, DELETE, HEAD). Secret headers
are decrypted only to be sent: their values are cut out of every result and error, even
when the remote service echoes them back.
"""

import json
import re
from typing import Any
from urllib.parse import quote

from django.conf import settings

from core.http_headers import HEADER_NAME_PATTERN, header_value_problem
from core.ssrf import guarded_request, with_default_headers
from tools.builtins.base import ToolError
from tools.models import Tool

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
QUERY_METHODS = frozenset({"GET", "DELETE", "HEAD"})
DEFAULT_MAX_RESPONSE_BYTES = 2_000_000
DEFAULT_MAX_RESPONSE_CHARS = 20_000
ERROR_EXCERPT_CHARS = 300
REDACTED = "[redacted]"


def run_http_tool(tool: Tool, arguments: dict[str, Any]) -> str:
    method = (tool.http_method or "GET").upper()
    if method not in BODY_METHODS | QUERY_METHODS:
        raise ToolError(f"HTTP method {method} is not supported")
    url, remaining = fill_url_template(tool.url_template, arguments)
    secrets = _text_headers(tool.secret_headers)
    headers = _text_headers(tool.headers) | secrets
    _check_headers(headers)
    try:
        response = guarded_request(
            method,
            url,
            timeout_seconds=tool.timeout_seconds,
            max_bytes=int(getattr(settings, "HTTP_TOOL_MAX_RESPONSE_BYTES", DEFAULT_MAX_RESPONSE_BYTES)),
            headers=with_default_headers(headers, {"Accept": "application/json, text/*;q=0.9, */*;q=0.5"}),
            params=_query_params(remaining) if method in QUERY_METHODS else None,
            json=remaining if method in BODY_METHODS else None,
            sensitive_headers=secrets,
        )
    except ToolError as error:
        raise ToolError(redact(str(error), secrets.values())) from None
    body = redact(response.text(), secrets.values())
    status = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    if response.status_code >= 400:
        excerpt = " ".join(body[:ERROR_EXCERPT_CHARS].split())
        raise ToolError(f"{tool.name} failed: {status}" + (f": {excerpt}" if excerpt else ""))
    return f"{status}\n\n{_truncated(body, is_cut=response.is_truncated)}"


def fill_url_template(template: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The URL with each ``{name}`` replaced by its URL-encoded argument, and the unused arguments."""
    used: set[str] = set()

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in arguments or arguments[name] is None:
            raise ToolError(f"missing argument {name!r}, which the URL needs")
        used.add(name)
        return quote(_scalar_text(name, arguments[name]), safe="")

    url = PLACEHOLDER.sub(substitute, template)
    return url, {name: value for name, value in arguments.items() if name not in used}


def _scalar_text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ToolError(f"argument {name!r} goes into the URL, so it must be a string, number or boolean")


def _query_params(arguments: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name, value in arguments.items():
        if value is None:
            continue
        if isinstance(value, list) and all(not isinstance(item, dict | list) for item in value):
            params[name] = [_scalar_text(name, item) for item in value]  # repeated: ?tag=a&tag=b
        elif isinstance(value, dict | list):
            params[name] = json.dumps(value, ensure_ascii=False)
        else:
            params[name] = _scalar_text(name, value)
    return params


def _text_headers(value: Any) -> dict[str, str]:
    return {str(name): str(item) for name, item in value.items()} if isinstance(value, dict) else {}


def _check_headers(headers: dict[str, str]) -> None:
    """Headers saved before tools.services checked them: refused here, their values never quoted
    (they may be secrets), rather than failing inside the HTTP client with a character of one."""
    for name, value in headers.items():
        if not HEADER_NAME_PATTERN.match(name):
            raise ToolError("a header name of this tool is not a valid HTTP header name; fix the tool")
        if problem := header_value_problem(value):
            raise ToolError(f"header {name!r} of this tool contains {problem}; fix the tool")


def redact(text: str, secrets: Any) -> str:
    """``text`` with every secret value, and the token part of ``<scheme> <token>`` values, masked."""
    needles: set[str] = set()
    for secret in secrets:
        needles.add(secret)
        scheme, _, token = secret.partition(" ")
        if scheme and token.strip():
            needles.add(token.strip())
    for needle in sorted((needle for needle in needles if needle), key=len, reverse=True):
        text = text.replace(needle, REDACTED)
    return text


def _truncated(body: str, *, is_cut: bool) -> str:
    limit = int(getattr(settings, "HTTP_TOOL_MAX_RESPONSE_CHARS", DEFAULT_MAX_RESPONSE_CHARS))
    if len(body) > limit:
        return body[:limit] + f"\n[truncated: {len(body) - limit} more characters]"
    if is_cut:
        return body + "\n[truncated: the response was larger than the read limit]"
    return body or "(empty body)"
