"""The ``sessions`` group: see the tenant's sessions, read one, post into another.

The tools act as the run's user, through the same selectors and services as the API, so
they see only the run's tenant and may do only what that user's role allows. A session
of another tenant answers "not found", exactly like a missing one.
"""

import json
from typing import Any
from uuid import UUID

from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404

from sessions.branches import messages_in_order, shown_path
from sessions.models import Message, Session
from sessions.selectors import session_get_for_actor, session_list_for_actor
from sessions.services import MAX_MESSAGE_CHARACTERS, session_post_message
from tenants.actors import Actor
from tenants.models import Membership, role_at_least
from tenants.quotas import QuotaExceeded
from tools.builtins.base import BuiltinTool, ToolContext, ToolError, register

DEFAULT_LIST_LIMIT = 20
MAX_LIST_LIMIT = 100
DEFAULT_HISTORY_LIMIT = 20
MAX_HISTORY_LIMIT = 100
MAX_MESSAGE_TEXT_CHARS = 4000
TOOL_RESULT_EXCERPT_CHARS = 200

SESSION_ID_PROPERTY = {
    "type": "string",
    "description": "The session's id (from sessions_list).",
    "maxLength": 64,
}


def actor_for_context(context: ToolContext) -> Actor:
    """The run's user in the run's tenant, with the lower of the run's role and their current one."""
    if context.user_id is None:
        raise ToolError("session tools act for the run's user, and this run has none")
    membership = (
        Membership.objects.filter(tenant_id=context.tenant_id, user_id=context.user_id)
        .select_related("tenant", "user")
        .first()
    )
    if membership is None:
        raise ToolError("the run's user is no longer a member of this workspace")
    # A user demoted since the run started must not act with their old role.
    role = context.user_role if role_at_least(membership.role, context.user_role) else membership.role
    return Actor(user=membership.user, tenant=membership.tenant, role=role)


def _session(actor: Actor, session_id: str) -> Session:
    try:
        return session_get_for_actor(actor=actor, session_id=session_id)
    except Http404:
        raise ToolError(f"session {session_id} not found") from None


def _as_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


# --- sessions_list ------------------------------------------------------------------------


def run_sessions_list(arguments: dict[str, Any], context: ToolContext) -> str:
    actor = actor_for_context(context)
    limit = int(arguments.get("limit", DEFAULT_LIST_LIMIT))
    sessions = list(session_list_for_actor(actor=actor)[:limit])
    return _as_json(
        [
            {
                "id": str(session.pk),
                "title": session.title,
                "agent": session.agent.name,
                "created_by": session.created_by.email if session.created_by else None,
                "state": _lane_state(session),
                "updated_at": session.updated_at.isoformat(timespec="seconds"),
                "is_this_session": session.pk == context.session_id,
            }
            for session in sessions
        ]
    )


def _lane_state(session: Session) -> str:
    statuses = [run.status for run in getattr(session, "lane_runs", [])]
    active = [status for status in statuses if status != "queued"]
    if active:
        return f"{active[0]} ({len(statuses) - 1} queued behind)" if len(statuses) > 1 else active[0]
    return f"{len(statuses)} queued" if statuses else "idle"


register(
    BuiltinTool(
        name="sessions_list",
        group="sessions",
        description=(
            "List this workspace's chat sessions, most recently active first, with their agent and state."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIST_LIMIT,
                    "description": f"How many sessions to list (default {DEFAULT_LIST_LIMIT}).",
                },
            },
            "additionalProperties": False,
        },
        run=run_sessions_list,
        is_read_only=True,
        timeout_seconds=10.0,
    )
)


# --- session_history ----------------------------------------------------------------------


def run_session_history(arguments: dict[str, Any], context: ToolContext) -> str:
    actor = actor_for_context(context)
    session = _session(actor, arguments["session_id"])
    limit = int(arguments.get("limit", DEFAULT_HISTORY_LIMIT))
    # The branch people see (sessions.branches), and only messages already in the transcript:
    # queued ones get their position when their run starts.
    tree, path = shown_path(session)
    placed = [message_id for message_id in path if not tree.nodes[message_id].is_queued]
    latest = messages_in_order(placed[-limit:] if limit > 0 else [])
    return _as_json(
        {
            "session": {"id": str(session.pk), "title": session.title, "agent": session.agent.name},
            "messages": [_message_view(message) for message in latest],
        }
    )


def _message_view(message: Message) -> dict[str, Any]:
    parts: list[str] = []
    for block in message.content:
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_call":
            parts.append(f"[called tool {block.get('name')}]")
        elif block.get("type") == "tool_result":
            excerpt = str(block.get("content", ""))[:TOOL_RESULT_EXCERPT_CHARS]
            parts.append(f"[tool result{' (error)' if block.get('is_error') else ''}: {excerpt}]")
    text = "\n".join(part for part in parts if part)
    if len(text) > MAX_MESSAGE_TEXT_CHARS:
        text = text[:MAX_MESSAGE_TEXT_CHARS] + f" [... {len(text) - MAX_MESSAGE_TEXT_CHARS} more characters]"
    return {
        "position": message.position,
        "role": message.role,
        "created_at": message.created_at.isoformat(timespec="seconds"),
        "text": text,
    }


register(
    BuiltinTool(
        name="session_history",
        group="sessions",
        description="Read the latest messages of a chat session of this workspace.",
        input_schema={
            "type": "object",
            "properties": {
                "session_id": SESSION_ID_PROPERTY,
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_HISTORY_LIMIT,
                    "description": f"How many latest messages to return (default {DEFAULT_HISTORY_LIMIT}).",
                },
            },
            "required": ["session_id"],
            "additionalProperties": False,
        },
        run=run_session_history,
        is_read_only=True,
        timeout_seconds=10.0,
    )
)


# --- session_send -------------------------------------------------------------------------


def run_session_send(arguments: dict[str, Any], context: ToolContext) -> str:
    actor = actor_for_context(context)
    session = _session(actor, arguments["session_id"])
    if session.pk == UUID(str(context.session_id)):
        raise ToolError("cannot send into this run's own session; answer here instead")
    try:
        posted = session_post_message(actor=actor, session=session, content=arguments["content"])
    except PermissionDenied as error:
        raise ToolError(str(error) or "your role does not allow posting into this session") from None
    except ValidationError as error:
        raise ToolError("; ".join(error.messages)) from None
    except QuotaExceeded as error:
        raise ToolError(f"{error.message} Try again in {error.retry_after_seconds} s.") from None
    return _as_json(
        {
            "status": "queued",
            "session_id": str(session.pk),
            "message_id": str(posted.message.pk),
            "run_id": str(posted.run.pk),
            "note": "The session's agent answers in that session, after any run already in its lane.",
        }
    )


register(
    BuiltinTool(
        name="session_send",
        group="sessions",
        description=(
            "Post a message into another chat session of this workspace, as the user of this run. "
            "The session's agent answers there, in turn with its other queued messages."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "session_id": SESSION_ID_PROPERTY,
                "content": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_MESSAGE_CHARACTERS,
                    "description": "The message to post.",
                },
            },
            "required": ["session_id", "content"],
            "additionalProperties": False,
        },
        run=run_session_send,
        timeout_seconds=15.0,
    )
)
