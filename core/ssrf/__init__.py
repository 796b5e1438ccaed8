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

from core.ssrf.addresses import (
    AddressPolicy,
    IPAddress,
    OutboundHttpError,
    PrivateHostAllowlist,
    Resolver,
    SsrfRefused,
    address_refusal,
    checked_url,
    resolve_and_check,
    system_resolver,
)
from core.ssrf.requests import FetchedResponse, guarded_request, with_default_headers

__all__ = [
    "AddressPolicy",
    "FetchedResponse",
    "IPAddress",
    "OutboundHttpError",
    "PrivateHostAllowlist",
    "Resolver",
    "SsrfRefused",
    "address_refusal",
    "checked_url",
    "guarded_request",
    "resolve_and_check",
    "system_resolver",
    "with_default_headers",
]
