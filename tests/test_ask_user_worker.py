"""ask_user on a real django-q2 worker process: the run gives its worker back while it waits."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from sessions.models import Run, UserQuestion
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import LiveStack, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker(tmp_path: Path, fake_model: FakeModelServer) -> Iterator[LiveStack]:
    stack = LiveStack(
        tmp_path,
        ANTHROPIC_API_KEY="test-anthropic-key",
        ANTHROPIC_BASE_URL=fake_model.url,
        OPENAI_API_KEY="test-openai-key",
        OPENAI_BASE_URL=fake_model.openai_base_url,
    )
    stack.start_worker(workers=1)
    yield stack
    stack.stop()


def test_a_worker_runs_the_question_then_resumes_with_the_answer(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, worker: LiveStack
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(
        Turn(tool_calls=[("ask_user", {"question": "Tea or coffee?", "choices": ["tea", "coffee"]})])
    )
    fake_model.script(Turn(text="Tea it is."), match="tool_result")
    session = bob_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
    posted = bob_api.post(
        f"/api/v1/sessions/{session['id']}/messages/", {"content": "a drink?"}, format="json"
    ).json()
    run_id = posted["run"]["id"]

    wait_until(
        lambda: Run.objects.filter(pk=run_id, status="awaiting_input").exists(),
        timeout=30,
        message=f"run to wait for the answer\n{worker.logs()}",
    )
    waiting = Run.objects.get(pk=run_id)
    (question,) = bob_api.get(f"/api/v1/runs/{run_id}/").json()["questions"]
    answered = bob_api.post(
        f"/api/v1/runs/{run_id}/answer/",
        {"tool_call_id": question["tool_call_id"], "answer": "tea"},
        format="json",
    )
    wait_until(
        lambda: Run.objects.filter(pk=run_id, status="completed").exists(),
        timeout=30,
        message=f"run to complete\n{worker.logs()}",
    )

    assert (waiting.lease_owner, waiting.lease_expires_at) == ("", None)
    assert (question["question"], question["choices"], question["status"]) == (
        "Tea or coffee?",
        ["tea", "coffee"],
        "pending",
    )
    assert answered.status_code == 200
    assert fake_model.requests[-1].body["messages"][-1]["content"][0]["content"] == "tea"
    run = bob_api.get(f"/api/v1/runs/{run_id}/").json()
    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    assert run["steps"][1]["output"] == {"content": "tea", "is_error": False}
    assert UserQuestion.objects.get(run_id=run_id).answered_by == cast.bob
