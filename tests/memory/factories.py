"""Factories for memory tests. ``make_memory`` writes the row directly (the database's own
triggers or generated column index it), ``age`` sets controlled timestamps."""

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from agents.models import Agent
from memory.models import Memory, MemorySource, MemoryStatus, MemoryType
from sessions.models import Message, MessageRole, Session

_counter = itertools.count(1)
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def make_memory(
    *,
    agent: Agent,
    content: str,
    type: str = MemoryType.FACT,
    importance: float = 0.5,
    status: str = MemoryStatus.ACTIVE,
    source: str = MemorySource.MANUAL,
    subject_user: Any = None,
    updated_at: datetime | None = None,
    last_accessed_at: datetime | None = None,
    **fields: Any,
) -> Memory:
    memory = Memory.objects.create(
        tenant_id=agent.tenant_id,
        agent=agent,
        content=content,
        type=type,
        importance=importance,
        status=status,
        source=source,
        subject_user=subject_user,
        **fields,
    )
    if updated_at is not None or last_accessed_at is not None:
        changes: dict[str, Any] = {}
        if updated_at is not None:
            changes["updated_at"] = updated_at
        if last_accessed_at is not None:
            changes["last_accessed_at"] = last_accessed_at
        Memory.objects.filter(pk=memory.pk).update(**changes)
        memory.refresh_from_db()
    return memory


def make_session(
    *, agent: Agent, user: Any, messages: tuple[tuple[str, str], ...] = (), title: str = ""
) -> Session:
    """A session with ``messages`` as (role, text), placed in order as a finished conversation."""
    session = Session.objects.create(tenant_id=agent.tenant_id, agent=agent, created_by=user, title=title)
    for position, (role, text) in enumerate(messages, start=1):
        Message.objects.create(
            tenant_id=agent.tenant_id,
            session=session,
            position=position,
            role=MessageRole(role),
            content=[{"type": "text", "text": text}],
        )
    Session.objects.filter(pk=session.pk).update(last_message_position=len(messages))
    session.refresh_from_db()
    return session


def days_ago(days: float, *, now: datetime) -> datetime:
    return now - timedelta(days=days)


def unique(prefix: str) -> str:
    return f"{prefix} {next(_counter)}"
