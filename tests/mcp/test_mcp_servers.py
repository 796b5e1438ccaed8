"""MCP servers end to end: real SDK servers over streamable HTTP, SSE and stdio, driven through the API."""

import json
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from django.test import Client
from django_q.models import Schedule
from rest_framework.test import APIClient

from mcp_servers.client import Connection, ToolCallResult, _discovered, call_server_tool, list_server_tools
from mcp_servers.content import content_as_text
from mcp_servers.health import (
    HEALTH_SCHEDULE_NAME,
    check_enabled_servers,
    ensure_mcp_health_schedule,
    mcp_server_check,
    mcp_server_check_by_id,
)
from mcp_servers.models import McpServer
from mcp_servers.tool_names import mcp_tool_public_name
from tests.conftest import Cast
from tests.mcp.conftest import NOT_MCP_BODY
from tests.mcp.servers import DemoHttpServer
from tools.models import Tool

pytestmark = pytest.mark.django_db

STDIO_SERVER = str(Path(__file__).with_name("stdio_server.py"))
DEMO_TOOLS = ["demo__add", "demo__fail", "demo__shout", "demo__wait"]


@pytest.fixture(scope="module")
def demo() -> Iterator[DemoHttpServer]:
    with DemoHttpServer() as server:
        yield server


def register(api: APIClient, **fields: Any) -> Any:
    return api.post("/api/v1/mcp-servers/", fields, format="json")


def register_demo(api: APIClient, demo: DemoHttpServer, **overrides: Any) -> dict[str, Any]:
    fields = {
        "name": "demo",
        "transport": "streamable_http",
        "url": demo.url,
        "token": demo.token,
        **overrides,
    }
    response = register(api, **fields)
    assert response.status_code == 201, response.json()
    body: dict[str, Any] = response.json()
    return body


def check(api: APIClient, server_id: str) -> Any:
    return api.post(f"/api/v1/mcp-servers/{server_id}/check/")


def snapshot(server_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    server = dict(McpServer.objects.filter(pk=server_id).values().get())
    tools = [dict(tool) for tool in Tool.objects.filter(mcp_server__pk=server_id).order_by("name").values()]
    return server, tools


# Registration and credentials


def test_registering_keeps_credentials_write_only(
    cast: Cast, alice_api: APIClient, demo: DemoHttpServer
) -> None:
    body = register_demo(alice_api, demo, headers={"X-Trace": "header-secret-value"})

    read = alice_api.get(f"/api/v1/mcp-servers/{body['id']}/").json()
    listed = alice_api.get("/api/v1/mcp-servers/").json()["results"]

    for payload in (body, read, listed[0]):
        assert payload["has_token"] is True
        assert payload["header_names"] == ["X-Trace"]
        assert payload["env_names"] == []
        assert "token" not in payload
        assert "headers" not in payload
        assert "env" not in payload
        assert demo.token not in json.dumps(payload)
        assert "header-secret-value" not in json.dumps(payload)
    assert body["health_status"] == "unknown"
    server = McpServer.objects.get(pk=body["id"])
    assert server.tenant == cast.tenant_a
    assert server.token == demo.token
    assert server.headers == {"X-Trace": "header-secret-value"}


def test_credentials_can_be_replaced_and_cleared(alice_api: APIClient, demo: DemoHttpServer) -> None:
    body = register_demo(alice_api, demo, headers={"X-One": "1"})
    url = f"/api/v1/mcp-servers/{body['id']}/"

    replaced = alice_api.patch(url, {"token": "new-token-value", "headers": {"X-Two": "2"}}, format="json")
    untouched = alice_api.patch(url, {"call_timeout_seconds": 30}, format="json")
    server_after_replace = McpServer.objects.get(pk=body["id"])
    cleared = alice_api.patch(url, {"token": None, "headers": {}}, format="json")
    cleared_by_empty = alice_api.patch(url, {"token": "t2", "headers": None}, format="json")
    emptied = alice_api.patch(url, {"token": ""}, format="json")

    assert replaced.status_code == 200
    assert replaced.json()["header_names"] == ["X-Two"]
    assert untouched.json()["has_token"] is True
    assert (server_after_replace.token, server_after_replace.headers) == ("new-token-value", {"X-Two": "2"})
    assert cleared.json()["has_token"] is False
    assert cleared.json()["header_names"] == []
    assert cleared_by_empty.json()["has_token"] is True
    assert cleared_by_empty.json()["header_names"] == []
    assert emptied.json()["has_token"] is False
    server = McpServer.objects.get(pk=body["id"])
    assert (server.token, server.headers, server.call_timeout_seconds) == ("", {}, 30.0)


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        (
            {"name": "my__server"},
            "name",
            'Use 1 to 40 letters, digits, "_" or "-", without "__" (it separates tool names).',
        ),
        (
            {"name": "has space"},
            "name",
            'Use 1 to 40 letters, digits, "_" or "-", without "__" (it separates tool names).',
        ),
        ({"url": ""}, "url", "Required for HTTP transports."),
        ({"url": "ftp://example.com/mcp"}, "url", "Must be an http:// or https:// URL with a host."),
        (
            {"url": "https://user:pw@example.com/mcp"},
            "url",
            "Put credentials in the token or headers, not in the URL (the URL is not stored encrypted).",
        ),
        (
            {"headers": {"Content-Type": "text/plain"}},
            "headers",
            "These headers are set by the MCP transport: content-type.",
        ),
        (
            {"headers": {"Authorization": "Basic x"}},
            "headers",
            "Set either the token or an Authorization header, not both.",
        ),
        ({"connect_timeout_seconds": 0}, "connect_timeout_seconds", "Must be between 1 and 120 seconds."),
        ({"transport": "carrier-pigeon"}, "transport", '"carrier-pigeon" is not a valid choice.'),
        ({"token": 42}, "token", "Must be a string."),
        ({"token": "t\u00f6ken"}, "token", "Must be a string without non-ASCII characters."),
        ({"token": "t\x7fken"}, "token", "Must be a string without control characters."),
        (
            {"token": "", "headers": {"X-Team": "\u00e9quipe", "X-Line": "a\nb"}},
            "headers",
            "Header values must not contain control characters or non-ASCII characters.",
        ),
        (
            {"headers": {"X Team": "a"}},
            "headers",
            "Header names may hold only letters, digits and !#$%&'*+.^_`|~-.",
        ),
    ],
)
def test_invalid_servers_are_refused(
    alice_api: APIClient, fields: dict[str, Any], field: str, message: str
) -> None:
    payload = {
        "name": "demo",
        "transport": "streamable_http",
        "url": "https://mcp.example.com/mcp",
        "token": "t",
    }

    response = register(alice_api, **{**payload, **fields})

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {field: [message]}
    assert McpServer.objects.count() == 0


