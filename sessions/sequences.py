"""Per-session counters taken with one UPDATE … RETURNING.

The UPDATE locks the session row until the surrounding transaction commits, so a
second writer waits for the first: numbers commit in the order they were handed out,
and a reader that sees N never later finds a smaller number appearing (no gaps).
"""

from typing import Literal
from uuid import UUID

from django.db import connection

from core.prepared import prepared_cursor
from sessions.models import Session

CounterName = Literal["last_event_seq", "last_message_position"]


def next_session_number(*, session_id: UUID, counter: CounterName, count: int = 1) -> int:
    """Advance ``counter`` by ``count`` and return its new value. Call inside a transaction."""
    table = Session._meta.db_table
    with prepared_cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {counter} = {counter} + %s WHERE id = %s RETURNING {counter}",  # noqa: S608
            [count, session_id.hex if connection.vendor == "sqlite" else session_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise Session.DoesNotExist(f"session {session_id} does not exist")
    return int(row[0])
