"""Arguments editable at approval: the approver changes a call's arguments; the tool and model see them."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.models import Agent
from sessions.models import Message, Run, RunEvent, Step, ToolApproval
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tools.models import ToolPolicy

pytestmark = pytest.mark.django_db


def waiting_run(
    cast: Cast, api: APIClient, fake_model: FakeModelServer, *, editable: list[str] | None = None
) -> str:
    agent = make_agent(
        tenant=cast.tenant_a, model_provider="anthropic", approval_required_tools=["calculator"]
    )
    ToolPolicy.objects.create(
        agent=agent, editable_arguments=["calculator"] if editable is None else editable
    )
    fake_model.script(Turn(tool_calls=[("calculator", {"expression": "6*7"})]), Turn(text="done"))
    session_id = api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()["id"]
    response = api.post(f"/api/v1/sessions/{session_id}/messages/", {"content": "6*7?"}, format="json")
    run_id: str = response.json()["run"]["id"]
    execute_run(run_id)
    return run_id


def approve(api: APIClient, run_id: str, **fields: Any) -> Any:
    call_id = ToolApproval.objects.get(run_id=run_id).tool_call_id
    body = {"tool_call_id": call_id, "decision": "approve", **fields}
    return api.post(f"/api/v1/runs/{run_id}/approve/", body, format="json")


def stored_call_arguments(run_id: str) -> Any:
    message = Message.objects.filter(run_id=run_id, role="assistant").order_by("created_at").first()
    assert message is not None
    return next(block["arguments"] for block in message.content if block["type"] == "tool_call")


def test_the_tool_runs_with_the_edited_arguments_and_the_model_sees_the_edited_call(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = waiting_run(cast, bob_api, fake_model)
    required = RunEvent.objects.get(run_id=run_id, type="approval.required").data

    response = approve(bob_api, run_id, arguments={"expression": "6*8"})
    execute_run(run_id)

    assert required["arguments_editable"] is True
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["arguments"], body["edited_arguments"]) == (
        "approved",
        {"expression": "6*7"},
        {"expression": "6*8"},
    )
    assert Run.objects.get(pk=run_id).status == "completed"
    step = Step.objects.get(run_id=run_id, kind="tool_call")
    assert step.output == {"content": "48", "is_error": False}
    call, result = fake_model.requests[-1].body["messages"][-2:]
    assert call["content"][-1]["input"] == {"expression": "6*8"}
    assert result["content"][0]["content"] == "48"
    assert stored_call_arguments(run_id) == {"expression": "6*8"}
    resolved = RunEvent.objects.get(run_id=run_id, type="approval.resolved").data
    assert (resolved["arguments_edited"], resolved["arguments"]) == (True, {"expression": "6*8"})


def test_an_approval_without_edits_records_none(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = waiting_run(cast, bob_api, fake_model)

    response = approve(bob_api, run_id)
    execute_run(run_id)

    assert response.json()["edited_arguments"] is None
    assert Step.objects.get(run_id=run_id, kind="tool_call").output == {"content": "42", "is_error": False}
    resolved = RunEvent.objects.get(run_id=run_id, type="approval.resolved").data
    assert resolved["arguments_edited"] is False
    assert "arguments" not in resolved


@pytest.mark.parametrize(
    ("editable", "fields", "errors"),
    [
        (
            ["calculator"],
            {"arguments": {"expr": "1"}},
            {
                "arguments": [
                    "(arguments): 'expression' is a required property",
                    "(arguments): Additional properties are not allowed ('expr' was unexpected)",
                ]
            },
        ),
        (
            ["calculator"],
            {"arguments": {"expression": 7}},
            {"arguments": ["expression: 7 is not of type 'string'"]},
        ),
        (
            ["calculator"],
            {"arguments": "6*8"},
            {"arguments": ["Must be an object."]},
        ),
        (
            ["calculator"],
            {"arguments": {"expression": "1"}, "decision": "deny"},
            {"arguments": ["Only an approval can change the arguments."]},
        ),
        (
            [],
            {"arguments": {"expression": "6*8"}},
            {"arguments": ["This tool's arguments cannot be edited at approval."]},
        ),
        (
            ["calculator"],
            {"arguments": {"expression": "6*8\x00"}},
            {"arguments": ["Must not contain null characters or unpaired surrogates."]},
        ),
    ],
    ids=["schema", "type", "not an object", "with a denial", "not editable", "a null character"],
)
def test_bad_edits_are_400_with_a_field_message_and_change_nothing(
    cast: Cast,
    bob_api: APIClient,
    fake_model: FakeModelServer,
    editable: list[str],
    fields: dict[str, Any],
    errors: dict[str, Any],
) -> None:
    run_id = waiting_run(cast, bob_api, fake_model, editable=editable)

    response = approve(bob_api, run_id, **fields)

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == errors
    approval = ToolApproval.objects.get(run_id=run_id)
    assert (approval.status, approval.edited_arguments) == ("pending", None)
    assert stored_call_arguments(run_id) == {"expression": "6*7"}
    assert Run.objects.get(pk=run_id).status == "awaiting_approval"


def test_another_tenant_cannot_edit_the_arguments(
    cast: Cast, bob_api: APIClient, carol_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = waiting_run(cast, bob_api, fake_model)

    response = approve(carol_api, run_id, arguments={"expression": "1+1"})

    assert response.status_code == 404
    assert ToolApproval.objects.get(run_id=run_id).status == "pending"
    assert stored_call_arguments(run_id) == {"expression": "6*7"}


def test_the_policy_api_sets_which_tools_have_editable_arguments(cast: Cast, alice_api: APIClient) -> None:
    agent: Agent = make_agent(tenant=cast.tenant_a, approval_required_tools=["calculator"])
    url = f"/api/v1/agents/{agent.pk}/tools/"

    response = alice_api.patch(url, {"editable_arguments": ["calculator"]}, format="json")
    bad = alice_api.patch(url, {"editable_arguments": ["no spaces please"]}, format="json")

    assert response.status_code == 200
    assert response.json()["policy"]["editable_arguments"] == ["calculator"]
    verdicts = {tool["name"]: tool for tool in response.json()["tools"]}
    assert verdicts["calculator"]["arguments_editable_at_approval"] is True
    assert verdicts["current_time"]["arguments_editable_at_approval"] is False
    assert bad.status_code == 400
    assert bad.json()["error"]["fields"] == {
        "editable_arguments": ["Must be a list of tool names, group:<name> entries or * wildcards."]
    }
    assert ToolPolicy.objects.get(agent=agent).editable_arguments == ["calculator"]
