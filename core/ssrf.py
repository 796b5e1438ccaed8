"""Outbound HTTP that models can aim but cannot point at the platform's own network.

Every hop of a request (the first URL and each redirect, followed here, at most
``MAX_REDIRECTS``) is checked the same way: http or https only, no userinfo, the host
resolved with ``getaddrinfo``, and every address it resolves to must be public unicast.
A hostname with one private address among public ones is refused: DNS answers rotate,
so any of them could be the one used.

The connection then goes to an address that was checked, never to the name again: the
request URL carries the IP, the ``Host`` header carries the name, and for https the
``sni_hostname`` request extension makes httpcore send the name as SNI and verify the
certificate against it. So a DNS answer that changes between check and connect (DNS
rebinding) cannot move the connection to another address, and TLS still proves the
name. Each hop gets its own client, so no pooled connection is reused across names, and
``trust_env=False`` keeps proxy variables from routing around the pinned address.

``ALLOW_PRIVATE_NETWORK_FETCH`` (default False) lets every address through, for
deployments that mean to reach their intranet. Scheme and userinfo checks still apply.
"""

import ipaddress
import json as jsonlib
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import certifi
import httpx
from django.conf import settings

from core.errors import ToolError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# host, port -> the addresses (as text) the host resolves to.
Resolver = Callable[[str, int], list[str]]

MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "Agentry/0.1 (+https://github.com/agentry; tool fetch)"
# Always dropped when a redirect leaves the origin they were meant for.
ALWAYS_SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})

_SHARED_ADDRESS_SPACE = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64_PREFIX = ipaddress.IPv6Network("64:ff9b::/96")


class SsrfRefused(ToolError):
    """The URL, or an address its host resolves to, may not be fetched."""


class OutboundHttpError(ToolError):
    """The request could not be completed. Retryable failures (timeouts, refused
    connections, DNS hiccups) are told apart from final ones (bad TLS certificate…)."""

    def __init__(self, message: str, *, is_retryable: bool) -> None:
        super().__init__(message)
        self.is_retryable = is_retryable


def system_resolver(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        is_retryable = error.errno in {socket.EAI_AGAIN, getattr(socket, "EAI_SYSTEM", None)}
        raise OutboundHttpError(
            f"could not resolve {host}: {error.strerror}", is_retryable=is_retryable
        ) from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def address_refusal(address: IPAddress) -> str | None:
    """Why ``address`` may not be reached ("a loopback address"…), or None when it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            reason = address_refusal(embedded)
            return f"{embedded} in IPv6 form, {reason}" if reason else None
    if address.is_loopback:
        return "a loopback address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_link_local:
        if address == ipaddress.IPv4Address("169.254.169.254"):
            return "a link-local address (cloud metadata service)"
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if isinstance(address, ipaddress.IPv4Address) and address in _SHARED_ADDRESS_SPACE:
        return "a shared (carrier-grade NAT) address"
    if address.is_private:
        return "a private address"
    if address.is_reserved:
        return "a reserved address"
    if not address.is_global:
        return "not a public address"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    # IPv4-mapped (::ffff:a.b.c.d), 6to4 (2002:…) and NAT64 (64:ff9b::a.b.c.d) all end up at the IPv4.
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64_PREFIX:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _allow_private_network(address: IPAddress) -> bool:
    return bool(getattr(settings, "ALLOW_PRIVATE_NETWORK_FETCH", False))


@dataclass(frozen=True)
class AddressPolicy:
    """How hosts resolve and which non-public addresses are nonetheless allowed.

    ``allow`` admits an address that ``address_refusal`` would refuse; by default it
    follows ``ALLOW_PRIVATE_NETWORK_FETCH``. Tests inject both to treat one local server
    as public while everything else stays private.
    """

    resolver: Resolver = system_resolver
    allow: Callable[[IPAddress], bool] = _allow_private_network


# Looked up at call time, so tests can swap it for one with a fake resolver.
DEFAULT_POLICY = AddressPolicy()

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class PrivateHostAllowlist:
    """Non-public hosts an operator lets one kind of outbound call reach, and nothing else.

    Entries are host names (matched exactly, case-insensitively, in their ASCII form),
    addresses (``10.0.0.5``, ``[::1]``) or networks (``10.20.0.0/16``). A listed name may
    resolve to any address; any other host must resolve only to public addresses or to
    listed ones.
    """

    names: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> "PrivateHostAllowlist":
        names: set[str] = set()
        networks: list[IPNetwork] = []
        for entry in entries:
            text = entry.strip().lower().rstrip(".")
            if not text:
                continue
            try:
                networks.append(ipaddress.ip_network(text.removeprefix("[").removesuffix("]"), strict=False))
            except ValueError:
                names.add(text)
        return cls(names=frozenset(names), networks=tuple(networks))

    def policy_for(self, url: str | httpx.URL, *, resolver: Resolver = system_resolver) -> AddressPolicy:
        """The policy for one URL: everything allowed for a listed name, listed networks otherwise."""
        host = _ascii_host(checked_url(url)).lower().rstrip(".")
        if host in self.names:
            return AddressPolicy(resolver=resolver, allow=lambda address: True)
        networks = self.networks
        return AddressPolicy(
            resolver=resolver,
            allow=lambda address: any(address in network for network in networks),
        )


def checked_url(url: str | httpx.URL) -> httpx.URL:
    """Parse ``url`` and refuse anything but plain http(s) URLs with a host."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as error:
        raise SsrfRefused(f"refused: invalid URL ({error})") from None
    if not parsed.scheme:
        raise SsrfRefused("refused: the URL must start with http:// or https://")
    if parsed.scheme not in {"http", "https"}:
        raise SsrfRefused(f"refused: only http and https URLs can be fetched, not {parsed.scheme!r}")
    if parsed.userinfo:
        raise SsrfRefused("refused: URLs with a user name or password (user@host) are not fetched")
    if not parsed.host:
        raise SsrfRefused("refused: the URL has no host")
    return parsed


def resolve_and_check(url: str | httpx.URL, *, policy: AddressPolicy | None = None) -> list[IPAddress]:
    """The addresses ``url``'s host resolves to, once every one of them has passed the policy."""
    policy = policy or DEFAULT_POLICY
    parsed = checked_url(url)
    host = parsed.host
    literal = _ip_literal(host)
    if literal is not None:
        texts = [str(literal)]
    else:
        # The IDNA-encoded name: what DNS, the Host header and SNI all use.
        texts = policy.resolver(_ascii_host(parsed), parsed.port or _default_port(parsed))
        if not texts:
            raise OutboundHttpError(f"could not resolve {host}: no addresses", is_retryable=True)
    addresses = [ipaddress.ip_address(text.split("%", 1)[0]) for text in texts]
    for address in addresses:
        reason = address_refusal(address)
        if reason is not None and not policy.allow(address):
            if literal is not None:
                raise SsrfRefused(f"refused: {address} is {reason}")
            raise SsrfRefused(f"refused: {host} resolves to {address}, which is {reason}")
    return addresses


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _ascii_host(url: httpx.URL) -> str:
    return url.raw_host.decode("ascii")


def _default_port(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80


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
    return url.scheme, url.host, url.port or _default_port(url)


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
    if hop.url.scheme == "https" and _ip_literal(hop.url.host) is None:
        extensions["sni_hostname"] = _ascii_host(hop.url)
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
