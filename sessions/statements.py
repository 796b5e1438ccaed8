"""The run's most frequent statements, as SQL written once for both databases.

Why by hand: Django builds every ORM statement anew from its queryset, about half a millisecond
of Python per UPDATE or INSERT on the machines we measure on, more for a query with joins or
``Exists``, and a run makes dozens (its claim, its transitions, its steps' ends, its counters, its
events, its transcript, the reads that set it up and end it); a post reads its conversation's
tree and counts its author's quotas. The writes here are built once from the models' metadata
and cached, the reads are SQL text; either costs a fraction of the ORM's statement. Each is here
because ``bench/compare.py`` showed it pays (docs/benchmarks.md, "Hot statements as SQL written
once" and "The reads too"); everything else is the ORM's.

The SQL is the same on PostgreSQL and SQLite (UPDATE … RETURNING needs SQLite ≥ 3.35). Values
go through each field's own conversion (``get_db_prep_save``), so they are stored and compared
exactly as the ORM would, and rows come back through ``Model.objects.raw``, or, for the claim's
row of four models, through each field's converters: either way converted as the ORM converts
them. Nothing here sends signals or runs ``save()``: like ``QuerySet.update`` and
``bulk_create``, which these statements replace.
"""

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any
from uuid import UUID

from django.db import connection, models
from django.db.models import prefetch_related_objects

from billing.models import ModelPrice
from sessions.models import CompactionSnapshot, Message, MessageRole, Run, Session, Step
from tenants.models import ProviderKey, Tenant
from tools.models import AgentTool, Tool

# Rows per INSERT: far below SQLite's limit on bound values.
INSERT_CHUNK_ROWS = 100

# The reads below are written out with their tables' names; the tests run them on both databases.
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
# A run whose answers left the context: it failed, timed out or was retried.
RUN_IS_ABANDONED = """
  run.status IN ({abandoned})
  OR EXISTS (SELECT 1 FROM agent_sessions_run retry WHERE retry.retry_of_id = run.id)
"""
LATEST_SNAPSHOT = """
SELECT snapshot.* FROM agent_sessions_compactionsnapshot snapshot
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


# A run's setup and end read these once each: the tenant's key for the model, the model's price,
# the steps an earlier attempt stored, the candidate tools, the branch it answers on, whether it
# has executor runs, and its counters again before the terminal transition.
PROVIDER_KEY = """
SELECT * FROM tenants_providerkey WHERE tenant_id = %s AND provider = %s ORDER BY id LIMIT 1
"""
MODEL_PRICE = """
SELECT * FROM billing_modelprice WHERE provider = %s AND model = %s ORDER BY id LIMIT 1
"""
STEP_COUNT = "SELECT COUNT(*) FROM agent_sessions_step WHERE run_id = %s"
STEP_COUNT_OF_KIND = "SELECT COUNT(*) FROM agent_sessions_step WHERE run_id = %s AND kind = %s"
HAS_CHILD_RUNS = "SELECT 1 FROM agent_sessions_run WHERE parent_run_id = %s LIMIT 1"
# The built-ins, and the tenant's tools among those assigned, in the order the model is offered them.
CANDIDATE_TOOLS = """
SELECT * FROM tools_tool WHERE tenant_id IS NULL {assigned} ORDER BY "group", name
"""
ASSIGNED_TOOLS = "OR (tenant_id = %s AND id IN ({ids}))"
# The conversation's placed messages (an executor's belong to its run, not to the conversation).
PLACED_CONVERSATION = """
SELECT message.id, message.parent_id, message.position, message.run_id
  FROM agent_sessions_message message
  LEFT JOIN agent_sessions_run run ON message.run_id = run.id
 WHERE message.session_id = %s AND message.position IS NOT NULL AND run.parent_run_id IS NULL
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
# The lane's next run: an active one sorts first, else the oldest queued (executors are outside it).
LANE_HEAD = """
SELECT id, status FROM agent_sessions_run
 WHERE session_id = %s AND parent_run_id IS NULL AND status IN ({statuses})
 ORDER BY CASE WHEN status = %s THEN 1 ELSE 0 END, created_at, id
 LIMIT 1
"""
ASSIGNED_TOOL_IDS = "SELECT tool_id FROM tools_agenttool WHERE agent_id = %s"
CLOSE_OPEN_STEPS = """
UPDATE agent_sessions_step SET status = %s, version = version + 1, finished_at = %s
 WHERE run_id = %s AND status IN ({statuses})
"""


