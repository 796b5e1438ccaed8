"""spawn_subagent with a real django-q2 worker process: the waiting parent does not hold the worker."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from sessions.models import Run, RunEvent
from tests.conftest import Cast
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import LiveStack, wait_until
from tests.test_planner_worker import stack_for
from tests.test_subagents import SUBAGENT, delegating_agent, spawn, start_session

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stack(tmp_path: Path, fake_model: FakeModelServer) -> Iterator[LiveStack]:
    live = stack_for(tmp_path, fake_model)
    yield live
    live.stop()


def test_one_worker_runs_the_subagent_while_its_parent_waits_then_the_parent(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, stack: LiveStack
) -> None:
    # One worker process with one worker: the child can only run if the parent gave it back.
    stack.start_worker(workers=1)
    fake_model.script(Turn(text="Paris has 2.1 million people."), match=SUBAGENT)
    fake_model.script(spawn(), Turn(text="About 2.1 million."))
    session_id = start_session(bob_api, delegating_agent(cast))
    posted = bob_api.post(
        f"/api/v1/sessions/{session_id}/messages/",
        {"content": "How many people live in Paris?"},
        format="json",
    )
    parent_id = posted.json()["run"]["id"]

    wait_until(
        lambda: Run.objects.filter(pk=parent_id, status="completed").exists(),
        timeout=60,
        message=f"the parent to complete\n{stack.logs()}",
    )

    child = Run.objects.get(parent_run_id=parent_id)
    assert (child.status, child.attempt) == ("completed", 1)
    parent = Run.objects.get(pk=parent_id)
    assert parent.started_at < child.started_at < child.finished_at < parent.finished_at  # type: ignore[operator]
    assert RunEvent.objects.get(run_id=parent_id, type="tool.result").data["content"] == (
        "Paris has 2.1 million people."
    )
    assert parent.messages.filter(role="assistant").order_by("position").last().text == "About 2.1 million."  # type: ignore[union-attr]
    statuses = [
        (event.data["from"], event.data["to"], event.data["actor"])
        for event in RunEvent.objects.filter(run_id=parent_id, type="run.status").order_by("seq")
    ]
    assert statuses == [
        ("queued", "planning", "system"),
        ("planning", "executing", "system"),
        ("executing", "executing", "subagent"),
        ("executing", "queued", "children"),
        ("queued", "planning", "system"),
        ("planning", "executing", "system"),
        ("executing", "completed", "system"),
    ]
