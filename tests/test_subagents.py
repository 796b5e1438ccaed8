"""spawn_subagent (issue 9): an agent of the normal loop delegates a task to a read-only child run.

The parent releases its worker while the child runs and is queued again by the child's end; these
tests play the workers' part in-process (``drive``) and check the database between the steps.
"""

from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.models import Agent
from sessions.execution import run_execute
from sessions.models import Run, RunEvent
from sessions.state import run_transition
from sessions.sweeper import sweep_runs
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, RecordedRequest, Turn
from tests.live import wait_until
from tests.test_planner import drive, execute_in_thread, post
from tools.models import ToolPolicy
from tools.registry import toolset_for_run

pytestmark = pytest.mark.django_db(transaction=True)

SUBAGENT = "You are a sub-agent"
TASK = "Find the population of Paris."
# The read-only tools of the messaging profile: what a sub-agent of such an agent may use.
SUBAGENT_TOOLS = ["calculator", "current_time", "memory_search", "session_history", "sessions_list"]


def delegating_agent(cast: Cast, *, provider: str = "anthropic", planning_mode: str = "direct") -> Agent:
    agent = make_agent(tenant=cast.tenant_a, model_provider=provider, planning_mode=planning_mode)
    ToolPolicy.objects.create(agent=agent, profile="messaging")
    return agent


def start_session(api: APIClient, agent: Agent) -> str:
    return str(api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()["id"])


def spawn(task: str = TASK, **extra: str) -> Turn:
    return Turn(tool_calls=[("spawn_subagent", {"task": task, **extra})], usage=(20, 10, 0, 0))


def tool_names(request: RecordedRequest) -> list[str]:
    if request.api == "openai":
        return sorted(tool["function"]["name"] for tool in request.body.get("tools", []))
    return sorted(tool["name"] for tool in request.body.get("tools", []))


def tool_results_sent(request: RecordedRequest) -> list[dict[str, Any]]:
    """The tool results at the end of a request, as (id, content, is_error) in neutral form."""
    if request.api == "openai":
        return [
            {"id": message["tool_call_id"], "content": message["content"]}
            for message in request.body["messages"]
            if message["role"] == "tool"
        ]
    last = request.body["messages"][-1]
    return [
        {"id": block["tool_use_id"], "content": block["content"], "is_error": block["is_error"]}
        for block in last["content"]
        if block["type"] == "tool_result"
    ]


def call_id_of(parent_id: str) -> str:
    completed = RunEvent.objects.filter(run_id=parent_id, type="message.completed").order_by("seq").first()
    assert completed is not None
    return str(completed.data["content"][0]["id"])


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_an_agent_delegates_a_task_and_continues_with_the_subagents_answer(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, provider: str
) -> None:
    fake_model.script(Turn(text="Paris has 2.1 million people.", usage=(11, 7, 1, 0)), match=SUBAGENT)
    fake_model.script(spawn(expected_output="a number"), Turn(text="About 2.1 million.", usage=(30, 5, 0, 2)))
    session_id = start_session(bob_api, delegating_agent(cast, provider=provider))
    parent_id = post(bob_api, session_id, "How many people live in Paris? Delegate it.")

    execute_run(parent_id)

    parent = Run.objects.get(pk=parent_id)
    assert (parent.status, parent.lease_owner, parent.lease_expires_at) == ("executing", "", None)
    child = Run.objects.get(parent_run_id=parent_id)
    call_id = call_id_of(parent_id)
    assert (child.status, child.parent_tool_call_id, child.title) == ("queued", call_id, TASK)
    assert child.session_id == parent.session_id
    assert child.user_message is not None
    assert child.user_message.text == f"{TASK}\n\nExpected output: a number"
    assert (child.agent_config["role"], child.agent_config["read_only_tools"]) == ("executor", True)
    assert child.agent_config["system_prompt"].startswith(SUBAGENT)
    assert sorted(tool.name for tool in toolset_for_run(child).allowed()) == SUBAGENT_TOOLS
    queued = RunEvent.objects.get(run_id=child.pk, type="run.queued").data
    assert queued == {
        "message_id": str(child.user_message_id),
        "parent_run_id": parent_id,
        "title": TASK,
        "tool_call_id": call_id,
    }

    parent = drive(parent_id)

    assert (parent.status, parent.stop_reason) == ("completed", "end_turn")
    child.refresh_from_db()
    assert (child.status, child.stop_reason) == ("completed", "end_turn")
    parent_requests = [request for request in fake_model.requests if SUBAGENT not in str(request.body)]
    child_requests = [request for request in fake_model.requests if SUBAGENT in str(request.body)]
    assert (len(parent_requests), len(child_requests)) == (2, 1)
    assert "spawn_subagent" in tool_names(parent_requests[0])
    assert tool_names(child_requests[0]) == SUBAGENT_TOOLS
    expected: dict[str, Any] = {"id": call_id, "content": "Paris has 2.1 million people."}
    if provider == "anthropic":
        expected["is_error"] = False
    assert tool_results_sent(parent_requests[1]) == [expected]
    started = RunEvent.objects.get(run_id=child.pk, type="run.started").data
    assert started == {
        "attempt": 1,
        "agent_id": str(child.agent_id),
        "parent_run_id": parent_id,
        "title": TASK,
        "tool_call_id": call_id,
    }
    messages = bob_api.get(f"/api/v1/sessions/{session_id}/messages/").json()["results"]
    assert [(message["role"], message["text"]) for message in messages] == [
        ("user", "How many people live in Paris? Delegate it."),
        ("assistant", ""),
        ("tool", ""),
        ("assistant", "About 2.1 million."),
    ]
    assert parent.tree_usage == {
        "input_tokens": 20 + 30 + 11,
        "output_tokens": 10 + 5 + 7,
        "cache_read_tokens": 1,
        "cache_write_tokens": 2,
        "total_tokens": 50 + 15 + 11 + 7,
        # the tree's cost: the default models have no price here
        "model_calls": 2 + 1,
        "unpriced_model_calls": 3,
        "cost_micros": 0,
    }


