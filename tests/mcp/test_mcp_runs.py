"""An agent uses a real MCP server's tool in a run, then the server goes away."""

import sys
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from sessions.models import Run, Step
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.mcp.servers import DemoHttpServer
from tools.models import Tool

pytestmark = pytest.mark.django_db

STDIO_SERVER = str(Path(__file__).with_name("stdio_server.py"))


def test_an_agent_calls_an_mcp_tool_and_the_result_reaches_the_model(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer
) -> None:
    with DemoHttpServer() as demo:
        server = alice_api.post(
            "/api/v1/mcp-servers/",
            {"name": "demo", "transport": "streamable_http", "url": demo.url, "token": demo.token},
            format="json",
        ).json()
        checked = alice_api.post(f"/api/v1/mcp-servers/{server['id']}/check/").json()
        add_tool = Tool.objects.get(name="demo__add")
        agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
        assigned = alice_api.patch(
            f"/api/v1/agents/{agent.pk}/tools/", {"assigned_tools": [str(add_tool.pk)]}, format="json"
        )
        fake_model.script(Turn(tool_calls=[("demo__add", {"a": 19, "b": 23})]), Turn(text="19 + 23 = 42"))
        session = alice_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
        run_id = alice_api.post(
            f"/api/v1/sessions/{session['id']}/messages/", {"content": "add 19 and 23"}, format="json"
        ).json()["run"]["id"]

        execute_run(run_id)

    assert checked["health_status"] == "healthy"
    assert assigned.status_code == 200
    offered = [tool["name"] for tool in fake_model.requests[0].body["tools"]]
    assert "demo__add" in offered
    assert "demo__shout" not in offered  # not assigned to this agent
    assert Step.objects.get(run_id=run_id, kind="tool_call").output == {"content": "42", "is_error": False}
    tool_result = fake_model.requests[1].body["messages"][-1]["content"][0]
    assert (tool_result["tool_use_id"], tool_result["content"]) == (
        fake_model.requests[1].body["messages"][-2]["content"][0]["id"],
        "42",
    )
    assert Run.objects.get(pk=run_id).status == "completed"

    stopped = alice_api.post(f"/api/v1/mcp-servers/{server['id']}/check/").json()
    assert stopped["health_status"] == "down"
    assert stopped["last_error"] != ""


def test_an_unreachable_mcp_server_gives_a_tool_error_not_a_crashed_run(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer
) -> None:
    with DemoHttpServer() as demo:
        server = alice_api.post(
            "/api/v1/mcp-servers/",
            {"name": "gone", "transport": "streamable_http", "url": demo.url, "token": demo.token},
            format="json",
        ).json()
        alice_api.post(f"/api/v1/mcp-servers/{server['id']}/check/")
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    alice_api.patch(
        f"/api/v1/agents/{agent.pk}/tools/",
        {"assigned_tools": [str(Tool.objects.get(name="gone__add").pk)]},
        format="json",
    )
    fake_model.script(Turn(tool_calls=[("gone__add", {"a": 1, "b": 2})]), Turn(text="the server is down"))
    session = alice_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
    run_id = alice_api.post(
        f"/api/v1/sessions/{session['id']}/messages/", {"content": "add"}, format="json"
    ).json()["run"]["id"]

    execute_run(run_id)

    step = Step.objects.get(run_id=run_id, kind="tool_call")
    assert step.output["is_error"] is True
    assert "MCP server gone is unavailable" in step.output["content"]
    assert Run.objects.get(pk=run_id).status == "completed"


def test_an_agent_calls_a_stdio_mcp_tool_in_a_run(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer, settings: object
) -> None:
    settings.MCP_ALLOW_STDIO = True  # type: ignore[attr-defined]
    server = alice_api.post(
        "/api/v1/mcp-servers/",
        {"name": "local", "transport": "stdio", "command": sys.executable, "args": [STDIO_SERVER]},
        format="json",
    ).json()
    checked = alice_api.post(f"/api/v1/mcp-servers/{server['id']}/check/").json()
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    alice_api.patch(
        f"/api/v1/agents/{agent.pk}/tools/",
        {"assigned_tools": [str(Tool.objects.get(name="local__shout").pk)]},
        format="json",
    )
    fake_model.script(Turn(tool_calls=[("local__shout", {"text": "quiet please"})]), Turn(text="done"))
    session = alice_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
    run_id = alice_api.post(
        f"/api/v1/sessions/{session['id']}/messages/", {"content": "shout it"}, format="json"
    ).json()["run"]["id"]

    execute_run(run_id)

    assert checked["health_status"] == "healthy"
    step = Step.objects.get(run_id=run_id, kind="tool_call")
    assert step.output == {"content": "QUIET PLEASE!", "is_error": False}
    assert fake_model.requests[1].body["messages"][-1]["content"][0]["content"] == "QUIET PLEASE!"
    assert Run.objects.get(pk=run_id).status == "completed"
