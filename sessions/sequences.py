"""Per-session counters, advanced under the session row's lock.

The UPDATE locks the session row until the surrounding transaction commits, so a second
writer waits for the first: numbers commit in the order they were handed out, and a reader
that sees N never later finds a smaller number appearing (no gaps).
"""

from typing import Literal
from uuid import UUID

from sessions.models import Session
from sessions.statements.writes import advance_counter

CounterName = Literal["last_event_seq", "last_message_position"]


def next_session_number(*, session_id: UUID, counter: CounterName, count: int = 1) -> int:
    """Advance ``counter`` by ``count`` and return its new value. Call inside a transaction.

    Every event and transcript message is numbered here, so it is one statement (UPDATE …
    RETURNING, sessions.statements) rather than the ORM's update and read.
    """
    number = advance_counter(Session, session_id, counter, count)
    if number is None:
        raise Session.DoesNotExist(f"session {session_id} does not exist")
    return number
