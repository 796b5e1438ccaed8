"""Writes to MCP servers. Business rules live here, with field-level errors.

Credentials (``token``, ``headers``, ``env``) are write-only: they can be set, replaced
or cleared (``None`` or empty), and nothing here ever returns or logs their values.
"""

import re
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction

from audit.models import AuditAction
from audit.services import audit_record, audit_values
from core.http_headers import (
    CONTROL_CHARACTERS,
    HEADER_NAME_PATTERN,
    HEADER_NAME_RULE,
    header_value_problem,
    header_values_problem,
)
from mcp_servers.models import McpServer, McpTransport
from mcp_servers.tool_names import SEPARATOR, SERVER_NAME_PATTERN, mcp_tool_group, mcp_tool_public_name
from tenants.actors import Actor
from tenants.models import Role
from tools.models import Tool

EDITABLE_FIELDS = (
    "name",
    "transport",
    "url",
    "token",
    "headers",
    "command",
    "args",
    "env",
    "connect_timeout_seconds",
    "call_timeout_seconds",
    "is_enabled",
)
CREDENTIAL_DEFAULTS: dict[str, Any] = {"token": "", "headers": {}, "env": {}}
CREDENTIAL_FIELDS = tuple(CREDENTIAL_DEFAULTS)
STDIO_FIELDS = frozenset({"transport", "command", "args", "env"})
DEFAULT_MAX_SERVERS_PER_TENANT = 50
CONNECT_TIMEOUT_RANGE = (1.0, 120.0)
CALL_TIMEOUT_RANGE = (1.0, 3600.0)
MAX_ARGS = 100
MAX_CREDENTIAL_ENTRIES = 50
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
# Set by the MCP transport itself; a tenant overriding them would break the protocol.
RESERVED_HEADERS = frozenset(
    {
        "accept",
        "content-type",
        "content-length",
        "host",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    }
)
NAME_TAKEN = "An MCP server with this name already exists in this tenant."


def mcp_server_create(*, actor: Actor, **fields: Any) -> McpServer:
    _refuse_unknown(fields)
    limit = (actor.tenant.settings or {}).get("max_mcp_servers", DEFAULT_MAX_SERVERS_PER_TENANT)
    if McpServer.objects.filter(tenant=actor.tenant).count() >= limit:
        raise ValidationError({"non_field_errors": ["This tenant has reached its MCP server limit."]})
    server = McpServer(tenant=actor.tenant)
    _assign(server, fields)
    _validate(server=server, actor=actor, changed=set(fields) | {"transport"})
    return _save(server, before=None)


def mcp_server_update(*, actor: Actor, server: McpServer, **fields: Any) -> McpServer:
    _refuse_unknown(fields)
    before = _audited(server)
    _assign(server, fields)
    _validate(server=server, actor=actor, changed=set(fields))
    return _save(server, before=before)


@transaction.atomic
def mcp_server_delete(*, server: McpServer) -> None:
    """Deletes the server and, with it, its tools and their assignments to agents."""
    _record(server, AuditAction.DELETE, before=_audited(server))
    server.delete()


def _audited(server: McpServer) -> dict[str, Any]:
    return audit_values(server, EDITABLE_FIELDS)


def _record(server: McpServer, action: str, *, before: dict[str, Any] | None) -> None:
    # The credentials read "[redacted]" whatever they hold: only whether one changed is kept.
    audit_record(
        tenant=server.tenant,
        action=action,
        object_type="mcp_server",
        object_id=server.pk,
        object_label=server.name,
        before=before,
        after=None if action == AuditAction.DELETE else _audited(server),
        secret_fields=CREDENTIAL_FIELDS,
    )


def _refuse_unknown(fields: dict[str, Any]) -> None:
    unknown = set(fields) - set(EDITABLE_FIELDS)
    if unknown:
        raise ValidationError({name: ["Unknown field."] for name in sorted(unknown)})


def _assign(server: McpServer, fields: dict[str, Any]) -> None:
    for name, value in fields.items():
        if value is None and name in CREDENTIAL_DEFAULTS:
            value = type(CREDENTIAL_DEFAULTS[name])()
        if isinstance(value, str) and name in ("name", "url", "command"):
            value = value.strip()
        setattr(server, name, value)


def _save(server: McpServer, *, before: dict[str, Any] | None) -> McpServer:
    try:
        with transaction.atomic():
            server.save()
            if before is not None and before["name"] != server.name:
                _rename_tools(server)
            _record(server, AuditAction.CREATE if before is None else AuditAction.UPDATE, before=before)
    except IntegrityError as error:  # a concurrent write took a name between check and save
        raise ValidationError({"name": [NAME_TAKEN]}) from error
    return server


def _renamed_tools(server: McpServer) -> list[Tool]:
    tools = list(Tool.objects.filter(mcp_server_id=server.pk))
    for tool in tools:
        tool.name = mcp_tool_public_name(server_name=server.name, tool_name=tool.mcp_tool_name)
        tool.group = mcp_tool_group(server_name=server.name)
    return tools