def test_server_names_are_unique_per_tenant(cast: Cast, alice_api: APIClient, carol_api: APIClient) -> None:
    payload = {"name": "demo", "transport": "streamable_http", "url": "https://mcp.example.com/mcp"}

    first = register(alice_api, **payload)
    second = register(alice_api, **payload)
    other_tenant = register(carol_api, **payload)

    assert first.status_code == 201
    assert second.status_code == 400
    assert second.json()["error"]["fields"] == {
        "name": ["An MCP server with this name already exists in this tenant."]
    }
    assert other_tenant.status_code == 201


@pytest.mark.parametrize("role_api", ["bob_api", "victor_api"])
def test_members_and_viewers_may_read_but_not_register(
    request: pytest.FixtureRequest, alice_api: APIClient, demo: DemoHttpServer, role_api: str
) -> None:
    api: APIClient = request.getfixturevalue(role_api)
    body = register_demo(alice_api, demo)

    listed = api.get("/api/v1/mcp-servers/")
    created = register(api, name="other", transport="streamable_http", url=demo.url)
    checked = check(api, body["id"])

    assert [server["name"] for server in listed.json()["results"]] == ["demo"]
    assert created.status_code == 403
    assert checked.status_code == 403
    assert McpServer.objects.count() == 1
    assert McpServer.objects.get().health_status == "unknown"


# Checks and calls over streamable HTTP


