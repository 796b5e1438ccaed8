"""Tools, agent policies, MCP servers and run timelines as pages."""

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client

from agents.models import Agent
from mcp_servers.models import McpServer
from sessions.events import emit_event
from sessions.models import Step, ToolApproval
from tests.mcp.servers import DemoHttpServer
from tests.web.conftest import World
from tools.models import AgentTool, Tool, ToolKind, ToolPolicy

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]


def http_tool_fields(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "weather",
        "description": "The weather in a city",
        "group": "",
        "http_method": "GET",
        "url_template": "https://weather.example/{city}",
        "input_schema": '{"type": "object", "properties": {"city": {"type": "string"}}}',
        "headers": "Accept: application/json",
        "secret_headers": "Authorization: Bearer sk-weather-secret",
        "timeout_seconds": "10",
        "is_read_only": "on",
        "is_enabled": "on",
        **overrides,
    }


def test_the_tools_page_lists_builtins_by_group_and_tenant_tools(world: World, client_for: ClientFor) -> None:
    Tool.objects.create(
        tenant=world.cast.tenant_b,
        name="b_secret_tool",
        kind=ToolKind.HTTP,
        http_method="GET",
        url_template="https://b.example",
    )

    body = client_for(world.cast.victor).get("/tools/").content.decode()

    assert '<h3 class="group-title">math</h3>' in body and "calculator" in body
    assert '<h3 class="group-title">time</h3>' in body and "current_time" in body
    assert "b_secret_tool" not in body
    assert "New HTTP tool" not in body and "View policy" in body


def test_creating_an_http_tool_keeps_secret_headers_secret(world: World, client_for: ClientFor) -> None:
    client = client_for(world.dave)

    created = client.post("/tools/new/", http_tool_fields())
    tool = Tool.objects.get(tenant=world.cast.tenant_a, name="weather")
    edit_page = client.get(f"/tools/{tool.pk}/edit/").content.decode()
    list_page = client.get("/tools/").content.decode()

    assert (created.status_code, created["Location"]) == (302, "/tools/")
    assert (tool.kind, tool.group, tool.http_method, tool.headers) == (
        "http",
        "http",
        "GET",
        {"Accept": "application/json"},
    )
    assert tool.secret_headers == {"Authorization": "Bearer sk-weather-secret"}
    assert tool.input_schema == {"type": "object", "properties": {"city": {"type": "string"}}}
    assert "sk-weather-secret" not in edit_page and "sk-weather-secret" not in list_page
    assert "Stored secret headers: Authorization (values hidden)." in edit_page


def test_editing_an_http_tool_with_blank_secrets_keeps_them(world: World, client_for: ClientFor) -> None:
    client = client_for(world.dave)
    client.post("/tools/new/", http_tool_fields())
    tool = Tool.objects.get(name="weather")

    client.post(f"/tools/{tool.pk}/edit/", http_tool_fields(secret_headers="", description="Forecasts"))

    tool.refresh_from_db()
    assert (tool.description, tool.secret_headers) == (
        "Forecasts",
        {"Authorization": "Bearer sk-weather-secret"},
    )


def test_http_tool_errors_show_inline(world: World, client_for: ClientFor) -> None:
    response = client_for(world.dave).post(
        "/tools/new/",
        http_tool_fields(
            name="has__double", url_template="ftp://x", input_schema="{not json", headers="no colon"
        ),
    )
    body = response.content.decode()

    assert response.status_code == 400
    assert "Not valid JSON: Expecting property name enclosed in double quotes (line 1, column 2)." in body
    assert "Line 1: write each header as &quot;name: value&quot;." in body
    assert not Tool.objects.filter(tenant=world.cast.tenant_a).exists()

    service_errors = client_for(world.dave).post(
        "/tools/new/", http_tool_fields(name="has__double", url_template="ftp://x")
    )
    assert (
        "&#x27;__&#x27; is reserved for MCP tools (&lt;server&gt;__&lt;tool&gt;)."
        in service_errors.content.decode()
    )
    assert "Must be an http:// or https:// URL template." in service_errors.content.decode()


