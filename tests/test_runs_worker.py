"""Runs executed by a real django-q2 cluster in another process (ORM broker or Redis)."""

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from agents.runtime.tool_execution import INTERRUPTED_TOOL_OUTCOME
from sessions.models import Message, Run, RunEvent
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import LiveStack, wait_until
from tests.tools import LocalServer, RecordedRequest, Reply
from tools.models import AgentTool, Tool, ToolKind

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


@pytest.fixture
def short_lease_stack(tmp_path: Path, fake_model: FakeModelServer) -> Iterator[LiveStack]:
    stack = LiveStack(
        tmp_path,
        ANTHROPIC_API_KEY="test-anthropic-key",
        ANTHROPIC_BASE_URL=fake_model.url,
        RUN_LEASE_SECONDS="2",
        RUN_SWEEP_INTERVAL_SECONDS="0.5",
        RUN_HEARTBEAT_SECONDS="0.2",
        RUN_LEASE_RENEW_SECONDS="0.5",
        ALLOW_PRIVATE_NETWORK_FETCH="true",  # the tests' HTTP tools call a server on loopback
    )
    yield stack
    stack.stop()


def test_a_killed_worker_run_resumes_on_another_worker_without_repeating_tools(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, short_lease_stack: LiveStack
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(
        Turn(tool_calls=[("calculator", {"expression": "19*23"})]),
        Turn(text="slow " * 500, chunk_size=5, chunk_delay=0.05),
        Turn(text="19*23 = 437."),
        match="crash-test",
    )
    first_worker = short_lease_stack.start_worker(workers=1)
    session = bob_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
    run_id = bob_api.post(
        f"/api/v1/sessions/{session['id']}/messages/", {"content": "crash-test"}, format="json"
    ).json()["run"]["id"]
    wait_until(
        lambda: RunEvent.objects.filter(run_id=run_id, type="text.delta").exists(),
        timeout=30,
        message=f"the second model call to stream\n{short_lease_stack.logs()}",
    )

    first_worker.kill()
    short_lease_stack.start_worker(workers=1)
    wait_until(
        lambda: Run.objects.filter(pk=run_id, status="completed").exists(),
        timeout=40,
        message=f"the run to resume and complete\n{short_lease_stack.logs()}",
    )

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason, run.attempt) == ("completed", "end_turn", 2)
    tool_steps = run.steps.filter(kind="tool_call")
    assert [(step.status, step.output["content"]) for step in tool_steps] == [("completed", "437")]
    assert RunEvent.objects.filter(run_id=run_id, type="tool.call").count() == 1
    assert len(fake_model.requests) == 3
    assert run.messages.filter(role="assistant").order_by("-position").first().text == "19*23 = 437."  # type: ignore[union-attr]


def test_a_burst_of_messages_runs_one_at_a_time_in_order(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, worker: LiveStack
) -> None:
    worker.start_worker(workers=2)  # a second cluster: two processes competing for the lane
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.set_default(Turn(text="answer", chunk_size=2, chunk_delay=0.01))
    session = bob_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
    run_ids = [
        bob_api.post(
            f"/api/v1/sessions/{session['id']}/messages/", {"content": f"burst {n}"}, format="json"
        ).json()["run"]["id"]
        for n in range(5)
    ]

    wait_until(
        lambda: Run.objects.filter(pk__in=run_ids, status="completed").count() == 5,
        timeout=60,
        message=f"five runs to complete\n{worker.logs()}",
    )

    runs = sorted(Run.objects.filter(pk__in=run_ids), key=lambda run: run.started_at)  # type: ignore[arg-type, return-value]
    assert [str(run.pk) for run in runs] == run_ids
    for earlier, later in itertools.pairwise(runs):
        assert earlier.finished_at <= later.started_at  # type: ignore[operator]
    user_texts = [
        m.text for m in Message.objects.filter(session_id=session["id"], role="user").order_by("position")
    ]
    assert user_texts == [f"burst {n}" for n in range(5)]


@pytest.fixture
def slow_heartbeat_worker(tmp_path: Path, fake_model: FakeModelServer) -> Iterator[LiveStack]:
    """A worker whose database read for cancels is rare when a channel layer can tell it at once."""
    heartbeat = "30" if settings.REDIS_URL else "1"
    stack = LiveStack(
        tmp_path,
        ANTHROPIC_API_KEY="test-anthropic-key",
        ANTHROPIC_BASE_URL=fake_model.url,
        RUN_HEARTBEAT_SECONDS=heartbeat,
    )
    stack.start_worker(workers=1)
    yield stack
    stack.stop()


def test_a_cancel_stops_a_run_in_another_worker_process_within_two_seconds(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, slow_heartbeat_worker: LiveStack
) -> None:
    """Through the channel layer with Redis (the heartbeat is 30 s there), else the heartbeat (1 s)."""
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(Turn(text="slow " * 2000, chunk_size=5, chunk_delay=0.05), match="cancel-test")
    session = bob_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
    run_id = bob_api.post(
        f"/api/v1/sessions/{session['id']}/messages/", {"content": "cancel-test"}, format="json"
    ).json()["run"]["id"]
    wait_until(
        lambda: RunEvent.objects.filter(run_id=run_id, type="text.delta").exists(),
        timeout=30,
        message=f"the model call to stream\n{slow_heartbeat_worker.logs()}",
    )

    cancelled_at = time.monotonic()
    assert bob_api.post(f"/api/v1/runs/{run_id}/cancel/").status_code == 202
    wait_until(
        lambda: Run.objects.filter(pk=run_id, status="cancelled").exists(),
        timeout=10,
        message=f"the run to stop\n{slow_heartbeat_worker.logs()}",
    )

    assert time.monotonic() - cancelled_at < 2.0
    assert fake_model.wait_for_closed_streams(1, timeout=5) == 1
    assert RunEvent.objects.filter(run_id=run_id).order_by("-seq").first().type == "run.cancelled"  # type: ignore[union-attr]


