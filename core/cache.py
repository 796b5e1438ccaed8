"""One redis-py connection pool per process for Django's Redis cache.

Django builds a cache object for every ASGI request context, and ``RedisCache`` a client and
a connection pool with it; a dropped pool's connection closes only when the garbage collector
finds it, so a burst of requests held a burst of Redis connections. ``RedisCache`` takes a
``pool_class`` option (``OPTIONS["pool_class"]``): this one hands every cache object the same
redis-py pool for the same URL and options. redis-py pools are thread-safe, replace a
connection that failed, and start afresh in a forked child.
"""

import threading
from typing import Any

import redis

_pools: dict[tuple[str, str], redis.ConnectionPool] = {}
_lock = threading.Lock()


class SharedConnectionPool:
    """A ``pool_class`` for ``django.core.cache.backends.redis.RedisCache``."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> redis.ConnectionPool:
        """This process's pool for ``url`` and ``options``, made by redis-py on first use."""
        key = (url, repr(sorted(options.items())))
        with _lock:
            pool = _pools.get(key)
            if pool is None:
                pool = _pools[key] = redis.ConnectionPool.from_url(url, **options)
            return pool