def test_the_agent_policy_page_saves_the_policy_and_assignments(world: World, client_for: ClientFor) -> None:
    lookup = Tool.objects.create(
        tenant=world.cast.tenant_a,
        name="lookup",
        kind=ToolKind.HTTP,
        http_method="GET",
        url_template="https://example.com",
    )
    client = client_for(world.dave)

    response = client.post(
        f"/agents/{world.agent_a.pk}/tools/",
        {
            "profile": "messaging",
            "allow": "",
            "deny": "current_time",
            "require_approval": "calculator\nlookup",
            "max_calls_per_turn": "4",
            "max_calls_per_run": "20",
            "assigned_tools": [str(lookup.pk)],
        },
    )
    page = client.get(f"/agents/{world.agent_a.pk}/tools/").content.decode()

    policy = ToolPolicy.objects.get(agent=world.agent_a)
    assert response.status_code == 302
    assert (policy.profile, policy.deny, policy.require_approval) == (
        "messaging",
        ["current_time"],
        ["calculator", "lookup"],
    )
    assert (policy.max_calls_per_turn, policy.max_calls_per_run) == (4, 20)
    assert list(AgentTool.objects.filter(agent=world.agent_a).values_list("tool__name", flat=True)) == [
        "lookup"
    ]
    assert "tool current_time is denied by the policy entry &#x27;current_time&#x27;" in page


def test_policy_errors_show_inline_and_viewers_cannot_post(world: World, client_for: ClientFor) -> None:
    fields = {
        "profile": "minimal",
        "allow": "bad entry!",
        "deny": "",
        "require_approval": "",
        "max_calls_per_turn": "0",
        "max_calls_per_run": "20",
    }

    refused = client_for(world.dave).post(f"/agents/{world.agent_a.pk}/tools/", fields)
    viewer = client_for(world.cast.victor).post(f"/agents/{world.agent_a.pk}/tools/", {**fields, "allow": ""})

    assert refused.status_code == 400
    assert (
        "Must be a list of tool names, group:&lt;name&gt; entries or * wildcards." in refused.content.decode()
    )
    assert "Must be between 1 and 100." in refused.content.decode()
    assert viewer.status_code == 403
    assert not ToolPolicy.objects.filter(agent=world.agent_a).exists()


@pytest.fixture(scope="module")
def demo_server() -> Iterator[DemoHttpServer]:
    with DemoHttpServer() as server:
        yield server


@pytest.fixture
def demo(demo_server: DemoHttpServer, settings: Any) -> DemoHttpServer:
    """The demo MCP server on 127.0.0.1, which the SSRF guard lets through only when the operator lists it."""
    settings.MCP_ALLOWED_PRIVATE_HOSTS = ["127.0.0.1"]
    return demo_server


def test_adding_an_mcp_server_checks_it_and_shows_its_tools(
    world: World, client_for: ClientFor, demo: DemoHttpServer
) -> None:
    client = client_for(world.dave)

    response = client.post(
        "/mcp/new/",
        {
            "name": "demo",
            "transport": "streamable_http",
            "url": demo.url,
            "token": demo.token,
            "headers": "",
            "connect_timeout_seconds": "10",
            "call_timeout_seconds": "30",
            "is_enabled": "on",
        },
    )
    server = McpServer.objects.get(tenant=world.cast.tenant_a, name="demo")
    detail = client.get(response["Location"]).content.decode()
    edit = client.get(f"/mcp/{server.pk}/edit/").content.decode()
    listing = client.get("/mcp/").content.decode()

    assert response["Location"] == f"/mcp/{server.pk}/"
    assert (server.health_status, server.token) == ("healthy", demo.token)
    assert list(server.tools.order_by("name").values_list("name", flat=True)) == [
        "demo__add",
        "demo__fail",
        "demo__shout",
        "demo__wait",
    ]
    assert "4 tools discovered." in detail and "demo__shout" in detail
    assert demo.token not in detail and demo.token not in edit and demo.token not in listing
    assert "A token is stored (hidden)." in edit


