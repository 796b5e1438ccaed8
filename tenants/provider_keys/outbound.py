"""Where a tenant may point its provider key: the SSRF guard of ``core.ssrf``.

A tenant's base URL must resolve only to public addresses and use https, unless the operator
listed its host in ``PROVIDER_ALLOWED_PRIVATE_HOSTS`` (an Ollama or vLLM on the intranet;
plain http is accepted there). The platform's own ``*_BASE_URL`` settings are the
operator's and are not checked.

The SDK's connections then go to the checked address (``PinnedTransport``), never to the
name again: a DNS answer that changes after the check (DNS rebinding) cannot move them.
Resolving the name waits on the tenant's name server, so during a request it counts among the
server's outside waits (``core.outside_waits``).
"""

import logging

import httpx2
from django.conf import settings

from core.errors import ToolError
from core.outside_waits import waiting_outside
from core.ssrf import PrivateHostAllowlist, address_refusal, checked_url, resolve_and_check, system_resolver

logger = logging.getLogger(__name__)

# One answer for every refusal: which one it was (a private address, a name that does not
# resolve, plain http) would let a tenant map the operator's network and DNS.
BASE_URL_REFUSED = (
    "Agentry cannot use this URL: it must be a public https:// address, "
    "or a private host the operator allowed (PROVIDER_ALLOWED_PRIVATE_HOSTS)."
)


class BaseUrlRefused(Exception):
    """The base URL may not be reached; the message is ``BASE_URL_REFUSED``, the log says why."""

    def __init__(self) -> None:
        super().__init__(BASE_URL_REFUSED)


def check_base_url(url: str) -> str:
    """The address to connect to for ``url``; ``BaseUrlRefused`` unless requests to it may leave
    the platform."""
    allowlist = PrivateHostAllowlist.parse(getattr(settings, "PROVIDER_ALLOWED_PRIVATE_HOSTS", []))
    try:
        parsed = checked_url(url)
        # The tenant's name server answers, or not, for as long as the resolver waits.
        with waiting_outside():
            # system_resolver is looked up here, at call time, so tests can swap it.
            addresses = resolve_and_check(url, policy=allowlist.policy_for(url, resolver=system_resolver))
    except ToolError as error:  # core.ssrf's refusals and resolution failures
        logger.info("provider base URL %s refused: %s", url, error)
        raise BaseUrlRefused() from None
    is_public = any(address_refusal(address) is None for address in addresses)
    if is_public and parsed.scheme != "https":
        # The key would cross the internet in clear text.
        logger.info("provider base URL %s refused: plain http to a public address", url)
        raise BaseUrlRefused()
    return str(addresses[0])


class PinnedTransport(httpx2.BaseTransport):
    """Sends every request for ``host`` to ``address``; requests for any other host are refused.

    Redirects the SDK follows are requests like any other: one to another host fails here.
    """

    def __init__(self, *, host: str, address: str) -> None:
        self.host = host
        self.address = address
        # No proxies from the environment: they would route around the pinned address.
        self.inner = httpx2.HTTPTransport(trust_env=False)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.host != self.host:
            raise httpx2.ConnectError(f"refused: {request.url.host} is not the checked host", request=request)
        # The Host header was set from the original URL when the request was built.
        request.url = request.url.copy_with(host=self.address)
        if request.url.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": self.host}
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()
