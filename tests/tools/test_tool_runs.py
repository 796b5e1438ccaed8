"""Tool policy inside real runs: caps, owner-only, schema validation, audit redaction."""

import uuid

import pytest
from rest_framework.test import APIClient

from sessions.models import Run, RunEvent, Step
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tools.builtins.base import ToolContext
from tools.models import Tool, ToolPolicy
from tools.policy import Decision
from tools.provider import DjangoToolProvider
from tools.registry import RunToolset, ensure_builtin_tools

pytestmark = pytest.mark.django_db


def run_message(api: APIClient, agent_id: object, content: str = "go") -> Run:
    session = api.post("/api/v1/sessions/", {"agent": str(agent_id)}, format="json").json()
    run_id = api.post(
        f"/api/v1/sessions/{session['id']}/messages/", {"content": content}, format="json"
    ).json()["run"]["id"]
    execute_run(run_id)
    return Run.objects.get(pk=run_id)


def tool_results(run: Run) -> list[dict[str, object]]:
    return [event.data for event in RunEvent.objects.filter(run=run, type="tool.result").order_by("seq")]


def test_calls_beyond_the_per_turn_cap_get_an_error_and_the_run_continues(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    ToolPolicy.objects.create(agent=agent, max_calls_per_turn=1)
    fake_model.script(
        Turn(tool_calls=[("calculator", {"expression": "1+1"}), ("calculator", {"expression": "2+2"})]),
        Turn(text="done"),
    )

    run = run_message(bob_api, agent.pk)

    assert (run.status, run.stop_reason) == ("completed", "end_turn")
    results = fake_model.requests[1].body["messages"][-1]["content"]
    assert [(block["is_error"], block["content"]) for block in results] == [
        (False, "2"),
        (True, "This tool call was refused: the limit of 1 tool calls per model turn was reached"),
    ]
    assert Step.objects.filter(run=run, kind="tool_call").count() == 1


def test_owner_only_tool_is_refused_in_a_members_run(
    cast: Cast, bob_api: APIClient, alice_api: APIClient, fake_model: FakeModelServer
) -> None:
    ensure_builtin_tools()
    Tool.objects.filter(name="calculator").update(owner_only=True)
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(
        Turn(tool_calls=[("calculator", {"expression": "1+1"})]), Turn(text="no"), match="member"
    )
    fake_model.script(
        Turn(tool_calls=[("calculator", {"expression": "1+1"})]), Turn(text="yes"), match="owner"
    )

    members_run = run_message(bob_api, agent.pk, "member")
    owners_run = run_message(alice_api, agent.pk, "owner")

    assert tool_results(members_run)[0]["content"] == (
        "This tool call was refused: tool calculator may only be used in runs of a tenant owner"
    )
    assert tool_results(owners_run)[0]["content"] == "2"
    member_specs = [tool["name"] for tool in fake_model.requests[0].body.get("tools", [])]
    assert "calculator" not in member_specs


def test_arguments_that_do_not_match_the_schema_never_reach_the_tool(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(Turn(tool_calls=[("calculator", {"expr": "1+1"})]), Turn(text="sorry"))

    run = run_message(bob_api, agent.pk)

    step = Step.objects.get(run=run, kind="tool_call")
    assert step.output["is_error"] is True
    assert str(step.output["content"]).startswith("invalid arguments: ")
    assert "'expression' is a required property" in str(step.output["content"])
    assert run.status == "completed"


def test_secret_arguments_are_redacted_in_events_and_approvals(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(
        Turn(tool_calls=[("calculator", {"expression": "1+1", "api_key": "sk-live-abcdef123456"})]),
        Turn(text="ok"),
    )

    run = run_message(bob_api, agent.pk)

    call = RunEvent.objects.get(run=run, type="tool.call").data
    assert call["arguments"] == {"expression": "1+1", "api_key": "***"}
    assert "sk-live-abcdef123456" not in str(
        list(RunEvent.objects.filter(run=run).values_list("data", flat=True))
    )


def test_the_provider_reports_which_tools_are_read_only() -> None:
    allowed = Decision(is_allowed=True, reason="")
    toolset = RunToolset(
        tools={
            "lookup": Tool(name="lookup", is_read_only=True),
            "send": Tool(name="send", is_read_only=False),
        },
        decisions={"lookup": allowed, "send": allowed},
        max_calls_per_turn=8,
        max_calls_per_run=8,
        is_owner_run=True,
    )
    ids = uuid.uuid4()
    context = ToolContext(
        tenant_id=ids, agent_id=None, session_id=ids, run_id=ids, user_id=None, user_role="owner"
    )

    provider = DjangoToolProvider(toolset, context)

    assert [provider.is_read_only(name) for name in ("lookup", "send", "missing")] == [True, False, False]
