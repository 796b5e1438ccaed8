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
from core.ssrf import PrivateHostAllowlist, resolve_and_check, system_resolver


class OutboundRefused(Exception):
    """The URL may not be reached, or its host could not be resolved; the message says why."""


def checked_address(url: str) -> str:
    """The address to connect to for ``url``, once every address of its host passed the guard."""
    allowlist = PrivateHostAllowlist.parse(getattr(settings, "MCP_ALLOWED_PRIVATE_HOSTS", []))
    try:
        # system_resolver is looked up here, at call time, so tests can swap it.
        policy = allowlist.policy_for(url, resolver=system_resolver)
        addresses = resolve_and_check(url, policy=policy)
    except ToolError as error:  # core.ssrf's refusals and resolution failures
        raise OutboundRefused(str(error)) from None
    return str(addresses[0])


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