def update_row(
    model: type[models.Model],
    pk: Any,
    *,
    values: Mapping[str, Any] | None = None,
    increments: Mapping[str, int] | None = None,
    expected: Mapping[str, Any] | None = None,
) -> int:
    """``UPDATE … SET field = value, counter = counter + n WHERE pk = … AND field = expected…``.

    Returns how many rows changed (0 or 1): with ``expected``, 0 means the row moved on.
    """
    values, increments, expected = values or {}, increments or {}, expected or {}
    statement = _update_statement(model, tuple(values), tuple(increments), tuple(expected))
    params = [
        *_prepared(model, values.items()),
        *increments.values(),
        _key(model, pk),
        *_prepared(model, expected.items()),
    ]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return int(cursor.rowcount)


def insert_rows(model: type[models.Model], field_names: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """``INSERT INTO … (fields) VALUES (…), (…)``: every row gives a value for each named field."""
    fields = [_field(model, name) for name in field_names]
    prepared = [
        [field.get_db_prep_save(value, connection) for field, value in zip(fields, row, strict=True)]
        for row in rows
    ]
    with connection.cursor() as cursor:
        for start in range(0, len(prepared), INSERT_CHUNK_ROWS):
            chunk = prepared[start : start + INSERT_CHUNK_ROWS]
            statement = _insert_statement(model, tuple(field_names), len(chunk))
            cursor.execute(statement, [value for row in chunk for value in row])


def advance_counter(model: type[models.Model], pk: Any, column: str, count: int) -> int | None:
    """``UPDATE … SET column = column + count WHERE pk = … RETURNING column``: the new value, or
    None when there is no such row. One statement where the ORM needs an update and a read."""
    statement = _advance_statement(model, column)
    with connection.cursor() as cursor:
        cursor.execute(statement, [count, _key(model, pk)])
        row = cursor.fetchone()
    return None if row is None else int(row[0])


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
    statement = QUOTA_COUNTS.format(statuses=_placeholders(len(active_statuses)))
    tenant = _field(Run, "tenant_id").get_db_prep_save(tenant_id, connection)
    user = _field(Run, "created_by_id").get_db_prep_save(user_id, connection)
    run_since = _field(Run, "created_at").get_db_prep_save(since, connection)
    step_since = _field(Step, "finished_at").get_db_prep_save(since, connection)
    params = [tenant, user, *active_statuses, tenant, user, run_since, tenant, step_since]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        active, recent, tokens = cursor.fetchone()
    return QuotaCounts(active_runs=int(active), recent_runs=int(recent), recent_tokens=int(tokens))


def latest_snapshot(
    *, session_id: Any, positions: Collection[int], abandoned_statuses: Collection[str]
) -> CompactionSnapshot | None:
    """The newest snapshot of the session that replaces the context up to one of ``positions``,
    unless its run was abandoned (ended in ``abandoned_statuses``, or retried)."""
    statement = LATEST_SNAPSHOT.format(
        positions=_placeholders(len(positions)), run_is_abandoned=_run_is_abandoned(len(abandoned_statuses))
    )
    params = [_key(Session, session_id), *positions, *abandoned_statuses]
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
        ids=_placeholders(len(ids)), run_is_abandoned=_run_is_abandoned(len(abandoned_statuses))
    )
    params = [_key(Session, session_id), *(_key(Message, message_id) for message_id in ids)]
    # Positions start at 1: after -1 is from the start.
    params += [-1 if after_position is None else after_position, MessageRole.USER, *abandoned_statuses]
    return list(Message.objects.raw(statement, params))