def test_check_records_healthy_and_lists_the_tools(
    cast: Cast, alice_api: APIClient, demo: DemoHttpServer
) -> None:
    body = register_demo(alice_api, demo)

    response = check(alice_api, body["id"])

    assert response.status_code == 200
    result = response.json()
    assert result["health_status"] == "healthy"
    assert result["last_error"] == ""
    assert isinstance(result["latency_ms"], int)
    assert result["last_checked_at"] is not None
    assert result["changes"] == {"added": DEMO_TOOLS, "changed": [], "removed": [], "issues": []}
    assert [tool["name"] for tool in result["tools"]] == DEMO_TOOLS
    read_only = {tool["mcp_tool_name"]: tool["is_read_only"] for tool in result["tools"]}
    assert read_only == {"add": True, "fail": True, "shout": False, "wait": True}
    add = Tool.objects.get(name="demo__add")
    assert (add.tenant, add.kind, add.group, add.mcp_tool_name) == (cast.tenant_a, "mcp", "mcp:demo", "add")
    assert add.description == "Add two integers."
    assert add.input_schema["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }
    assert add.input_schema["required"] == ["a", "b"]
    assert add.annotations == {"readOnlyHint": True}
    assert demo.token not in json.dumps(result)


def test_a_second_check_changes_nothing(alice_api: APIClient, demo: DemoHttpServer) -> None:
    body = register_demo(alice_api, demo)
    check(alice_api, body["id"])
    ids_before = list(Tool.objects.order_by("name").values_list("pk", flat=True))

    result = check(alice_api, body["id"]).json()

    assert result["changes"] == {"added": [], "changed": [], "removed": [], "issues": []}
    assert list(Tool.objects.order_by("name").values_list("pk", flat=True)) == ids_before


def test_tools_are_called_through_the_sdk(alice_api: APIClient, demo: DemoHttpServer) -> None:
    server = McpServer.objects.get(pk=register_demo(alice_api, demo)["id"])

    assert call_server_tool(server, "add", {"a": 2, "b": 40}) == ToolCallResult(text="42", is_error=False)
    assert call_server_tool(server, "shout", {"text": "hello"}) == ToolCallResult(
        text="HELLO!", is_error=False
    )
    assert call_server_tool(server, "fail", {"reason": "boom"}) == ToolCallResult(
        text="Error executing tool fail", is_error=True
    )
    assert call_server_tool(server, "missing", {}) == ToolCallResult(
        text="Unknown tool: missing", is_error=True
    )


def test_sse_transport_is_checked_and_called(alice_api: APIClient, demo: DemoHttpServer) -> None:
    body = register_demo(alice_api, demo, transport="sse", url=demo.sse_url)

    result = check(alice_api, body["id"]).json()
    server = McpServer.objects.get(pk=body["id"])

    assert result["health_status"] == "healthy"
    assert [tool["name"] for tool in result["tools"]] == DEMO_TOOLS
    assert call_server_tool(server, "add", {"a": 1, "b": 1}) == ToolCallResult(text="2", is_error=False)


def test_wrong_token_is_checked_down_with_the_error(alice_api: APIClient, demo: DemoHttpServer) -> None:
    body = register_demo(alice_api, demo, token="not-the-token")

    result = check(alice_api, body["id"]).json()
    server = McpServer.objects.get(pk=body["id"])

    message = "the server answered HTTP 401: check the token and headers"
    assert result["health_status"] == "down"
    assert result["last_error"] == message
    assert result["latency_ms"] is None
    assert result["tools"] == []
    assert (server.health_status, server.last_error) == ("down", message)
    assert call_server_tool(server, "add", {"a": 1, "b": 2}) == ToolCallResult(
        text=f"MCP server demo is unavailable: {message}", is_error=True
    )


def test_stopped_server_is_checked_down_and_keeps_its_tools(
    alice_api: APIClient, caplog: pytest.LogCaptureFixture
) -> None:
    with DemoHttpServer() as short_lived:
        body = register_demo(alice_api, short_lived)
        healthy = check(alice_api, body["id"]).json()
    url = short_lived.url

    with caplog.at_level(logging.INFO, logger="mcp_servers.client"):
        down = check(alice_api, body["id"]).json()
    server = McpServer.objects.get(pk=body["id"])
    call = call_server_tool(server, "add", {"a": 1, "b": 2})

    assert healthy["health_status"] == "healthy"
    assert down["health_status"] == "down"
    assert down["last_error"] == "could not connect to the server"
    assert server.last_error == "could not connect to the server"
    assert [tool["name"] for tool in down["tools"]] == DEMO_TOOLS
    assert down["changes"] == {"added": [], "changed": [], "removed": [], "issues": []}
    assert call == ToolCallResult(
        text="MCP server demo is unavailable: could not connect to the server", is_error=True
    )
    # The operator still learns why.
    assert f"MCP server demo at {url}: cannot connect to {url}: All connection attempts failed" in [
        record.getMessage() for record in caplog.records
    ]


def test_added_changed_and_removed_tools_follow_the_server(
    alice_api: APIClient, demo: DemoHttpServer
) -> None:
    body = register_demo(alice_api, demo)
    check(alice_api, body["id"])

    def temporary(text: str) -> str:
        return text

    demo.mcp.add_tool(temporary, name="temporary", description="first version")
    try:
        added = check(alice_api, body["id"]).json()
        demo.mcp.remove_tool("temporary")
        demo.mcp.add_tool(temporary, name="temporary", description="second version")
        changed = check(alice_api, body["id"]).json()
    finally:
        demo.mcp.remove_tool("temporary")
    removed = check(alice_api, body["id"]).json()

    assert added["changes"] == {"added": ["demo__temporary"], "changed": [], "removed": [], "issues": []}
    assert changed["changes"] == {"added": [], "changed": ["demo__temporary"], "removed": [], "issues": []}
    assert removed["changes"] == {"added": [], "changed": [], "removed": ["demo__temporary"], "issues": []}
    assert [tool["name"] for tool in removed["tools"]] == DEMO_TOOLS
    assert not Tool.objects.filter(name="demo__temporary").exists()


def test_a_tool_with_an_invalid_schema_is_skipped_and_the_server_degraded(
    alice_api: APIClient, demo: DemoHttpServer
) -> None:
    body = register_demo(alice_api, demo)

    def broken() -> str:
        return "never listed"

    demo.mcp.add_tool(broken, name="broken")
    listed = demo.mcp._tool_manager.get_tool("broken")
    assert listed is not None
    # The SDK derives schemas from signatures, so an invalid one has to be planted.
    listed.parameters = {"type": "object", "properties": {"x": {"type": 7}}}
    try:
        result = check(alice_api, body["id"]).json()
    finally:
        demo.mcp.remove_tool("broken")

    assert result["health_status"] == "degraded"
    assert result["last_error"].startswith(
        "tool 'broken': its input schema cannot be used: Not a valid JSON Schema: "
    )
    assert result["changes"]["issues"] == [result["last_error"]]
    assert [tool["name"] for tool in result["tools"]] == DEMO_TOOLS


def test_slow_answers_make_the_server_degraded(
    alice_api: APIClient, demo: DemoHttpServer, settings: Any
) -> None:
    settings.MCP_DEGRADED_LATENCY_MS = -1
    body = register_demo(alice_api, demo)

    result = check(alice_api, body["id"]).json()

    assert result["health_status"] == "degraded"
    assert result["last_error"] == ""
    assert len(result["tools"]) == 4


def test_a_call_is_bounded_by_the_servers_call_timeout(alice_api: APIClient, demo: DemoHttpServer) -> None:
    server = McpServer.objects.get(pk=register_demo(alice_api, demo, call_timeout_seconds=1)["id"])

    started = time.monotonic()
    result = call_server_tool(server, "wait", {"seconds": 10})
    elapsed = time.monotonic() - started

    assert result == ToolCallResult(
        text="MCP server demo is unavailable: no answer within 1 s", is_error=True
    )
    assert elapsed < 5


ALLOW_HINT = "; an operator can allow the host in MCP_ALLOWED_PRIVATE_HOSTS"


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("127.0.0.1", "refused: 127.0.0.1 is a loopback address"),
        ("[::1]", "refused: ::1 is a loopback address"),
        ("169.254.169.254", "refused: 169.254.169.254 is a link-local address (cloud metadata service)"),
        ("10.1.2.3", "refused: 10.1.2.3 is a private address"),
        ("192.168.0.10", "refused: 192.168.0.10 is a private address"),
        ("[::ffff:127.0.0.1]", "refused: ::ffff:7f00:1 is 127.0.0.1 in IPv6 form, a loopback address"),
        ("0.0.0.0", "refused: 0.0.0.0 is an unspecified address"),
    ],
)
def test_an_address_typed_in_is_refused_with_the_policys_reason_unless_the_operator_allowed_it(
    alice_api: APIClient, settings: Any, caplog: pytest.LogCaptureFixture, host: str, reason: str
) -> None:
    settings.MCP_ALLOWED_PRIVATE_HOSTS = []
    body = register(
        alice_api, name="internal", transport="streamable_http", url=f"http://{host}:8000/mcp", token="t0ken"
    ).json()
    server = McpServer.objects.get(pk=body["id"])

    with caplog.at_level(logging.INFO, logger="mcp_servers.client"):
        result = check(alice_api, body["id"]).json()
    call = call_server_tool(server, "add", {"a": 1, "b": 2})

    assert (result["health_status"], result["last_error"]) == ("down", reason + ALLOW_HINT)
    assert call == ToolCallResult(
        text=f"MCP server internal is unavailable: {reason}{ALLOW_HINT}", is_error=True
    )
    assert f"MCP server internal at http://{host}:8000/mcp: {reason}" in caplog.records[0].getMessage()


