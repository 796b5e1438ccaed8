"""The guarded request: every hop (the first URL and each redirect) checked, then sent to an
address that was checked, never to the name again."""

import json as jsonlib
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import certifi
import httpx

from core.ssrf.addresses import (
    AddressPolicy,
    IPAddress,
    OutboundHttpError,
    SsrfRefused,
    ascii_host,
    checked_url,
    default_port,
    ip_literal,
    resolve_and_check,
)

MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "Agentry/0.1 (+https://github.com/agentry; tool fetch)"
# Always dropped when a redirect leaves the origin they were meant for.
ALWAYS_SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


@dataclass
class FetchedResponse:
    """A response read up to the byte cap; ``url`` is the final URL after redirects."""

    url: httpx.URL
    status_code: int
    reason_phrase: str
    headers: httpx.Headers
    content: bytes
    is_truncated: bool

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    @property
    def charset(self) -> str | None:
        for parameter in self.headers.get("content-type", "").split(";")[1:]:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "charset" and value.strip():
                return value.strip().strip("\"'")
        return None

    def text(self) -> str:
        try:
            return self.content.decode(self.charset or "utf-8", errors="replace")
        except LookupError:
            return self.content.decode("utf-8", errors="replace")


@dataclass
class _Hop:
    method: str
    url: httpx.URL
    headers: dict[str, str]
    content: bytes | None
    sensitive_headers: frozenset[str] = field(default_factory=frozenset)


def guarded_request(
    method: str,
    url: str | httpx.URL,
    *,
    timeout_seconds: float,
    max_bytes: int,
    headers: Mapping[str, str] | None = None,
    params: Mapping[str, Any] | None = None,
    json: Any = None,
    sensitive_headers: Iterable[str] = (),
    policy: AddressPolicy | None = None,
    max_redirects: int = MAX_REDIRECTS,
) -> FetchedResponse:
    """Send one request through the guard, following redirects, within ``timeout_seconds`` overall.

    The body is read up to ``max_bytes`` (after decompression, so a gzip bomb stops there).
    ``sensitive_headers`` (and Authorization, Cookie) are dropped when a redirect leaves
    the first URL's origin.
    """
    first_url = checked_url(url)
    if params:
        first_url = first_url.copy_merge_params(dict(params))
    request_headers = with_default_headers(headers or {}, {"User-Agent": USER_AGENT})
    content = None
    if json is not None:
        content = jsonlib.dumps(json, ensure_ascii=False).encode()
        request_headers = with_default_headers(request_headers, {"Content-Type": "application/json"})
    sensitive = frozenset(name.lower() for name in sensitive_headers) | ALWAYS_SENSITIVE_HEADERS
    hop = _Hop(method.upper(), first_url, request_headers, content, sensitive)
    deadline = time.monotonic() + timeout_seconds
    for _ in range(max_redirects + 1):
        addresses = resolve_and_check(hop.url, policy=policy)
        response = _send_pinned(hop, addresses, max_bytes=max_bytes, deadline=deadline)
        location = response.headers.get("location")
        if response.status_code not in REDIRECT_STATUSES or not location:
            return response
        hop = _next_hop(hop, response.status_code, location, origin=first_url)
    raise OutboundHttpError(f"too many redirects (more than {max_redirects})", is_retryable=False)


def with_default_headers(headers: Mapping[str, str], defaults: Mapping[str, str]) -> dict[str, str]:
    """``headers`` plus each default whose name (in any case) it does not already have."""
    present = {name.lower() for name in headers}
    return {**{name: value for name, value in defaults.items() if name.lower() not in present}, **headers}