def provider_key(*, tenant_id: Any, provider: str) -> ProviderKey | None:
    """The tenant's own key for ``provider``, if it stored one."""
    params = [_field(ProviderKey, "tenant_id").get_db_prep_save(tenant_id, connection), provider]
    return next(iter(ProviderKey.objects.raw(PROVIDER_KEY, params)), None)


def model_price(*, provider: str, model: str) -> ModelPrice | None:
    return next(iter(ModelPrice.objects.raw(MODEL_PRICE, [provider, model])), None)


def step_count(run_id: Any, *, kind: str | None = None) -> int:
    """How many steps the run has stored (of ``kind``, if given)."""
    statement, params = STEP_COUNT, [_key(Run, run_id)]
    if kind is not None:
        statement, params = STEP_COUNT_OF_KIND, [*params, kind]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return int(cursor.fetchone()[0])


def has_child_runs(run_id: Any) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(HAS_CHILD_RUNS, [_field(Run, "parent_run_id").get_db_prep_save(run_id, connection)])
        return cursor.fetchone() is not None


def candidate_tools(*, tenant_id: Any, assigned_ids: Collection[Any]) -> list[Tool]:
    """The built-in tools and the tenant's tools among ``assigned_ids``, each with its MCP server."""
    assigned, params = "", []
    if assigned_ids:
        assigned = ASSIGNED_TOOLS.format(ids=_placeholders(len(assigned_ids)))
        params = [_field(Tool, "tenant_id").get_db_prep_save(tenant_id, connection)]
        params += [_key(Tool, tool_id) for tool_id in assigned_ids]
    tools = list(Tool.objects.raw(CANDIDATE_TOOLS.format(assigned=assigned), params))
    served = [tool for tool in tools if tool.mcp_server_id is not None]
    if served:
        prefetch_related_objects(served, "mcp_server")
    return tools


def placed_conversation(session_id: Any) -> list[tuple[UUID, UUID | None, int, UUID | None]]:
    """(id, parent id, position, run id) of each placed message of the session's conversation."""
    with connection.cursor() as cursor:
        cursor.execute(PLACED_CONVERSATION, [_key(Session, session_id)])
        rows = cursor.fetchall()
    uuid = Message._meta.pk.to_python  # SQLite answers with the hex text
    return [(uuid(pk), uuid(parent_id), position, uuid(run_id)) for pk, parent_id, position, run_id in rows]


def conversation_rows(
    session_id: Any, *, pending_statuses: Collection[str]
) -> tuple[list[tuple[Message, bool]], dict[UUID | None, datetime]]:
    """The conversation's messages, each with whether a run of it is in ``pending_statuses``, and
    when each user message's newest top-level run was created."""
    statement = CONVERSATION_MESSAGES.format(pending=_placeholders(len(pending_statuses)))
    session = _key(Session, session_id)
    messages = Message.objects.raw(statement, [*pending_statuses, session])
    # is_pending is a column of the query, not a field: the database's boolean (SQLite's is 0 or 1).
    rows = [(message, bool(vars(message)["is_pending"])) for message in messages]
    runs = Run.objects.raw(CONVERSATION_RUNS, [session])  # oldest first: the newest is kept
    return rows, {run.user_message_id: run.created_at for run in runs}


def lane_runs(session_id: Any, *, statuses: Collection[str]) -> list[tuple[UUID, str]]:
    """(id, status) of the session's runs in ``statuses``, oldest first."""
    statement = LANE_RUNS.format(statuses=_placeholders(len(statuses)))
    with connection.cursor() as cursor:
        cursor.execute(statement, [_key(Session, session_id), *statuses])
        rows = cursor.fetchall()
    uuid = Run._meta.pk.to_python
    return [(uuid(pk), status) for pk, status in rows]