def test_localhost_is_refused_with_the_policys_reason(alice_api: APIClient, settings: Any) -> None:
    settings.MCP_ALLOWED_PRIVATE_HOSTS = []
    body = register(
        alice_api, name="local", transport="streamable_http", url="http://localhost:8000/mcp"
    ).json()

    result = check(alice_api, body["id"]).json()

    assert result["health_status"] == "down"
    assert result["last_error"].startswith("refused: localhost resolves to ")
    assert result["last_error"].endswith(f", which is a loopback address{ALLOW_HINT}")


def test_a_name_that_resolves_to_a_private_address_is_refused_with_the_same_message(
    alice_api: APIClient, settings: Any, monkeypatch: pytest.MonkeyPatch, demo: DemoHttpServer
) -> None:
    settings.MCP_ALLOWED_PRIVATE_HOSTS = []
    monkeypatch.setattr("mcp_servers.outbound.system_resolver", lambda host, port: ["127.0.0.1"])
    body = register_demo(alice_api, demo, url=f"http://mcp.invalid:{demo.port}/mcp")

    result = check(alice_api, body["id"]).json()

    assert (result["health_status"], result["last_error"]) == ("down", "could not connect to the server")


@pytest.mark.parametrize("allowed", [["127.0.0.1"], ["127.0.0.0/8"], ["10.0.0.1", " 127.0.0.1 "]])
def test_the_operator_can_allow_a_private_host_by_address_or_network(
    alice_api: APIClient, demo: DemoHttpServer, settings: Any, allowed: list[str]
) -> None:
    settings.MCP_ALLOWED_PRIVATE_HOSTS = allowed
    body = register_demo(alice_api, demo)

    result = check(alice_api, body["id"]).json()

    assert result["health_status"] == "healthy", result["last_error"]


