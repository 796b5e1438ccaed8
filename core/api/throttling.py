"""The API's general rate limit: a sliding-window counter per actor, one cache round trip.

DRF's ``SimpleRateThrottle`` keeps a list of every request's time in the window and reads
and rewrites it whole on every request: at 600 a minute that is a 600-entry list pickled
twice per request, and two round trips to Redis. Here each actor has one counter per fixed
window, and the limit applies to the current window's count plus the previous window's,
weighted by how much of it still overlaps the sliding window (the usual sliding-window
counter). A request counts as soon as it arrives, refused or not: a client that keeps
hammering stays limited.

Throttling runs after authentication: a request with a wrong secret is refused (401) before it
is counted, so no one spends the allowance of a key whose prefix alone they have seen.
"""

import math
from typing import Any

from django.core.cache import caches
from django.core.cache.backends.base import BaseCache
from django.core.cache.backends.redis import RedisCache
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle


class ActorRateThrottle(SimpleRateThrottle):
    """A general ceiling per API key, per signed-in user, or per address when anonymous."""

    scope = "actor"
    # Set by SimpleRateThrottle.__init__ from the rate; declared for the type checker.
    num_requests: int | None
    duration: int | None
    _wait_seconds: float | None = None

    def get_cache_key(self, request: Request, view: Any) -> str:
        api_key = getattr(request, "auth", None)
        if api_key is not None and hasattr(api_key, "pk"):
            ident = f"key:{api_key.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user:{request.user.pk}"
        else:
            ident = f"ip:{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def allow_request(self, request: Request, view: Any) -> bool:
        if self.rate is None or self.num_requests is None or self.duration is None:
            return True
        key = self.get_cache_key(request, view)
        now = self.timer()
        window = int(now // self.duration)
        current, previous = count_in_windows(
            caches["default"], f"{key}:{window}", f"{key}:{window - 1}", ttl=2 * self.duration
        )
        self._wait_seconds = seconds_until_allowed(
            current=current,
            previous=previous,
            elapsed_fraction=(now % self.duration) / self.duration,
            limit=self.num_requests,
            window_seconds=self.duration,
        )
        return self._wait_seconds == 0

    def wait(self) -> float | None:
        return self._wait_seconds or None


def count_in_windows(cache: BaseCache, current_key: str, previous_key: str, *, ttl: int) -> tuple[int, int]:
    """Count one request in the current window; return (current count, previous window's count)."""
    if isinstance(cache, RedisCache):
        return _count_in_redis(cache, current_key, previous_key, ttl=ttl)
    cache.add(current_key, 0, ttl)
    try:
        current = cache.incr(current_key)
    except ValueError:  # expired between add and incr
        cache.set(current_key, 1, ttl)
        current = 1
    return current, int(cache.get(previous_key, 0))


def _count_in_redis(cache: RedisCache, current_key: str, previous_key: str, *, ttl: int) -> tuple[int, int]:
    """``count_in_windows`` in one pipeline (``INCRBY``, ``EXPIRE``, ``GET``) on the cache's own client.

    Django's cache API would take four round trips (``add``, then ``incr``'s ``EXISTS`` and
    ``INCR``, then ``get``). The keys are the cache's own, so ``cache.get`` reads the counters.
    """
    counter = cache.make_and_validate_key(current_key)
    other = cache.make_and_validate_key(previous_key)
    # The server Django's cache writes to; the previous window's counter was written there too.
    client = cache._cache.get_client(counter, write=True)
    with client.pipeline(transaction=False) as pipeline:
        pipeline.incr(counter)
        pipeline.expire(counter, ttl)
        pipeline.get(other)
        current, _, previous = pipeline.execute()
    return int(current), int(previous or 0)


def seconds_until_allowed(
    *, current: int, previous: int, elapsed_fraction: float, limit: int, window_seconds: int
) -> float:
    """0 when the weighted count is within ``limit``, else whole seconds until it will be.

    The weighted count is ``previous * (1 - f) + current`` at fraction ``f`` of the current window.
    """
    if previous * (1 - elapsed_fraction) + current <= limit:
        return 0
    if current > limit:
        # This window's own count is over: it fades only once it is the previous window, until
        # current * (1 - f) <= limit in the next one.
        return _whole_seconds(1 + (1 - limit / current) - elapsed_fraction, window_seconds)
    # The previous window's share must fade until previous * (1 - f) <= limit - current.
    return _whole_seconds(1 - (limit - current) / previous - elapsed_fraction, window_seconds)


def _whole_seconds(window_fraction: float, window_seconds: int) -> int:
    return max(1, math.ceil(window_fraction * window_seconds))
