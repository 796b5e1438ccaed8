"""Planner and executors (issue 9), executed in-process: executors of one round run in parallel threads."""

import json
import threading
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from agents.models import DEFAULT_MODEL_NAMES, ModelProvider
from agents.runtime.plan_tool import PLAN_STARTED
from billing.models import ModelPrice
from memory.models import Memory
from sessions.execution import run_execute
from sessions.models import Message, Plan, PlanStep, Run, RunEvent, Session
from sessions.state import TERMINAL_RUN_STATUSES
from sessions.sweeper import sweep_runs
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, RecordedRequest, Turn
from tests.live import wait_until

PLANNER = "You are the planner"
SYNTHESIS = "Results of the plan's steps"
THREE_STEP_PLAN = {
    "goal": "Compare the populations of Paris and Rome",
    "steps": [
        {"id": "s1", "title": "Paris", "instructions": "Find the population of Paris.", "depends_on": []},
        {"id": "s2", "title": "Rome", "instructions": "Find the population of Rome.", "depends_on": []},
        {
            "id": "s3",
            "title": "Compare",
            "instructions": "Compare the two populations.",
            "depends_on": ["s1", "s2"],
        },
    ],
}
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
PLAN_REASON = "two populations to look up, then a comparison"
# The tools of an agent without a policy, and those of its executors (read-only ones).
# A top-level run also gets ask_user (the minimal profile); executors never ask the user.
AGENT_TOOLS = ["ask_user", "calculator", "current_time", "memory_forget", "memory_save", "memory_search"]
EXECUTOR_TOOLS = ["calculator", "current_time", "memory_search"]

pytestmark = pytest.mark.django_db(transaction=True)


def plan_turn(plan: dict[str, Any], usage: tuple[int, int, int, int] = (10, 5, 0, 0)) -> Turn:
    return Turn(text=json.dumps(plan), usage=usage)


def slow(text: str, usage: tuple[int, int, int, int] = (10, 5, 0, 0)) -> Turn:
    return Turn(text=text, chunk_size=4, chunk_delay=0.02, usage=usage)


def start_planning_session(api: APIClient, cast: Cast, *, planning_mode: str = "plan") -> str:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", planning_mode=planning_mode)
    return str(api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()["id"])


def post(api: APIClient, session_id: str, content: str) -> str:
    response = api.post(f"/api/v1/sessions/{session_id}/messages/", {"content": content}, format="json")
    return str(response.json()["run"]["id"])


def execute_in_thread(run_id: str) -> threading.Thread:
    def target() -> None:
        try:
            execute_run(run_id)
        finally:
            connection.close()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def drive(parent_id: str, *, rounds: int = 12) -> Run:
    """Do what the workers would: run the parent when queued, its queued executors concurrently."""
    for _ in range(rounds):
        parent = Run.objects.get(pk=parent_id)
        if parent.status in TERMINAL_RUN_STATUSES:
            return parent
        if parent.status == "queued":
            execute_run(parent_id)
            continue
        children = Run.objects.filter(parent_run_id=parent_id, status="queued").values_list("id", flat=True)
        threads = [execute_in_thread(str(child_id)) for child_id in children]
        assert threads, f"parent is {parent.status} with nothing to run"
        for thread in threads:
            thread.join(timeout=30)
    raise AssertionError("the run tree did not finish")


def child_for(parent_id: str, key: str) -> Run:
    return PlanStep.objects.select_related("child_run").get(plan__run_id=parent_id, key=key).child_run  # type: ignore[return-value]


def request_with(fake_model: FakeModelServer, marker: str) -> RecordedRequest:
    matching = [request for request in fake_model.requests if marker in json.dumps(request.body)]
    assert len(matching) == 1, f"{len(matching)} requests contain {marker!r}"
    return matching[0]


def request_text(fake_model: FakeModelServer, marker: str) -> str:
    return json.dumps(request_with(fake_model, marker).body)


def offered_tools(request: RecordedRequest) -> list[str]:
    return sorted(tool["name"] for tool in request.body.get("tools", []))


def create_plan_turn(reason: str = PLAN_REASON) -> Turn:
    return Turn(
        text="Let me plan this.", tool_calls=[("create_plan", {"reason": reason})], usage=(30, 8, 0, 0)
    )


