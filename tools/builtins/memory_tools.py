"""The ``memory`` group: the agent searches, saves and forgets its long-term memories.

Everything is scoped to the run's tenant and agent, and to what the session's user may
see: general memories and memories about that user, never another user's. What the agent
saves is active at once (source "agent"); forgetting archives, so people can restore it.
"""

import dataclasses
import json
from typing import Any
from uuid import UUID

from django.core.exceptions import ValidationError

from memory.fulltext import MemoryScope
from memory.models import MAX_MEMORY_CHARACTERS, MemoryStatus, MemoryType
from memory.retrieval import rank_memories, record_access, subject_user_id_for_session
from memory.services import memory_archive_for_agent, memory_save_from_agent
from tools.builtins.base import BuiltinTool, ToolContext, ToolError, register

DEFAULT_SEARCH_LIMIT = 5
MAX_SEARCH_LIMIT = 20


def _scope(context: ToolContext, *, subject_user_id: int | None) -> MemoryScope:
    if context.agent_id is None:
        raise ToolError("memory tools need the run's agent, and this run has none")
    return MemoryScope(
        tenant_id=context.tenant_id,
        agent_id=context.agent_id,
        statuses=(MemoryStatus.ACTIVE,),
        subject_user_id=subject_user_id,
    )


def _validation_message(error: ValidationError) -> str:
    if hasattr(error, "error_dict"):
        return "; ".join(f"{name}: {' '.join(messages)}" for name, messages in error.message_dict.items())
    return " ".join(error.messages)


# --- memory_search --------------------------------------------------------------------------


def run_memory_search(arguments: dict[str, Any], context: ToolContext) -> str:
    query = str(arguments.get("query", "")).strip()
    if not query:
        raise ToolError("query must not be empty")
    limit = min(max(int(arguments.get("limit", DEFAULT_SEARCH_LIMIT)), 1), MAX_SEARCH_LIMIT)
    scope = _scope(context, subject_user_id=subject_user_id_for_session(context.session_id))
    if arguments.get("type"):
        scope = dataclasses.replace(scope, types=(str(arguments["type"]),))
    results = rank_memories(scope=scope, query=query, limit=limit)
    record_access(item.memory.pk for item in results)
    return json.dumps(
        [
            {
                "id": str(item.memory.pk),
                "type": item.memory.type,
                "content": item.memory.content,
                "importance": item.memory.importance,
                "about_user": item.memory.subject_user_id is not None,
                "score": round(item.score, 4),
                "updated_at": item.memory.updated_at.isoformat(timespec="seconds"),
            }
            for item in results
        ],
        indent=2,
        ensure_ascii=False,
    )


# --- memory_save ----------------------------------------------------------------------------


def run_memory_save(arguments: dict[str, Any], context: ToolContext) -> str:
    _scope(context, subject_user_id=None)
    about_user = arguments.get("about", "user") == "user"
    subject_user_id = subject_user_id_for_session(context.session_id) if about_user else None
    if about_user and subject_user_id is None:
        raise ToolError('this session has no user to remember things about; save with "about": "general"')
    try:
        memory, created = memory_save_from_agent(
            tenant_id=context.tenant_id,
            agent_id=context.agent_id,  # type: ignore[arg-type]  # checked by _scope
            content=str(arguments.get("content", "")),
            type=str(arguments.get("type", MemoryType.FACT)),
            importance=float(arguments.get("importance", 0.5)),
            subject_user_id=subject_user_id,
            source_session_id=context.session_id,
            created_by_id=context.user_id,
        )
    except ValidationError as error:
        raise ToolError(_validation_message(error)) from None
    if not created:
        return json.dumps({"id": str(memory.pk), "saved": False, "reason": "already remembered"})
    return json.dumps({"id": str(memory.pk), "saved": True})


# --- memory_forget --------------------------------------------------------------------------


def run_memory_forget(arguments: dict[str, Any], context: ToolContext) -> str:
    try:
        memory_id = UUID(str(arguments.get("memory_id", "")))
    except ValueError:
        raise ToolError("memory_id must be a memory's id (from memory_search)") from None
    scope = _scope(context, subject_user_id=subject_user_id_for_session(context.session_id))
    if memory_archive_for_agent(scope=scope, memory_id=memory_id) is None:
        raise ToolError(f"memory {memory_id} not found")
    return json.dumps({"id": str(memory_id), "forgotten": True})


register(
    BuiltinTool(
        name="memory_search",
        group="memory",
        description=(
            "Search your long-term memory (facts, preferences, context and episodes from earlier "
            "conversations) for what is relevant to a query. Returns the best matches with their ids."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 2000,
                    "description": "What to look for.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_SEARCH_LIMIT,
                    "default": DEFAULT_SEARCH_LIMIT,
                },
                "type": {
                    "type": "string",
                    "enum": MemoryType.values,
                    "description": "Only memories of this type.",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        run=run_memory_search,
        is_read_only=True,
        timeout_seconds=15.0,
    )
)
register(
    BuiltinTool(
        name="memory_save",
        group="memory",
        description=(
            "Remember something for later conversations: one self-contained sentence, e.g. "
            '"The user prefers metric units." Use "about": "user" (the default) for what concerns '
            'the person you are talking to, "general" for what holds for everyone.'
        ),
        input_schema={
            "type": "object",
            "properties": {
                "content": {"type": "string", "minLength": 1, "maxLength": MAX_MEMORY_CHARACTERS},
                "type": {"type": "string", "enum": MemoryType.values, "default": MemoryType.FACT},
                "importance": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.5},
                "about": {"type": "string", "enum": ["user", "general"], "default": "user"},
            },
            "required": ["content"],
            "additionalProperties": False,
        },
        run=run_memory_save,
        timeout_seconds=15.0,
    )
)
register(
    BuiltinTool(
        name="memory_forget",
        group="memory",
        description="Forget a memory that is wrong or no longer true, by its id from memory_search.",
        input_schema={
            "type": "object",
            "properties": {"memory_id": {"type": "string", "maxLength": 64}},
            "required": ["memory_id"],
            "additionalProperties": False,
        },
        run=run_memory_forget,
        timeout_seconds=10.0,
    )
)
