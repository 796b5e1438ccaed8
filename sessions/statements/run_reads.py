"""What a run reads: its claim, its set-up (key, price, tools, transcript) and its end."""

from collections.abc import Collection, Sequence
from functools import cache
from typing import Any
from uuid import UUID

from django.db import connection, models
from django.db.models import prefetch_related_objects

from billing.models import ModelPrice
from sessions.models import CompactionSnapshot, Message, MessageRole, Run, Session
from sessions.statements.sql import (
    column,
    instances,
    joined_columns,
    key,
    placeholders,
    prepared_value,
)
from tenants.models import ProviderKey, Tenant
from tools.models import Tool

# The reads below are written out with their tables' names; the tests run them on both databases.

# A claim reads these rows together: (model, its alias in the statement), and how they join the run.
CLAIM_MODELS: tuple[tuple[type[models.Model], str], ...] = (
    (Run, "run"),
    (Tenant, "tenant"),
    (Session, "session"),
    (Message, "message"),
)
# With the steps an earlier attempt stored, which its recorder numbers on from.
CLAIM_STEP_COUNT = "(SELECT COUNT(*) FROM agent_sessions_step step WHERE step.run_id = run.id)"
CLAIM_FROM = """
  FROM agent_sessions_run run
  JOIN tenants_tenant tenant ON run.tenant_id = tenant.id
  JOIN agent_sessions_session session ON run.session_id = session.id
  LEFT JOIN agent_sessions_message message ON run.user_message_id = message.id
 WHERE run.id = %s
"""
# The lane's next run: an active one sorts first, else the oldest queued (executors are outside it).
LANE_HEAD = """
SELECT id, status FROM agent_sessions_run
 WHERE session_id = %s AND parent_run_id IS NULL AND status IN ({statuses})
 ORDER BY CASE WHEN status = %s THEN 1 ELSE 0 END, created_at, id
 LIMIT 1
"""
# What a lane dispatches: the session's queued executors (they start at once, beside their parent)
# and its top-level runs that hold or wait for the lane, oldest first.
DISPATCH_CANDIDATES = """
SELECT id, status, parent_run_id FROM agent_sessions_run
 WHERE session_id = %s
   AND ((parent_run_id IS NOT NULL AND status = %s) OR (parent_run_id IS NULL AND status IN ({statuses})))
 ORDER BY created_at, id
"""
# A run's setup and end read these once each: the tenant's key for the model, the model's price,
# the steps an earlier attempt stored, the candidate tools, the branch it answers on, whether it
# has executor runs, and its counters again before the terminal transition. Those that read
# whole rows name their columns ({columns}, from the model) rather than ``*``: a prepared
# statement's row must keep its shape when a migration adds a column.
PROVIDER_KEY = """
SELECT {columns} FROM tenants_providerkey provider_key
 WHERE tenant_id = %s AND provider = %s ORDER BY id LIMIT 1
"""
MODEL_PRICE = """
SELECT {columns} FROM billing_modelprice price WHERE provider = %s AND model = %s ORDER BY id LIMIT 1
"""
STEP_COUNT = "SELECT COUNT(*) FROM agent_sessions_step WHERE run_id = %s"
STEP_COUNT_OF_KIND = "SELECT COUNT(*) FROM agent_sessions_step WHERE run_id = %s AND kind = %s"
# A run's fields again before its end, with whether it has child runs (its tree's usage is summed).
REREAD = """
SELECT {columns},
       EXISTS (SELECT 1 FROM agent_sessions_run child WHERE child.parent_run_id = run.id) AS has_child_runs
  FROM agent_sessions_run run WHERE run.id = %s
"""
# The built-ins, and the tenant's tools among those assigned, in the order the model is offered them.
CANDIDATE_TOOLS = """
SELECT {columns} FROM tools_tool tool WHERE tenant_id IS NULL {assigned} ORDER BY "group", name
"""
ASSIGNED_TOOLS = "OR (tenant_id = %s AND id IN ({ids}))"
# The conversation's placed messages (an executor's belong to its run, not to the conversation).
PLACED_CONVERSATION = """
SELECT message.id, message.parent_id, message.position, message.run_id
  FROM agent_sessions_message message
  LEFT JOIN agent_sessions_run run ON message.run_id = run.id
 WHERE message.session_id = %s AND message.position IS NOT NULL AND run.parent_run_id IS NULL
"""
# A run whose answers left the context: it failed, timed out or was retried.
RUN_IS_ABANDONED = """
  run.status IN ({abandoned})
  OR EXISTS (SELECT 1 FROM agent_sessions_run retry WHERE retry.retry_of_id = run.id)
"""
LATEST_SNAPSHOT = """
SELECT {columns} FROM agent_sessions_compactionsnapshot snapshot
  LEFT JOIN agent_sessions_run run ON snapshot.run_id = run.id
 WHERE snapshot.session_id = %s AND snapshot.replaces_up_to_position IN ({positions})
   AND NOT (run.id IS NOT NULL AND ({run_is_abandoned}))
 ORDER BY snapshot.created_at DESC, snapshot.replaces_up_to_position DESC
 LIMIT 1
"""
PLACED_MESSAGES = """
SELECT message.id, message.role, message.content, message.position
  FROM agent_sessions_message message
  LEFT JOIN agent_sessions_run run ON message.run_id = run.id
 WHERE message.session_id = %s AND message.position IS NOT NULL AND message.id IN ({ids})
   AND message.position > %s
   AND NOT (message.role <> %s AND run.id IS NOT NULL AND ({run_is_abandoned}))
 ORDER BY message.position
"""


