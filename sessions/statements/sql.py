"""Statements built from the models' metadata, and values converted as the ORM converts them."""

from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

from django.db import connection, models


def placeholders(count: int) -> str:
    return ", ".join(["%s"] * count)


def key(model: type[models.Model], pk: Any) -> Any:
    """A primary key as the database compares it."""
    return model._meta.pk.get_db_prep_value(pk, connection)


def prepared(model: type[models.Model], items: Iterable[tuple[str, Any]]) -> list[Any]:
    """Each (field name, value) as the field stores it."""
    return [field_of(model, name).get_db_prep_save(value, connection) for name, value in items]


def prepared_value(model: type[models.Model], name: str, value: Any) -> Any:
    return field_of(model, name).get_db_prep_save(value, connection)


def field_of(model: type[models.Model], name: str) -> "models.Field[Any, Any]":
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field):
        raise TypeError(f"{model.__name__}.{name} is the reverse side of a relation, not a column")
    return field


def column(model: type[models.Model], name: str) -> str:
    column_name = field_of(model, name).column
    if column_name is None:
        raise TypeError(f"{model.__name__}.{name} has no column")
    return connection.ops.quote_name(column_name)


def table(model: type[models.Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


@cache
def update_statement(
    model: type[models.Model],
    set_names: tuple[str, ...],
    add_names: tuple[str, ...],
    where_names: tuple[str, ...],
) -> str:
    assignments = [f"{column(model, name)} = %s" for name in set_names]
    assignments += [f"{column(model, name)} = {column(model, name)} + %s" for name in add_names]
    conditions = [f"{column(model, model._meta.pk.name)} = %s"]
    conditions += [f"{column(model, name)} = %s" for name in where_names]
    return f"UPDATE {table(model)} SET {', '.join(assignments)} WHERE {' AND '.join(conditions)}"  # noqa: S608


@cache
def insert_statement(model: type[models.Model], field_names: tuple[str, ...], row_count: int) -> str:
    columns = ", ".join(column(model, name) for name in field_names)
    row = f"({placeholders(len(field_names))})"
    return f"INSERT INTO {table(model)} ({columns}) VALUES {', '.join([row] * row_count)}"  # noqa: S608


@cache
def advance_statement(model: type[models.Model], column_name: str) -> str:
    quoted = column(model, column_name)
    return (
        f"UPDATE {table(model)} SET {quoted} = {quoted} + %s "  # noqa: S608
        f"WHERE {column(model, model._meta.pk.name)} = %s RETURNING {quoted}"
    )


def joined_columns(models_and_aliases: Sequence[tuple[type[models.Model], str]]) -> str:
    """Every concrete column of each model, under its alias, in the order ``instances`` reads them."""
    return ", ".join(
        f"{alias}.{column(model, field.name)}"
        for model, alias in models_and_aliases
        for field in model._meta.concrete_fields
    )


def instances(row: Sequence[Any], model_classes: Sequence[type[models.Model]]) -> list[models.Model | None]:
    """The row's columns as one instance per model (each model's concrete fields in turn), their
    values converted as the ORM converts what it reads; None for a model whose key is NULL (an
    outer join that found nothing). Columns after the models' are left to the caller."""
    found: list[models.Model | None] = []
    start = 0
    for model in model_classes:
        fields = model._meta.concrete_fields
        values = row[start : start + len(fields)]
        start += len(fields)
        if values[fields.index(model._meta.pk)] is None:
            found.append(None)
            continue
        values = [converted(field, value) for field, value in zip(fields, values, strict=True)]
        found.append(model.from_db(connection.alias, [field.attname for field in fields], values))
    return found


def converted(field: "models.Field[Any, Any]", value: Any) -> Any:
    """A column's value as the ORM reads it into ``field``."""
    col, converters = _reading(field)
    for convert in converters:
        value = convert(value, col, connection)
    return value


@cache
def _reading(field: "models.Field[Any, Any]") -> tuple[Any, list[Any]]:
    """The field's column, and the database's and the field's own conversions of a value read, as
    the ORM applies them.

    Kept once per process: they depend on the backend and the field, not on the thread's
    connection (the backend's converters read settings, such as the time zone, not the socket).
    """
    col = field.get_col(field.model._meta.db_table)
    return col, [*connection.ops.get_db_converters(col), *col.get_db_converters(connection)]
