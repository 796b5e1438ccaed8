"""What a post reads: its author's quotas, its conversation's tree, its lane, its agent's tools."""

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import connection

from sessions.models import Message, Run, Session, Step
from sessions.statements.sql import key, placeholders, prepared_value
from tools.models import AgentTool, Tool

QUOTA_COUNTS = """
SELECT
  (SELECT COUNT(*) FROM agent_sessions_run
    WHERE tenant_id = %s AND created_by_id = %s AND status IN ({statuses})),
  (SELECT COUNT(*) FROM agent_sessions_run
    WHERE tenant_id = %s AND created_by_id = %s AND created_at > %s),
  (SELECT COALESCE(SUM(step.input_tokens + step.output_tokens), 0)
     FROM agent_sessions_step step JOIN agent_sessions_run run ON step.run_id = run.id
    WHERE run.tenant_id = %s AND step.finished_at > %s)
"""
# A post reads the conversation's tree: each message, whether a run of it is queued or active, and
# when each user message's newest run started (sessions.branches).
CONVERSATION_MESSAGES = """
SELECT message.id, message.parent_id, message.position, message.role, message.created_at, message.run_id,
       EXISTS (SELECT 1 FROM agent_sessions_run pending
                WHERE (pending.user_message_id = message.id OR pending.id = message.run_id)
                  AND pending.status IN ({pending})) AS is_pending
  FROM agent_sessions_message message
  LEFT JOIN agent_sessions_run run ON message.run_id = run.id
 WHERE message.session_id = %s AND run.parent_run_id IS NULL
"""
CONVERSATION_RUNS = """
SELECT run.id, run.user_message_id, run.created_at
  FROM agent_sessions_run run JOIN agent_sessions_message message ON run.user_message_id = message.id
 WHERE message.session_id = %s AND run.parent_run_id IS NULL
 ORDER BY run.created_at, run.id
"""
LANE_RUNS = """
SELECT id, status FROM agent_sessions_run
 WHERE session_id = %s AND status IN ({statuses}) ORDER BY created_at, id
"""
ASSIGNED_TOOL_IDS = "SELECT tool_id FROM tools_agenttool WHERE agent_id = %s"


@dataclass(frozen=True)
class QuotaCounts:
    """What a post's quotas (tenants.quotas) count, read together."""

    active_runs: int  # the author's runs in the given statuses
    recent_runs: int  # the author's runs created after ``since``
    recent_tokens: int  # input + output tokens of the tenant's steps finished after ``since``


def quota_counts(
    *, tenant_id: Any, user_id: Any, since: datetime, active_statuses: Collection[str]
) -> QuotaCounts:
    """The three counts in one statement of three subqueries."""
    statement = QUOTA_COUNTS.format(statuses=placeholders(len(active_statuses)))
    tenant = prepared_value(Run, "tenant_id", tenant_id)
    user = prepared_value(Run, "created_by_id", user_id)
    run_since = prepared_value(Run, "created_at", since)
    step_since = prepared_value(Step, "finished_at", since)
    params = [tenant, user, *active_statuses, tenant, user, run_since, tenant, step_since]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        active, recent, tokens = cursor.fetchone()
    return QuotaCounts(active_runs=int(active), recent_runs=int(recent), recent_tokens=int(tokens))


def conversation_rows(
    session_id: Any, *, pending_statuses: Collection[str]
) -> tuple[list[tuple[Message, bool]], dict[UUID | None, datetime]]:
    """The conversation's messages, each with whether a run of it is in ``pending_statuses``, and
    when each user message's newest top-level run was created."""
    statement = CONVERSATION_MESSAGES.format(pending=placeholders(len(pending_statuses)))
    session = key(Session, session_id)
    messages = Message.objects.raw(statement, [*pending_statuses, session])
    # is_pending is a column of the query, not a field: the database's boolean (SQLite's is 0 or 1).
    rows = [(message, bool(vars(message)["is_pending"])) for message in messages]
    runs = Run.objects.raw(CONVERSATION_RUNS, [session])  # oldest first: the newest is kept
    return rows, {run.user_message_id: run.created_at for run in runs}


def lane_runs(session_id: Any, *, statuses: Collection[str]) -> list[tuple[UUID, str]]:
    """(id, status) of the session's runs in ``statuses``, oldest first."""
    statement = LANE_RUNS.format(statuses=placeholders(len(statuses)))
    with connection.cursor() as cursor:
        cursor.execute(statement, [key(Session, session_id), *statuses])
        rows = cursor.fetchall()
    uuid = Run._meta.pk.to_python
    return [(uuid(pk), status) for pk, status in rows]


def agent_tool_ids(agent_id: Any) -> list[UUID]:
    with connection.cursor() as cursor:
        cursor.execute(ASSIGNED_TOOL_IDS, [prepared_value(AgentTool, "agent_id", agent_id)])
        rows = cursor.fetchall()
    uuid = Tool._meta.pk.to_python
    return [uuid(tool_id) for (tool_id,) in rows]
