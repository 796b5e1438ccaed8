"""Failed sign-ins and wrong API keys, counted in the cache; past a limit, they are refused.

A password sign-in (the app's and the admin's) is refused while its account and address together,
or its address alone, failed too often in the window: the password is not even checked, so the
right one does not get in either, and a flood costs one cache read an attempt, not a password
hash. A wrong API key past its address's limit is answered 429 instead of 401; a valid key is
never counted, so it costs no extra cache round trip and keeps working for the address's
other clients (keys are too long to guess: the limit is there to stop floods, not guesses).

There is no lockout per account alone: anyone could then lock any person out from everywhere by
failing on purpose. An attacker can at most lock out an account from their own address, and their
own address. An unknown account is counted exactly like a known one, so the answers never tell
them apart. The counters are the API throttle's sliding windows (``core.api.throttling``), in
the default cache: Redis when configured, else the embedded default's file cache, shared by
every process of the host.
"""

import hashlib
import ipaddress
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import caches
from django.core.exceptions import ValidationError

from core.api.throttling import count_in_windows

# An IPv6 host usually holds a whole /64: counting its addresses one by one would let it spread
# its attempts over billions of them.
IPV6_PREFIX_LENGTH = 64


def _now() -> float:
    return time.time()


@dataclass(frozen=True)
class FailureLimit:
    """At most ``limit`` failures per ``window_seconds`` for one counter."""

    name: str
    limit: int
    window_seconds: int


class HasMeta(Protocol):
    """A Django request or a DRF one."""

    @property
    def META(self) -> Mapping[str, Any]: ...


def client_address(request: HasMeta | None) -> str:
    """The address a request came from as counted here: an IPv6 address stands for its /64."""
    return counted_address(str(request.META.get("REMOTE_ADDR", "")) if request is not None else "")


def counted_address(raw: str) -> str:
    """``raw`` (a client's IP address) as counted here: an IPv6 address stands for its /64."""
    try:
        address = ipaddress.ip_address(raw)
    except ValueError:
        return raw or "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/{IPV6_PREFIX_LENGTH}", strict=False))
    return str(address)


def _account_and_address_limit() -> FailureLimit:
    return FailureLimit(
        "sign-in-account", settings.SIGN_IN_FAILURE_LIMIT, settings.SIGN_IN_FAILURE_WINDOW_SECONDS
    )


def _address_limit() -> FailureLimit:
    return FailureLimit(
        "sign-in-address", settings.SIGN_IN_ADDRESS_FAILURE_LIMIT, settings.SIGN_IN_FAILURE_WINDOW_SECONDS
    )


def _api_key_limit() -> FailureLimit:
    return FailureLimit("api-key", settings.API_KEY_FAILURE_LIMIT, settings.API_KEY_FAILURE_WINDOW_SECONDS)


def _counter(limit: FailureLimit, *parts: str) -> str:
    # A digest: usernames are free text, and cache keys must stay short and plain.
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]
    return f"failures:{limit.name}:{digest}"


