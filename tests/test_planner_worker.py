"""Planning runs executed by real django-q2 worker processes: parallel executors, a killed worker."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from sessions.models import PlanStep, Run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import LiveStack, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

PLANNER = "You are the planner"
SYNTHESIS = "Results of the plan's steps"


def stack_for(tmp_path: Path, fake_model: FakeModelServer, **environment: str) -> LiveStack:
    return LiveStack(
        tmp_path, ANTHROPIC_API_KEY="test-anthropic-key", ANTHROPIC_BASE_URL=fake_model.url, **environment
    )


@pytest.fixture
def stack(tmp_path: Path, fake_model: FakeModelServer) -> Iterator[LiveStack]:
    live = stack_for(tmp_path, fake_model)
    yield live
    live.stop()


@pytest.fixture
def short_lease_stack(tmp_path: Path, fake_model: FakeModelServer) -> Iterator[LiveStack]:
    live = stack_for(
        tmp_path,
        fake_model,
        RUN_LEASE_SECONDS="2",
        RUN_SWEEP_INTERVAL_SECONDS="0.5",
        RUN_HEARTBEAT_SECONDS="0.2",
        RUN_LEASE_RENEW_SECONDS="0.5",
    )
    yield live
    live.stop()


def post_planned(api: APIClient, cast: Cast, content: str) -> str:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", planning_mode="plan")
    session = api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
    posted = api.post(f"/api/v1/sessions/{session['id']}/messages/", {"content": content}, format="json")
    return str(posted.json()["run"]["id"])


def plan_of(*keys: str) -> Turn:
    steps = [{"id": key, "title": key, "instructions": f"do {key}"} for key in keys]
    return Turn(text=json.dumps({"steps": steps}))


def test_worker_processes_run_independent_steps_concurrently(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, stack: LiveStack
) -> None:
    stack.start_worker(workers=3)
    fake_model.script(plan_of("s1", "s2"), match=PLANNER)
    for key in ("s1", "s2"):
        fake_model.script(Turn(text=f"{key} " * 60, chunk_size=3, chunk_delay=0.02), match=f"Step {key}:")
    fake_model.script(Turn(text="final answer"), match=SYNTHESIS)
    run_id = post_planned(bob_api, cast, "Do s1 and s2.")

    wait_until(
        lambda: Run.objects.filter(pk=run_id, status="completed").exists(),
        timeout=60,
        message=f"the planning run to complete\n{stack.logs()}",
    )

    first, second = (
        PlanStep.objects.select_related("child_run").get(plan__run_id=run_id, key=key).child_run
        for key in ("s1", "s2")
    )
    assert first is not None and second is not None
    assert first.started_at < second.finished_at and second.started_at < first.finished_at  # type: ignore[operator]
    assert Run.objects.get(pk=run_id).messages.filter(role="assistant").get().text == "final answer"


def test_killing_the_worker_of_a_running_executor_resumes_it_and_the_parent_completes(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, short_lease_stack: LiveStack
) -> None:
    fake_model.script(plan_of("s1"), match=PLANNER)
    fake_model.script(
        Turn(text="slow " * 500, chunk_size=5, chunk_delay=0.05), Turn(text="s1 result"), match="Step s1:"
    )
    fake_model.script(Turn(text="final from s1"), match=SYNTHESIS)
    first_worker = short_lease_stack.start_worker(workers=1)
    run_id = post_planned(bob_api, cast, "Do s1.")
    wait_until(
        lambda: Run.objects.filter(
            parent_run_id=run_id, status="executing", events__type="text.delta"
        ).exists(),
        timeout=30,
        message=f"the executor to stream\n{short_lease_stack.logs()}",
    )

    first_worker.kill()
    short_lease_stack.start_worker(workers=1)
    wait_until(
        lambda: Run.objects.filter(pk=run_id, status="completed").exists(),
        timeout=60,
        message=f"the parent to complete\n{short_lease_stack.logs()}",
    )

    child = Run.objects.get(parent_run_id=run_id)
    assert (child.status, child.attempt) == ("completed", 2)
    assert PlanStep.objects.get(plan__run_id=run_id).result == "s1 result"
    assert Run.objects.get(pk=run_id).messages.filter(role="assistant").get().text == "final from s1"


def test_an_offline_auto_agent_plans_a_numbered_list_on_worker_processes(
    cast: Cast, bob_api: APIClient, stack: LiveStack
) -> None:
    stack.start_worker(workers=2)
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline", planning_mode="auto")
    session = bob_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
    content = "Please:\n1. what is 2+3?\n2. what is 4*5?"
    posted = bob_api.post(f"/api/v1/sessions/{session['id']}/messages/", {"content": content}, format="json")
    run_id = posted.json()["run"]["id"]

    wait_until(
        lambda: Run.objects.filter(pk=run_id, status="completed").exists(),
        timeout=60,
        message=f"the auto run to plan and complete\n{stack.logs()}",
    )

    run = Run.objects.get(pk=run_id)
    assert (run.route, run.route_reason, run.model_calls) == ("complex", "the message lists 2 tasks", 2)
    steps = PlanStep.objects.filter(plan__run_id=run_id).order_by("index")
    assert [(step.key, step.status, step.result) for step in steps] == [
        ("s1", "completed", "2+3 = 5."),
        ("s2", "completed", "4\\*5 = 20."),
    ]
    assert run.messages.filter(role="assistant").order_by("position").last().text == (  # type: ignore[union-attr]
        "Here is what the plan's steps found:\n- what is 2+3? [s1]: 2+3 = 5.\n"
        "- what is 4\\*5? [s2]: 4\\*5 = 20."
    )