def test_check_now_over_htmx_answers_the_row_and_a_toast(
    world: World, client_for: ClientFor, demo: DemoHttpServer
) -> None:
    server = McpServer.objects.create(
        tenant=world.cast.tenant_a,
        name="demo",
        transport="streamable_http",
        url=demo.url,
        token="wrong-token",
    )

    response = client_for(world.dave).post(f"/mcp/{server.pk}/check/", HTTP_HX_REQUEST="true")

    server.refresh_from_db()
    assert server.health_status == "down"
    assert response.content.decode().strip().startswith(f'<tr id="server-{server.pk}">')
    assert '"level": "error"' in response["HX-Trigger"] and "demo is down" in response["HX-Trigger"]


def test_mcp_form_errors_show_inline(world: World, client_for: ClientFor) -> None:
    response = client_for(world.dave).post(
        "/mcp/new/",
        {
            "name": "bad__name",
            "transport": "streamable_http",
            "url": "ftp://x",
            "connect_timeout_seconds": "10",
            "call_timeout_seconds": "30",
        },
    )
    body = response.content.decode()

    assert response.status_code == 400
    assert "without &quot;__&quot; (it separates tool names)" in body
    assert "Must be an http:// or https:// URL with a host." in body
    assert not McpServer.objects.exists()


def test_the_run_timeline_shows_steps_events_approvals_and_usage(world: World, client_for: ClientFor) -> None:
    run = world.run_a
    Step.objects.create(
        run=run,
        tenant_id=run.tenant_id,
        index=0,
        kind="model_call",
        status="completed",
        input_tokens=100,
        output_tokens=20,
    )
    Step.objects.create(
        run=run,
        tenant_id=run.tenant_id,
        index=1,
        kind="tool_call",
        status="failed",
        error="tool timed out",
        input={"name": "calculator", "arguments": {"expression": "1/0"}},
        output={"content": "division by zero", "is_error": True},
    )
    ToolApproval.objects.create(
        tenant=run.tenant,
        run=run,
        tool_call_id="c1",
        tool_name="calculator",
        status="approved",
        decision="approve",
        decided_by=world.cast.alice,
        expires_at=run.created_at,
    )
    for text in ("Hel", "lo ", "there"):
        emit_event(session_id=run.session_id, run_id=run.pk, event_type="text.delta", data={"text": text})
    emit_event(
        session_id=run.session_id,
        run_id=run.pk,
        event_type="tool.result",
        data={"tool_call_id": "c1", "name": "calculator", "content": "division by zero", "is_error": True},
    )

    body = client_for(world.cast.victor).get(f"/runs/{run.pk}/").content.decode()

    assert "Text streamed" in body and "(3 deltas)" in body and "Hello there" in body
    assert "#1\N{EN DASH}3" in body
    assert "Tool calculator failed" in body and "tool timed out" in body
    assert "Tool: <strong>calculator</strong>" in body
    assert "alice@a.test" in body and ">approved</span>" in body
    assert "120 in · 30 out" in body
    assert 'hx-trigger="agentry:poll"' not in body


def test_an_active_runs_timeline_refreshes_itself(world: World, client_for: ClientFor) -> None:
    world.run_a.status = "executing"
    world.run_a.save()

    page = client_for(world.cast.bob).get(f"/runs/{world.run_a.pk}/").content.decode()
    fragment = (
        client_for(world.cast.bob).get(f"/runs/{world.run_a.pk}/", HTTP_HX_REQUEST="true").content.decode()
    )

    assert f'hx-get="/runs/{world.run_a.pk}/" data-poll-seconds="2" hx-trigger="agentry:poll"' in page
    assert fragment.strip().startswith('<div id="run-timeline"')


