"""The tools a run may see: the built-ins and its tenant's assigned tools, with their MCP servers."""

import pytest

from mcp_servers.models import McpServer
from tests.conftest import Cast
from tests.factories import field_values
from tools.models import Tool, ToolKind
from tools.registry import _run_tool_candidates, ensure_builtin_tools

pytestmark = pytest.mark.django_db


def test_candidates_are_the_builtins_and_the_assigned_tools_with_their_servers(cast: Cast) -> None:
    ensure_builtin_tools()
    server = McpServer.objects.create(
        tenant=cast.tenant_a,
        name="crm",
        transport="streamable_http",
        url="https://mcp.example/mcp",
        token="secret-token",
        headers={"X-Team": "blue"},
    )
    mcp_tool = Tool.objects.create(
        tenant=cast.tenant_a, name="crm_lookup", kind=ToolKind.MCP, mcp_server=server, input_schema={}
    )
    http_tool = Tool.objects.create(
        tenant=cast.tenant_a,
        name="weather",
        kind=ToolKind.HTTP,
        input_schema={"type": "object"},
        secret_headers={"X-Api-Key": "k-123"},
    )
    Tool.objects.create(tenant=cast.tenant_a, name="unassigned", kind=ToolKind.HTTP, input_schema={})
    elsewhere = Tool.objects.create(tenant=cast.tenant_b, name="theirs", kind=ToolKind.HTTP, input_schema={})
    assigned = {str(mcp_tool.pk), str(http_tool.pk), str(elsewhere.pk)}

    in_order = _run_tool_candidates(cast.tenant_a.pk, assigned)
    candidates = {tool.pk: tool for tool in in_order}

    expected = {
        tool.pk: tool
        for tool in (
            Tool.objects.filter(tenant__isnull=True)
            | Tool.objects.filter(tenant=cast.tenant_a, pk__in=assigned)
        ).select_related("mcp_server")
    }
    assert [tool.pk for tool in in_order] == list(expected)  # the order the model is offered them
    assert mcp_tool.pk in candidates and http_tool.pk in candidates and elsewhere.pk not in candidates
    for pk, tool in candidates.items():
        assert field_values(tool) == field_values(expected[pk])
        assert (tool.mcp_server is None) == (expected[pk].mcp_server is None)
    assert candidates[http_tool.pk].secret_headers == {"X-Api-Key": "k-123"}
    loaded_server = candidates[mcp_tool.pk].mcp_server
    assert loaded_server is not None and field_values(loaded_server) == field_values(server)
    assert (loaded_server.token, loaded_server.headers) == ("secret-token", {"X-Team": "blue"})
    only_builtins = _run_tool_candidates(cast.tenant_a.pk, set())
    assert {tool.pk for tool in only_builtins} == set(
        Tool.objects.filter(tenant__isnull=True).values_list("pk", flat=True)
    )