def test_a_complex_request_is_planned_run_by_parallel_executors_and_synthesized(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    fake_model.script(plan_turn(THREE_STEP_PLAN, usage=(100, 50, 0, 0)), match=PLANNER)
    fake_model.script(slow("Paris has 2.1 million people.", usage=(11, 7, 1, 0)), match="Step s1:")
    fake_model.script(slow("Rome has 2.8 million people.", usage=(13, 9, 0, 2)), match="Step s2:")
    fake_model.script(Turn(text="Rome is larger by 0.7 million.", usage=(17, 3, 0, 0)), match="Step s3:")
    fake_model.script(
        Turn(text="Rome (2.8M, s2) outnumbers Paris (2.1M, s1) by 0.7M (s3).", usage=(40, 20, 0, 0)),
        match=SYNTHESIS,
    )
    session_id = start_planning_session(bob_api, cast)
    parent_id = post(bob_api, session_id, "Compare the populations of Paris and Rome.")

    parent = drive(parent_id)

    assert (parent.status, parent.stop_reason, parent.route) == ("completed", "end_turn", "complex")
    steps = list(PlanStep.objects.filter(plan__run_id=parent_id).order_by("index"))
    assert [(step.key, step.status, step.depends_on) for step in steps] == [
        ("s1", "completed", []),
        ("s2", "completed", []),
        ("s3", "completed", ["s1", "s2"]),
    ]
    first, second = child_for(parent_id, "s1"), child_for(parent_id, "s2")
    assert first.started_at < second.finished_at and second.started_at < first.finished_at  # type: ignore[operator]
    third_prompt = request_text(fake_model, "Step s3:")
    assert "Paris has 2.1 million people." in third_prompt
    assert "Rome has 2.8 million people." in third_prompt
    synthesis_prompt = request_text(fake_model, SYNTHESIS)
    assert "Rome is larger by 0.7 million." in synthesis_prompt
    messages = bob_api.get(f"/api/v1/sessions/{session_id}/messages/").json()["results"]
    assert [(message["role"], message["text"]) for message in messages] == [
        ("user", "Compare the populations of Paris and Rome."),
        ("assistant", "Rome (2.8M, s2) outnumbers Paris (2.1M, s1) by 0.7M (s3)."),
    ]
    detail = bob_api.get(f"/api/v1/runs/{parent_id}/").json()
    assert (detail["route"], detail["route_reason"], detail["tree_usage"]) == (
        "complex",
        "the agent's planning mode is plan",
        parent.tree_usage,
    )
    assert [offered_tools(request) for request in fake_model.requests] == [
        [],
        EXECUTOR_TOOLS,
        EXECUTOR_TOOLS,
        EXECUTOR_TOOLS,
        [],
    ]
    for child in Run.objects.filter(parent_run_id=parent_id):
        assert (child.status, child.agent_config["read_only_tools"]) == ("completed", True)
        assert child.session_id == parent.session_id


def test_the_session_stream_shows_plan_executors_and_synthesis_without_gaps(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    fake_model.script(plan_turn(THREE_STEP_PLAN), match=PLANNER)
    for key in ("s1", "s2", "s3"):
        fake_model.script(Turn(text=f"result of {key}"), match=f"Step {key}:")
    fake_model.script(Turn(text="final"), match=SYNTHESIS)
    session_id = start_planning_session(bob_api, cast)
    parent_id = post(bob_api, session_id, "Compare the populations of Paris and Rome.")

    drive(parent_id)

    events = list(RunEvent.objects.filter(session_id=session_id).order_by("seq"))
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert Session.objects.get(pk=session_id).last_event_seq == len(events)
    created = [event for event in events if event.type == "plan.created"]
    assert len(created) == 1
    assert [step["id"] for step in created[0].data["steps"]] == ["s1", "s2", "s3"]
    children = {str(child.pk): child for child in Run.objects.filter(parent_run_id=parent_id)}
    queued = [event for event in events if event.type == "run.queued" and str(event.run_id) in children]
    assert sorted(event.data["plan_step"] for event in queued) == ["s1", "s2", "s3"]
    for child_id in children:
        child_types = [event.type for event in events if str(event.run_id) == child_id]
        assert child_types[0] == "run.queued"
        assert "text.delta" in child_types
        assert child_types[-1] == "run.completed"
    parent_events = [event for event in events if str(event.run_id) == parent_id]
    assert parent_events[-1].type == "run.completed"
    updates = [event.data for event in parent_events if event.type == "plan.updated"]
    assert updates[-1]["status"] == "completed"
    assert [step["status"] for step in updates[-1]["steps"]] == ["completed"] * 3
    synthesis_deltas = [
        event for event in parent_events if event.type == "text.delta" and event.seq > created[0].seq
    ]
    assert "".join(event.data["text"] for event in synthesis_deltas) == "final"


def test_parent_usage_totals_equal_the_sum_over_the_tree(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    # Every call unpriced: the tree's cost with prices is tests/test_usage_reports.py's.
    default_model = DEFAULT_MODEL_NAMES[ModelProvider.ANTHROPIC]
    ModelPrice.objects.filter(provider="anthropic", model=default_model).delete()
    fake_model.script(plan_turn(THREE_STEP_PLAN, usage=(100, 50, 3, 0)), match=PLANNER)
    fake_model.script(Turn(text="one", usage=(11, 7, 1, 0)), match="Step s1:")
    fake_model.script(Turn(text="two", usage=(13, 9, 0, 2)), match="Step s2:")
    fake_model.script(Turn(text="three", usage=(17, 3, 0, 0)), match="Step s3:")
    fake_model.script(Turn(text="final", usage=(40, 20, 0, 5)), match=SYNTHESIS)
    session_id = start_planning_session(bob_api, cast)
    parent_id = post(bob_api, session_id, "Compare the populations of Paris and Rome.")

    parent = drive(parent_id)

    children = list(Run.objects.filter(parent_run_id=parent_id))
    assert {name: getattr(parent, name) for name in USAGE_FIELDS} == {
        "input_tokens": 140,
        "output_tokens": 70,
        "cache_read_tokens": 3,
        "cache_write_tokens": 5,
    }
    assert parent.tree_usage == {
        "input_tokens": 140 + 11 + 13 + 17,
        "output_tokens": 70 + 7 + 9 + 3,
        "cache_read_tokens": 4,
        "cache_write_tokens": 7,
        "total_tokens": 181 + 89,
        # the tree's cost (tests/test_usage_reports.py): the default model's price is removed above
        "model_calls": 2 + 3,
        "unpriced_model_calls": 5,
        "cost_micros": 0,
    }
    for name in USAGE_FIELDS:
        assert parent.tree_usage[name] == getattr(parent, name) + sum(getattr(c, name) for c in children)
    completed = RunEvent.objects.get(run_id=parent_id, type="run.completed").data
    assert completed["tree_usage"] == parent.tree_usage
    assert completed["children_usage"] == {str(child.pk): child.usage for child in children}


def test_an_executor_that_tries_a_write_tool_is_refused_by_policy(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    plan = {"steps": [{"id": "s1", "title": "Note", "instructions": "Remember that the user likes tea."}]}
    fake_model.script(plan_turn(plan), match=PLANNER)
    fake_model.script(
        Turn(tool_calls=[("memory_save", {"content": "The user likes tea."})], stop_reason="tool_use"),
        Turn(text="I could not save it."),
        match="Step s1:",
    )
    fake_model.script(Turn(text="final"), match=SYNTHESIS)
    session_id = start_planning_session(bob_api, cast)
    parent_id = post(bob_api, session_id, "Remember that I like tea.")

    parent = drive(parent_id)

    child = child_for(parent_id, "s1")
    refused = RunEvent.objects.get(run_id=child.pk, type="tool.result").data
    assert refused["refused"] is True
    assert refused["name"] == "memory_save"
    assert refused["content"] == (
        "This tool call was refused: "
        "tool memory_save can change things; this run may only use read-only tools"
    )
    assert parent.status == "completed"
    assert not Memory.objects.exists()


def test_a_failing_step_triggers_a_replan_and_an_unneeded_step_is_skipped(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    plan = {
        "steps": [
            {"id": "s1", "title": "Primary source", "instructions": "Read the primary source."},
            {"id": "s2", "title": "Weather", "instructions": "Find the weather."},
            {"id": "s3", "title": "Summarize", "instructions": "Summarize s1.", "depends_on": ["s1"]},
        ]
    }
    revised = {"steps": [{"id": "s4", "title": "Backup", "instructions": "Read the backup source."}]}
    fake_model.script(plan_turn(plan), plan_turn(revised), match=PLANNER)
    fake_model.script(Turn(error_status=400), match="Step s1:")
    fake_model.script(Turn(text="sunny"), match="Step s2:")
    fake_model.script(Turn(text="backup says 42"), match="Step s4:")
    fake_model.script(Turn(text="final: 42 and sunny"), match=SYNTHESIS)
    session_id = start_planning_session(bob_api, cast)
    parent_id = post(bob_api, session_id, "Research the source and the weather.")

    parent = drive(parent_id)

    assert (parent.status, parent.error) == ("completed", "")
    statuses = dict(PlanStep.objects.filter(plan__run_id=parent_id).values_list("key", "status"))
    assert statuses == {"s1": "failed", "s2": "completed", "s3": "skipped", "s4": "completed"}
    plan_row = Plan.objects.get(run_id=parent_id)
    assert (plan_row.replans, plan_row.revision, plan_row.status) == (1, 2, "completed")
    replan_prompt = request_text(fake_model, "Step s1 failed.")
    assert "- s2 [completed] Weather: sunny" in replan_prompt
    reasons = [
        event.data.get("reason")
        for event in RunEvent.objects.filter(run_id=parent_id, type="plan.updated").order_by("seq")
    ]
    assert "replanned" in reasons


def test_a_plan_still_invalid_after_its_errors_were_sent_back_fails_the_run(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    cyclic = {
        "steps": [
            {"id": "a", "title": "A", "instructions": "do a", "depends_on": ["b"]},
            {"id": "b", "title": "B", "instructions": "do b", "depends_on": ["a"]},
        ]
    }
    fake_model.script(plan_turn(cyclic), plan_turn(cyclic), match=PLANNER)
    session_id = start_planning_session(bob_api, cast)
    parent_id = post(bob_api, session_id, "Do a and b.")

    parent = drive(parent_id)

    assert (parent.status, parent.stop_reason) == ("failed", "error")
    assert (
        parent.error
        == "The planner could not produce a valid plan: The dependencies form a cycle: a → b → a."
    )
    assert len(fake_model.requests) == 2
    assert "Your plan is invalid:\\n- The dependencies form a cycle" in json.dumps(
        fake_model.requests[1].body
    )
    assert not Run.objects.filter(parent_run_id=parent_id).exists()
    assert not Plan.objects.filter(run_id=parent_id).exists()


def test_cancelling_the_parent_leaves_no_child_running_and_closes_their_streams(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    plan = {
        "steps": [
            {"id": "s1", "title": "One", "instructions": "first"},
            {"id": "s2", "title": "Two", "instructions": "second"},
        ]
    }
    fake_model.script(plan_turn(plan), match=PLANNER)
    long_text = "word " * 500
    fake_model.script(Turn(text=long_text, chunk_size=5, chunk_delay=0.02), match="Step s1:")
    fake_model.script(Turn(text=long_text, chunk_size=5, chunk_delay=0.02), match="Step s2:")
    session_id = start_planning_session(bob_api, cast)
    parent_id = post(bob_api, session_id, "Do one and two.")
    execute_run(parent_id)
    child_ids = [str(pk) for pk in Run.objects.filter(parent_run_id=parent_id).values_list("id", flat=True)]
    threads = [execute_in_thread(child_id) for child_id in child_ids]
    wait_until(
        lambda: all(RunEvent.objects.filter(run_id=c, type="text.delta").exists() for c in child_ids),
        timeout=10,
        message="both executors to stream",
    )

    response = bob_api.post(f"/api/v1/runs/{parent_id}/cancel/")
    for thread in threads:
        thread.join(timeout=10)

    assert response.status_code == 202
    assert Run.objects.get(pk=parent_id).status == "cancelled"
    children = list(Run.objects.filter(parent_run_id=parent_id).values_list("status", "stop_reason"))
    assert children == [("cancelled", "cancelled")] * 2
    assert fake_model.wait_for_closed_streams(2, timeout=5) == 2
    assert Run.objects.get(pk=parent_id).status == "cancelled"  # the children's ends did not resume it


def test_an_auto_agent_that_answers_directly_makes_exactly_one_model_request(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    fake_model.script(Turn(text="Hello!", usage=(12, 3, 0, 0)))
    session_id = start_planning_session(bob_api, cast, planning_mode="auto")
    run_id = post(bob_api, session_id, "Hi there")

    run = drive(run_id)

    assert (run.status, run.stop_reason, run.route, run.route_reason, run.model_calls) == (
        "completed",
        "end_turn",
        "",
        "",
        1,
    )
    assert len(fake_model.requests) == 1
    assert offered_tools(fake_model.requests[0]) == sorted([*AGENT_TOOLS, "create_plan"])
    moves = RunEvent.objects.filter(run_id=run_id, type="run.status").order_by("seq")
    assert [(event.data["to"], event.data["actor"]) for event in moves] == [
        ("planning", "system"),
        ("executing", "system"),
        ("completed", "system"),
    ]
    messages = bob_api.get(f"/api/v1/sessions/{session_id}/messages/").json()["results"]
    assert [(message["role"], message["text"]) for message in messages] == [
        ("user", "Hi there"),
        ("assistant", "Hello!"),
    ]
    assert not Plan.objects.exists()


def test_a_direct_agent_is_never_offered_create_plan(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    fake_model.script(Turn(text="Hello!"))
    session_id = start_planning_session(bob_api, cast, planning_mode="direct")

    run = drive(post(bob_api, session_id, "1. Compare Paris\n2. and Rome"))

    assert (run.status, run.route, len(fake_model.requests)) == ("completed", "", 1)
    assert offered_tools(fake_model.requests[0]) == AGENT_TOOLS


def test_an_auto_agent_whose_model_calls_create_plan_plans_runs_executors_and_synthesizes(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    fake_model.script(create_plan_turn())
    fake_model.script(plan_turn(THREE_STEP_PLAN, usage=(100, 50, 0, 0)), match=PLANNER)
    fake_model.script(Turn(text="Paris has 2.1 million people.", usage=(11, 7, 1, 0)), match="Step s1:")
    fake_model.script(Turn(text="Rome has 2.8 million people.", usage=(13, 9, 0, 2)), match="Step s2:")
    fake_model.script(Turn(text="Rome is larger by 0.7 million.", usage=(17, 3, 0, 0)), match="Step s3:")
    fake_model.script(Turn(text="Rome is larger (s2, s1, s3).", usage=(40, 20, 0, 0)), match=SYNTHESIS)
    session_id = start_planning_session(bob_api, cast, planning_mode="auto")
    parent_id = post(bob_api, session_id, "Compare the populations of Paris and Rome.")

    parent = drive(parent_id)

    assert (parent.status, parent.stop_reason, parent.route, parent.route_reason) == (
        "completed",
        "end_turn",
        "complex",
        PLAN_REASON,
    )
    statuses = list(
        PlanStep.objects.filter(plan__run_id=parent_id).order_by("index").values_list("key", "status")
    )
    assert statuses == [("s1", "completed"), ("s2", "completed"), ("s3", "completed")]
    requests = fake_model.requests
    assert len(requests) == 6
    assert offered_tools(requests[0]) == sorted([*AGENT_TOOLS, "create_plan"])
    assert offered_tools(request_with(fake_model, PLANNER)) == []
    for key in ("s1", "s2", "s3"):
        assert offered_tools(request_with(fake_model, f"Step {key}:")) == EXECUTOR_TOOLS
    synthesis = request_with(fake_model, SYNTHESIS)
    assert offered_tools(synthesis) == []
    assert [message["role"] for message in synthesis.body["messages"]] == ["user", "assistant", "user"]
    # A request that defines no tools carries the earlier call and its result as text (the API's rule).
    assert synthesis.body["messages"][1]["content"] == [
        {"type": "text", "text": "Let me plan this."},
        {"type": "text", "text": f'[called tool create_plan with {{"reason": "{PLAN_REASON}"}}]'},
    ]
    answered, results = synthesis.body["messages"][2]["content"]
    assert answered == {"type": "text", "text": f"[tool result: {PLAN_STARTED.content}]"}
    assert results["text"].startswith(SYNTHESIS)
    assert "## s3: Compare\nRome is larger by 0.7 million." in results["text"]

    parent_events = list(RunEvent.objects.filter(run_id=parent_id).order_by("seq"))
    milestones = [
        (event.type, event.data.get("actor") or event.data.get("name") or event.data.get("reason"))
        for event in parent_events
        if event.type in ("tool.result", "plan.created", "run.completed")
        or (event.type == "run.status" and event.data["actor"] in ("router", "planner", "children"))
    ]
    assert milestones == [
        ("tool.result", "create_plan"),
        ("run.status", "router"),
        ("plan.created", None),
        ("run.status", "planner"),
        ("run.status", "children"),
        ("run.status", "planner"),
        ("run.status", "children"),
        ("run.completed", None),
    ]
    routed = next(event for event in parent_events if event.data.get("actor") == "router")
    assert routed.data == {
        "from": "executing",
        "to": "executing",
        "actor": "router",
        "route": "complex",
        "reason": PLAN_REASON,
    }
    messages = bob_api.get(f"/api/v1/sessions/{session_id}/messages/").json()["results"]
    assert [(message["role"], message["text"]) for message in messages] == [
        ("user", "Compare the populations of Paris and Rome."),
        ("assistant", "Let me plan this."),
        ("tool", ""),
        ("assistant", "Rome is larger (s2, s1, s3)."),
    ]
    children = list(Run.objects.filter(parent_run_id=parent_id))
    assert {name: getattr(parent, name) for name in USAGE_FIELDS} == {
        "input_tokens": 30 + 100 + 40,
        "output_tokens": 8 + 50 + 20,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    for name in USAGE_FIELDS:
        assert parent.tree_usage[name] == getattr(parent, name) + sum(getattr(c, name) for c in children)
    assert parent.tree_usage["input_tokens"] == 170 + 11 + 13 + 17


def test_the_planning_mode_is_set_through_the_agents_api_and_validated(
    cast: Cast, bob_api: APIClient, alice_api: APIClient
) -> None:
    agent = make_agent(tenant=cast.tenant_a)

    changed = alice_api.patch(f"/api/v1/agents/{agent.pk}/", {"planning_mode": "auto"}, format="json")
    refused = alice_api.patch(f"/api/v1/agents/{agent.pk}/", {"planning_mode": "always"}, format="json")

    assert (changed.status_code, changed.json()["planning_mode"]) == (200, "auto")
    assert refused.status_code == 400
    assert list(refused.json()["error"]["fields"]) == ["planning_mode"]
    agent.refresh_from_db()
    assert agent.planning_mode == "auto"


def test_offline_agent_in_auto_mode_plans_a_numbered_list(cast: Cast, bob_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a, planning_mode="auto")
    session_id = str(bob_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()["id"])
    run_id = post(bob_api, session_id, "Please:\n1. what is 2+3?\n2. what is 4*5?")

    run = drive(run_id)

    assert (run.status, run.route, run.route_reason) == ("completed", "complex", "the message lists 2 tasks")
    steps = list(PlanStep.objects.filter(plan__run_id=run_id).values_list("key", "title", "status"))
    assert steps == [("s1", "what is 2+3?", "completed"), ("s2", "what is 4*5?", "completed")]
    transcript = Message.objects.filter(run_id=run_id, position__isnull=False).order_by("position")
    assert [(message.role, message.text) for message in transcript] == [
        ("user", "Please:\n1. what is 2+3?\n2. what is 4*5?"),
        ("assistant", "This request has several parts: I will have them planned."),
        ("tool", ""),
        (
            "assistant",
            "Here is what the plan's steps found:\n- what is 2+3? [s1]: 2+3 = 5.\n"
            # The step's title (the person's words) and its executor's answer escape the "*".
            + "- what is 4\\*5? [s2]: 4\\*5 = 20.",
        ),
    ]
    assert run.model_calls == 2  # the create_plan call and the synthesis: the offline planner asks no model
    call_id = transcript[1].content[1]["id"]
    chat = Client()
    chat.force_login(cast.bob)
    page = chat.get(f"/chat/{session_id}/").content.decode()
    answer = page[page.index(f'<article class="turn turn-assistant" id="run-{run_id}"') :]
    assert f'<details class="tool-card" data-tool-call-id="{call_id}" data-state="done">' in answer
    assert answer.count('<details class="child-run" id="run-') == 2
    for title in ("s1: what is 2+3?", "s2: what is 4*5?"):
        assert f'<span class="child-run-title" data-slot="title">{title}</span>' in answer


def test_a_parent_whose_resume_was_lost_is_resumed_by_the_sweeper(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    plan = {"steps": [{"id": "s1", "title": "One", "instructions": "first"}]}
    fake_model.script(plan_turn(plan), match=PLANNER)
    fake_model.script(Turn(text="one done"), match="Step s1:")
    fake_model.script(Turn(text="final"), match=SYNTHESIS)
    session_id = start_planning_session(bob_api, cast)
    parent_id = post(bob_api, session_id, "Do one.")
    execute_run(parent_id)
    child = Run.objects.get(parent_run_id=parent_id)
    # The child's worker records its end, then dies before its task resumes the parent.
    run_execute(run_id=child.pk)
    assert Run.objects.get(pk=parent_id).status == "executing"

    report = sweep_runs()

    assert report.parents_resumed == 1
    assert Run.objects.get(pk=parent_id).status == "queued"
    assert drive(parent_id).status == "completed"
