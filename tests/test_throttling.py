"""The API's general rate limit (``core.api.throttling``): per actor, sliding window, one round trip."""

from typing import Any

import pytest
from django.conf import settings
from django.core.cache import caches
from redis.client import Pipeline, Redis
from rest_framework.test import APIClient

from core.api.throttling import ActorRateThrottle, seconds_until_allowed
from tenants.models import ApiKey
from tests.conftest import Cast
from tests.factories import make_api_key

needs_redis = pytest.mark.skipif(not settings.REDIS_URL, reason="the Redis cache counts in one pipeline")

WINDOW_START = 1_800_000_000.0  # a multiple of 60: a minute window starts here


@pytest.mark.parametrize(
    ("current", "previous", "elapsed_fraction", "expected"),
    [
        (3, 0, 0.5, 0),  # at the limit: allowed
        (4, 0, 0.25, 60),  # over it alone: the rest of this minute, then until 4 * (1 - f) <= 3
        (1, 4, 0.25, 15),  # the previous minute's share fades: 4 * (1 - f) <= 2 at f = 0.5
        (1, 4, 0.5, 0),  # faded enough: 4 * 0.5 + 1 = 3
        (2, 6, 0.9, 0),  # 6 * 0.1 + 2 = 2.6
    ],
)
def test_seconds_until_allowed(current: int, previous: int, elapsed_fraction: float, expected: float) -> None:
    wait = seconds_until_allowed(
        current=current, previous=previous, elapsed_fraction=elapsed_fraction, limit=3, window_seconds=60
    )
    assert wait == expected


@pytest.fixture
def three_a_minute(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The actor limit at 3 a minute, on a clock the test moves."""
    clock = [WINDOW_START + 10]
    monkeypatch.setattr(ActorRateThrottle, "THROTTLE_RATES", {"actor": "3/min"})
    monkeypatch.setattr(ActorRateThrottle, "timer", lambda self: clock[0])
    return clock


@pytest.mark.django_db
def test_an_actor_over_the_limit_gets_429_with_retry_after_and_others_do_not(
    cast: Cast, bob_api: APIClient, alice_api: APIClient, three_a_minute: list[float]
) -> None:
    statuses = [bob_api.get("/api/v1/sessions/").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    limited = bob_api.get("/api/v1/sessions/")
    # 5 this minute at 10 s in: the rest of the minute, then until 5 * (1 - f) <= 3 (f = 0.4).
    assert (limited.status_code, limited["Retry-After"]) == (429, "74")
    assert limited.json()["error"]["code"] == "throttled"
    assert alice_api.get("/api/v1/sessions/").status_code == 200


@pytest.mark.django_db
def test_the_previous_window_counts_while_it_fades(bob_api: APIClient, three_a_minute: list[float]) -> None:
    assert [bob_api.get("/api/v1/sessions/").status_code for _ in range(3)] == [200, 200, 200]
    three_a_minute[0] = WINDOW_START + 60 + 15  # next minute, a quarter in: 3 * 0.75 + 1 > 3
    assert bob_api.get("/api/v1/sessions/").status_code == 429
    # Three quarters in: 3 * 0.25 + 2 (the refused request and this one) <= 3.
    three_a_minute[0] = WINDOW_START + 60 + 45
    assert bob_api.get("/api/v1/sessions/").status_code == 200


def _client_with(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.mark.django_db
def test_a_wrong_secret_does_not_spend_the_allowance_of_the_key_it_names(
    cast: Cast, three_a_minute: list[float]
) -> None:
    token = make_api_key(tenant=cast.tenant_a, user=cast.bob)
    prefix = token.rsplit("_", 1)[0]
    impostor = _client_with(f"{prefix}_{'x' * 32}")

    assert [impostor.get("/api/v1/sessions/").status_code for _ in range(4)] == [401, 401, 401, 401]
    owner = _client_with(token)
    assert [owner.get("/api/v1/sessions/").status_code for _ in range(4)] == [200, 200, 200, 429]


@pytest.mark.django_db
def test_a_keys_requests_are_counted_under_the_key(cast: Cast, three_a_minute: list[float]) -> None:
    token = make_api_key(tenant=cast.tenant_a, user=cast.bob)
    key = ApiKey.objects.get(prefix=token.split("_")[1])
    window = int(three_a_minute[0] // 60)
    client = _client_with(token)

    assert [client.get("/api/v1/sessions/").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert caches["default"].get(f"throttle_actor_key:{key.pk}:{window}") == 4


@needs_redis
@pytest.mark.django_db
def test_a_request_is_counted_in_one_redis_pipeline(
    cast: Cast, three_a_minute: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """INCRBY and EXPIRE this window's counter, GET the previous one's: one round trip, no other command."""
    commands: list[Any] = []
    execute_pipeline = Pipeline.execute
    execute_command = Redis.execute_command

    def recording_pipeline(self: Pipeline, *args: Any, **kwargs: Any) -> Any:
        commands.append([arguments[0] for arguments, _options in self.command_stack])
        return execute_pipeline(self, *args, **kwargs)

    def recording_command(self: Redis, *args: Any, **options: Any) -> Any:
        commands.append(args[0])
        return execute_command(self, *args, **options)

    monkeypatch.setattr(Pipeline, "execute", recording_pipeline)
    monkeypatch.setattr(Redis, "execute_command", recording_command)
    client = _client_with(make_api_key(tenant=cast.tenant_a, user=cast.bob))

    assert client.get("/api/v1/sessions/").status_code == 200
    assert commands == [["INCRBY", "EXPIRE", "GET"]]
