"""The SSRF guard against real local servers: 127.0.0.1 plays "public" when a test's policy
says so, 127.0.0.2 stays private, and fake host names resolve through an injected resolver."""

import datetime
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from core import ssrf
from core.ssrf import AddressPolicy, OutboundHttpError, SsrfRefused, guarded_request, resolve_and_check
from core.ssrf import requests as guarded_requests
from tests.tools import LocalServer, Reply

PUBLIC = ipaddress.ip_address("127.0.0.1")


def fake_resolver(table: dict[str, list[str]]) -> ssrf.Resolver:
    def resolve(host: str, port: int) -> list[str]:
        return table[host]

    return resolve


def public_policy(table: dict[str, list[str]]) -> AddressPolicy:
    """Names resolve through ``table``; 127.0.0.1 counts as public, every other address keeps its class."""
    return AddressPolicy(resolver=fake_resolver(table), allow=lambda address: address == PUBLIC)


@pytest.fixture
def public_server() -> Iterator[LocalServer]:
    with LocalServer("127.0.0.1") as server:
        yield server


@pytest.fixture
def private_server() -> Iterator[LocalServer]:
    with LocalServer("127.0.0.2") as server:
        server.routes["/secret"] = Reply(200, "internal secret")
        yield server


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1/", "refused: 127.0.0.1 is a loopback address"),
        (
            "http://169.254.169.254/latest/meta-data/",
            "refused: 169.254.169.254 is a link-local address (cloud metadata service)",
        ),
        ("http://[::1]/", "refused: ::1 is a loopback address"),
        ("http://10.0.0.5/", "refused: 10.0.0.5 is a private address"),
        ("http://192.168.1.1/", "refused: 192.168.1.1 is a private address"),
        ("http://172.16.0.1/", "refused: 172.16.0.1 is a private address"),
        ("http://100.64.0.1/", "refused: 100.64.0.1 is a shared (carrier-grade NAT) address"),
        ("http://0.0.0.0/", "refused: 0.0.0.0 is an unspecified address"),
        ("http://224.0.0.251/", "refused: 224.0.0.251 is a multicast address"),
        ("http://240.0.0.1/", "refused: 240.0.0.1 is a private address"),
        ("http://[fe80::1]/", "refused: fe80::1 is a link-local address"),
        ("http://[fd12:3456::1]/", "refused: fd12:3456::1 is a private address"),
        (
            "http://[::ffff:127.0.0.1]/",
            "refused: ::ffff:7f00:1 is 127.0.0.1 in IPv6 form, a loopback address",
        ),
        (
            "http://[::ffff:169.254.169.254]/",
            "refused: ::ffff:a9fe:a9fe is 169.254.169.254 in IPv6 form, "
            "a link-local address (cloud metadata service)",
        ),
        ("http://[64:ff9b::a00:1]/", "refused: 64:ff9b::a00:1 is 10.0.0.1 in IPv6 form, a private address"),
        ("ftp://example.com/file", "refused: only http and https URLs can be fetched, not 'ftp'"),
        ("file:///etc/passwd", "refused: only http and https URLs can be fetched, not 'file'"),
        ("example.com/page", "refused: the URL must start with http:// or https://"),
        (
            "http://example.com@127.0.0.1/",
            "refused: URLs with a user name or password (user@host) are not fetched",
        ),
    ],
)
def test_non_public_and_non_http_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(SsrfRefused) as refused:
        resolve_and_check(url)
    assert str(refused.value) == message


def test_a_public_address_passes() -> None:
    assert resolve_and_check("https://93.184.216.34/page") == [ipaddress.ip_address("93.184.216.34")]


def test_a_hostname_resolving_to_a_private_address_is_refused() -> None:
    policy = AddressPolicy(resolver=fake_resolver({"intranet.example": ["10.1.2.3"]}))
    with pytest.raises(SsrfRefused) as refused:
        resolve_and_check("http://intranet.example/admin", policy=policy)
    assert str(refused.value) == "refused: intranet.example resolves to 10.1.2.3, which is a private address"


def test_one_private_address_among_public_ones_is_refused() -> None:
    policy = AddressPolicy(resolver=fake_resolver({"mixed.example": ["93.184.216.34", "127.0.0.1"]}))
    with pytest.raises(SsrfRefused) as refused:
        resolve_and_check("http://mixed.example/", policy=policy)
    assert str(refused.value) == "refused: mixed.example resolves to 127.0.0.1, which is a loopback address"


