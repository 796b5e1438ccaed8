"""Failed sign-ins (app and admin) and wrong API keys (API, event streams, websocket) are refused
past a limit (tenants.sign_in_throttle).

Each test signs in from its own made-up address, so counters left in the shared cache by other
tests, other runs or the live servers never meet its own.
"""

import random
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client, RequestFactory
from rest_framework.test import APIClient

from sessions.consumers import CLOSE_NOT_AUTHENTICATED, CLOSE_TOO_MANY_WRONG_KEYS, actor_for_scope
from tenants import sign_in_throttle
from tenants.sign_in_throttle import client_address
from tests.conftest import Cast
from tests.factories import make_api_key

pytestmark = pytest.mark.django_db

WINDOW = 900
LOCKED = "Too many failed sign-ins. Wait 20 minutes, then try again."
# 3 failures at a window's start: this window, then until 3 * (1 - f) + 1 <= 3 in the next (f = 1/3).
LOCKED_SECONDS = WINDOW + WINDOW // 3
MISMATCH = "That email and password do not match an account."


@pytest.mark.parametrize(
    ("current", "previous", "elapsed_fraction", "expected"),
    [
        (2, 0, 0.5, 0),  # a third failure is still within 3
        (3, 0, 0.0, 1200),  # this window, then until 3 * (1 - f) + 1 <= 3 in the next (f = 1/3)
        (3, 0, 0.5, 750),
        (0, 3, 0.0, 300),  # the previous window's share fades until 3 * (1 - f) <= 2
        (0, 3, 0.4, 0),
        (1, 3, 0.5, 150),  # 3 * (1 - f) <= 1 at f = 2/3
    ],
)
def test_seconds_until_one_more(current: int, previous: int, elapsed_fraction: float, expected: int) -> None:
    wait = sign_in_throttle.seconds_until_one_more(
        current=current, previous=previous, elapsed_fraction=elapsed_fraction, limit=3, window_seconds=WINDOW
    )
    assert wait == expected


def made_up_address() -> str:
    # 198.18.0.0/15 is for benchmarks: never a real client.
    return f"198.{random.randint(18, 19)}.{random.randint(0, 255)}.{random.randint(1, 254)}"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The throttle's clock at the start of a window; the test moves it."""
    now = [1_800_000_000.0]  # a multiple of 900
    monkeypatch.setattr(sign_in_throttle, "_now", lambda: now[0])
    return now


@pytest.fixture(autouse=True)
def small_limits(settings: Any, clock: list[float]) -> None:
    settings.SIGN_IN_FAILURE_LIMIT = 3
    settings.SIGN_IN_ADDRESS_FAILURE_LIMIT = 5
    settings.SIGN_IN_FAILURE_WINDOW_SECONDS = WINDOW
    settings.API_KEY_FAILURE_LIMIT = 3
    settings.API_KEY_FAILURE_WINDOW_SECONDS = WINDOW


@pytest.fixture
def address() -> Iterator[str]:
    chosen = made_up_address()
    yield chosen
    for username in ("alice@a.test", "bob@a.test", "nobody@a.test"):
        sign_in_throttle.sign_in_failures_clear(address=chosen, username=username)
    sign_in_throttle.api_key_failures_clear(address=chosen)


def sign_in(address: str, username: str, password: str, path: str = "/login/") -> tuple[Client, Any]:
    client = Client(REMOTE_ADDR=address)
    return client, client.post(path, {"username": username, "password": password})


def is_signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_wrong_passwords_past_the_limit_refuse_even_the_right_one(cast: Cast, address: str) -> None:
    wrong = [sign_in(address, "alice@a.test", f"guess-{n}")[1] for n in range(3)]
    client, right = sign_in(address, "alice@a.test", "alice-password")

    assert [response.status_code for response in wrong] == [200, 200, 200]
    assert all(MISMATCH in response.content.decode() for response in wrong)
    assert (right.status_code, right["Retry-After"]) == (429, str(LOCKED_SECONDS))
    assert LOCKED in right.content.decode() and MISMATCH not in right.content.decode()
    assert not is_signed_in(client)


def test_the_lockout_ends_as_the_window_slides_past(cast: Cast, address: str, clock: list[float]) -> None:
    for n in range(3):
        sign_in(address, "alice@a.test", f"guess-{n}")
    clock[0] += WINDOW  # the failures are the previous window's, still weighing in full
    assert sign_in(address, "alice@a.test", "alice-password")[1].status_code == 429

    clock[0] += WINDOW / 3  # 3 * (1 - 1/3) + 1 = 3: one more attempt fits
    client, response = sign_in(address, "alice@a.test", "alice-password")

    assert (response.status_code, response["Location"]) == (302, "/")
    assert is_signed_in(client)


def _normalized(response: Any, email: str) -> tuple[int, str, str]:
    body = response.content.decode().replace(email, "EMAIL")
    body = re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "", body)
    body = re.sub(r'"X-CSRFToken": "[^"]+"', "", body)
    return response.status_code, response.get("Retry-After", ""), body


def test_an_unknown_account_gets_the_very_same_answers(cast: Cast, address: str) -> None:
    other_address = made_up_address()
    known = [
        sign_in(address, "alice@a.test", password)[1] for password in ("a1", "a2", "a3", "alice-password")
    ]
    unknown = [sign_in(other_address, "nobody@a.test", password)[1] for password in ("a1", "a2", "a3", "x")]

    assert [_normalized(r, "alice@a.test") for r in known] == [
        _normalized(r, "nobody@a.test") for r in unknown
    ]
    assert [r.status_code for r in known] == [200, 200, 200, 429]
    sign_in_throttle.sign_in_failures_clear(address=other_address, username="nobody@a.test")


