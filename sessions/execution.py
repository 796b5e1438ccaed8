"""Executing one run: claim it, build the loop's inputs, run the loop, record the end."""

import contextlib
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from agents.model_clients import ProviderNotConfigured, model_client_for
from agents.runtime.compaction import CompactionPolicy
from agents.runtime.loop import LoopConfig, LoopResult, run_agent_loop
from agents.runtime.metering import MeteredModelClient
from agents.runtime.plan_tool import PlanRequest
from agents.runtime.types import (
    ChatMessage,
    ModelClient,
    ToolCallRequested,
    ToolOutcome,
    ToolProvider,
    ToolSpec,
)
from billing.meter import credit_meter_for, payer_for_run
from billing.pricing import run_price
from core.errors import DATABASE_UNAVAILABLE_ERRORS
from memory.retrieval import memories_for_context
from sessions.approvals import ToolCallGate, run_is_waiting_only_on_resolved_requests
from sessions.compaction import chat_message_for, compaction_policy_for, run_transcript
from sessions.lane import run_claim
from sessions.models import Message, Run, RunRoute, RunStatus, StopReason
from sessions.planning.orchestration import run_plan_advance
from sessions.planning.routing import offers_create_plan, route_to_plan_record
from sessions.questions import ASK_USER, QuestionAsker
from sessions.recorder import DjangoRunRecorder
from sessions.run_end import run_finish
from sessions.run_host import RunHandle, active_runs, new_lease_owner
from sessions.state import (
    TERMINAL_RUN_STATUSES,
    InvalidTransition,
    StaleTransition,
    run_transition,
)
from sessions.subagents import SPAWN_SUBAGENT, SpawnRequest, SubagentSpawner, subagents_start_and_wait
from tenants.limits import tenant_limit
from tools.provider import DjangoToolProvider, tool_context_for
from tools.registry import RunToolset, toolset_for_run

logger = logging.getLogger(__name__)

# How each way the loop can end maps onto the run's terminal state.
LOOP_OUTCOMES: dict[str, tuple[str, str]] = {
    "end_turn": (RunStatus.COMPLETED, StopReason.END_TURN),
    "max_steps": (RunStatus.COMPLETED, StopReason.MAX_STEPS),
    "max_tokens": (RunStatus.COMPLETED, StopReason.MAX_TOKENS),
    "cancelled": (RunStatus.CANCELLED, StopReason.CANCELLED),
    "timeout": (RunStatus.TIMEOUT, StopReason.TIMEOUT),
    "llm_error": (RunStatus.FAILED, StopReason.LLM_ERROR),
    "context_overflow": (RunStatus.FAILED, StopReason.CONTEXT_OVERFLOW),
    "insufficient_credits": (RunStatus.FAILED, StopReason.INSUFFICIENT_CREDITS),
    "no_price": (RunStatus.FAILED, StopReason.NO_PRICE),
}


def run_execute(*, run_id: UUID) -> Run | None:
    """Execute the run if it can be claimed; returns it, or None when it was not claimed."""
    owner = new_lease_owner()
    run = run_claim(run_id=run_id, owner=owner)
    if run is None:
        return None
    handle = active_runs.register(run.pk, lease_owner=owner)
    try:
        _execute_claimed(run, handle=handle)
    except DATABASE_UNAVAILABLE_ERRORS:
        logger.warning("run %s lost the database; queueing it again", run.pk, exc_info=True)
        _requeue_after_database_loss(run)
    except Exception as error:
        logger.exception("run %s crashed", run.pk)
        run_finish(
            run,
            status=RunStatus.FAILED,
            stop_reason=StopReason.ERROR,
            error=f"{type(error).__name__}: {error}",
        )
    finally:
        active_runs.unregister(handle)
    return run