def test_a_worker_stopped_with_sigterm_hands_its_run_back_for_another_worker(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, tmp_path: Path
) -> None:
    stack = LiveStack(
        tmp_path,
        ANTHROPIC_API_KEY="test-anthropic-key",
        ANTHROPIC_BASE_URL=fake_model.url,
        RUN_SHUTDOWN_GRACE_SECONDS="0.5",
    )
    try:
        stopping_worker = stack.start_worker(workers=1)
        agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
        fake_model.script(
            Turn(text="slow " * 2000, chunk_size=5, chunk_delay=0.05), Turn(text="resumed."), match="handover"
        )
        session = bob_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
        run_id = bob_api.post(
            f"/api/v1/sessions/{session['id']}/messages/", {"content": "handover"}, format="json"
        ).json()["run"]["id"]
        wait_until(
            lambda: RunEvent.objects.filter(run_id=run_id, type="text.delta").exists(),
            timeout=30,
            message=f"the model call to stream\n{stack.logs()}",
        )
        stack.start_worker(workers=1)

        stopping_worker.stop()
        wait_until(
            lambda: Run.objects.filter(pk=run_id, status="completed").exists(),
            timeout=40,
            message=f"another worker to finish the run\n{stack.logs()}",
        )
    finally:
        stack.stop()

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason, run.attempt) == ("completed", "end_turn", 1)
    moves = [
        (event.data["from"], event.data["to"], event.data["actor"])
        for event in RunEvent.objects.filter(run_id=run_id, type="run.status").order_by("seq")
    ]
    assert ("executing", "queued", "worker") in moves
    assert run.messages.filter(role="assistant").order_by("-position").first().text == "resumed."  # type: ignore[union-attr]
    seqs = list(
        RunEvent.objects.filter(session_id=session["id"]).order_by("seq").values_list("seq", flat=True)
    )
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.fixture
def slow_write_server() -> Iterator[LocalServer]:
    """An HTTP endpoint that changes something and takes its time (a side effect to not repeat)."""

    def slow_write(request: RecordedRequest) -> Reply:
        time.sleep(3.0)
        return Reply(200, "written")

    with LocalServer("127.0.0.1") as server:
        server.routes["/write"] = slow_write
        yield server


def test_a_killed_worker_leaves_every_run_to_finish_elsewhere_without_repeating_side_effects(
    cast: Cast,
    bob_api: APIClient,
    fake_model: FakeModelServer,
    slow_write_server: LocalServer,
    short_lease_stack: LiveStack,
) -> None:
    """kill -9 while runs stream and while runs wait inside a slow call that changes something."""
    cast.tenant_a.settings = {"active_runs_per_user": 50, "messages_per_minute_per_user": 100}
    cast.tenant_a.save()
    writer = Tool.objects.create(
        tenant=cast.tenant_a,
        name="write_record",
        kind=ToolKind.HTTP,
        http_method="POST",
        url_template=slow_write_server.url("/write"),
        input_schema={"type": "object"},
        timeout_seconds=30.0,
    )
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    AgentTool.objects.create(agent=agent, tool=writer)
    first_worker = short_lease_stack.start_worker(workers=1)
    runs = {}
    for kind, number in [("writing", n) for n in range(3)] + [("streaming", n) for n in range(3)]:
        content = f"{kind}-run-{number}"
        if kind == "writing":
            fake_model.script(
                Turn(tool_calls=[("write_record", {})]), Turn(text="write attempted."), match=content
            )
        else:
            slow = Turn(text="slow " * 400, chunk_size=5, chunk_delay=0.05)
            fake_model.script(slow, Turn(text="streamed again."), match=content)
        session = bob_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
        posted = bob_api.post(
            f"/api/v1/sessions/{session['id']}/messages/", {"content": content}, format="json"
        )
        runs[posted.json()["run"]["id"]] = (kind, session["id"])
    wait_until(
        lambda: (
            len(slow_write_server.requests) == 3
            and RunEvent.objects.filter(run_id__in=list(runs), type="text.delta")
            .values("run_id")
            .distinct()
            .count()
            == 3
        ),
        timeout=30,
        message=f"three runs inside the write and three streaming\n{short_lease_stack.logs()}",
    )

    first_worker.kill()
    short_lease_stack.start_worker(workers=1)
    wait_until(
        lambda: Run.objects.filter(pk__in=list(runs), status="completed").count() == len(runs),
        timeout=60,
        message=f"every run to complete on the new worker\n{short_lease_stack.logs()}",
    )

    assert len(slow_write_server.requests) == 3  # no write was sent again
    for run_id, (kind, session_id) in runs.items():
        run = Run.objects.get(pk=run_id)
        assert run.attempt == 2
        events = RunEvent.objects.filter(session_id=session_id).order_by("seq")
        assert list(events.values_list("seq", flat=True)) == list(range(1, events.count() + 1))
        if kind == "writing":
            [interrupted] = [event.data for event in events.filter(type="tool.result")]
            assert interrupted["interrupted"] is True
            assert interrupted["content"] == INTERRUPTED_TOOL_OUTCOME.content
            assert (
                run.messages.filter(role="assistant").order_by("-position").first().text == "write attempted."
            )  # type: ignore[union-attr]
        else:
            assert (
                run.messages.filter(role="assistant").order_by("-position").first().text == "streamed again."
            )  # type: ignore[union-attr]
