"""Outbound connections to MCP servers, held to the same guard as ``web_fetch``.

The server's host is resolved and checked by ``core.ssrf``: every address must be public,
unless the operator listed the host in ``MCP_ALLOWED_PRIVATE_HOSTS``. The connection is
then pinned to the checked address: requests go to that IP with the name in the ``Host``
header and, for https, as TLS SNI, so a DNS answer that changes after the check (DNS
rebinding) cannot redirect the connection. The SDK only follows redirects within the
endpoint's origin, so every request goes to the pinned host.
"""

import httpx2
from django.conf import settings

from core.errors import ToolError
from core.ssrf import PrivateHostAllowlist, SsrfRefused, checked_url, resolve_and_check, system_resolver
from core.ssrf.addresses import ip_literal

ALLOW_HINT = "an operator can allow the host in MCP_ALLOWED_PRIVATE_HOSTS"


class OutboundRefused(Exception):
    """The URL may not be reached, or its host could not be resolved; the message says why.

    ``policy_reason`` is what the tenant may be told: the guard's reason when the URL alone
    decided it (an address typed in, ``localhost``, a URL of the wrong shape), which teaches
    nothing the tenant did not write. Empty when DNS took part: whether an internal name
    resolves, and where, is the network's to keep.
    """

    def __init__(self, message: str, *, policy_reason: str = "") -> None:
        super().__init__(message)
        self.policy_reason = policy_reason


def checked_address(url: str) -> str:
    """The address to connect to for ``url``, once every address of its host passed the guard."""
    allowlist = PrivateHostAllowlist.parse(getattr(settings, "MCP_ALLOWED_PRIVATE_HOSTS", []))
    try:
        parsed = checked_url(url)
    except SsrfRefused as error:
        raise OutboundRefused(str(error), policy_reason=str(error)) from None
    try:
        # system_resolver is looked up here, at call time, so tests can swap it.
        policy = allowlist.policy_for(url, resolver=system_resolver)
        addresses = resolve_and_check(url, policy=policy)
    except SsrfRefused as error:
        told = f"{error}; {ALLOW_HINT}" if is_decided_by_the_url(parsed.host) else ""
        raise OutboundRefused(str(error), policy_reason=told) from None
    except ToolError as error:  # resolution failures
        raise OutboundRefused(str(error)) from None
    return str(addresses[0])


def is_decided_by_the_url(host: str) -> bool:
    """An address written in the URL, or a name that is loopback everywhere (RFC 6761)."""
    name = host.lower().rstrip(".")
    return ip_literal(host) is not None or name == "localhost" or name.endswith(".localhost")


class PinnedTransport(httpx2.AsyncBaseTransport):
    """Sends every request for ``host`` to ``address``; requests for any other host are refused."""

    def __init__(self, *, host: str, address: str) -> None:
        self.host = host
        self.address = address
        # No proxies from the environment: they would route around the pinned address.
        self.inner = httpx2.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.host != self.host:
            raise httpx2.ConnectError(f"refused: {request.url.host} is not the checked host", request=request)
        # The Host header was set from the original URL when the request was built.
        request.url = request.url.copy_with(host=self.address)
        if request.url.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": self.host}
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()
