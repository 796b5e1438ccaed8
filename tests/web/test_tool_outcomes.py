"""A tool call's outcome reads the same on the chat's card and on the run page (its steps and its
waterfall): one function says it (sessions.tool_outcomes)."""

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from sessions.models import Run, Step, StepStatus
from sessions.tasks import execute_run
from sessions.tool_outcomes import tool_step_outcome
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn

ClientFor = Callable[[Any], Client]


def run_one_tool_call(api: APIClient, cast: Cast, fake_model: FakeModelServer, expression: str) -> Run:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(Turn(tool_calls=[("calculator", {"expression": expression})]), Turn(text="Done."))
    session_id = api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()["id"]
    posted = api.post(f"/api/v1/sessions/{session_id}/messages/", {"content": "compute"}, format="json")
    execute_run(posted.json()["run"]["id"])
    return Run.objects.get(pk=posted.json()["run"]["id"])


def badges_on_the_run_page(client: Client, run: Run) -> tuple[str, str]:
    """(the tool step's badge in the steps list, the tool's bar badge in the waterfall)."""
    body = client.get(f"/runs/{run.pk}/").content.decode()
    step = re.search(
        r"Tool: <strong>calculator</strong></span>\s*"
        r"<span class=\"badge tone-(\w+)\" data-step-status>(\w+)<",
        body,
    )
    bar = re.search(r"Tool: calculator\s*<span class=\"badge tone-(\w+)\">(\w+)</span>", body)
    assert step is not None and bar is not None, body
    return f"{step.group(2)}/{step.group(1)}", f"{bar.group(2)}/{bar.group(1)}"


def card_state_in_the_chat(client: Client, run: Run) -> str:
    body = client.get(f"/chat/{run.session_id}/").content.decode()
    card = re.search(r'<details class="tool-card" data-tool-call-id="[^"]+" data-state="(\w+)">', body)
    badge = re.search(r'<span class="badge tool-state" data-slot="state">(\w+)</span>', body)
    assert card is not None and badge is not None, body
    return f"{card.group(1)}/{badge.group(1)}"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("expression", "outcome", "tone"),
    [("1/0", "error", "error"), ("6*7", "done", "ok")],
)
def test_the_chat_card_and_the_run_page_say_the_same_outcome_of_a_tool_call(
    cast: Cast,
    bob_api: APIClient,
    fake_model: FakeModelServer,
    client_for: ClientFor,
    expression: str,
    outcome: str,
    tone: str,
) -> None:
    run = run_one_tool_call(bob_api, cast, fake_model, expression)
    browser = client_for(cast.bob)

    step = Step.objects.get(run=run, kind="tool_call")
    assert (step.status, step.output["is_error"]) == ("completed", outcome == "error")
    assert card_state_in_the_chat(browser, run) == f"{outcome}/{outcome}"
    assert badges_on_the_run_page(browser, run) == (f"{outcome}/{tone}", f"{outcome}/{tone}")


@pytest.mark.parametrize(
    ("status", "output", "outcome"),
    [
        (StepStatus.PENDING, {}, "pending"),
        (StepStatus.RUNNING, {}, "running"),
        (StepStatus.COMPLETED, {"content": "42", "is_error": False}, "done"),
        (StepStatus.COMPLETED, {"content": "division by zero", "is_error": True}, "error"),
        # Stopped before it finished: the model was told so, as an error, and the chat says so.
        (StepStatus.FAILED, {}, "error"),
        (StepStatus.CANCELLED, {}, "error"),
        (StepStatus.SKIPPED, {}, "skipped"),
    ],
)
def test_a_tool_steps_outcome_follows_its_status_and_its_result(
    status: str, output: dict[str, Any], outcome: str
) -> None:
    assert tool_step_outcome(Step(kind="tool_call", status=status, output=output)) == outcome
