"""Which hosts and addresses an outbound request may reach: a URL is checked, its host resolved,
and every address it resolves to must pass the policy (public unicast, or allowed)."""

import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpx
from django.conf import settings

from core.errors import ToolError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# host, port -> the addresses (as text) the host resolves to.
Resolver = Callable[[str, int], list[str]]

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
        host = ascii_host(checked_url(url)).lower().rstrip(".")
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
    literal = ip_literal(host)
    if literal is not None:
        texts = [str(literal)]
    else:
        # The IDNA-encoded name: what DNS, the Host header and SNI all use.
        texts = policy.resolver(ascii_host(parsed), parsed.port or default_port(parsed))
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


def ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def ascii_host(url: httpx.URL) -> str:
    return url.raw_host.decode("ascii")


def default_port(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80
