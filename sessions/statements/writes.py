"""Updates, inserts and counters: one statement each, built once per model and shape."""

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connection, models

from sessions.models import Run, Step
from sessions.statements.sql import (
    advance_statement,
    field_of,
    insert_statement,
    key,
    placeholders,
    prepared,
    prepared_value,
    update_statement,
)

# Rows per INSERT: far below SQLite's limit on bound values.
INSERT_CHUNK_ROWS = 100

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
    statement = update_statement(model, tuple(values), tuple(increments), tuple(expected))
    params = [
        *prepared(model, values.items()),
        *increments.values(),
        key(model, pk),
        *prepared(model, expected.items()),
    ]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return int(cursor.rowcount)


def insert_rows(model: type[models.Model], field_names: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """``INSERT INTO … (fields) VALUES (…), (…)``: every row gives a value for each named field."""
    fields = [field_of(model, name) for name in field_names]
    prepared_rows = [
        [field.get_db_prep_save(value, connection) for field, value in zip(fields, row, strict=True)]
        for row in rows
    ]
    with connection.cursor() as cursor:
        for start in range(0, len(prepared_rows), INSERT_CHUNK_ROWS):
            chunk = prepared_rows[start : start + INSERT_CHUNK_ROWS]
            statement = insert_statement(model, tuple(field_names), len(chunk))
            cursor.execute(statement, [value for row in chunk for value in row])


def advance_counter(model: type[models.Model], pk: Any, column: str, count: int) -> int | None:
    """``UPDATE … SET column = column + count WHERE pk = … RETURNING column``: the new value, or
    None when there is no such row. One statement where the ORM needs an update and a read."""
    statement = advance_statement(model, column)
    with connection.cursor() as cursor:
        cursor.execute(statement, [count, key(model, pk)])
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def close_open_steps(
    run_id: Any, *, open_statuses: Collection[str], to_status: str, finished_at: datetime
) -> int:
    """Every step of the run in one of ``open_statuses`` moves to ``to_status`` (a new version)."""
    statement = CLOSE_OPEN_STEPS.format(statuses=placeholders(len(open_statuses)))
    finished = prepared_value(Step, "finished_at", finished_at)
    with connection.cursor() as cursor:
        cursor.execute(statement, [to_status, finished, key(Run, run_id), *open_statuses])
        return int(cursor.rowcount)