def _next_hop(hop: _Hop, status_code: int, location: str, *, origin: httpx.URL) -> _Hop:
    try:
        target = checked_url(hop.url.join(location))
    except httpx.InvalidURL:
        raise SsrfRefused(f"refused: invalid redirect location {location[:200]!r}") from None
    method, content, headers = hop.method, hop.content, dict(hop.headers)
    # As browsers and httpx do: 303 always becomes GET, and so do 301/302 after a POST.
    if (status_code == 303 and method != "HEAD") or (status_code in {301, 302} and method == "POST"):
        method, content = "GET", None
        headers = {name: value for name, value in headers.items() if name.lower() != "content-type"}
    if _origin(target) != _origin(origin):
        headers = {
            name: value for name, value in headers.items() if name.lower() not in hop.sensitive_headers
        }
    return _Hop(method, target, headers, content, hop.sensitive_headers)


def _origin(url: httpx.URL) -> tuple[str, str, int]:
    return url.scheme, url.host, url.port or default_port(url)


def _send_pinned(
    hop: _Hop, addresses: list[IPAddress], *, max_bytes: int, deadline: float
) -> FetchedResponse:
    """Try the checked addresses in order; only a failure to connect moves on to the next."""
    for index, address in enumerate(addresses):
        try:
            return _send_to_address(hop, address, max_bytes=max_bytes, deadline=deadline)
        except httpx.ConnectError as error:
            if _is_tls_failure(error):
                raise OutboundHttpError(
                    f"TLS with {hop.url.host} failed: {error}", is_retryable=False
                ) from None
            if index == len(addresses) - 1:
                raise OutboundHttpError(
                    f"could not connect to {hop.url.host}: {error}", is_retryable=True
                ) from None
        except httpx.TimeoutException:
            raise OutboundHttpError(f"{hop.url.host} did not answer in time", is_retryable=True) from None
        except httpx.LocalProtocolError:
            # Its message can quote a header value, which may be a secret.
            raise OutboundHttpError(
                "the request could not be sent (invalid header?)", is_retryable=False
            ) from None
        except httpx.TransportError as error:
            raise OutboundHttpError(
                f"{hop.url.host}: {type(error).__name__}: {error}", is_retryable=True
            ) from None
    raise AssertionError("resolve_and_check returns at least one address")


def _is_tls_failure(error: BaseException) -> bool:
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ssl.SSLError | ssl.CertificateError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _send_to_address(hop: _Hop, address: IPAddress, *, max_bytes: int, deadline: float) -> FetchedResponse:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise httpx.ReadTimeout("deadline reached")
    pinned_url = hop.url.copy_with(host=str(address))
    # The Host header always names the checked URL's host; a caller's own Host is dropped.
    headers = {name: value for name, value in hop.headers.items() if name.lower() != "host"}
    headers["Host"] = hop.url.netloc.decode("ascii")
    extensions = {}
    if hop.url.scheme == "https" and ip_literal(hop.url.host) is None:
        extensions["sni_hostname"] = ascii_host(hop.url)
    with httpx.Client(
        verify=_ssl_context(), trust_env=False, follow_redirects=False, timeout=httpx.Timeout(remaining)
    ) as client:
        request = client.build_request(
            hop.method,
            pinned_url,
            headers=headers,
            content=hop.content,
            extensions=extensions,
        )
        response = client.send(request, stream=True)
        try:
            is_redirect = response.status_code in REDIRECT_STATUSES
            content, is_truncated = (
                (b"", False) if is_redirect else _read_capped(response, max_bytes, deadline)
            )
        finally:
            response.close()
    return FetchedResponse(
        url=hop.url,
        status_code=response.status_code,
        reason_phrase=response.reason_phrase,
        headers=response.headers,
        content=content,
        is_truncated=is_truncated,
    )


def _read_capped(response: httpx.Response, max_bytes: int, deadline: float) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            return b"".join(chunks)[:max_bytes], True
        if time.monotonic() > deadline:
            # A server that drips bytes would otherwise hold the tool until each read times out.
            raise httpx.ReadTimeout("deadline reached while reading the body")
    return b"".join(chunks), False


@cache
def _ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certifi.where())
