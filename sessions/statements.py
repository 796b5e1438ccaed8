"""The run's most frequent writes, as SQL written once for both databases.

Why by hand: Django builds every ORM statement anew from its queryset, about half a millisecond
of Python per UPDATE or INSERT on the machines we measure on, and a run makes a dozen of them
on its way (its transitions, its steps' ends, its counters, its events). Built once from the
model's metadata and cached, the same statement costs a fifth of that: `bench/compare.py` in
docs/benchmarks.md ("Hot writes as SQL written once") has the figures.

The SQL is the same on PostgreSQL and SQLite (UPDATE … RETURNING needs SQLite ≥ 3.35). Values
go through each field's own conversion (``get_db_prep_save``), so they are stored exactly as
the ORM stores them. Nothing here sends signals or runs ``save()``: like ``QuerySet.update`` and
``bulk_create``, which these statements replace.
"""

from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from django.db import connection, models

# Rows per INSERT: far below SQLite's limit on bound values.
INSERT_CHUNK_ROWS = 100


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
        model._meta.pk.get_db_prep_value(pk, connection),
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
        cursor.execute(statement, [count, model._meta.pk.get_db_prep_value(pk, connection)])
        row = cursor.fetchone()
    return None if row is None else int(row[0])


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


@cache
def _insert_statement(model: type[models.Model], field_names: tuple[str, ...], row_count: int) -> str:
    columns = ", ".join(_column(model, name) for name in field_names)
    row = "(" + ", ".join(["%s"] * len(field_names)) + ")"
    return f"INSERT INTO {_table(model)} ({columns}) VALUES {', '.join([row] * row_count)}"  # noqa: S608


@cache
def _advance_statement(model: type[models.Model], column: str) -> str:
    quoted = _column(model, column)
    return (
        f"UPDATE {_table(model)} SET {quoted} = {quoted} + %s "  # noqa: S608
        f"WHERE {_column(model, model._meta.pk.name)} = %s RETURNING {quoted}"
    )