def _requeue_after_database_loss(run: Run) -> None:
    """A write failed on a dead connection: the run's steps commit one by one, so it resumes from
    its last one rather than failing. Each such loss counts as an attempt, so a run whose writes
    always fail ends after ``RUN_MAX_ATTEMPTS``. Still no database: its lease lapses, and the
    sweeper queues it."""
    with contextlib.suppress(DatabaseError):
        connection.close()  # the dead connection; the next query opens (or borrows) a live one
    try:
        run.refresh_from_db()
        if run.status == RunStatus.CANCELLING:
            run_finish(run, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)
        elif run.attempt >= settings.RUN_MAX_ATTEMPTS:
            error = f"the database failed the run {run.attempt} times; giving up"
            run_finish(run, status=RunStatus.FAILED, stop_reason=StopReason.ERROR, error=error)
        else:
            run_transition(
                run,
                RunStatus.QUEUED,
                actor="worker",
                lease_owner="",
                lease_expires_at=None,
                attempt=run.attempt + 1,
            )
    except (StaleTransition, InvalidTransition):
        logger.warning("run %s moved while being queued again; leaving it as it is", run.pk)
    except DatabaseError:
        logger.warning("run %s could not be queued again yet; the sweeper will once its lease lapses", run.pk)


def _execute_claimed(run: Run, *, handle: RunHandle) -> None:
    # The claim leaves runs that plan first planning; an auto run that planned resumes executing.
    if run.status == RunStatus.PLANNING or run.route == RunRoute.COMPLEX:
        _execute_planning(run, handle=handle)
        return
    try:
        model, recorder = _model_and_recorder(run, handle=handle)
    except ProviderNotConfigured as error:
        run_finish(run, status=RunStatus.FAILED, stop_reason=StopReason.LLM_ERROR, error=str(error))
        return
    _run_loop(run, model=model, recorder=recorder)


def _model_and_recorder(run: Run, *, handle: RunHandle) -> tuple[ModelClient, DjangoRunRecorder]:
    """The run's model client, its calls held and paid in credits when the tenant meters them."""
    model = model_client_for(tenant=run.tenant, agent_config=run.agent_config)
    price = run_price(run)
    recorder = DjangoRunRecorder(
        run, handle=handle, deadline=_deadline_for(run), price=price, end_run=partial(_finish_as, run)
    )
    meter = credit_meter_for(payer_for_run(run), price=price, current_step_id=recorder.open_model_step_id)
    if meter is not None:
        model = MeteredModelClient(model, meter)
    return model, recorder


def _run_loop(
    run: Run,
    *,
    model: ModelClient,
    recorder: DjangoRunRecorder,
    synthesis_context: str = "",
) -> None:
    """The agent loop over the run's transcript; a synthesis adds the step results and offers no tools.

    An ``auto`` agent's top-level run is offered ``create_plan``: when its model calls it, the run plans.
    """
    is_tool_use = not synthesis_context
    toolset = toolset_for_run(run)
    config = loop_config_for(run.agent_config, compaction=compaction_policy_for(run, toolset))
    config.offers_create_plan = is_tool_use and offers_create_plan(run)
    memories = memories_for_context(run)
    if memories:
        config.system_prompt = f"{config.system_prompt}\n\n{memories}".strip()
    history = transcript_for(run)
    if synthesis_context:
        history = with_added_user_text(history, synthesis_context)
    tools: ToolProvider = DjangoToolProvider(toolset, tool_context_for(run)) if is_tool_use else NO_TOOLS
    subagents = _subagent_spawner(run, toolset)
    result = run_agent_loop(
        config=config,
        history=history,
        model=model,
        tools=tools,
        recorder=recorder,
        model_calls_done=run.model_calls,
        approvals=(
            ToolCallGate(run, toolset, subagents=subagents, questions=_question_asker(toolset, run))
            if is_tool_use
            else None
        ),
    )
    if result.plan_request is not None:
        _plan_requested(run, result.plan_request, model=model, recorder=recorder)
        return
    _record_loop_result(run, result, recorder, subagents)


def _plan_requested(
    run: Run, request: PlanRequest, *, model: ModelClient, recorder: DjangoRunRecorder
) -> None:
    """The model called ``create_plan`` (its turn is answered): record the route, then plan."""
    route_to_plan_record(run, reason=request.reason, recorder=recorder)
    _plan_advance(run, model=model, recorder=recorder)