def test_allowing_one_private_host_does_not_allow_another(
    alice_api: APIClient, demo: DemoHttpServer, settings: Any
) -> None:
    settings.MCP_ALLOWED_PRIVATE_HOSTS = ["10.0.0.1", "mcp.internal", "192.168.0.0/16"]
    body = register_demo(alice_api, demo)

    result = check(alice_api, body["id"]).json()

    assert (result["health_status"], result["last_error"]) == (
        "down",
        f"refused: 127.0.0.1 is a loopback address{ALLOW_HINT}",
    )


def test_a_port_that_is_not_an_mcp_server_reads_like_a_closed_one(
    alice_api: APIClient, demo: DemoHttpServer, live_text_server: str
) -> None:
    # A web server answering with its own page must not have that page echoed, nor be told
    # apart from a port where nothing listens.
    body = register(alice_api, name="web", transport="streamable_http", url=live_text_server).json()

    response = check(alice_api, body["id"])
    result = response.json()

    assert (result["health_status"], result["last_error"]) == ("down", "could not connect to the server")
    assert NOT_MCP_BODY.decode() not in response.content.decode()


def test_connections_go_to_the_checked_address_of_an_allowed_name(
    alice_api: APIClient, demo: DemoHttpServer, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A name that resolves nowhere, checked with a resolver that resolves it to the demo
    # server: only a connection pinned to the checked address can reach it.
    settings.MCP_ALLOWED_PRIVATE_HOSTS = ["MCP.invalid"]
    resolved: list[tuple[str, int]] = []

    def resolver(host: str, port: int) -> list[str]:
        resolved.append((host, port))
        return ["127.0.0.1"]

    monkeypatch.setattr("mcp_servers.outbound.system_resolver", resolver)
    body = register_demo(alice_api, demo, url=f"http://mcp.invalid:{demo.port}/mcp")

    result = check(alice_api, body["id"]).json()
    server = McpServer.objects.get(pk=body["id"])

    assert result["health_status"] == "healthy", result["last_error"]
    assert call_server_tool(server, "add", {"a": 3, "b": 4}) == ToolCallResult(text="7", is_error=False)
    assert resolved == [("mcp.invalid", demo.port), ("mcp.invalid", demo.port)]


def test_a_disabled_server_answers_tool_calls_with_an_error(
    alice_api: APIClient, demo: DemoHttpServer
) -> None:
    body = register_demo(alice_api, demo, is_enabled=False)
    server = McpServer.objects.get(pk=body["id"])

    assert call_server_tool(server, "add", {"a": 1, "b": 2}) == ToolCallResult(
        text="MCP server demo is unavailable: the server is disabled", is_error=True
    )


def test_renaming_a_server_renames_its_tools(alice_api: APIClient, demo: DemoHttpServer) -> None:
    body = register_demo(alice_api, demo)
    check(alice_api, body["id"])

    response = alice_api.patch(f"/api/v1/mcp-servers/{body['id']}/", {"name": "calc"}, format="json")

    assert response.status_code == 200
    assert [tool["name"] for tool in response.json()["tools"]] == [
        "calc__add",
        "calc__fail",
        "calc__shout",
        "calc__wait",
    ]
    assert set(Tool.objects.values_list("group", flat=True)) == {"mcp:calc"}


def test_deleting_a_server_deletes_its_tools(alice_api: APIClient, demo: DemoHttpServer) -> None:
    body = register_demo(alice_api, demo)
    check(alice_api, body["id"])

    response = alice_api.delete(f"/api/v1/mcp-servers/{body['id']}/")

    assert response.status_code == 204
    assert McpServer.objects.count() == 0
    assert Tool.objects.count() == 0


# stdio


def test_stdio_server_is_registered_checked_and_called(alice_api: APIClient, settings: Any) -> None:
    settings.MCP_ALLOW_STDIO = True
    response = register(
        alice_api,
        name="local",
        transport="stdio",
        command=sys.executable,
        args=[STDIO_SERVER],
        env={"DEMO_GREETING": "hello from the environment"},
    )
    assert response.status_code == 201, response.json()
    body = response.json()

    result = check(alice_api, body["id"]).json()
    server = McpServer.objects.get(pk=body["id"])

    assert body["env_names"] == ["DEMO_GREETING"]
    assert "hello from the environment" not in json.dumps(body)
    assert result["health_status"] == "healthy", result["last_error"]
    assert [tool["name"] for tool in result["tools"]] == [
        "local__add",
        "local__fail",
        "local__greeting",
        "local__leak_greeting",
        "local__shout",
        "local__wait",
    ]
    assert call_server_tool(server, "greeting", {}) == ToolCallResult(
        text="HELLO FROM THE ENVIRONMENT", is_error=False
    )
    assert call_server_tool(server, "leak_greeting", {}) == ToolCallResult(text="[redacted]", is_error=False)


def test_stdio_is_refused_when_the_installation_disables_it(alice_api: APIClient, settings: Any) -> None:
    settings.MCP_ALLOW_STDIO = False

    response = register(
        alice_api, name="local", transport="stdio", command=sys.executable, args=[STDIO_SERVER]
    )

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "transport": ["stdio servers are disabled on this installation (MCP_ALLOW_STDIO)."]
    }
    assert McpServer.objects.count() == 0