def _window_keys(counter: str, limit: FailureLimit, now: float) -> tuple[str, str]:
    window = int(now // limit.window_seconds)
    return f"{counter}:{window}", f"{counter}:{window - 1}"


def _wait(limit: FailureLimit, counter: str, now: float) -> int:
    """0 if one more failure would stay within the limit, else whole seconds until it would."""
    current_key, previous_key = _window_keys(counter, limit, now)
    counts = caches["default"].get_many([current_key, previous_key])
    return seconds_until_one_more(
        current=int(counts.get(current_key, 0)),
        previous=int(counts.get(previous_key, 0)),
        elapsed_fraction=(now % limit.window_seconds) / limit.window_seconds,
        limit=limit.limit,
        window_seconds=limit.window_seconds,
    )


def seconds_until_one_more(
    *, current: int, previous: int, elapsed_fraction: float, limit: int, window_seconds: int
) -> int:
    """0 if one more failure keeps the sliding-window count within ``limit``, else whole seconds
    until it will.

    The count is ``previous * (1 - f) + current`` at fraction ``f`` of the current window (as
    ``core.api.throttling``); once this window ends, its ``current`` fades the same way.
    """
    if previous * (1 - elapsed_fraction) + current + 1 <= limit:
        return 0
    if current + 1 <= limit:
        window_fraction = 1 - (limit - current - 1) / previous - elapsed_fraction
    else:
        window_fraction = (1 - elapsed_fraction) + (1 - (limit - 1) / current)
    # Rounded first: float error would otherwise add a second to an exact boundary.
    return max(1, math.ceil(round(window_fraction * window_seconds, 6)))


def _record(limit: FailureLimit, counter: str, now: float) -> None:
    current_key, previous_key = _window_keys(counter, limit, now)
    count_in_windows(caches["default"], current_key, previous_key, ttl=2 * limit.window_seconds)


def _sign_in_counters(address: str, username: str) -> list[tuple[FailureLimit, str]]:
    account = _account_and_address_limit()
    by_address = _address_limit()
    return [
        (account, _counter(account, username.strip().lower(), address)),
        (by_address, _counter(by_address, address)),
    ]


def sign_in_wait(*, address: str, username: str) -> int:
    """Seconds until ``username`` may try a password from ``address`` again; 0 if it may now."""
    now = _now()
    return max(_wait(limit, counter, now) for limit, counter in _sign_in_counters(address, username))


def sign_in_failure_record(*, address: str, username: str) -> None:
    now = _now()
    for limit, counter in _sign_in_counters(address, username):
        _record(limit, counter, now)


def sign_in_failures_clear(*, address: str, username: str) -> None:
    """Forget the failures of ``username`` from ``address``, and of the address (an operator's unlock)."""
    now = _now()
    keys = [
        key
        for limit, counter in _sign_in_counters(address, username)
        for key in _window_keys(counter, limit, now)
    ]
    caches["default"].delete_many(keys)


def api_key_failure_record(*, address: str) -> int:
    """Count a wrong key from ``address``; 0 if it is within the limit, else seconds until one more is."""
    limit = _api_key_limit()
    now = _now()
    current_key, previous_key = _window_keys(_counter(limit, address), limit, now)
    current, previous = count_in_windows(
        caches["default"], current_key, previous_key, ttl=2 * limit.window_seconds
    )
    return seconds_until_one_more(
        current=current - 1,
        previous=previous,
        elapsed_fraction=(now % limit.window_seconds) / limit.window_seconds,
        limit=limit.limit,
        window_seconds=limit.window_seconds,
    )


def api_key_failures_clear(*, address: str) -> None:
    limit = _api_key_limit()
    caches["default"].delete_many(list(_window_keys(_counter(limit, address), limit, _now())))


# One answer whether or not the account exists.
TOO_MANY_FAILURES = "Too many failed sign-ins. Wait %(minutes)s, then try again."


class ThrottledAuthenticationForm(AuthenticationForm):
    """Django's sign-in form, refusing an account and address (or an address) that failed too often."""

    retry_after = 0

    def clean(self) -> dict[str, object]:
        username = self.cleaned_data.get("username")
        if not username or not self.cleaned_data.get("password"):
            return super().clean()  # a field is missing: nothing is checked, nothing counts
        address = client_address(self.request)
        self.retry_after = sign_in_wait(address=address, username=username)
        if self.retry_after:
            raise ValidationError(
                TOO_MANY_FAILURES,
                code="too_many_failures",
                params={"minutes": _minutes(self.retry_after)},
            )
        try:
            return super().clean()
        except ValidationError:
            sign_in_failure_record(address=address, username=username)
            raise


def _minutes(seconds: int) -> str:
    minutes = max(1, -(-seconds // 60))
    return "1 minute" if minutes == 1 else f"{minutes} minutes"