def claim_read(run_id: Any) -> Run | None:
    """The run with its tenant, session, user message and stored step count, in one statement that
    locks the session's row until the transaction ends (where the database locks rows: SQLite's one
    writer needs not)."""
    with connection.cursor() as cursor:
        cursor.execute(_claim_statement(), [key(Run, run_id)])
        row = cursor.fetchone()
    if row is None:
        return None
    *columns, stored_step_count = row
    run, tenant, session, message = instances(columns, [model for model, _ in CLAIM_MODELS])
    assert isinstance(run, Run) and isinstance(tenant, Tenant) and isinstance(session, Session)
    run.tenant, run.session = tenant, session
    run.stored_step_count = int(stored_step_count)
    if isinstance(message, Message):
        run.user_message = message
    return run


@cache
def _claim_statement() -> str:
    lock = (
        connection.ops.for_update_sql(of=("session",)) if connection.features.has_select_for_update_of else ""
    )
    return f"SELECT {joined_columns(CLAIM_MODELS)}, {CLAIM_STEP_COUNT} {CLAIM_FROM} {lock}"


def lane_head(session_id: Any, *, statuses: Collection[str], queued: str) -> tuple[UUID, str] | None:
    """(id, status) of the session's top-level run in ``statuses`` that an active one would be, else
    its oldest ``queued`` one."""
    statement = LANE_HEAD.format(statuses=placeholders(len(statuses)))
    with connection.cursor() as cursor:
        cursor.execute(statement, [key(Session, session_id), *statuses, queued])
        row = cursor.fetchone()
    return None if row is None else (Run._meta.pk.to_python(row[0]), row[1])


def dispatch_candidates(
    session_id: Any, *, statuses: Collection[str], queued: str
) -> list[tuple[UUID, str, UUID | None]]:
    """(id, status, parent run id) of the session's ``queued`` child runs and of its top-level runs
    in ``statuses``, oldest first."""
    statement = DISPATCH_CANDIDATES.format(statuses=placeholders(len(statuses)))
    with connection.cursor() as cursor:
        cursor.execute(statement, [key(Session, session_id), queued, *statuses])
        rows = cursor.fetchall()
    uuid = Run._meta.pk.to_python  # SQLite answers with the hex text
    return [(uuid(run_id), status, uuid(parent_id)) for run_id, status, parent_id in rows]


def provider_key(*, tenant_id: Any, provider: str) -> ProviderKey | None:
    """The tenant's own key for ``provider``, if it stored one."""
    params = [prepared_value(ProviderKey, "tenant_id", tenant_id), provider]
    statement = PROVIDER_KEY.format(columns=_columns(ProviderKey, "provider_key"))
    return next(iter(ProviderKey.objects.raw(statement, params)), None)


def model_price(*, provider: str, model: str) -> ModelPrice | None:
    statement = MODEL_PRICE.format(columns=_columns(ModelPrice, "price"))
    return next(iter(ModelPrice.objects.raw(statement, [provider, model])), None)


