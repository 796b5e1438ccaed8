"""Exceptions shared across apps."""

from django.db import InterfaceError, OperationalError


class ToolError(Exception):
    """A failure the model should see as the tool's error result (bad input, refused URL…).

    Lives in core because the outbound-request guard (core.ssrf) raises it too.
    """


# The database could not be reached or dropped the connection (a restart, a network cut, no pooled
# connection within the pool's timeout). Requests answer 503 and runs go back to the queue.
DATABASE_UNAVAILABLE_ERRORS = (OperationalError, InterfaceError)
