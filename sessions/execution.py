"""Executing one run: claim it, build the loop's inputs, run the loop, record the end."""

import logging
import time
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.model_clients import ProviderNotConfigured, model_client_for
from agents.runtime.compaction import CompactionPolicy
from agents.runtime.loop import LoopConfig, LoopResult, run_agent_loop
from agents.runtime.types import ChatMessage
from memory.retrieval import memories_for_context
from sessions.approvals import ToolCallGate
from sessions.compaction import compaction_policy_for, session_transcript
from sessions.events import emit_event
from sessions.lane import new_lease_owner, run_claim
from sessions.models import Run, RunStatus, StopReason
from sessions.recorder import DjangoRunRecorder
from sessions.state import TERMINAL_EVENT_TYPES, TERMINAL_RUN_STATUSES, StaleTransition, run_transition
from tenants.limits import tenant_limit
from tools.provider import DjangoToolProvider, tool_context_for
from tools.registry import toolset_for_run

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
}


def run_execute(*, run_id: UUID) -> UUID | None:
    """Execute the run if it can be claimed; returns its session id, or None when not claimed."""
    owner = new_lease_owner()
    run = run_claim(run_id=run_id, owner=owner)
    if run is None:
        return None
    try:
        _execute_claimed(run, owner=owner)
    except Exception as error:
        logger.exception("run %s crashed", run.pk)
        run_finish(
            run,
            status=RunStatus.FAILED,
            stop_reason=StopReason.ERROR,
            error=f"{type(error).__name__}: {error}",
        )
    return run.session_id


def _execute_claimed(run: Run, *, owner: str) -> None:
    run_transition(run, RunStatus.EXECUTING)
    try:
        model = model_client_for(tenant=run.tenant, agent_config=run.agent_config)
    except ProviderNotConfigured as error:
        run_finish(run, status=RunStatus.FAILED, stop_reason=StopReason.LLM_ERROR, error=str(error))
        return
    recorder = DjangoRunRecorder(run, lease_owner=owner, deadline=_deadline_for(run))
    toolset = toolset_for_run(run)
    config = loop_config_for(run.agent_config, compaction=compaction_policy_for(run, toolset))
    memories = memories_for_context(run)
    if memories:
        config.system_prompt = f"{config.system_prompt}\n\n{memories}".strip()
    result = run_agent_loop(
        config=config,
        history=transcript_for(run),
        model=model,
        tools=DjangoToolProvider(toolset, tool_context_for(run)),
        recorder=recorder,
        model_calls_done=run.model_calls,
        approvals=ToolCallGate(run, toolset),
    )
    _record_loop_result(run, result)


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
    """The model's context for the run: compacted history, then the newer messages (sessions.compaction)."""
    return session_transcript(session_id=run.session_id)


def _record_loop_result(run: Run, result: LoopResult) -> None:
    if result.stop_reason == "lease_lost":
        logger.warning("run %s: lease lost; another worker continues it", run.pk)
        return
    if result.stop_reason == "awaiting_approval":
        _pause_for_approval(run)
        return
    status, stop_reason = LOOP_OUTCOMES[result.stop_reason]
    run_finish(run, status=status, stop_reason=stop_reason, error=result.error or "")


def _pause_for_approval(run: Run) -> None:
    """Release the worker while people decide; a decision (or the TTL) queues the run again."""
    run.refresh_from_db()
    if run.status == RunStatus.CANCELLING:
        run_finish(run, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)
        return
    try:
        run_transition(run, RunStatus.AWAITING_APPROVAL, lease_owner="", lease_expires_at=None)
    except StaleTransition:
        run_finish(run, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)


def run_finish(run: Run, *, status: str, stop_reason: str, error: str = "", actor: str = "system") -> Run:
    """Move the run to a terminal state and announce it; a run already finished is left alone."""
    for _ in range(3):
        run.refresh_from_db()
        if run.status in TERMINAL_RUN_STATUSES:
            return run
        target = status
        if run.status == RunStatus.CANCELLING and status != RunStatus.FAILED:
            target, stop_reason = RunStatus.CANCELLED, StopReason.CANCELLED
        try:
            with transaction.atomic():
                run_transition(run, target, stop_reason=stop_reason, error=error[:10_000], actor=actor)
                data: dict[str, Any] = {"status": target, "stop_reason": stop_reason, "usage": run.usage}
                if error:
                    data["error"] = error
                emit_event(
                    session_id=run.session_id,
                    run_id=run.pk,
                    event_type=TERMINAL_EVENT_TYPES[target],
                    data=data,
                )
            return run
        except StaleTransition:
            continue  # a cancel request moved the run meanwhile: re-read and finish from there
    raise StaleTransition(f"run {run.pk} kept changing while finishing")
