"""Arguments editable at approval on the pages: the policy form, and the chat's approve fallback."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from sessions.models import Message, MessageRole, Run, RunStatus, ToolApproval
from tests.factories import last_placed_message_id
from tests.web.conftest import World
from tools.models import ToolPolicy

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]


def waiting_approval(world: World, *, is_editable: bool) -> Run:
    run = Run.objects.create(
        tenant=world.cast.tenant_a,
        session=world.session_a,
        agent=world.agent_a,
        created_by=world.cast.bob,
        status=RunStatus.AWAITING_APPROVAL,
        agent_config={"tool_policy": {"profile": "minimal", "editable_arguments": ["calculator"]}},
    )
    call = {"type": "tool_call", "id": "call_1", "name": "calculator", "arguments": {"expression": "6*7"}}
    Message.objects.create(
        tenant=run.tenant,
        session=run.session,
        parent_id=last_placed_message_id(run.session),
        role=MessageRole.ASSISTANT,
        content=[call],
        run=run,
        position=3,
    )
    ToolApproval.objects.create(
        tenant=world.cast.tenant_a,
        run=run,
        tool_call_id="call_1",
        tool_name="calculator",
        arguments={"expression": "6*7"},
        arguments_editable=is_editable,
        expires_at=timezone.now() + timedelta(minutes=10),
    )
    return run


def post_approval(client: Client, run: Run, arguments: str) -> Any:
    fields = {"tool_call_id": "call_1", "decision": "approve", "arguments": arguments}
    return client.post(f"/runs/{run.pk}/approve/", fields, HTTP_ACCEPT="application/json")


def test_the_policy_page_saves_which_tools_have_editable_arguments(
    world: World, client_for: ClientFor
) -> None:
    client = client_for(world.dave)
    fields = {
        "profile": "minimal",
        "allow": "",
        "deny": "",
        "require_approval": "calculator",
        "editable_arguments": "calculator",
        "max_calls_per_turn": "4",
        "max_calls_per_run": "20",
    }

    response = client.post(f"/agents/{world.agent_a.pk}/tools/", fields)
    page = client.get(f"/agents/{world.agent_a.pk}/tools/").content.decode()

    assert response.status_code == 302
    assert ToolPolicy.objects.get(agent=world.agent_a).editable_arguments == ["calculator"]
    assert '<span class="badge tone-info">editable</span>' in page


def test_the_chat_approves_with_edited_arguments(world: World, client_for: ClientFor) -> None:
    run = waiting_approval(world, is_editable=True)

    response = post_approval(client_for(world.cast.bob), run, '{"expression": "6*8"}')

    assert response.json() == {"ok": True, "message": "Tool call approved."}
    approval = ToolApproval.objects.get(run=run)
    assert (approval.status, approval.edited_arguments) == ("approved", {"expression": "6*8"})
    message = Message.objects.get(run=run)
    assert message.content[0]["arguments"] == {"expression": "6*8"}


@pytest.mark.parametrize(
    ("is_editable", "arguments", "message"),
    [
        (True, "{not json", "The arguments are not valid JSON."),
        (True, '["6*8"]', "Give the arguments as a JSON object."),
        (False, '{"expression": "6*8"}', "This tool's arguments cannot be edited at approval."),
    ],
    ids=["not json", "not an object", "not editable"],
)
def test_bad_edited_arguments_are_refused_and_change_nothing(
    world: World, client_for: ClientFor, is_editable: bool, arguments: str, message: str
) -> None:
    run = waiting_approval(world, is_editable=is_editable)

    response = post_approval(client_for(world.cast.bob), run, arguments)

    assert response.status_code == 400
    assert response.json() == {"ok": False, "message": message}
    assert ToolApproval.objects.get(run=run).status == "pending"
    assert Message.objects.get(run=run).content[0]["arguments"] == {"expression": "6*7"}


def test_another_tenant_cannot_approve_with_edited_arguments(world: World, client_for: ClientFor) -> None:
    run = waiting_approval(world, is_editable=True)

    response = post_approval(client_for(world.cast.carol), run, '{"expression": "1"}')

    assert response.status_code == 404
    assert ToolApproval.objects.get(run=run).status == "pending"
    assert Message.objects.get(run=run).content[0]["arguments"] == {"expression": "6*7"}