def _rename_tools(server: McpServer) -> None:
    """Models see tools as ``<server>__<tool>``, so a renamed server renames its tools."""
    tools = _renamed_tools(server)
    Tool.objects.bulk_update(tools, ["name", "group"])


def _validate(*, server: McpServer, actor: Actor, changed: set[str]) -> None:
    errors: dict[str, list[str]] = {}
    _check_name(server, errors, is_renamed="name" in changed and not server._state.adding)
    if server.transport not in McpTransport.values:
        errors["transport"] = [f"Choose one of {', '.join(McpTransport.values)}."]
    elif server.transport == McpTransport.STDIO:
        _check_stdio(server, actor=actor, changed=changed, errors=errors)
    else:
        url_problem = _url_problem(server.url)
        if url_problem:
            errors["url"] = [url_problem]
    _check_credentials(server, errors)
    for name, (low, high) in (
        ("connect_timeout_seconds", CONNECT_TIMEOUT_RANGE),
        ("call_timeout_seconds", CALL_TIMEOUT_RANGE),
    ):
        value = getattr(server, name)
        if not isinstance(value, int | float) or not low <= value <= high:
            errors[name] = [f"Must be between {low:g} and {high:g} seconds."]
    if errors:
        raise ValidationError(errors)


def _check_name(server: McpServer, errors: dict[str, list[str]], *, is_renamed: bool) -> None:
    if not SERVER_NAME_PATTERN.match(server.name) or SEPARATOR in server.name:
        errors["name"] = ['Use 1 to 40 letters, digits, "_" or "-", without "__" (it separates tool names).']
        return
    if McpServer.objects.filter(tenant_id=server.tenant_id, name=server.name).exclude(pk=server.pk).exists():
        errors["name"] = [NAME_TAKEN]
        return
    if not is_renamed:
        return
    renamed = [tool.name for tool in _renamed_tools(server)]
    taken = Tool.objects.filter(tenant_id=server.tenant_id, name__in=renamed).exclude(mcp_server_id=server.pk)
    if taken.exists():
        errors["name"] = [
            "Renaming would give this server's tools names other tools use: "
            + ", ".join(sorted(taken.values_list("name", flat=True)))
            + "."
        ]


def _check_stdio(server: McpServer, *, actor: Actor, changed: set[str], errors: dict[str, list[str]]) -> None:
    # Only starting or changing a local command is gated: an admin may still disable or
    # delete a stdio server after the installation turned stdio off.
    if changed & STDIO_FIELDS:
        if not getattr(settings, "MCP_ALLOW_STDIO", False):
            errors["transport"] = ["stdio servers are disabled on this installation (MCP_ALLOW_STDIO)."]
            return
        if not actor.can(Role.ADMIN):
            raise PermissionDenied("Only admins may configure stdio MCP servers.")
    if not server.command:
        errors["command"] = ["Required for stdio servers."]
    elif CONTROL_CHARACTERS.search(server.command):
        errors["command"] = ["Must not contain control characters."]
    args = server.args
    if not isinstance(args, list) or len(args) > MAX_ARGS or not all(isinstance(arg, str) for arg in args):
        errors["args"] = [f"Must be a list of at most {MAX_ARGS} strings."]


def _url_problem(url: str) -> str:
    if not url:
        return "Required for HTTP transports."
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for an invalid port
    except ValueError:
        return "Not a valid URL."
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "Must be an http:// or https:// URL with a host."
    if parts.username or parts.password:
        return "Put credentials in the token or headers, not in the URL (the URL is not stored encrypted)."
    if CONTROL_CHARACTERS.search(url) or " " in url:
        return "Must not contain spaces or control characters."
    return ""


def _check_credentials(server: McpServer, errors: dict[str, list[str]]) -> None:
    if not isinstance(server.token, str):
        errors["token"] = ["Must be a string."]
    elif token_problem := header_value_problem(server.token):
        errors["token"] = [f"Must be a string without {token_problem}."]
    headers: Any = server.headers  # a dict, though the stubs type the field as text
    if not _is_string_map(headers):
        errors["headers"] = [f"Must be an object of at most {MAX_CREDENTIAL_ENTRIES} string values."]
    else:
        names = {name.lower() for name in headers}
        if not all(HEADER_NAME_PATTERN.match(name) for name in headers):
            errors["headers"] = [HEADER_NAME_RULE]
        elif names & RESERVED_HEADERS:
            errors["headers"] = [
                f"These headers are set by the MCP transport: {', '.join(sorted(names & RESERVED_HEADERS))}."
            ]
        elif "authorization" in names and server.token:
            errors["headers"] = ["Set either the token or an Authorization header, not both."]
        elif values_problem := header_values_problem(headers.values()):
            errors["headers"] = [values_problem]
    env: Any = server.env
    if not _is_string_map(env):
        errors["env"] = [f"Must be an object of at most {MAX_CREDENTIAL_ENTRIES} string values."]
    elif not all(ENV_NAME_PATTERN.match(name) for name in env):
        errors["env"] = ["Variable names may hold only letters, digits and _, and not start with a digit."]


def _is_string_map(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and len(value) <= MAX_CREDENTIAL_ENTRIES
        and all(isinstance(key, str) and isinstance(item, str) for key, item in value.items())
    )