def test_stdio_is_refused_to_members(bob_api: APIClient, settings: Any) -> None:
    settings.MCP_ALLOW_STDIO = True

    response = register(bob_api, name="local", transport="stdio", command=sys.executable, args=[STDIO_SERVER])

    assert response.status_code == 403
    assert McpServer.objects.count() == 0


def test_stdio_server_is_not_started_after_the_installation_disables_it(cast: Cast, settings: Any) -> None:
    server = McpServer.objects.create(
        tenant=cast.tenant_a, name="local", transport="stdio", command=sys.executable, args=[STDIO_SERVER]
    )
    settings.MCP_ALLOW_STDIO = False

    result = mcp_server_check(server)

    assert (result.health_status, result.error) == (
        "down",
        "stdio servers are disabled on this installation (MCP_ALLOW_STDIO)",
    )


def test_stdio_command_that_crashes_reports_its_stderr(cast: Cast, settings: Any) -> None:
    settings.MCP_ALLOW_STDIO = True
    server = McpServer.objects.create(
        tenant=cast.tenant_a,
        name="crash",
        transport="stdio",
        command=sys.executable,
        args=["-c", "import sys; print('missing configuration', file=sys.stderr); sys.exit(3)"],
    )

    result = mcp_server_check(server)

    assert result.health_status == "down"
    assert (
        result.error
        == f"MCP error -32000 from {sys.executable}: Connection closed; stderr: missing configuration"
    )


# Tenancy


def test_another_tenant_gets_404_and_changes_nothing(
    alice_api: APIClient, carol_api: APIClient, demo: DemoHttpServer
) -> None:
    body = register_demo(alice_api, demo)
    check(alice_api, body["id"])
    before = snapshot(body["id"])
    url = f"/api/v1/mcp-servers/{body['id']}/"

    responses = [
        carol_api.get(url),
        carol_api.patch(url, {"name": "stolen", "token": "carol-token"}, format="json"),
        carol_api.delete(url),
        carol_api.post(f"{url}check/"),
    ]
    listed = carol_api.get("/api/v1/mcp-servers/").json()

    assert [response.status_code for response in responses] == [404, 404, 404, 404]
    assert listed["results"] == []
    assert snapshot(body["id"]) == before


