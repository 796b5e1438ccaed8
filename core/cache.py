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
