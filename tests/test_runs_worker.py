"""Runs executed by a real django-q2 cluster in another process (ORM broker or Redis)."""

from pathlib import Path
from collections.abc import Iterator

import pytest
from rest_framework.test import APIClient

from sessions.models import Run, RunEvent
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
    stack.start_worker(workers=2)
    yield stack
    stack.stop()


def test_a_separate_worker_process_runs_the_message_to_completion(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, worker: LiveStack
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(
        Turn(tool_calls=[("calculator", {"expression": "2+3"})]), Turn(text="2+3 = 5."), match="worker-test"
    )
    session = bob_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
    posted = bob_api.post(
        f"/api/v1/sessions/{session['id']}/messages/", {"content": "worker-test: 2+3?"}, format="json"
    ).json()
    run_id = posted["run"]["id"]

    wait_until(
        lambda: Run.objects.filter(pk=run_id, status="completed").exists(),
        timeout=30,
        message=f"run to complete\n{worker.logs()}",
    )

    run = bob_api.get(f"/api/v1/runs/{run_id}/").json()
    assert (run["status"], run["stop_reason"], len(run["steps"])) == ("completed", "end_turn", 3)
    assert run["steps"][1]["output"] == {"content": "5", "is_error": False}
    seqs = list(RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert RunEvent.objects.filter(run_id=run_id).order_by("-seq").first().type == "run.completed"  # type: ignore[union-attr]