# Admin


def test_admin_never_shows_credentials(cast: Cast, alice_api: APIClient, demo: DemoHttpServer) -> None:
    body = register_demo(alice_api, demo, headers={"X-Trace": "header-secret-value"})
    client = Client()
    assert client.login(username="alice@a.test", password="alice-password")

    page = client.get(f"/admin/mcp_servers/mcpserver/{body['id']}/change/")

    assert page.status_code == 200
    assert demo.token.encode() not in page.content
    assert b"header-secret-value" not in page.content
    assert b"X-Trace" in page.content
    assert b"Token set" in page.content


# Schedule


def test_health_schedule_is_created_once(db: None) -> None:
    ensure_mcp_health_schedule()
    ensure_mcp_health_schedule()

    schedule = Schedule.objects.get(name=HEALTH_SCHEDULE_NAME)
    assert Schedule.objects.filter(name=HEALTH_SCHEDULE_NAME).count() == 1
    assert (schedule.func, schedule.schedule_type, schedule.minutes, schedule.repeats) == (
        "mcp_servers.health.check_enabled_servers",
        Schedule.MINUTES,
        5,
        -1,
    )


def test_scheduled_checks_cover_only_enabled_servers(
    alice_api: APIClient, demo: DemoHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    enabled = register_demo(alice_api, demo, name="on")
    disabled = register_demo(alice_api, demo, name="off", is_enabled=False)
    enqueued: list[tuple[Any, ...]] = []
    monkeypatch.setattr("mcp_servers.health.enqueue_task", lambda *args, **kwargs: enqueued.append(args))

    count = check_enabled_servers()
    for _function, server_id in enqueued:
        mcp_server_check_by_id(server_id)
    mcp_server_check_by_id(disabled["id"])

    assert count == 1
    assert [server_id for _function, server_id in enqueued] == [enabled["id"]]
    assert McpServer.objects.get(pk=enabled["id"]).health_status == "healthy"
    assert McpServer.objects.get(pk=disabled["id"]).health_status == "unknown"


# Plain helpers


def test_list_server_tools_returns_names_schemas_and_annotations(cast: Cast, demo: DemoHttpServer) -> None:
    server = McpServer(
        tenant=cast.tenant_a, name="demo", transport="streamable_http", url=demo.url, token=demo.token
    )

    tools = {tool.name: tool for tool in list_server_tools(server)}

    assert sorted(tools) == ["add", "fail", "shout", "wait"]
    assert tools["add"].annotations == {"readOnlyHint": True}
    assert tools["add"].is_read_only is True
    assert tools["shout"].is_read_only is False
    assert tools["shout"].input_schema["required"] == ["text"]


@pytest.mark.parametrize(
    ("tool_name", "public_name"),
    [
        ("add", "demo__add"),
        ("read.file", "demo__read_file_dd32cd"),
        ("x" * 70, "demo__" + "x" * 51 + "_c71bd1"),
    ],
)
def test_public_tool_names_follow_the_tool_name_rules(tool_name: str, public_name: str) -> None:
    assert mcp_tool_public_name(server_name="demo", tool_name=tool_name) == public_name


def test_content_blocks_become_text() -> None:
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(text="first"),
            mcp_types.ImageContent(data="aGVsbG8=", mime_type="image/png"),
            mcp_types.EmbeddedResource(
                resource=mcp_types.TextResourceContents(uri="file:///notes.txt", text="note body")
            ),
            mcp_types.EmbeddedResource(
                resource=mcp_types.BlobResourceContents(
                    uri="file:///a.bin", blob="AAAA", mime_type="application/zip"
                )
            ),
            mcp_types.ResourceLink(name="report", uri="https://example.com/report"),
        ]
    )

    assert content_as_text(result) == (
        "first\n"
        "[image: image/png, 5 bytes]\n"
        "[resource file:///notes.txt]\nnote body\n"
        "[resource file:///a.bin: application/zip, 3 bytes]\n"
        "[resource link: report <https://example.com/report>]"
    )


def test_structured_content_is_used_when_there_is_no_content() -> None:
    result = mcp_types.CallToolResult(content=[], structured_content={"b": 1, "a": 2})

    assert content_as_text(result) == '{"a": 2, "b": 1}'


