"""What a post reads: its API key (as every request with one does), its session with the agent,
its author's quotas, its conversation's tree, its lane, its agent's tools."""

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db import connection, models

from agents.models import Agent
from files.models import FilePurpose
from sessions.models import Message, Run, Session, Step
from sessions.statements.sql import (
    converted,
    field_of,
    instances,
    joined_columns,
    key,
    placeholders,
    prepared_value,
)
from tenants.models import ApiKey, Tenant
from tools.models import AgentTool, Tool, ToolPolicy

# An API key is read with its tenant, its creator and the creator's role in the tenant (None once
# the creator is no longer a member): (model, its alias in the statement) and how they join.
API_KEY_MODELS: tuple[tuple[type[models.Model], str], ...] = (
    (ApiKey, "api_key"),
    (Tenant, "tenant"),
    (User, "creator"),
)
API_KEY_FROM = """
  FROM tenants_apikey api_key
  JOIN tenants_tenant tenant ON api_key.tenant_id = tenant.id
  JOIN auth_user creator ON api_key.created_by_id = creator.id
  LEFT JOIN tenants_membership membership
    ON membership.tenant_id = api_key.tenant_id AND membership.user_id = api_key.created_by_id
 WHERE api_key.prefix = %s
"""
# The session a message is posted to, with its agent, the agent's tool policy if it stored one,
# and whether file_search would have files to search (files.selectors.with_searchable_files).
POSTING_MODELS: tuple[tuple[type[models.Model], str], ...] = (
    (Session, "session"),
    (Agent, "agent"),
    (ToolPolicy, "policy"),
)
POSTING_FROM = """
  FROM agent_sessions_session session
  JOIN agents_agent agent ON session.agent_id = agent.id
  LEFT JOIN tools_toolpolicy policy ON policy.agent_id = agent.id
 WHERE session.id = %s AND session.tenant_id = %s
"""
SEARCHABLE_FILES = """
EXISTS (SELECT 1 FROM files_knowledgebase_agents knowledge WHERE knowledge.agent_id = session.agent_id),
EXISTS (SELECT 1 FROM files_storedfile attachment
         WHERE attachment.session_id = session.id AND attachment.purpose = %s)
"""

