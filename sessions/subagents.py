"""spawn_subagent: an agent of the normal loop delegates one task to a read-only sub-agent.

The sub-agent is a child run (``parent_run``) configured like a planner's executor. Its parent
waits the way a planning run does (sessions.planning.delivery): executing, with no lease, so it
holds its session's lane while no worker holds it. The child's end (its task, or the sweeper)
queues the parent again; the parent's loop replays its last turn, finds the child by the tool
call's id, and the tool answers with the child's final text. One child per tool call, however
often the parent replays.
"""

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from agents.runtime.types import ApprovalCheck, ToolCallRequested
from sessions.models import Run, RunStatus
from sessions.planning.delivery import parent_resume_when_children_done
from sessions.planning.executors import child_run_create, executor_config, run_final_text
from sessions.state import TERMINAL_RUN_STATUSES, run_transition
from tools.provider import argument_errors

SPAWN_SUBAGENT = "spawn_subagent"
SUBAGENT_SYSTEM_PROMPT = (
    "You are a sub-agent carrying out one task another agent delegated to you. Do only this task, with "
    "read-only tools; you cannot change anything or start other agents. End with the task's result."
)
WAITING = ApprovalCheck(state="waiting")


@dataclass(frozen=True)
class SpawnRequest:
    """A spawn_subagent call the gate let through: its child starts when the parent pauses."""

    tool_call_id: str
    task: str
    expected_output: str


class SubagentSpawner:
    """The tool gate's part for spawn_subagent calls: which wait on a child, which children to start."""

    def __init__(self, run: Run, input_schema: dict[str, Any]) -> None:
        self.run = run
        self.input_schema = input_schema
        self.requests: list[SpawnRequest] = []

    def check(self, calls: list[ToolCallRequested]) -> dict[str, ApprovalCheck]:
        """``waiting`` for calls whose child is open or not yet started; finished ones are left out."""
        if not calls:
            return {}
        children = {
            child.parent_tool_call_id: child
            for child in Run.objects.filter(
                parent_run=self.run, parent_tool_call_id__in=[c.id for c in calls]
            )
        }
        started = Run.objects.filter(parent_run=self.run).count()
        checks: dict[str, ApprovalCheck] = {}
        for call in calls:
            child = children.get(call.id)
            if child is not None:
                if child.status not in TERMINAL_RUN_STATUSES:
                    checks[call.id] = WAITING
                continue  # finished: the tool answers with its result
            refusal = self._refusal(call, started=started)
            if refusal:
                checks[call.id] = ApprovalCheck(state="refused", reason=refusal)
                continue
            started += 1
            self.requests.append(
                SpawnRequest(
                    tool_call_id=call.id,
                    task=str(call.arguments["task"]).strip(),
                    expected_output=str(call.arguments.get("expected_output") or "").strip(),
                )
            )
            checks[call.id] = WAITING
        return checks

    def _refusal(self, call: ToolCallRequested, *, started: int) -> str | None:
        if self.run.parent_run_id is not None:
            return "a sub-agent cannot start other sub-agents"
        if errors := argument_errors(self.input_schema, call.arguments):
            return "invalid arguments: " + "; ".join(errors)
        if not str(call.arguments["task"]).strip():
            return "the task is empty"
        limit = settings.PLANNER_MAX_CHILDREN_PER_RUN
        if started >= limit:
            return f"the limit of {limit} sub-agents per run was reached"
        return None


def subagents_start_and_wait(run: Run, requests: list[SpawnRequest]) -> bool:
    """Start the requested children and release the run's worker, in one transaction.

    False when the run was moved meanwhile (a cancel): nothing was started. The children are
    dispatched by the run's task once this returns (``run_dispatch_next``).
    """
    with transaction.atomic():
        run.refresh_from_db()
        if run.status != RunStatus.EXECUTING:
            return False
        for request in requests:
            _child_create(run, request)
        run_transition(run, RunStatus.EXECUTING, actor="subagent", lease_owner="", lease_expires_at=None)
    # Children that ended before the worker was released found no waiting parent to queue.
    parent_resume_when_children_done(parent_id=run.pk)
    return True


def _child_create(parent: Run, request: SpawnRequest) -> Run:
    try:
        with transaction.atomic():
            return child_run_create(
                parent,
                prompt=subagent_prompt(request),
                title=request.task,
                config=executor_config(parent.agent_config, prompt=SUBAGENT_SYSTEM_PROMPT),
                event_data={"tool_call_id": request.tool_call_id},
                parent_tool_call_id=request.tool_call_id,
            )
    except IntegrityError:  # another execution of the parent started it first
        return Run.objects.get(parent_run=parent, parent_tool_call_id=request.tool_call_id)


def subagent_prompt(request: SpawnRequest) -> str:
    if not request.expected_output:
        return request.task
    return f"{request.task}\n\nExpected output: {request.expected_output}"


class SubagentUnavailable(Exception):
    """The sub-agent of a tool call gave no answer; the message is for the model."""


def subagent_answer(*, parent_run_id: Any, tool_call_id: str) -> str:
    """The final answer of the tool call's sub-agent, once it has ended."""
    child = Run.objects.filter(parent_run_id=parent_run_id, parent_tool_call_id=tool_call_id).first()
    if child is None:
        raise SubagentUnavailable("no sub-agent was started for this call")
    if child.status == RunStatus.COMPLETED:
        answer = run_final_text(child)
        if not answer:
            raise SubagentUnavailable(f"the sub-agent ended ({child.stop_reason}) without an answer")
        return answer
    if child.status == RunStatus.TIMEOUT:
        raise SubagentUnavailable("the sub-agent ran out of time before it answered")
    if child.status == RunStatus.CANCELLED:
        raise SubagentUnavailable("the sub-agent was cancelled before it answered")
    if child.status == RunStatus.FAILED:
        raise SubagentUnavailable(f"the sub-agent failed: {child.error or child.stop_reason}")
    raise SubagentUnavailable("the sub-agent has not finished")
