"""Model instances from hand-written SQL rows, with the ORM's own value conversions.

Hot paths that cannot afford the ORM's query compilation (a cold request pays for it
several times over) select a model's concrete columns with ``column_list`` and build the
instance with ``instance_from_row``: JSON, encrypted and other converted fields come out
exactly as a queryset would give them.
"""

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, TypeVar

from django.db import connections
from django.db.models import Field, Model

ModelT = TypeVar("ModelT", bound=Model)
Converter = Callable[[Any, Any, Any], Any]


def column_list(model: type[Model], alias: str) -> str:
    """``alias."col", …`` for every concrete field of ``model``, in ``instance_from_row``'s order."""
    return ", ".join(f'{alias}."{field.column}"' for field in model._meta.concrete_fields)


def column_count(model: type[Model]) -> int:
    return len(model._meta.concrete_fields)


@cache
def _field_converters(model: type[Model], field_name: str, using: str) -> tuple[tuple[Converter, ...], Any]:
    connection = connections[using]
    field = model._meta.get_field(field_name)
    assert isinstance(field, Field), f"{model.__name__}.{field_name} is not a column"
    column = field.get_col(model._meta.db_table)
    return tuple(connection.ops.get_db_converters(column) + field.get_db_converters(connection)), column


def field_value(model: type[Model], field_name: str, value: Any, *, using: str = "default") -> Any:
    """A raw column value of ``model.field_name`` as the ORM would give it (JSON decoded, …)."""
    converters, column = _field_converters(model, field_name, using)
    connection = connections[using]
    for converter in converters:
        value = converter(value, column, connection)
    return value


def insert_values(instance: Model, *, using: str = "default") -> tuple[list[str], list[Any]]:
    """The columns and the adapted values ``instance.save()`` would insert (defaults, auto_now_add)."""
    connection = connections[using]
    fields = type(instance)._meta.concrete_fields
    columns = [f'"{field.column}"' for field in fields]
    values = [field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields]
    return columns, values


@cache
def _row_reading(model: type[Model], using: str) -> tuple[list[str], list[tuple[tuple[Converter, ...], Any]]]:
    """The attribute names of ``model``'s concrete fields, and each one's converters and column."""
    fields = model._meta.concrete_fields
    readings = [_field_converters(model, field.name, using) for field in fields]
    return [field.attname for field in fields], readings


def instance_from_row(model: type[ModelT], row: Sequence[Any], *, using: str = "default") -> ModelT:
    """The instance whose concrete fields are ``row`` (as ``column_list`` selected them)."""
    # Every run reads a dozen tools this way: look the connection and converters up once per row.
    attnames, readings = _row_reading(model, using)
    connection = connections[using]
    values = []
    for (converters, column), value in zip(readings, row, strict=True):
        for converter in converters:
            value = converter(value, column, connection)
        values.append(value)
    return model.from_db(using, attnames, values)