def test_credentials_are_scrubbed_from_messages(cast: Cast) -> None:
    server = McpServer(  # type: ignore[misc]  # headers: a dict the stubs see as text
        tenant=cast.tenant_a,
        name="demo",
        transport="streamable_http",
        url="https://mcp.example.com/mcp",
        token="secret-token-1",
        headers={"X-Key": "header-value-2"},
    )

    scrubbed = Connection.for_server(server).scrub(
        "sent Bearer secret-token-1, header-value-2 and secret-token-1"
    )

    assert scrubbed == "sent [redacted], [redacted] and [redacted]"


def test_admin_action_checks_the_selected_servers(alice_api: APIClient, demo: DemoHttpServer) -> None:
    body = register_demo(alice_api, demo)
    client = Client()
    assert client.login(username="alice@a.test", password="alice-password")

    response = client.post(
        "/admin/mcp_servers/mcpserver/", {"action": "check_now", "_selected_action": [body["id"]]}
    )

    assert response.status_code == 302
    assert McpServer.objects.get(pk=body["id"]).health_status == "healthy"
    assert Tool.objects.filter(mcp_server_id=body["id"]).count() == 4


def test_a_rename_that_would_take_other_tools_names_is_refused(
    cast: Cast, alice_api: APIClient, demo: DemoHttpServer
) -> None:
    body = register_demo(alice_api, demo)
    check(alice_api, body["id"])
    Tool.objects.create(tenant=cast.tenant_a, name="calc__add", kind="http")

    response = alice_api.patch(f"/api/v1/mcp-servers/{body['id']}/", {"name": "calc"}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "name": ["Renaming would give this server's tools names other tools use: calc__add."]
    }
    assert McpServer.objects.get(pk=body["id"]).name == "demo"
    assert Tool.objects.filter(mcp_server_id=body["id"], name="demo__add").exists()


def test_a_listed_tool_is_kept_with_what_postgresql_cannot_store_replaced() -> None:
    tool = mcp_types.Tool(
        name="lookup", description="finds\x00things", input_schema={"type": "object", "description": "\ud800"}
    )

    discovered = _discovered(tool)

    assert (discovered.description, discovered.input_schema) == (
        "finds\ufffdthings",
        {"type": "object", "description": "\ufffd"},
    )


def test_a_tool_whose_schema_has_a_pattern_re2_cannot_compile_is_skipped(
    alice_api: APIClient, demo: DemoHttpServer
) -> None:
    body = register_demo(alice_api, demo)

    def lookahead(city: str) -> str:
        return city

    demo.mcp.add_tool(lookahead, name="lookahead")
    listed = demo.mcp._tool_manager.get_tool("lookahead")
    assert listed is not None
    listed.parameters = {"type": "object", "properties": {"city": {"type": "string", "pattern": "^(?!x)"}}}
    try:
        result = check(alice_api, body["id"]).json()
    finally:
        demo.mcp.remove_tool("lookahead")

    assert result["health_status"] == "degraded"
    assert result["changes"]["issues"] == [
        "tool 'lookahead': its input schema cannot be used: The pattern \"^(?!x)\" cannot be used: "
        "invalid perl operator: (?!. Patterns use RE2 syntax: "
        "no backreferences and no lookahead or lookbehind."
    ]
    assert not Tool.objects.filter(name="demo__lookahead").exists()


def test_a_structured_result_is_checked_against_a_catastrophic_output_pattern_without_backtracking(
    alice_api: APIClient, demo: DemoHttpServer
) -> None:
    server = McpServer.objects.get(pk=register_demo(alice_api, demo)["id"])
    attack = "a" * 40 + "!"

    def echo_city(city: str) -> dict[str, str]:
        return {"city": city}

    demo.mcp.add_tool(echo_city, name="echo_city", structured_output=True)
    listed = demo.mcp._tool_manager.get_tool("echo_city")
    assert listed is not None
    # output_schema is a cached property: the SDK derives it from the return annotation.
    listed.__dict__["output_schema"] = {
        "type": "object",
        "properties": {"city": {"type": "string", "pattern": "(a+)+$"}},
    }
    try:
        matching = call_server_tool(server, "echo_city", {"city": "aaaa"})
        attacking = call_server_tool(server, "echo_city", {"city": attack})
    finally:
        demo.mcp.remove_tool("echo_city")

    assert matching == ToolCallResult(text='{\n  "city": "aaaa"\n}', is_error=False)
    assert attacking == ToolCallResult(
        text="tool echo_city returned a result its output schema refuses: "
        f"city: {attack!r} does not match '(a+)+$'",
        is_error=True,
    )