def test_an_auto_agent_may_delegate_and_its_subagent_is_never_offered_create_plan(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    fake_model.script(Turn(text="Paris has 2.1 million people."), match=SUBAGENT)
    fake_model.script(spawn(), Turn(text="About 2.1 million."))
    session_id = start_session(bob_api, delegating_agent(cast, planning_mode="auto"))
    parent_id = post(bob_api, session_id, "How many people live in Paris? Delegate it.")

    parent = drive(parent_id)

    assert (parent.status, parent.route) == ("completed", "")
    parent_requests = [request for request in fake_model.requests if SUBAGENT not in str(request.body)]
    child_requests = [request for request in fake_model.requests if SUBAGENT in str(request.body)]
    assert (len(parent_requests), len(child_requests)) == (2, 1)
    assert tool_names(parent_requests[0]) == sorted(
        [
            *SUBAGENT_TOOLS,
            "ask_user",
            "memory_forget",
            "memory_save",
            "session_send",
            "spawn_subagent",
            "create_plan",
        ]
    )
    assert tool_names(child_requests[0]) == SUBAGENT_TOOLS
    assert Run.objects.get(parent_run_id=parent_id).agent_config["planning_mode"] == "direct"


def test_a_failing_subagent_is_an_error_result_and_the_parent_continues(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    fake_model.script(Turn(error_status=400), match=SUBAGENT)
    fake_model.script(spawn(), Turn(text="The sub-agent could not find it."))
    session_id = start_session(bob_api, delegating_agent(cast))
    parent_id = post(bob_api, session_id, "How many people live in Paris?")

    parent = drive(parent_id)

    child = Run.objects.get(parent_run_id=parent_id)
    assert (child.status, child.stop_reason) == ("failed", "llm_error")
    assert (parent.status, parent.stop_reason) == ("completed", "end_turn")
    result = RunEvent.objects.get(run_id=parent_id, type="tool.result").data
    assert result == {
        "tool_call_id": call_id_of(parent_id),
        "name": "spawn_subagent",
        "content": f"the sub-agent failed: {child.error}",
        "is_error": True,
    }
    assert child.error != ""
    assert tool_results_sent(fake_model.requests[-1])[0]["is_error"] is True


def test_a_subagent_cannot_spawn_another(cast: Cast, bob_api: APIClient, fake_model: FakeModelServer) -> None:
    fake_model.script(
        Turn(tool_calls=[("spawn_subagent", {"task": "go deeper"})]),
        Turn(text="I did it myself."),
        match=SUBAGENT,
    )
    fake_model.script(spawn(), Turn(text="done"))
    session_id = start_session(bob_api, delegating_agent(cast))
    parent_id = post(bob_api, session_id, "Delegate something.")

    parent = drive(parent_id)

    assert parent.status == "completed"
    child = Run.objects.get(parent_run_id=parent_id)
    assert not Run.objects.filter(parent_run=child).exists()
    refused = RunEvent.objects.get(run_id=child.pk, type="tool.result").data
    assert (refused["refused"], refused["content"]) == (
        True,
        "This tool call was refused: there is no tool named 'spawn_subagent' for this agent",
    )
    child_requests = [request for request in fake_model.requests if SUBAGENT in str(request.body)]
    assert [tool_names(request) for request in child_requests] == [SUBAGENT_TOOLS, SUBAGENT_TOOLS]


def test_replaying_the_parent_does_not_start_a_second_subagent(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    fake_model.script(Turn(text="2.1 million"), match=SUBAGENT)
    fake_model.script(spawn(), Turn(text="About 2.1 million."))
    session_id = start_session(bob_api, delegating_agent(cast))
    parent_id = post(bob_api, session_id, "How many people live in Paris?")
    execute_run(parent_id)
    # As after a crash the sweeper recovered from: the parent runs again while its child is still queued.
    run_transition(Run.objects.get(pk=parent_id), "queued", actor="test")

    execute_run(parent_id)

    assert Run.objects.get(pk=parent_id).status == "executing"
    assert Run.objects.filter(parent_run_id=parent_id).count() == 1
    assert RunEvent.objects.filter(run__parent_run_id=parent_id, type="run.queued").count() == 1
    assert len(fake_model.requests) == 1  # the replay answered the stored call; it did not ask again

    parent = drive(parent_id)

    assert parent.status == "completed"
    assert Run.objects.filter(parent_run_id=parent_id).count() == 1
    assert len(fake_model.requests) == 3


def test_cancelling_the_parent_cancels_its_running_subagent(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    fake_model.script(Turn(text="word " * 500, chunk_size=5, chunk_delay=0.02), match=SUBAGENT)
    fake_model.script(spawn())
    session_id = start_session(bob_api, delegating_agent(cast))
    parent_id = post(bob_api, session_id, "Delegate a long job.")
    execute_run(parent_id)
    child = Run.objects.get(parent_run_id=parent_id)
    thread = execute_in_thread(str(child.pk))
    wait_until(
        lambda: RunEvent.objects.filter(run_id=child.pk, type="text.delta").exists(),
        timeout=10,
        message="the sub-agent to stream",
    )

    response = bob_api.post(f"/api/v1/runs/{parent_id}/cancel/")
    thread.join(timeout=10)

    assert response.status_code == 202
    assert Run.objects.filter(pk=parent_id).values_list("status", "stop_reason").get() == (
        "cancelled",
        "cancelled",
    )
    assert Run.objects.filter(pk=child.pk).values_list("status", "stop_reason").get() == (
        "cancelled",
        "cancelled",
    )
    assert fake_model.wait_for_closed_streams(1, timeout=5) == 1


def test_the_sweeper_resumes_a_parent_whose_subagent_wake_up_was_lost(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    fake_model.script(Turn(text="2.1 million"), match=SUBAGENT)
    fake_model.script(spawn(), Turn(text="About 2.1 million."))
    session_id = start_session(bob_api, delegating_agent(cast))
    parent_id = post(bob_api, session_id, "How many people live in Paris?")
    execute_run(parent_id)
    # The child's worker records its end, then dies before its task queues the parent.
    run_execute(run_id=Run.objects.get(parent_run_id=parent_id).pk)
    assert Run.objects.get(pk=parent_id).status == "executing"

    report = sweep_runs()

    assert report.parents_resumed == 1
    assert drive(parent_id).status == "completed"
    assert RunEvent.objects.get(run_id=parent_id, type="tool.result").data["content"] == "2.1 million"


def test_calls_past_the_childrens_limit_are_refused(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, settings: Any
) -> None:
    settings.PLANNER_MAX_CHILDREN_PER_RUN = 1
    fake_model.script(Turn(text="one"), match=SUBAGENT)
    two_spawns = Turn(
        tool_calls=[("spawn_subagent", {"task": "first"}), ("spawn_subagent", {"task": "second"})]
    )
    fake_model.script(two_spawns, Turn(text="done"))
    session_id = start_session(bob_api, delegating_agent(cast))
    parent_id = post(bob_api, session_id, "Delegate two things.")

    parent = drive(parent_id)

    assert parent.status == "completed"
    assert list(Run.objects.filter(parent_run_id=parent_id).values_list("title", flat=True)) == ["first"]
    results = [
        (event.data["content"], event.data["is_error"])
        for event in RunEvent.objects.filter(run_id=parent_id, type="tool.result").order_by("seq")
    ]
    assert sorted(results) == [
        ("This tool call was refused: the limit of 1 sub-agents per run was reached", True),
        ("one", False),
    ]


def test_the_offline_model_delegates_on_request(cast: Cast, bob_api: APIClient) -> None:
    session_id = start_session(bob_api, delegating_agent(cast, provider="offline"))
    parent_id = post(bob_api, session_id, "delegate: what is 6*7?")

    parent = drive(parent_id)

    child = Run.objects.get(parent_run_id=parent_id)
    assert (parent.status, child.status, child.title) == ("completed", "completed", "what is 6*7?")
    answer = parent.messages.filter(role="assistant").order_by("position").last()
    assert answer is not None
    assert answer.text == "The sub-agent answered: 6\\*7 = 42."
