"""web_fetch and web_search against real local servers, and the built-in tools' catalogue."""

import ipaddress
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

import pytest

from agents.runtime import builtin_tools
from core import ssrf
from core.ssrf import addresses
from tests.tools import LocalServer, RecordedRequest, Reply
from tools.builtins import load_builtin_tools
from tools.builtins.base import BUILTIN_REGISTRY, ToolContext, ToolError
from tools.builtins.time_and_math import run_calculator, run_current_time
from tools.builtins.web import run_web_fetch, run_web_search

CONTEXT = ToolContext(
    tenant_id=uuid.uuid4(),
    agent_id=None,
    session_id=uuid.uuid4(),
    run_id=uuid.uuid4(),
    user_id=None,
    user_role="member",
)

PAGE = """<!doctype html>
<html><head><title>Field notes</title><style>body { color: red }</style>
<script>document.write("tracking")</script></head>
<body>
<nav><a href="/">Home</a></nav>
<h1>Birds of the coast</h1>
<p>Gulls are  <em>loud</em>.<br>Terns are quick.</p>
<h2>Links</h2>
<ul><li><a href="/terns">About terns</a></li><li>Puffins &amp; auks</li></ul>
<noscript>Enable JavaScript</noscript>
</body></html>"""


@pytest.fixture
def server() -> Iterator[LocalServer]:
    with LocalServer("127.0.0.1") as local:
        yield local


@pytest.fixture
def private_network_allowed(settings: Any) -> None:
    settings.ALLOW_PRIVATE_NETWORK_FETCH = True


def test_the_builtin_catalogue_has_groups_and_read_only_flags() -> None:
    load_builtin_tools()
    catalogue = {
        name: (tool.group, tool.is_read_only)
        for name, tool in BUILTIN_REGISTRY.items()
        if tool.group in {"time", "math", "web", "files", "sessions"}
    }
    assert catalogue == {
        "current_time": ("time", True),
        "calculator": ("math", True),
        "web_fetch": ("web", True),
        "web_search": ("web", True),
        "file_list": ("files", True),
        "file_read": ("files", True),
        "file_write": ("files", False),
        "file_edit": ("files", False),
        "sessions_list": ("sessions", True),
        "session_history": ("sessions", True),
        "session_send": ("sessions", False),
        "spawn_subagent": ("sessions", False),
    }


def test_calculator_and_current_time_wrap_the_runtime_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_calculator({"expression": "(3 + 4) * 2"}, CONTEXT) == "14"
    with pytest.raises(ToolError) as failed:
        run_calculator({"expression": "1 / 0"}, CONTEXT)
    assert str(failed.value) == "division by zero"
    monkeypatch.setattr(builtin_tools, "_utc_now", lambda: datetime(2026, 1, 15, 9, 30, tzinfo=UTC))
    assert run_current_time({"timezone": "Europe/Paris"}, CONTEXT) == (
        "2026-01-15T10:30:00+01:00 (Thursday 15 January 2026, 10:30:00 CET)"
    )
    with pytest.raises(ToolError) as failed:
        run_current_time({"timezone": "Mars/Olympus"}, CONTEXT)
    assert str(failed.value) == "unknown time zone 'Mars/Olympus'; use an IANA name such as 'Europe/Paris'"


def test_web_fetch_returns_readable_text_of_html(server: LocalServer, private_network_allowed: None) -> None:
    server.routes["/birds"] = Reply(200, PAGE, {"Content-Type": "text/html; charset=utf-8"})
    result = run_web_fetch({"url": server.url("/birds")}, CONTEXT)
    base = server.url("")
    assert result == (
        f"URL: {base}/birds\n"
        "Status: 200\n"
        "Content-Type: text/html\n"
        "Title: Field notes\n"
        "\n"
        f"[Home]({base}/)\n"
        "\n"
        "# Birds of the coast\n"
        "\n"
        "Gulls are loud.\n"
        "Terns are quick.\n"
        "\n"
        "## Links\n"
        "\n"
        f"- [About terns]({base}/terns)\n"
        "- Puffins & auks"
    )


