"""A Redis cache backend whose client (and connection pool) is shared by the whole process.

Under ASGI, Django builds a new cache object for every request context, and the stock
``RedisCache`` builds a new client with it: each API request opened a fresh Redis
connection just to count its throttle (about 1 ms). redis-py clients and pools are
thread-safe, so one per process and configuration is enough.
"""

import threading
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.utils.functional import cached_property

from core.redis_replies import RepliesReadLater

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
        replies = _thread_replies.of(pool)
        if replies.is_open_in_this_process():
            replies.read(replies.unread_replies)
        replies.send([("INCR", counter), ("EXPIRE", counter, ttl), ("GET", other)])
        return PendingCounts(replies)


class _ThreadReplies(threading.local):
    """Each thread's connections (one per pool) for counts read later. A count never read (its
    request failed before the throttle) is read and dropped before that thread's next one: it
    arrived long before."""

    def __init__(self) -> None:
        self.by_pool: dict[int, RepliesReadLater] = {}

    def of(self, pool: Any) -> RepliesReadLater:
        replies = self.by_pool.get(id(pool))
        if replies is None:
            replies = self.by_pool[id(pool)] = RepliesReadLater(pool)
        return replies


_thread_replies = _ThreadReplies()


class PendingCounts:
    """The answer to a ``start_increment_and_read``."""

    def __init__(self, replies: RepliesReadLater) -> None:
        self._replies = replies

    def result(self) -> tuple[int, int]:
        """(this window's count with this request, the other window's count)."""
        current, _expire, previous = self._replies.read(3)
        return int(current), int(previous or 0)