def lane_head(session_id: Any, *, statuses: Collection[str], queued: str) -> tuple[UUID, str] | None:
    """(id, status) of the session's top-level run in ``statuses`` that an active one would be, else
    its oldest ``queued`` one."""
    statement = LANE_HEAD.format(statuses=_placeholders(len(statuses)))
    with connection.cursor() as cursor:
        cursor.execute(statement, [_key(Session, session_id), *statuses, queued])
        row = cursor.fetchone()
    return None if row is None else (Run._meta.pk.to_python(row[0]), row[1])


def agent_tool_ids(agent_id: Any) -> list[UUID]:
    with connection.cursor() as cursor:
        cursor.execute(
            ASSIGNED_TOOL_IDS, [_field(AgentTool, "agent_id").get_db_prep_save(agent_id, connection)]
        )
        rows = cursor.fetchall()
    uuid = Tool._meta.pk.to_python
    return [uuid(tool_id) for (tool_id,) in rows]


def claim_read(run_id: Any) -> Run | None:
    """The run with its tenant, session and user message, in one statement that locks the session's
    row until the transaction ends (where the database locks rows: SQLite's one writer needs not)."""
    with connection.cursor() as cursor:
        cursor.execute(_claim_statement(), [_key(Run, run_id)])
        row = cursor.fetchone()
    if row is None:
        return None
    run, tenant, session, message = _instances(row, CLAIM_MODELS)
    assert isinstance(run, Run) and isinstance(tenant, Tenant) and isinstance(session, Session)
    run.tenant, run.session = tenant, session
    if isinstance(message, Message):
        run.user_message = message
    return run


def close_open_steps(
    run_id: Any, *, open_statuses: Collection[str], to_status: str, finished_at: datetime
) -> int:
    """Every step of the run in one of ``open_statuses`` moves to ``to_status`` (a new version)."""
    statement = CLOSE_OPEN_STEPS.format(statuses=_placeholders(len(open_statuses)))
    finished = _field(Step, "finished_at").get_db_prep_save(finished_at, connection)
    with connection.cursor() as cursor:
        cursor.execute(statement, [to_status, finished, _key(Run, run_id), *open_statuses])
        return int(cursor.rowcount)


def reread_fields(run: Run, field_names: Sequence[str]) -> None:
    """``run.refresh_from_db(fields=field_names)`` for plain fields, in a statement built once."""
    statement = _select_statement(Run, tuple(field_names))
    fresh = next(iter(Run.objects.raw(statement, [_key(Run, run.pk)])), None)
    if fresh is None:
        raise Run.DoesNotExist(f"run {run.pk} no longer exists")
    for name in field_names:
        setattr(run, name, getattr(fresh, name))


def _run_is_abandoned(status_count: int) -> str:
    return RUN_IS_ABANDONED.format(abandoned=_placeholders(status_count))


def _placeholders(count: int) -> str:
    return ", ".join(["%s"] * count)


def _key(model: type[models.Model], pk: Any) -> Any:
    return model._meta.pk.get_db_prep_value(pk, connection)


def _prepared(model: type[models.Model], items: Iterable[tuple[str, Any]]) -> list[Any]:
    return [_field(model, name).get_db_prep_save(value, connection) for name, value in items]


def _field(model: type[models.Model], name: str) -> "models.Field[Any, Any]":
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field):
        raise TypeError(f"{model.__name__}.{name} is the reverse side of a relation, not a column")
    return field


def _column(model: type[models.Model], name: str) -> str:
    column = _field(model, name).column
    if column is None:
        raise TypeError(f"{model.__name__}.{name} has no column")
    return connection.ops.quote_name(column)


