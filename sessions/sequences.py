"""Per-session counters, advanced under the session row's lock.

The UPDATE locks the session row until the surrounding transaction commits, so a second
writer waits for the first: numbers commit in the order they were handed out, and a reader
that sees N never later finds a smaller number appearing (no gaps).
"""

from functools import cache
from typing import Literal
from uuid import UUID

from django.db import connection

from sessions.models import Session

CounterName = Literal["last_event_seq", "last_message_position"]


@cache
def _advance_statement(counter: CounterName) -> str:
    quote = connection.ops.quote_name
    table, column = quote(Session._meta.db_table), quote(counter)
    primary_key = quote("id")
    return f"UPDATE {table} SET {column} = {column} + %s WHERE {primary_key} = %s RETURNING {column}"  # noqa: S608


def next_session_number(*, session_id: UUID, counter: CounterName, count: int = 1) -> int:
    """Advance ``counter`` by ``count`` and return its new value. Call inside a transaction.

    Every event and transcript message is numbered here, so it is one statement (UPDATE …
    RETURNING, the same on PostgreSQL and SQLite ≥ 3.35) rather than the ORM's update and read.
    """
    key = Session._meta.get_field("id").get_db_prep_value(session_id, connection)
    with connection.cursor() as cursor:
        cursor.execute(_advance_statement(counter), [count, key])
        row = cursor.fetchone()
    if row is None:
        raise Session.DoesNotExist(f"session {session_id} does not exist")
    return int(row[0])