def test_web_fetch_pretty_prints_json(server: LocalServer, private_network_allowed: None) -> None:
    server.routes["/api"] = Reply(200, '{"name":"tern","wings":2}', {"Content-Type": "application/json"})
    result = run_web_fetch({"url": server.url("/api")}, CONTEXT)
    assert result.split("\n\n", 1)[1] == '{\n  "name": "tern",\n  "wings": 2\n}'


def test_web_fetch_decodes_text_with_its_charset(server: LocalServer, private_network_allowed: None) -> None:
    server.routes["/latin"] = Reply(
        200, "café".encode("latin-1"), {"Content-Type": "text/plain; charset=latin-1"}
    )
    assert run_web_fetch({"url": server.url("/latin")}, CONTEXT).split("\n\n", 1)[1] == "café"


def test_web_fetch_refuses_binary_content(server: LocalServer, private_network_allowed: None) -> None:
    server.routes["/logo.png"] = Reply(200, b"\x89PNG\r\n\x1a\n\x00\x00", {"Content-Type": "image/png"})
    with pytest.raises(ToolError) as failed:
        run_web_fetch({"url": server.url("/logo.png")}, CONTEXT)
    assert (
        str(failed.value)
        == f"{server.url('/logo.png')} returned image/png content, which web_fetch cannot read as text"
    )


def test_web_fetch_reports_error_statuses(server: LocalServer, private_network_allowed: None) -> None:
    with pytest.raises(ToolError) as failed:
        run_web_fetch({"url": server.url("/missing")}, CONTEXT)
    assert str(failed.value) == f"HTTP 404 Not Found from {server.url('/missing')}: no such page"


def test_web_fetch_returns_long_text_in_windows(
    server: LocalServer, private_network_allowed: None, settings: Any
) -> None:
    settings.WEB_FETCH_MAX_CHARS = 10
    server.routes["/long"] = Reply(200, "abcdefghijklmnopqrstuvwxy")
    first = run_web_fetch({"url": server.url("/long")}, CONTEXT).split("\n\n", 1)[1]
    assert first == (
        "abcdefghij\n\n"
        "[truncated: characters 0-10 of 25; call web_fetch again with start_index=10 to read on]"
    )
    last = run_web_fetch({"url": server.url("/long"), "start_index": 20}, CONTEXT).split("\n\n", 1)[1]
    assert last == "uvwxy"
    with pytest.raises(ToolError) as failed:
        run_web_fetch({"url": server.url("/long"), "start_index": 25}, CONTEXT)
    assert str(failed.value) == "start_index 25 is past the end of the text (25 characters)"


def test_web_fetch_notes_a_body_cut_at_the_byte_cap(
    server: LocalServer, private_network_allowed: None, settings: Any
) -> None:
    settings.WEB_FETCH_MAX_BYTES = 8
    server.routes["/big"] = Reply(200, "0123456789abcdef")
    result = run_web_fetch({"url": server.url("/big")}, CONTEXT)
    assert result == (
        f"URL: {server.url('/big')}\nStatus: 200\nContent-Type: text/plain\n"
        "Note: only the first 8 bytes of the body were read\n\n01234567"
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1/", "refused: 127.0.0.1 is a loopback address"),
        (
            "http://169.254.169.254/latest/meta-data/iam/",
            "refused: 169.254.169.254 is a link-local address (cloud metadata service)",
        ),
        ("http://[::1]:8000/", "refused: ::1 is a loopback address"),
    ],
)
def test_web_fetch_refuses_private_addresses_by_default(url: str, message: str) -> None:
    with pytest.raises(ToolError) as failed:
        run_web_fetch({"url": url}, CONTEXT)
    assert str(failed.value) == message