def test_the_policy_page_is_the_one_place_for_an_agents_approvals(
    world: World, client_for: ClientFor
) -> None:
    ToolPolicy.objects.create(agent=world.agent_a, require_approval=["web_fetch"])
    Agent.objects.filter(pk=world.agent_a.pk).update(approval_required_tools=["calculator", "web_fetch"])
    client = client_for(world.dave)

    shown = client.get(f"/agents/{world.agent_a.pk}/tools/").content.decode()
    read_only = client_for(world.cast.victor).get(f"/agents/{world.agent_a.pk}/tools/").content.decode()
    saved = client.post(
        f"/agents/{world.agent_a.pk}/tools/",
        {
            "profile": "minimal",
            "allow": "",
            "deny": "",
            "require_approval": "web_fetch\ncalculator\ncurrent_time",
            "max_calls_per_turn": "4",
            "max_calls_per_run": "20",
        },
    )

    assert '<textarea name="require_approval" cols="40" rows="2" class="mono"' in shown
    assert ">\nweb_fetch\ncalculator</textarea>" in shown
    assert "<dt>Need approval</dt><dd>web_fetch</dd>" in read_only
    assert "Also need approval (set on the agent through the API): calculator, web_fetch.</p>" in read_only
    assert saved.status_code == 302
    assert ToolPolicy.objects.get(agent=world.agent_a).require_approval == [
        "web_fetch",
        "calculator",
        "current_time",
    ]
    assert Agent.objects.get(pk=world.agent_a.pk).approval_required_tools == []


def test_another_tenants_policy_page_is_404_and_changes_nothing(world: World, client_for: ClientFor) -> None:
    Agent.objects.filter(pk=world.agent_a.pk).update(approval_required_tools=["calculator"])
    carol = client_for(world.cast.carol)

    page = carol.get(f"/agents/{world.agent_a.pk}/tools/")
    posted = carol.post(
        f"/agents/{world.agent_a.pk}/tools/",
        {"profile": "full", "require_approval": "", "max_calls_per_turn": "4", "max_calls_per_run": "20"},
    )

    assert (page.status_code, posted.status_code) == (404, 404)
    assert not ToolPolicy.objects.filter(agent=world.agent_a).exists()
    assert Agent.objects.get(pk=world.agent_a.pk).approval_required_tools == ["calculator"]


MCP_FIELDS = {
    "name": "local",
    "transport": "streamable_http",
    "url": "http://10.255.255.1:9000/mcp",
    "connect_timeout_seconds": "10",
    "call_timeout_seconds": "30",
    "is_enabled": "on",
}


@pytest.mark.parametrize(("is_allowed", "offers_stdio"), [(False, False), (True, True)])
def test_the_mcp_form_offers_stdio_only_where_the_installation_allows_it(
    world: World, client_for: ClientFor, settings: Any, is_allowed: bool, offers_stdio: bool
) -> None:
    settings.MCP_ALLOW_STDIO = is_allowed

    body = client_for(world.dave).get("/mcp/new/").content.decode()

    assert ('<option value="stdio">' in body) is offers_stdio
    assert ('name="command"' in body) is offers_stdio


def test_a_stdio_server_posted_where_stdio_is_off_is_refused_on_its_field(
    world: World, client_for: ClientFor, settings: Any
) -> None:
    settings.MCP_ALLOW_STDIO = False

    response = client_for(world.dave).post(
        "/mcp/new/", {**MCP_FIELDS, "transport": "stdio", "url": "", "command": "python3"}
    )

    assert response.status_code == 400
    assert "Select a valid choice. stdio is not one of the available choices." in response.content.decode()
    assert not McpServer.objects.exists()


def test_a_stored_stdio_server_keeps_its_transport_on_the_form_where_stdio_is_off(
    world: World, client_for: ClientFor, settings: Any
) -> None:
    settings.MCP_ALLOW_STDIO = False
    server = McpServer.objects.create(
        tenant=world.cast.tenant_a, name="local", transport="stdio", command="python3"
    )

    body = client_for(world.dave).get(f"/mcp/{server.pk}/edit/").content.decode()

    assert '<option value="stdio" selected>' in body


def test_a_server_the_network_policy_refuses_shows_the_policys_reason(
    world: World, client_for: ClientFor, settings: Any
) -> None:
    settings.MCP_ALLOWED_PRIVATE_HOSTS = []
    client = client_for(world.dave)

    response = client.post("/mcp/new/", MCP_FIELDS)
    detail = client.get(response["Location"]).content.decode()

    reason = (
        "refused: 10.255.255.1 is a private address; "
        "an operator can allow the host in MCP_ALLOWED_PRIVATE_HOSTS"
    )
    assert McpServer.objects.get(tenant=world.cast.tenant_a, name="local").last_error == reason
    assert f"saved, but it is down: {reason}" in detail
    assert f'<span class="prewrap">{reason}</span>' in detail
