"""Per-session counters, advanced under the session row's lock.

The UPDATE locks the session row until the surrounding transaction commits, so a second
writer waits for the first: numbers commit in the order they were handed out, and a reader
that sees N never later finds a smaller number appearing (no gaps).
"""

from typing import Literal
from uuid import UUID

from django.db.models import F

from sessions.models import Session

CounterName = Literal["last_event_seq", "last_message_position"]


def next_session_number(*, session_id: UUID, counter: CounterName, count: int = 1) -> int:
    """Advance ``counter`` by ``count`` and return its new value. Call inside a transaction."""
    sessions = Session.objects.filter(pk=session_id)
    if not sessions.update(**{counter: F(counter) + count}):
        raise Session.DoesNotExist(f"session {session_id} does not exist")
    return int(sessions.values_list(counter, flat=True).get())