def step_count(run_id: Any, *, kind: str | None = None) -> int:
    """How many steps the run has stored (of ``kind``, if given)."""
    statement, params = STEP_COUNT, [key(Run, run_id)]
    if kind is not None:
        statement, params = STEP_COUNT_OF_KIND, [*params, kind]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return int(cursor.fetchone()[0])


def candidate_tools(*, tenant_id: Any, assigned_ids: Collection[Any]) -> list[Tool]:
    """The built-in tools and the tenant's tools among ``assigned_ids``, each with its MCP server."""
    assigned, params = "", []
    if assigned_ids:
        assigned = ASSIGNED_TOOLS.format(ids=placeholders(len(assigned_ids)))
        params = [prepared_value(Tool, "tenant_id", tenant_id)]
        params += [key(Tool, tool_id) for tool_id in assigned_ids]
    statement = CANDIDATE_TOOLS.format(columns=_columns(Tool, "tool"), assigned=assigned)
    tools = list(Tool.objects.raw(statement, params))
    served = [tool for tool in tools if tool.mcp_server_id is not None]
    if served:
        prefetch_related_objects(served, "mcp_server")
    return tools


def placed_conversation(session_id: Any) -> list[tuple[UUID, UUID | None, int, UUID | None]]:
    """(id, parent id, position, run id) of each placed message of the session's conversation."""
    with connection.cursor() as cursor:
        cursor.execute(PLACED_CONVERSATION, [key(Session, session_id)])
        rows = cursor.fetchall()
    uuid = Message._meta.pk.to_python  # SQLite answers with the hex text
    return [(uuid(pk), uuid(parent_id), position, uuid(run_id)) for pk, parent_id, position, run_id in rows]


def latest_snapshot(
    *, session_id: Any, positions: Collection[int], abandoned_statuses: Collection[str]
) -> CompactionSnapshot | None:
    """The newest snapshot of the session that replaces the context up to one of ``positions``,
    unless its run was abandoned (ended in ``abandoned_statuses``, or retried)."""
    statement = LATEST_SNAPSHOT.format(
        columns=_columns(CompactionSnapshot, "snapshot"),
        positions=placeholders(len(positions)),
        run_is_abandoned=_run_is_abandoned(len(abandoned_statuses)),
    )
    params = [key(Session, session_id), *positions, *abandoned_statuses]
    return next(iter(CompactionSnapshot.objects.raw(statement, params)), None)


def placed_messages(
    *, session_id: Any, ids: Collection[Any], after_position: int | None, abandoned_statuses: Collection[str]
) -> list[Message]:
    """The session's placed messages among ``ids`` (a branch of the conversation, which holds no
    executor's messages: sessions.branches) after ``after_position``, by position, with their id,
    role, content and position; the answers (anything but the user's messages) of abandoned runs
    are left out, as ``latest_snapshot`` says abandoned."""
    if not ids:
        return []
    statement = PLACED_MESSAGES.format(
        ids=placeholders(len(ids)), run_is_abandoned=_run_is_abandoned(len(abandoned_statuses))
    )
    params = [key(Session, session_id), *(key(Message, message_id) for message_id in ids)]
    # Positions start at 1: after -1 is from the start.
    params += [-1 if after_position is None else after_position, MessageRole.USER, *abandoned_statuses]
    return list(Message.objects.raw(statement, params))


def _run_is_abandoned(status_count: int) -> str:
    return RUN_IS_ABANDONED.format(abandoned=placeholders(status_count))


def reread_fields(run: Run, field_names: Sequence[str]) -> bool:
    """``run.refresh_from_db(fields=field_names)`` for plain fields, in a statement built once;
    returns whether the run has child runs (executors, sub-agents), read in the same statement."""
    fresh = next(iter(Run.objects.raw(_reread_statement(tuple(field_names)), [key(Run, run.pk)])), None)
    if fresh is None:
        raise Run.DoesNotExist(f"run {run.pk} no longer exists")
    for name in field_names:
        setattr(run, name, getattr(fresh, name))
    return bool(vars(fresh)["has_child_runs"])  # a column of the statement, not of the model


@cache
def _reread_statement(field_names: tuple[str, ...]) -> str:
    columns = ", ".join(column(Run, name) for name in ("id", *field_names))
    return REREAD.format(columns=columns)


@cache
def _columns(model: type[models.Model], alias: str) -> str:
    return joined_columns(((model, alias),))