QUOTA_COUNTS = """
SELECT
  (SELECT COUNT(*) FROM agent_sessions_run
    WHERE tenant_id = %s AND created_by_id = %s AND status IN ({statuses})),
  (SELECT COUNT(*) FROM agent_sessions_run
    WHERE tenant_id = %s AND created_by_id = %s AND created_at > %s),
  (SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM agent_sessions_step
    WHERE tenant_id = %s AND finished_at > %s)
"""
# A post reads the conversation's tree: each message, whether a run of it is queued or active, and
# when each user message's newest run started (sessions.branches). Each statement reads the
# session's own rows (its messages; its runs by index run_session_lane), once: a per-message
# subquery for the pending runs cost a lookup per message of a long conversation.
CONVERSATION_MESSAGES = """
SELECT id, parent_id, position, role, created_at, run_id FROM agent_sessions_message
 WHERE session_id = %s
   AND (run_id IS NULL OR run_id NOT IN (
        SELECT id FROM agent_sessions_run WHERE session_id = %s AND parent_run_id IS NOT NULL))
"""
# A run answers a message of its own session: read by the run's session (index run_session_lane),
# not through the messages, where SQLite chose to walk every top-level run in the database.
CONVERSATION_RUNS = """
SELECT id, user_message_id, parent_run_id, status, created_at FROM agent_sessions_run
 WHERE session_id = %s ORDER BY created_at, id
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


@dataclass(frozen=True)
class ConversationRow:
    """One message of a conversation as its tree needs it (sessions.branches)."""

    id: UUID
    parent_id: UUID | None
    position: int | None
    role: str
    created_at: datetime
    run_id: UUID | None
    is_pending: bool


def conversation_rows(
    session_id: Any, *, pending_statuses: Collection[str]
) -> tuple[list[ConversationRow], dict[UUID | None, datetime]]:
    """The conversation's messages, each with whether a run of it (its own run, or one answering
    it, sub-runs included) is in ``pending_statuses``, and when each user message's newest
    top-level run was created.

    Read as columns, not as model instances: a post reads the whole conversation, and building a
    ``Message`` for each of a long one's messages was most of a post's time (bench/neighbours.py).
    """
    session = key(Session, session_id)
    with connection.cursor() as cursor:
        cursor.execute(CONVERSATION_MESSAGES, [session, session])
        message_rows = cursor.fetchall()
        cursor.execute(CONVERSATION_RUNS, [session])
        run_rows = cursor.fetchall()
    run_id, run_message, run_created = (field_of(Run, name) for name in ("id", "user_message", "created_at"))
    pending: set[UUID] = set()
    newest: dict[UUID | None, datetime] = {}
    for row_id, message_id, parent_run_id, status, created_at in run_rows:
        message_id = converted(run_message, message_id)
        if status in pending_statuses:
            pending.add(converted(run_id, row_id))
            if message_id is not None:
                pending.add(message_id)
        if parent_run_id is None and message_id is not None:
            # Oldest first: the newest run of each message is the one kept.
            newest[message_id] = converted(run_created, created_at)
    fields = _message_fields()
    return [_conversation_row(row, fields, pending) for row in message_rows], newest


@cache
def _message_fields() -> tuple["models.Field[Any, Any]", ...]:
    return tuple(field_of(Message, name) for name in ("id", "parent", "created_at", "run"))


def _conversation_row(
    row: Sequence[Any], fields: tuple["models.Field[Any, Any]", ...], pending: set[UUID]
) -> ConversationRow:
    message_id, parent_id, position, role, created_at, run_id = row
    id_field, parent_field, created_field, run_field = fields
    message_id, run_id = converted(id_field, message_id), converted(run_field, run_id)
    return ConversationRow(
        id=message_id,
        parent_id=converted(parent_field, parent_id),
        position=position,
        role=role,
        created_at=converted(created_field, created_at),
        run_id=run_id,
        is_pending=message_id in pending or run_id in pending,
    )


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


def api_key_with_creator(prefix: str) -> tuple[ApiKey, str | None] | None:
    """The key with ``prefix``, its tenant and creator read with it, and the creator's role in the
    tenant (None once they are no longer a member)."""
    with connection.cursor() as cursor:
        cursor.execute(_api_key_statement(), [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    api_key, tenant, creator = instances(row, [model for model, _ in API_KEY_MODELS])
    assert isinstance(api_key, ApiKey) and isinstance(tenant, Tenant) and isinstance(creator, User)
    api_key.tenant, api_key.created_by = tenant, creator
    return api_key, row[-1]


@cache
def _api_key_statement() -> str:
    return f"SELECT {joined_columns(API_KEY_MODELS)}, membership.role {API_KEY_FROM}"


def session_for_posting(*, tenant_id: Any, session_id: Any) -> Session | None:
    """The tenant's session with its agent and the agent's tool policy (read, or known absent), and
    ``agent_has_knowledge`` and ``has_attachments`` as ``with_searchable_files`` annotates them."""
    tenant = prepared_value(Session, "tenant_id", tenant_id)
    params = [FilePurpose.ATTACHMENT, key(Session, session_id), tenant]
    with connection.cursor() as cursor:
        cursor.execute(_posting_statement(), params)
        row = cursor.fetchone()
    if row is None:
        return None
    session, agent, policy = instances(row, [model for model, _ in POSTING_MODELS])
    assert isinstance(session, Session) and isinstance(agent, Agent)
    session.agent = agent
    # Known absent as well as known present: the agent's tool_policy reads no row either way.
    Agent._meta.get_field("tool_policy").set_cached_value(agent, policy)
    if isinstance(policy, ToolPolicy):
        policy.agent = agent
    # Columns of the query, not fields: the database's booleans (SQLite's are 0 or 1).
    vars(session).update(agent_has_knowledge=bool(row[-2]), has_attachments=bool(row[-1]))
    return session


@cache
def _posting_statement() -> str:
    return f"SELECT {joined_columns(POSTING_MODELS)}, {SEARCHABLE_FILES} {POSTING_FROM}"