def test_localhost_is_refused_through_the_system_resolver(public_server: LocalServer) -> None:
    with pytest.raises(SsrfRefused) as refused:
        guarded_request("GET", f"http://localhost:{public_server.port}/", timeout_seconds=5, max_bytes=1000)
    assert str(refused.value).startswith("refused: localhost resolves to ")
    assert str(refused.value).endswith(", which is a loopback address")
    assert public_server.requests == []


def test_loopback_is_refused_before_any_connection(public_server: LocalServer) -> None:
    public_server.routes["/"] = Reply(200, "hello")
    with pytest.raises(SsrfRefused) as refused:
        guarded_request("GET", public_server.url("/"), timeout_seconds=5, max_bytes=1000)
    assert str(refused.value) == "refused: 127.0.0.1 is a loopback address"
    assert public_server.requests == []


def test_the_allow_setting_lets_private_addresses_through(public_server: LocalServer, settings: Any) -> None:
    settings.ALLOW_PRIVATE_NETWORK_FETCH = True
    public_server.routes["/"] = Reply(200, "hello")
    response = guarded_request("GET", public_server.url("/"), timeout_seconds=5, max_bytes=1000)
    assert (response.status_code, response.content) == (200, b"hello")


def test_a_redirect_to_a_private_address_is_refused(
    public_server: LocalServer, private_server: LocalServer
) -> None:
    public_server.routes["/start"] = Reply(302, headers={"Location": private_server.url("/secret")})
    policy = public_policy({"public.test": ["127.0.0.1"]})
    with pytest.raises(SsrfRefused) as refused:
        guarded_request(
            "GET",
            f"http://public.test:{public_server.port}/start",
            timeout_seconds=5,
            max_bytes=1000,
            policy=policy,
        )
    assert str(refused.value) == "refused: 127.0.0.2 is a loopback address"
    assert [request.path for request in public_server.requests] == ["/start"]
    assert private_server.requests == []


def test_a_redirect_to_a_name_resolving_privately_is_refused(
    public_server: LocalServer, private_server: LocalServer
) -> None:
    target = f"http://internal.test:{private_server.port}/secret"
    public_server.routes["/start"] = Reply(301, headers={"Location": target})
    policy = public_policy({"public.test": ["127.0.0.1"], "internal.test": ["127.0.0.2"]})
    with pytest.raises(SsrfRefused) as refused:
        guarded_request(
            "GET",
            f"http://public.test:{public_server.port}/start",
            timeout_seconds=5,
            max_bytes=1000,
            policy=policy,
        )
    assert str(refused.value) == "refused: internal.test resolves to 127.0.0.2, which is a loopback address"
    assert private_server.requests == []