def _question_asker(toolset: RunToolset, run: Run) -> QuestionAsker | None:
    tool = toolset.tools.get(ASK_USER)
    return QuestionAsker(run, tool.input_schema) if tool is not None else None


def _subagent_spawner(run: Run, toolset: RunToolset) -> SubagentSpawner | None:
    tool = toolset.tools.get(SPAWN_SUBAGENT)
    return SubagentSpawner(run, tool.input_schema) if tool is not None else None


def _execute_planning(run: Run, *, handle: RunHandle) -> None:
    """Plan and coordinate executors (sessions.planning); the loop synthesizes the answer."""
    try:
        model, recorder = _model_and_recorder(run, handle=handle)
    except ProviderNotConfigured as error:
        run_finish(run, status=RunStatus.FAILED, stop_reason=StopReason.LLM_ERROR, error=str(error))
        return
    _plan_advance(run, model=model, recorder=recorder)


def _plan_advance(run: Run, *, model: ModelClient, recorder: DjangoRunRecorder) -> None:
    """Plan or continue the plan: release the worker while executors work, or synthesize the answer."""
    outcome = run_plan_advance(run, model=model, recorder=recorder)
    if outcome.action == "wait":
        return
    if outcome.action == "fail":
        stop_reason = outcome.extra.get("stop_reason", StopReason.ERROR)
        run_finish(run, status=RunStatus.FAILED, stop_reason=stop_reason, error=outcome.text)
        return
    if outcome.action == "cancelled":
        _finish_stopped_planning(run, recorder)
        return
    if run.status != RunStatus.EXECUTING:  # a run that planned first is still planning
        run_transition(run, RunStatus.EXECUTING)
    run.refresh_from_db(fields=["model_calls"])  # planning made calls of its own
    _run_loop(run, model=model, recorder=recorder, synthesis_context=outcome.text)


def _finish_stopped_planning(run: Run, recorder: DjangoRunRecorder) -> None:
    """A planner call stopped: the run was cancelled, ran out of time, or another worker owns it."""
    reason = recorder.stop_requested()
    if reason == "lease_lost":
        logger.warning("run %s: lease lost while planning; another worker continues it", run.pk)
    elif reason == "shutdown":
        run_hand_back(run)
    elif reason == "timeout":
        run_finish(run, status=RunStatus.TIMEOUT, stop_reason=StopReason.TIMEOUT)
    else:
        run_finish(run, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)


def with_added_user_text(history: list[ChatMessage], text: str) -> list[ChatMessage]:
    """``text`` joins the last user turn (or starts one), so roles keep alternating."""
    block = {"type": "text", "text": text}
    if history and history[-1].role == "user":
        return [*history[:-1], ChatMessage(role="user", content=[*history[-1].content, block])]
    return [*history, ChatMessage(role="user", content=[block])]


class _NoTools:
    """The tool provider of a direct answer or a synthesis: nothing to call."""

    def specs(self) -> list[ToolSpec]:
        return []

    def timeout_for(self, name: str) -> float:
        return 0.0

    def is_read_only(self, name: str) -> bool:
        return True  # no tool runs: the call is answered as unknown

    def execute(self, call: ToolCallRequested, *, should_stop: Callable[[], bool]) -> ToolOutcome:
        return ToolOutcome(content=f"there is no tool named {call.name!r}", is_error=True)


NO_TOOLS = _NoTools()


def _deadline_for(run: Run) -> float:
    """The monotonic time the run's wall-clock limit ends, counted from its first start."""
    limit = run.agent_config.get("run_timeout_seconds") or tenant_limit(run.tenant, "run_timeout_seconds")
    started_at = run.started_at or timezone.now()
    elapsed = (timezone.now() - started_at).total_seconds()
    return time.monotonic() + max(0.0, limit - elapsed)


