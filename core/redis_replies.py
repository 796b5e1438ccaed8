"""A Redis connection whose commands go out at once and whose replies are read later.

redis-py sends a command and waits for its reply in one call. Two hot paths have something
better to do meanwhile: an announcement's emitter needs no reply at all
(``sessions.publisher.PublishConnection``), and an API request's rate-limit count can travel
while the database looks the key up (``core.cache.SharedRedisCache.start_increment_and_read``).
"""

import os
from typing import Any


class RepliesReadLater:
    """Commands sent without waiting; their replies read in order, when the caller asks.

    Not thread-safe: share one under a lock, or keep one per thread. A forked child opens a
    connection of its own (the inherited socket is the parent's, left to the parent). Any error
    closes the connection, and what was unread goes with it.
    """

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._connection: Any = None
        self._pid = 0
        self._unread = 0

    @property
    def unread_replies(self) -> int:
        return self._unread

    def send(self, commands: list[tuple[Any, ...]]) -> None:
        if self._connection is None or self._pid != os.getpid():
            self._connection, self._pid, self._unread = self._pool.make_connection(), os.getpid(), 0
        try:
            self._connection.send_packed_command(self._connection.pack_commands(commands))
        except BaseException:
            self._close()
            raise
        self._unread += len(commands)

    def read(self, count: int) -> list[Any]:
        """The next ``count`` replies, waiting for them (at most the pool's socket timeout each)."""
        try:
            replies = [self._connection.read_response() for _ in range(count)]
        except BaseException:
            self._close()
            raise
        self._unread -= count
        return replies

    def read_arrived(self) -> None:
        """Read and drop the replies that are already here, without waiting for the others."""
        try:
            while self._unread and self._connection.can_read(timeout=0):
                self._connection.read_response()
                self._unread -= 1
        except BaseException:
            self._close()
            raise

    def is_open_in_this_process(self) -> bool:
        return self._connection is not None and self._pid == os.getpid()

    def _close(self) -> None:
        self._connection.disconnect()
        self._connection, self._unread = None, 0
