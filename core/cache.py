"""A Redis cache backend whose client (and connection pool) is shared by the whole process.

Under ASGI, Django builds a new cache object for every request context, and the stock
``RedisCache`` builds a new client with it: each API request opened a fresh Redis
connection just to count its throttle (about 1 ms). redis-py clients and pools are
thread-safe, so one per process and configuration is enough.
"""

import os
import threading
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.utils.functional import cached_property

_clients: dict[tuple[Any, ...], RedisCacheClient] = {}
_lock = threading.Lock()


class SharedRedisCache(RedisCache):
    # Set by RedisCache.__init__; declared for the type checker.
    _servers: list[str]
    _options: dict[str, Any]
    _class: type[RedisCacheClient]

    @cached_property
    def _cache(self) -> RedisCacheClient:
        key = (tuple(self._servers), repr(sorted(self._options.items())))
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = self._class(self._servers, **self._options)
            return client

    @property
    def has_one_server(self) -> bool:
        return len(self._servers) == 1

    def increment_and_read(self, increment_key: str, read_key: str, *, ttl: int) -> tuple[int, int]:
        """Add 1 to one counter (kept ``ttl`` seconds) and read another, in one round trip.

        Both keys must live on the same server: callers check ``has_one_server``.
        """
        counter = self.make_and_validate_key(increment_key)
        other = self.make_and_validate_key(read_key)
        client = self._cache.get_client(counter, write=True)
        with client.pipeline(transaction=False) as pipeline:
            pipeline.incr(counter)
            pipeline.expire(counter, ttl)
            pipeline.get(other)
            current, _, previous = pipeline.execute()
        return int(current), int(previous or 0)

    def start_increment_and_read(self, increment_key: str, read_key: str, *, ttl: int) -> "PendingCounts":
        """``increment_and_read`` sent now, its answer read by ``PendingCounts.result``: the round
        trip goes on while the caller waits for something else."""
        counter = self.make_and_validate_key(increment_key)
        other = self.make_and_validate_key(read_key)
        pool = self._cache.get_client(counter, write=True).connection_pool
        connection = _ThreadConnection.of(pool)
        connection.send([("INCR", counter), ("EXPIRE", counter, ttl), ("GET", other)])
        return PendingCounts(connection)


class _ThreadConnection:
    """A thread's own connection for answers read later. An answer never read (its request
    failed before it) is read and dropped before the next send: it arrived long before."""

    _local = threading.local()

    def __init__(self, pool: Any) -> None:
        self._connection = pool.make_connection()
        self._unread = 0

    @classmethod
    def of(cls, pool: Any) -> "_ThreadConnection":
        """The calling thread's connection to ``pool``'s server."""
        connections: dict[int, _ThreadConnection] | None = getattr(cls._local, "connections", None)
        if connections is None or getattr(cls._local, "pid", None) != os.getpid():
            connections = cls._local.connections = {}  # a forked child opens its own
            cls._local.pid = os.getpid()
        connection = connections.get(id(pool))
        if connection is None:
            connection = connections[id(pool)] = cls(pool)
        return connection

    def send(self, commands: list[tuple[Any, ...]]) -> None:
        try:
            while self._unread:
                self._connection.read_response()
                self._unread -= 1
            self._connection.send_packed_command(self._connection.pack_commands(commands))
        except BaseException:
            self._reset()
            raise
        self._unread = len(commands)

    def read(self, count: int) -> list[Any]:
        """The next ``count`` answers, in order."""
        try:
            answers = [self._connection.read_response() for _ in range(count)]
        except BaseException:
            self._reset()
            raise
        self._unread -= count
        return answers

    def _reset(self) -> None:
        self._connection.disconnect()  # what was unread goes with the socket
        self._unread = 0


class PendingCounts:
    """The answer to a ``start_increment_and_read``."""

    def __init__(self, connection: _ThreadConnection) -> None:
        self._connection = connection

    def result(self) -> tuple[int, int]:
        """(this window's count with this request, the other window's count)."""
        current, _expire, previous = self._connection.read(3)
        return int(current), int(previous or 0)