def test_the_same_account_from_elsewhere_and_other_accounts_from_here_still_sign_in(
    cast: Cast, address: str
) -> None:
    for n in range(3):
        sign_in(address, "alice@a.test", f"guess-{n}")
    elsewhere = made_up_address()

    alice_elsewhere, alice_answer = sign_in(elsewhere, "alice@a.test", "alice-password")
    bob_here, bob_answer = sign_in(address, "bob@a.test", "bob-password")

    assert (alice_answer.status_code, bob_answer.status_code) == (302, 302)
    assert is_signed_in(alice_elsewhere) and is_signed_in(bob_here)


def test_an_address_failing_across_many_accounts_is_refused(cast: Cast, address: str) -> None:
    spread = [sign_in(address, f"person-{n}@a.test", "guess")[1].status_code for n in range(5)]
    client, bob = sign_in(address, "bob@a.test", "bob-password")

    assert spread == [200] * 5
    # 5 failures at a window's start: this window, then until 5 * (1 - f) + 1 <= 5 (f = 1/5).
    assert (bob.status_code, bob["Retry-After"]) == (429, str(WINDOW + WINDOW // 5))
    assert "Too many failed sign-ins. Wait 18 minutes, then try again." in bob.content.decode()
    assert not is_signed_in(client)
    for n in range(5):
        sign_in_throttle.sign_in_failures_clear(address=address, username=f"person-{n}@a.test")


def test_the_admin_sign_in_counts_and_refuses_too(cast: Cast, address: str) -> None:
    wrong = [sign_in(address, "alice@a.test", f"guess-{n}", "/admin/login/")[1] for n in range(3)]
    admin_client, admin_right = sign_in(address, "alice@a.test", "alice-password", "/admin/login/")
    app_client, app_right = sign_in(address, "alice@a.test", "alice-password")

    assert [response.status_code for response in wrong] == [200, 200, 200]
    assert "Please enter the correct" in wrong[0].content.decode()
    assert admin_right.status_code == 200 and LOCKED in admin_right.content.decode()
    assert app_right.status_code == 429
    assert not is_signed_in(admin_client) and not is_signed_in(app_client)


def test_a_flood_of_wrong_api_keys_gets_429_with_the_error_envelope(cast: Cast, address: str) -> None:
    valid_key = make_api_key(tenant=cast.tenant_a, user=cast.alice)
    wrong = APIClient(REMOTE_ADDR=address)
    wrong.credentials(HTTP_AUTHORIZATION=f"Bearer {valid_key[:-4]}xxxx")
    malformed = APIClient(REMOTE_ADDR=address)
    malformed.credentials(HTTP_AUTHORIZATION="Bearer not-a-key")
    right = APIClient(REMOTE_ADDR=address)
    right.credentials(HTTP_AUTHORIZATION=f"Bearer {valid_key}")

    refused = [wrong.get("/api/v1/agents/"), malformed.get("/api/v1/agents/"), wrong.get("/api/v1/agents/")]
    throttled = [malformed.get("/api/v1/agents/"), wrong.get("/api/v1/agents/")]

    assert [response.status_code for response in refused] == [401, 401, 401]
    # 4 wrong keys at a window's start: this window, then until 4 * (1 - f) + 1 <= 3 (f = 1/2).
    assert [(response.status_code, response["Retry-After"]) for response in throttled] == [
        (429, str(LOCKED_SECONDS)),
        (429, str(WINDOW + WINDOW // 2)),
    ]
    assert throttled[0].json() == {
        "error": {
            "code": "throttled",
            "message": (
                "Too many requests with a wrong API key from this address. "
                "Expected available in 1200 seconds."
            ),
            "fields": {},
        }
    }
    # A valid key is never counted: the address's other clients keep working.
    assert right.get("/api/v1/agents/").status_code == 200


@pytest.mark.parametrize(
    ("remote", "counted_as"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("", "unknown"),
    ],
)
def test_an_ipv6_host_counts_as_its_whole_64(remote: str, counted_as: str) -> None:
    assert client_address(RequestFactory().get("/", REMOTE_ADDR=remote)) == counted_as


# The event stream's view is asynchronous: its database calls close the connection they used.
@pytest.mark.django_db(transaction=True)
def test_wrong_keys_count_together_on_the_api_its_event_streams_and_the_websocket(
    cast: Cast, address: str
) -> None:
    valid_key = make_api_key(tenant=cast.tenant_a, user=cast.alice)
    wrong_key = f"{valid_key[:-4]}xxxx"
    events = f"/api/v1/sessions/{uuid.uuid4()}/events/"

    def stream(key: str) -> Any:
        return Client(REMOTE_ADDR=address).get(
            events, HTTP_ACCEPT="text/event-stream", HTTP_AUTHORIZATION=f"Bearer {key}"
        )

    def socket(key: str) -> int:
        scope = {"client": (address, 40_000), "query_string": f"token={key}".encode(), "subprotocols": []}
        return actor_for_scope(scope)[1]

    api = APIClient(REMOTE_ADDR=address)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {wrong_key}")
    wrong = [api.get("/api/v1/agents/").status_code, stream(wrong_key).status_code, socket(wrong_key)]
    refused_stream = stream(wrong_key)

    assert wrong == [401, 401, CLOSE_NOT_AUTHENTICATED]
    assert (refused_stream.status_code, refused_stream["Retry-After"]) == (429, str(LOCKED_SECONDS))
    assert refused_stream.json()["error"] == {
        "code": "throttled",
        "message": "Too many requests with a wrong API key from this address. Try again in 1200 seconds.",
        "fields": {},
    }
    assert socket(wrong_key) == CLOSE_TOO_MANY_WRONG_KEYS == 4429
    assert stream(valid_key).status_code == 404  # let through: the made-up session is not found
