"""Liveness and readiness. Readiness checks the database, Redis (with ``REDIS_URL``), the task
broker and the channel layer, each with short timeouts so that an outage is reported at once."""

import asyncio
import time
from collections.abc import Callable

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import caches
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

BROKER_TIMEOUT_SECONDS = 1.0
READINESS_CACHE_KEY = "agentry:readyz"


def check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def check_redis() -> None:
    """A read through Django's cache: the connection pool every API request's rate limit uses,
    so a pool that kept a dead connection would show here."""
    caches["default"].get(READINESS_CACHE_KEY)


def check_broker() -> None:
    if settings.REDIS_URL:
        client = redis.Redis.from_url(
            settings.REDIS_URL,
            socket_timeout=BROKER_TIMEOUT_SECONDS,
            socket_connect_timeout=BROKER_TIMEOUT_SECONDS,
        )
        try:
            client.ping()
        finally:
            client.close()
    else:
        check_database()  # the ORM broker is the database


CHANNEL_LAYER_TIMEOUT_SECONDS = 3


async def _send_on_channel_layer() -> None:
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer configured")
    # A group send reaches the layer's backend (a Redis PUBLISH) and, unlike a round trip on a
    # new channel, leaves no subscription behind: readiness probes run every few seconds.
    await asyncio.wait_for(
        layer.group_send("agentry.health", {"type": "health.check"}), CHANNEL_LAYER_TIMEOUT_SECONDS
    )


def check_channel_layer() -> None:
    async_to_sync(_send_on_channel_layer)()


def readiness_checks() -> dict[str, Callable[[], None]]:
    redis_checks = {"redis": check_redis} if settings.REDIS_URL else {}
    return {
        "database": check_database,
        **redis_checks,
        "broker": check_broker,
        "channel_layer": check_channel_layer,
    }


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    results: dict[str, dict[str, object]] = {}
    for name, check in readiness_checks().items():
        started = time.perf_counter()
        try:
            check()
        except Exception as error:
            results[name] = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        else:
            results[name] = {"ok": True, "latency_ms": round((time.perf_counter() - started) * 1000, 2)}
    is_ready = all(result["ok"] for result in results.values())
    return JsonResponse(
        {"status": "ok" if is_ready else "unavailable", "checks": results}, status=200 if is_ready else 503
    )