def loop_config_for(
    agent_config: dict[str, Any], *, compaction: CompactionPolicy | None = None
) -> LoopConfig:
    system_prompt = agent_config.get("system_prompt", "")
    if agent_config.get("goal"):
        system_prompt = f"{system_prompt}\n\nYour goal: {agent_config['goal']}".strip()
    return LoopConfig(
        model=agent_config["model_name"],
        system_prompt=system_prompt,
        max_model_calls=agent_config["max_steps"],
        max_output_tokens=agent_config["max_tokens"],
        temperature=agent_config.get("temperature"),
        max_parallel_tools=settings.RUN_MAX_PARALLEL_TOOLS,
        model_timeout_seconds=settings.MODEL_TIMEOUT_SECONDS,
        compaction=compaction,
    )


def transcript_for(run: Run) -> list[ChatMessage]:
    """The model's context for the run: compacted history, then the newer messages of the run's
    branch (sessions.compaction).

    An executor sees only its own step: its prompt and its own turns.
    """
    if run.parent_run_id is not None:
        own = Message.objects.filter(run=run, position__isnull=False).order_by("position")
        return [chat_message_for(message) for message in own.only("role", "content")]
    return run_transcript(run)


def _record_loop_result(
    run: Run, result: LoopResult, recorder: DjangoRunRecorder, subagents: SubagentSpawner | None = None
) -> None:
    if result.stop_reason == "lease_lost":
        logger.warning("run %s: lease lost; another worker continues it", run.pk)
        return
    if result.stop_reason == "shutdown":
        run_hand_back(run)
        return
    if result.stop_reason == "awaiting_approval":
        _pause_for_people(run, RunStatus.AWAITING_APPROVAL)
        return
    if result.stop_reason == "awaiting_input":
        _pause_for_people(run, RunStatus.AWAITING_INPUT)
        return
    if result.stop_reason == "awaiting_subagents":
        _pause_for_subagents(run, subagents.requests if subagents is not None else [])
        return
    if run.status in TERMINAL_RUN_STATUSES:
        return  # its recorder stored the end with the last answer (DjangoRunRecorder.loop_ends)
    _finish_as(run, result.stop_reason, error=result.error or "")


def _finish_as(run: Run, loop_stop_reason: str, *, error: str = "") -> None:
    status, stop_reason = LOOP_OUTCOMES[loop_stop_reason]
    run_finish(run, status=status, stop_reason=stop_reason, error=error)


def run_hand_back(run: Run) -> None:
    """This worker is shutting down: the run goes back to the queue and another worker resumes
    it from its stored transcript (not counted as a failed attempt)."""
    run.refresh_from_db()
    if run.status == RunStatus.CANCELLING:
        run_finish(run, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)
        return
    try:
        run_transition(run, RunStatus.QUEUED, actor="worker", lease_owner="", lease_expires_at=None)
    except (StaleTransition, InvalidTransition):
        logger.warning("run %s moved while being handed back; leaving it as it is", run.pk)
        return
    logger.info("run %s handed back to the queue", run.pk)


def _pause_for_people(run: Run, waiting_status: str) -> None:
    """Release the worker while people decide or answer; the last decision or answer (or the TTL)
    queues the run again."""
    run.refresh_from_db()
    if run.status == RunStatus.CANCELLING:
        run_finish(run, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)
        return
    try:
        run_transition(run, waiting_status, lease_owner="", lease_expires_at=None)
    except StaleTransition:
        run_finish(run, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)
        return
    # A decision or answer given while the run was still executing found no waiting run to queue;
    # queued here, the run's task dispatches it when this returns. A cancel may move it first.
    if run_is_waiting_only_on_resolved_requests(run):
        with contextlib.suppress(StaleTransition):
            run_transition(run, RunStatus.QUEUED)


def _pause_for_subagents(run: Run, requests: list[SpawnRequest]) -> None:
    """Start the sub-agents and release the worker; the last one to end queues the run again."""
    try:
        if subagents_start_and_wait(run, requests):
            return
    except StaleTransition:
        pass  # a cancel moved the run while it paused: no child was started
    run_finish(run, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)
