"""Executor runs: the agent configuration derived from the planner, their prompts, their results."""

from typing import Any

from django.conf import settings

from sessions.events import emit_event
from sessions.models import Message, MessageRole, PlanStep, Run, RunStatus
from tools.registry import toolset_for_run

EXECUTOR_SYSTEM_PROMPT = (
    "You are an executor sub-agent carrying out one step of a plan. Do only this step, with read-only "
    "tools; you cannot change anything or start other agents. End with the step's result."
)


def executor_config(parent_config: dict[str, Any], *, prompt: str = EXECUTOR_SYSTEM_PROMPT) -> dict[str, Any]:
    """The executor agent derived from the planner: same model, read-only tools, its own limits."""
    config = dict(parent_config)
    config.update(
        role="executor",
        read_only_tools=True,
        planning_mode="direct",
        max_steps=min(int(config.get("max_steps", 20)), settings.PLANNER_EXECUTOR_MAX_STEPS),
        run_timeout_seconds=settings.PLANNER_EXECUTOR_TIMEOUT_SECONDS,
        context_compaction_enabled=False,
        system_prompt=f"{prompt}\n\n{config.get('system_prompt', '')}".strip(),
    )
    return config


def executor_tool_names(run: Run) -> frozenset[str]:
    probe = Run(tenant_id=run.tenant_id, agent_config=executor_config(run.agent_config))
    return frozenset(tool.name for tool in toolset_for_run(probe).allowed())


def plan_step_run_create(parent: Run, step: PlanStep, by_key: dict[str, PlanStep]) -> Run:
    return child_run_create(
        parent,
        prompt=executor_prompt(step, by_key),
        title=f"{step.key}: {step.title}",
        config=executor_config(parent.agent_config),
        event_data={"plan_step": step.key},
    )


def child_run_create(
    parent: Run,
    *,
    prompt: str,
    title: str,
    config: dict[str, Any],
    event_data: dict[str, Any],
    parent_tool_call_id: str = "",
) -> Run:
    """A queued child run in the parent's session, its prompt as its own (off-transcript) message."""
    message = Message.objects.create(
        tenant_id=parent.tenant_id,
        session_id=parent.session_id,
        position=None,
        role=MessageRole.USER,
        content=[{"type": "text", "text": prompt}],
    )
    child = Run.objects.create(
        tenant_id=parent.tenant_id,
        session_id=parent.session_id,
        agent_id=parent.agent_id,
        user_message=message,
        created_by_id=parent.created_by_id,
        parent_run=parent,
        parent_tool_call_id=parent_tool_call_id,
        title=title[:300],
        agent_config=config,
        status=RunStatus.QUEUED,
    )
    Message.objects.filter(pk=message.pk).update(run=child)
    emit_event(
        session_id=parent.session_id,
        run_id=child.pk,
        event_type="run.queued",
        data={
            "message_id": str(message.pk),
            "parent_run_id": str(parent.pk),
            "title": child.title,
            **event_data,
        },
    )
    return child


def executor_prompt(step: PlanStep, by_key: dict[str, PlanStep]) -> str:
    parts = [f"Step {step.key}: {step.title}", step.instructions]
    if step.expected_output:
        parts.append(f"Expected output: {step.expected_output}")
    for key in step.depends_on:
        dependency = by_key.get(key)
        if dependency is not None:
            parts.append(f"Result of step {key} ({dependency.title}):\n{dependency.result}")
    return "\n\n".join(parts)


def run_final_text(run: Run) -> str:
    message = (
        Message.objects.filter(run=run, role=MessageRole.ASSISTANT, position__isnull=False)
        .order_by("-position")
        .first()
    )
    return message.text if message is not None else ""