def _table(model: type[models.Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


@cache
def _update_statement(
    model: type[models.Model],
    set_names: tuple[str, ...],
    add_names: tuple[str, ...],
    where_names: tuple[str, ...],
) -> str:
    assignments = [f"{_column(model, name)} = %s" for name in set_names]
    assignments += [f"{_column(model, name)} = {_column(model, name)} + %s" for name in add_names]
    conditions = [f"{_column(model, model._meta.pk.name)} = %s"]
    conditions += [f"{_column(model, name)} = %s" for name in where_names]
    return f"UPDATE {_table(model)} SET {', '.join(assignments)} WHERE {' AND '.join(conditions)}"  # noqa: S608


# A claim reads these rows together: (model, its alias in the statement, how it joins the run).
CLAIM_MODELS: tuple[type[models.Model], ...] = (Run, Tenant, Session, Message)
CLAIM_FROM = """
  FROM agent_sessions_run run
  JOIN tenants_tenant tenant ON run.tenant_id = tenant.id
  JOIN agent_sessions_session session ON run.session_id = session.id
  LEFT JOIN agent_sessions_message message ON run.user_message_id = message.id
 WHERE run.id = %s
"""
CLAIM_ALIASES = ("run", "tenant", "session", "message")


@cache
def _claim_statement() -> str:
    columns = ", ".join(
        f"{alias}.{_column(model, field.name)}"
        for model, alias in zip(CLAIM_MODELS, CLAIM_ALIASES, strict=True)
        for field in model._meta.concrete_fields
    )
    lock = (
        connection.ops.for_update_sql(of=("session",)) if connection.features.has_select_for_update_of else ""
    )
    return f"SELECT {columns} {CLAIM_FROM} {lock}"


def _instances(row: Sequence[Any], model_classes: Sequence[type[models.Model]]) -> list[models.Model | None]:
    """The row's columns as one instance per model (each model's concrete fields in turn), their
    values converted as the ORM converts what it reads; None for a model whose key is NULL (an
    outer join that found nothing)."""
    instances: list[models.Model | None] = []
    start = 0
    for model in model_classes:
        fields = model._meta.concrete_fields
        values = row[start : start + len(fields)]
        start += len(fields)
        if values[fields.index(model._meta.pk)] is None:
            instances.append(None)
            continue
        converted = [_converted(field, value) for field, value in zip(fields, values, strict=True)]
        instances.append(model.from_db(connection.alias, [field.attname for field in fields], converted))
    return instances


def _converted(field: "models.Field[Any, Any]", value: Any) -> Any:
    column = field.get_col(field.model._meta.db_table)
    for convert in _converters(field):
        value = convert(value, column, connection)
    return value


@cache
def _converters(field: "models.Field[Any, Any]") -> list[Any]:
    """The database's and the field's own conversions of a value read, as the ORM applies them.

    Kept once per process: they depend on the backend and the field, not on the thread's
    connection (the backend's converters read settings, such as the time zone, not the socket).
    """
    column = field.get_col(field.model._meta.db_table)
    return [*connection.ops.get_db_converters(column), *column.get_db_converters(connection)]


@cache
def _select_statement(model: type[models.Model], field_names: tuple[str, ...]) -> str:
    key = _column(model, model._meta.pk.name)
    columns = ", ".join([key, *(_column(model, name) for name in field_names)])
    return f"SELECT {columns} FROM {_table(model)} WHERE {key} = %s"  # noqa: S608


@cache
def _insert_statement(model: type[models.Model], field_names: tuple[str, ...], row_count: int) -> str:
    columns = ", ".join(_column(model, name) for name in field_names)
    row = f"({_placeholders(len(field_names))})"
    return f"INSERT INTO {_table(model)} ({columns}) VALUES {', '.join([row] * row_count)}"  # noqa: S608


@cache
def _advance_statement(model: type[models.Model], column: str) -> str:
    quoted = _column(model, column)
    return (
        f"UPDATE {_table(model)} SET {quoted} = {quoted} + %s "  # noqa: S608
        f"WHERE {_column(model, model._meta.pk.name)} = %s RETURNING {quoted}"
    )
