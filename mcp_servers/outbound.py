"""Outbound connections to MCP servers when private networks are off limits.

With ``MCP_ALLOW_PRIVATE_NETWORKS`` off, the server's host is resolved and checked by
``core.ssrf`` (every address public), and the connection is pinned to the checked
address: requests go to that IP with the name in the ``Host`` header and, for https, as
TLS SNI, so a DNS answer that changes after the check (DNS rebinding) cannot redirect
the connection. The SDK only follows redirects within the endpoint's origin, so every
request goes to the pinned host.
"""

import httpx2

from core.ssrf import AddressPolicy, resolve_and_check
from tools.builtins.base import ToolError

# Every non-public address refused, whatever the web tools' own setting says.
PUBLIC_ONLY = AddressPolicy(allow=lambda address: False)


class OutboundRefused(Exception):
    """The URL may not be reached; the message says why."""


def checked_public_address(url: str) -> str:
    """The address to connect to for ``url``, once every address of its host is public."""
    try:
        addresses = resolve_and_check(url, policy=PUBLIC_ONLY)
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
