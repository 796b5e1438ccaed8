"""Giving a thread's database connection back while it waits."""

from django.db import connection


def release_connection() -> None:
    """Return this thread's connection to the pool (PostgreSQL with ``DATABASE_POOL``).

    A run thread calls this before it waits on a model or a tool, so a worker's connections stay
    bounded by its pool however many runs it executes. Inside a transaction, or without a pool
    (SQLite keeps one cheap connection per thread), it does nothing.
    """
    is_pooled = bool(connection.settings_dict["OPTIONS"].get("pool"))
    if is_pooled and connection.connection is not None and not connection.in_atomic_block:
        connection.close()