def test_redirects_between_allowed_urls_are_followed(public_server: LocalServer) -> None:
    public_server.routes["/start"] = Reply(302, headers={"Location": "/middle"})
    public_server.routes["/middle"] = Reply(
        307, headers={"Location": f"http://other.test:{public_server.port}/end"}
    )
    public_server.routes["/end"] = Reply(200, "arrived")
    policy = public_policy({"public.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    response = guarded_request(
        "GET",
        f"http://public.test:{public_server.port}/start",
        timeout_seconds=5,
        max_bytes=1000,
        policy=policy,
    )
    assert (response.status_code, response.content) == (200, b"arrived")
    assert str(response.url) == f"http://other.test:{public_server.port}/end"
    assert [(request.path, request.headers["host"]) for request in public_server.requests] == [
        ("/start", f"public.test:{public_server.port}"),
        ("/middle", f"public.test:{public_server.port}"),
        ("/end", f"other.test:{public_server.port}"),
    ]


def test_more_than_five_redirects_fail(public_server: LocalServer) -> None:
    public_server.routes["/loop"] = Reply(302, headers={"Location": "/loop"})
    policy = public_policy({"public.test": ["127.0.0.1"]})
    with pytest.raises(OutboundHttpError) as failed:
        guarded_request(
            "GET",
            f"http://public.test:{public_server.port}/loop",
            timeout_seconds=5,
            max_bytes=1000,
            policy=policy,
        )
    assert str(failed.value) == "too many redirects (more than 5)"
    assert failed.value.is_retryable is False
    assert len(public_server.requests) == 6


def test_the_connection_goes_to_the_checked_address_not_a_new_lookup(
    public_server: LocalServer, private_server: LocalServer
) -> None:
    """DNS rebinding: the name answers a public address for the check, then a private one."""
    answers = iter([["127.0.0.1"]])

    def rebinding_resolver(host: str, port: int) -> list[str]:
        return next(answers, ["127.0.0.2"])

    public_server.routes["/"] = Reply(200, "public page")
    policy = AddressPolicy(resolver=rebinding_resolver, allow=lambda address: address == PUBLIC)
    response = guarded_request(
        "GET", f"http://rebind.test:{public_server.port}/", timeout_seconds=5, max_bytes=1000, policy=policy
    )
    assert response.content == b"public page"
    assert public_server.requests[0].headers["host"] == f"rebind.test:{public_server.port}"
    assert private_server.requests == []


def test_credentials_are_dropped_when_a_redirect_leaves_the_origin(public_server: LocalServer) -> None:
    port = public_server.port
    public_server.routes["/start"] = Reply(302, headers={"Location": "/same"})
    public_server.routes["/same"] = Reply(302, headers={"Location": f"http://elsewhere.test:{port}/away"})
    public_server.routes["/away"] = Reply(200, "done")
    policy = public_policy({"public.test": ["127.0.0.1"], "elsewhere.test": ["127.0.0.1"]})
    guarded_request(
        "GET",
        f"http://public.test:{port}/start",
        timeout_seconds=5,
        max_bytes=1000,
        headers={"Authorization": "Bearer abc", "X-Api-Key": "k-123", "X-Trace": "t-1"},
        sensitive_headers=["X-Api-Key"],
        policy=policy,
    )
    seen = [
        (
            request.path,
            request.headers.get("authorization"),
            request.headers.get("x-api-key"),
            request.headers["x-trace"],
        )
        for request in public_server.requests
    ]
    assert seen == [
        ("/start", "Bearer abc", "k-123", "t-1"),
        ("/same", "Bearer abc", "k-123", "t-1"),
        ("/away", None, None, "t-1"),
    ]


def test_a_303_after_a_post_becomes_a_get_without_body(public_server: LocalServer) -> None:
    public_server.routes["/submit"] = Reply(303, headers={"Location": "/result"})
    public_server.routes["/result"] = Reply(200, "ok")
    policy = public_policy({"public.test": ["127.0.0.1"]})
    guarded_request(
        "POST",
        f"http://public.test:{public_server.port}/submit",
        timeout_seconds=5,
        max_bytes=1000,
        json={"a": 1},
        policy=policy,
    )
    assert [(request.method, request.path, request.body) for request in public_server.requests] == [
        ("POST", "/submit", b'{"a": 1}'),
        ("GET", "/result", b""),
    ]


def test_the_body_is_cut_at_the_byte_cap(public_server: LocalServer) -> None:
    public_server.routes["/big"] = Reply(200, b"x" * 50_000)
    policy = public_policy({"public.test": ["127.0.0.1"]})
    response = guarded_request(
        "GET",
        f"http://public.test:{public_server.port}/big",
        timeout_seconds=5,
        max_bytes=1000,
        policy=policy,
    )
    assert (len(response.content), response.is_truncated) == (1000, True)


def test_a_slow_server_hits_the_time_cap(public_server: LocalServer) -> None:
    release = threading.Event()

    def slow(request: Any) -> Reply:
        release.wait(5)
        return Reply(200, "late")

    public_server.routes["/slow"] = slow
    policy = public_policy({"public.test": ["127.0.0.1"]})
    try:
        with pytest.raises(OutboundHttpError) as failed:
            guarded_request(
                "GET",
                f"http://public.test:{public_server.port}/slow",
                timeout_seconds=0.3,
                max_bytes=1000,
                policy=policy,
            )
    finally:
        release.set()
    assert str(failed.value) == "public.test did not answer in time"
    assert failed.value.is_retryable is True


# --- https: the pinned connection still verifies the certificate against the name -----------


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, ssl.SSLContext]]:
    """An HTTPS server on 127.0.0.1 whose self-signed certificate names only secure.test."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "secure.test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("secure.test")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    certificate_file = tmp_path / "cert.pem"
    key_file = tmp_path / "key.pem"
    certificate_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            body = f"tls ok for {self.headers['Host']}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class QuietServer(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            return  # the refused handshake of the impostor test is expected

    server = QuietServer(("127.0.0.1", 0), Handler)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(certificate_file, key_file)
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client_context = ssl.create_default_context(cafile=str(certificate_file))
    try:
        yield server.server_address[1], client_context
    finally:
        server.shutdown()
        server.server_close()


def test_https_to_a_pinned_address_verifies_the_certificate_for_the_name(
    tls_server: tuple[int, ssl.SSLContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, client_context = tls_server
    monkeypatch.setattr(guarded_requests, "_ssl_context", lambda: client_context)
    policy = public_policy({"secure.test": ["127.0.0.1"], "impostor.test": ["127.0.0.1"]})
    response = guarded_request(
        "GET", f"https://secure.test:{port}/", timeout_seconds=5, max_bytes=1000, policy=policy
    )
    assert response.content == f"tls ok for secure.test:{port}".encode()

    with pytest.raises(OutboundHttpError) as failed:
        guarded_request(
            "GET", f"https://impostor.test:{port}/", timeout_seconds=5, max_bytes=1000, policy=policy
        )
    assert str(failed.value).startswith("TLS with impostor.test failed: ")
    assert "certificate verify failed" in str(failed.value)
    assert failed.value.is_retryable is False


# An operator's list of allowed private hosts (MCP servers, tenant provider base URLs)


ALLOWLIST = ssrf.PrivateHostAllowlist.parse(["MCP.Internal.", "10.20.0.0/16", "[::1]", " ", "192.168.1.7"])
ALLOWLIST_NAMES = fake_resolver(
    {
        "mcp.internal": ["10.99.0.1"],
        "other.internal": ["10.20.3.4"],
        "mixed.internal": ["10.20.3.4", "10.99.0.1"],
        "elsewhere.internal": ["10.99.0.1"],
        "example.com": ["93.184.216.34"],
    }
)


def test_an_allowlist_parses_names_addresses_and_networks() -> None:
    expected = ssrf.PrivateHostAllowlist(
        names=frozenset({"mcp.internal"}),
        networks=(
            ipaddress.ip_network("10.20.0.0/16"),
            ipaddress.ip_network("::1/128"),
            ipaddress.ip_network("192.168.1.7/32"),
        ),
    )

    assert expected == ALLOWLIST


@pytest.mark.parametrize(
    ("url", "addresses"),
    [
        ("http://mcp.internal/mcp", ["10.99.0.1"]),
        ("https://MCP.INTERNAL:8443/mcp", ["10.99.0.1"]),
        ("http://other.internal/", ["10.20.3.4"]),
        ("http://10.20.255.1/", ["10.20.255.1"]),
        ("http://[::1]:8000/", ["::1"]),
        ("http://192.168.1.7/", ["192.168.1.7"]),
        ("https://example.com/", ["93.184.216.34"]),
    ],
)
def test_an_allowlist_lets_through_its_names_addresses_and_networks(url: str, addresses: list[str]) -> None:
    policy = ALLOWLIST.policy_for(url, resolver=ALLOWLIST_NAMES)

    assert resolve_and_check(url, policy=policy) == [ipaddress.ip_address(text) for text in addresses]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "http://elsewhere.internal/",
            "refused: elsewhere.internal resolves to 10.99.0.1, which is a private address",
        ),
        (
            "http://mixed.internal/",
            "refused: mixed.internal resolves to 10.99.0.1, which is a private address",
        ),
        ("http://10.21.0.1/", "refused: 10.21.0.1 is a private address"),
        ("http://127.0.0.1/", "refused: 127.0.0.1 is a loopback address"),
        ("http://192.168.1.8/", "refused: 192.168.1.8 is a private address"),
        (
            "http://169.254.169.254/",
            "refused: 169.254.169.254 is a link-local address (cloud metadata service)",
        ),
    ],
)
def test_an_allowlist_refuses_every_other_private_address(url: str, message: str) -> None:
    policy = ALLOWLIST.policy_for(url, resolver=ALLOWLIST_NAMES)

    with pytest.raises(SsrfRefused) as refused:
        resolve_and_check(url, policy=policy)

    assert str(refused.value) == message