def test_web_fetch_refuses_the_local_server_it_could_reach(server: LocalServer) -> None:
    server.routes["/"] = Reply(200, "admin console")
    with pytest.raises(ToolError) as failed:
        run_web_fetch({"url": server.url("/")}, CONTEXT)
    assert str(failed.value) == "refused: 127.0.0.1 is a loopback address"
    assert server.requests == []


def test_web_fetch_refuses_a_hostname_resolving_to_a_private_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        addresses,
        "DEFAULT_POLICY",
        ssrf.AddressPolicy(resolver=lambda host, port: {"db.corp.test": ["10.20.30.40"]}[host]),
    )
    with pytest.raises(ToolError) as failed:
        run_web_fetch({"url": "http://db.corp.test/"}, CONTEXT)
    assert str(failed.value) == "refused: db.corp.test resolves to 10.20.30.40, which is a private address"


def test_web_fetch_refuses_a_private_address_reached_through_a_redirect(
    server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LocalServer("127.0.0.2") as private:
        private.routes["/secret"] = Reply(200, "internal secret")
        server.routes["/go"] = Reply(302, headers={"Location": private.url("/secret")})
        policy = ssrf.AddressPolicy(
            resolver=lambda host, port: {"news.test": ["127.0.0.1"]}[host],
            allow=lambda address: address == ipaddress.ip_address("127.0.0.1"),
        )
        monkeypatch.setattr(addresses, "DEFAULT_POLICY", policy)
        with pytest.raises(ToolError) as failed:
            run_web_fetch({"url": f"http://news.test:{server.port}/go"}, CONTEXT)
        assert str(failed.value) == "refused: 127.0.0.2 is a loopback address"
        assert [request.path for request in server.requests] == ["/go"]
        assert private.requests == []


# --- web_search ----------------------------------------------------------------------------


def test_web_search_is_hidden_without_a_backend(settings: Any) -> None:
    settings.WEB_SEARCH_SEARXNG_URL = ""
    assert BUILTIN_REGISTRY["web_search"].is_available() is False
    settings.WEB_SEARCH_SEARXNG_URL = "http://search.internal:8080"
    assert BUILTIN_REGISTRY["web_search"].is_available() is True


def searxng_answer(request: RecordedRequest) -> Reply:
    query = parse_qs(request.query)
    payload = {
        "query": query["q"][0],
        "answers": [],
        "results": [
            {
                "title": "Arctic tern",
                "url": "https://birds.example/arctic-tern",
                "content": "Longest  migration.",
            },
            {"title": "Common tern", "url": "https://birds.example/common-tern", "content": ""},
            {"title": "Sandwich tern", "url": "https://birds.example/sandwich-tern", "content": "Crested."},
        ],
    }
    return Reply(200, json.dumps(payload), {"Content-Type": "application/json"})


def test_web_search_asks_searxng_for_json_and_formats_results(server: LocalServer, settings: Any) -> None:
    # The configured backend is trusted admin configuration: a private address is fine.
    settings.WEB_SEARCH_SEARXNG_URL = server.url("/")
    server.routes["/search"] = searxng_answer
    result = run_web_search({"query": "tern migration", "max_results": 2}, CONTEXT)
    assert result == (
        "1. Arctic tern\n"
        "   https://birds.example/arctic-tern\n"
        "   Longest migration.\n"
        "2. Common tern\n"
        "   https://birds.example/common-tern"
    )
    assert [(request.path, parse_qs(request.query)) for request in server.requests] == [
        ("/search", {"q": ["tern migration"], "format": ["json"]})
    ]


def test_web_search_explains_a_backend_without_json_output(server: LocalServer, settings: Any) -> None:
    settings.WEB_SEARCH_SEARXNG_URL = server.url("")
    server.routes["/search"] = Reply(403, "Forbidden")
    with pytest.raises(ToolError) as failed:
        run_web_search({"query": "terns"}, CONTEXT)
    assert str(failed.value) == (
        "the search backend refused JSON output (enable the json format in SearxNG's settings)"
    )
