"""The API's general rate limit: a sliding-window counter per actor, one cache round trip.

DRF's ``SimpleRateThrottle`` keeps a list of every request's time in the window and reads
and rewrites it whole on every request: at 600 a minute that is a 600-entry list pickled
twice per request, and two round trips to Redis. Here each actor has one counter per fixed
window, and the limit applies to the current window's count plus the previous window's,
weighted by how much of it still overlaps the sliding window (the usual sliding-window
counter). A request counts as soon as it arrives, refused or not: a client that keeps
hammering stays limited.

An API key's requests are counted under its token's digest, which is known before the key is
looked up: the count goes to Redis while the database finds the key (``start_token_count``),
so the limit costs the request no round trip of its own. The digest, unlike the key's public
prefix, cannot be spent by someone who has seen only the prefix.
"""

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from django.core.cache import caches
from django.core.cache.backends.base import BaseCache
from redis.exceptions import RedisError
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from core.cache import PendingCounts, SharedRedisCache

# Where a request keeps the count its authentication started (``start_token_count``).
STARTED_COUNT_ATTRIBUTE = "_started_actor_count"


def token_ident(token: str) -> str:
    """The rate limit's bucket for a bearer token (an API key's requests)."""
    return "token:" + hashlib.sha256(token.encode()).hexdigest()[:32]


@dataclass
class StartedCount:
    key: str
    now: float
    pending: PendingCounts


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
            ident = getattr(api_key, "rate_limit_ident", None) or f"key:{api_key.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user:{request.user.pk}"
        else:
            ident = f"ip:{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def allow_request(self, request: Request, view: Any) -> bool:
        if self.rate is None or self.num_requests is None or self.duration is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        started: StartedCount | None = getattr(request, STARTED_COUNT_ATTRIBUTE, None)
        if started is not None and started.key == key:
            now = started.now
            current, previous = started.pending.result()
        else:
            now = self.timer()
            window = int(now // self.duration)
            current, previous = count_in_windows(
                caches["default"], f"{key}:{window}", f"{key}:{window - 1}", ttl=2 * self.duration
            )
        elapsed = now % self.duration
        self._wait_seconds = seconds_until_allowed(
            current=current,
            previous=previous,
            elapsed_fraction=elapsed / self.duration,
            limit=self.num_requests,
            window_seconds=self.duration,
        )
        return self._wait_seconds == 0

    def wait(self) -> float | None:
        return self._wait_seconds or None

    def start_count(self, request: Request, ident: str) -> None:
        """Send this request's count for ``ident`` now, for ``allow_request`` to read (Redis only)."""
        cache = caches["default"]
        if self.rate is None or self.duration is None:
            return
        if not isinstance(cache, SharedRedisCache) or not cache.has_one_server:
            return  # the other caches answer in-process or from disk: nothing to overlap
        key = self.cache_format % {"scope": self.scope, "ident": ident}
        now = self.timer()
        window = int(now // self.duration)
        try:
            pending = cache.start_increment_and_read(
                f"{key}:{window}", f"{key}:{window - 1}", ttl=2 * self.duration
            )
        except (RedisError, OSError):
            return  # allow_request counts as it always could, and reports what fails then
        setattr(request, STARTED_COUNT_ATTRIBUTE, StartedCount(key=key, now=now, pending=pending))


def start_token_count(request: Request, token: str) -> str:
    """Start counting a bearer token's request before its key is looked up; returns its ident.

    The throttle reads the count after authentication, as it would have made it; a request
    refused before that (an unknown key) leaves its count unread, in a bucket no key uses.
    """
    ident = token_ident(token)
    ActorRateThrottle().start_count(request, ident)
    return ident


def count_in_windows(cache: BaseCache, current_key: str, previous_key: str, *, ttl: int) -> tuple[int, int]:
    """Count one request in the current window; return (current count, previous window's count)."""
    if isinstance(cache, SharedRedisCache) and cache.has_one_server:
        return cache.increment_and_read(current_key, previous_key, ttl=ttl)
    cache.add(current_key, 0, ttl)
    try:
        current = cache.incr(current_key)
    except ValueError:  # expired between add and incr
        cache.set(current_key, 1, ttl)
        current = 1
    return current, int(cache.get(previous_key, 0))


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
