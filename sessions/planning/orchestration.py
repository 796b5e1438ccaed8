"""The planning run's side of planning: plan, dispatch ready steps, replan, prepare synthesis.

``run_plan_advance`` is called each time a run that plans executes: a top-level run of a ``plan``
agent, or of an ``auto`` agent once its model called ``create_plan`` (sessions.planning.routing).
It returns what the execution layer does next: release the worker while executors work
(``wait``), answer from the step results (``synthesize``), or end the run.
"""

from dataclasses import dataclass, field
from typing import Any, Literal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.runtime.offline import PLAN_RESULTS_MARKER, list_items
from agents.runtime.types import ChatMessage, ModelClient
from sessions.models import (
    Message,
    Plan,
    PlanStatus,
    PlanStep,
    Run,
    RunStatus,
    StepStatus,
)
from sessions.planning.executors import (
    executor_tool_names,
    plan_step_run_create,
    run_final_text,
)
from sessions.planning.plans import PlanSpec, StepSpec, plan_parse
from sessions.planning.routing import PLAN_MODE_REASON, route_to_plan_record
from sessions.planning.structured import PlannerCallFailed, structured_call
from sessions.recorder import DjangoRunRecorder
from sessions.state import TERMINAL_RUN_STATUSES, StaleTransition, run_transition

PLANNER_SYSTEM_PROMPT = (
    "You are the planner. Split the user's request into steps that executor sub-agents carry out "
    "separately; steps that do not need each other's results must not depend on each other, so they "
    "run in parallel. Answer with only a JSON object: "
    '{{"goal": "…", "steps": [{{"id": "s1", "title": "…", "instructions": "…", "depends_on": [], '
    '"expected_output": "…", "tools": []}}]}}. At most {max_steps} steps. Executors may only use '
    "these read-only tools: {tools}."
)
SYNTHESIS_INSTRUCTIONS = (
    "The plan's steps are done. Write the final answer to the request above from these results, "
    "citing the steps you use by their ids."
)
RESULT_PREVIEW_CHARACTERS = 2000

Action = Literal["wait", "synthesize", "fail", "cancelled"]


@dataclass(frozen=True)
class PlanningOutcome:
    action: Action
    # synthesize: the step results to answer from; fail: the error.
    text: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def run_plan_advance(run: Run, *, model: ModelClient, recorder: DjangoRunRecorder) -> PlanningOutcome:
    """Plan the request, or continue its plan; a ``plan`` agent's run records its route first."""
    try:
        plan = Plan.objects.filter(run=run).first()
        if plan is not None:
            return _plan_continue(run, plan, model=model, recorder=recorder)
        if not run.route:
            route_to_plan_record(run, reason=PLAN_MODE_REASON, recorder=recorder)
        return _plan_create(run, model=model, recorder=recorder)
    except PlannerCallFailed as error:
        if error.is_cancelled:
            return PlanningOutcome("cancelled", text=str(error))
        return PlanningOutcome("fail", text=str(error), extra={"stop_reason": error.stop_reason})


def _request_text(run: Run) -> str:
    if run.user_message_id is None:
        return ""
    message = Message.objects.filter(pk=run.user_message_id).first()
    return message.text if message is not None else ""


def _user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=[{"type": "text", "text": text}])


# --- Creating the plan ----------------------------------------------------------------------------------


def _ask_for_plan(
    run: Run,
    *,
    model: ModelClient,
    recorder: DjangoRunRecorder,
    prompt: str,
    purpose: str,
    done_keys: frozenset[str] = frozenset(),
    allow_empty: bool = False,
) -> PlanSpec | str:
    """The validated plan, or the errors as text after the model was sent its errors once."""
    allowed = executor_tool_names(run)
    system = PLANNER_SYSTEM_PROMPT.format(
        max_steps=settings.PLANNER_MAX_STEPS, tools=", ".join(sorted(allowed)) or "none"
    )
    messages = [_user(prompt)]
    errors: list[str] = []
    for _ in range(2):
        answer, text = structured_call(
            model=model,
            recorder=recorder,
            model_name=run.agent_config["model_name"],
            system=system,
            messages=messages,
            purpose=purpose,
        )
        spec, errors = plan_parse(
            answer,
            max_steps=settings.PLANNER_MAX_STEPS,
            allowed_tools=allowed,
            done_keys=done_keys,
            allow_empty=allow_empty,
        )
        if spec is not None:
            return spec
        feedback = "Your plan is invalid:\n- " + "\n- ".join(errors) + "\nAnswer with a corrected plan."
        messages = [*messages, ChatMessage(role="assistant", content=[{"type": "text", "text": text}])]
        messages.append(_user(feedback))
    return "; ".join(errors)


def _offline_plan(text: str) -> PlanSpec:
    items = list_items(text) or [text.strip()]
    steps = tuple(
        StepSpec(
            key=f"s{index}",
            title=item[:300],
            instructions=item,
            depends_on=(),
            expected_output="",
            tools=(),
        )
        for index, item in enumerate(items[: settings.PLANNER_MAX_STEPS], start=1)
    )
    return PlanSpec(goal=text.strip()[:1000], steps=steps)


def _plan_create(run: Run, *, model: ModelClient, recorder: DjangoRunRecorder) -> PlanningOutcome:
    text = _request_text(run)
    if run.agent_config.get("model_provider") == "offline":
        spec: PlanSpec | str = _offline_plan(text)
    else:
        spec = _ask_for_plan(run, model=model, recorder=recorder, prompt=text, purpose="plan")
    if isinstance(spec, str):
        return PlanningOutcome("fail", text=f"The planner could not produce a valid plan: {spec}")
    with transaction.atomic():
        plan = Plan.objects.create(tenant_id=run.tenant_id, run=run, goal=spec.goal or text[:1000])
        PlanStep.objects.bulk_create([_plan_step(plan, step, index) for index, step in enumerate(spec.steps)])
        recorder.emit("plan.created", plan_payload(plan))
    return _dispatch_ready(run, plan, recorder=recorder)


def _plan_step(plan: Plan, step: StepSpec, index: int) -> PlanStep:
    return PlanStep(
        plan=plan,
        key=step.key,
        index=index,
        title=step.title,
        instructions=step.instructions,
        depends_on=list(step.depends_on),
        expected_output=step.expected_output,
        tools=list(step.tools),
    )


def plan_payload(plan: Plan, *, reason: str = "") -> dict[str, Any]:
    """The plan as ``plan.created`` / ``plan.updated`` events carry it."""
    payload: dict[str, Any] = {
        "plan_id": str(plan.pk),
        "goal": plan.goal,
        "status": plan.status,
        "revision": plan.revision,
        "replans": plan.replans,
        "steps": [
            {
                "id": step.key,
                "title": step.title,
                "instructions": step.instructions,
                "depends_on": step.depends_on,
                "expected_output": step.expected_output,
                "status": step.status,
                "child_run_id": str(step.child_run_id) if step.child_run_id else None,
                "result": step.result[:RESULT_PREVIEW_CHARACTERS],
                "error": step.error,
            }
            for step in PlanStep.objects.filter(plan=plan).order_by("index")
        ],
    }
    if reason:
        payload["reason"] = reason
    return payload


# --- Dispatching executors ------------------------------------------------------------------------------


def _dispatch_ready(run: Run, plan: Plan, *, recorder: DjangoRunRecorder) -> PlanningOutcome:
    """Start the ready steps as child runs (up to the limit) and release the worker, or synthesize."""
    steps = list(PlanStep.objects.filter(plan=plan).order_by("index"))
    by_key = {step.key: step for step in steps}
    running = [step for step in steps if step.status == StepStatus.RUNNING]
    ready = [
        step
        for step in steps
        if step.status == StepStatus.PENDING
        and all(by_key[key].status == StepStatus.COMPLETED for key in step.depends_on if key in by_key)
    ]
    to_start = ready[: max(0, settings.PLANNER_MAX_PARALLEL_STEPS - len(running))]
    if not to_start and not running:
        if all(
            step.status in (StepStatus.COMPLETED, StepStatus.SKIPPED) or step.is_replanned for step in steps
        ):
            return _synthesis(plan, steps, recorder=recorder)
        return PlanningOutcome(
            "fail", text="The plan cannot continue: its remaining steps wait on steps that failed."
        )
    try:
        with transaction.atomic():
            for step in to_start:
                child = plan_step_run_create(run, step, by_key)
                PlanStep.objects.filter(pk=step.pk).update(
                    status=StepStatus.RUNNING, child_run=child, started_at=timezone.now()
                )
            # The wait: executing without a lease, so the lane stays held and no sweeper takes it.
            run_transition(run, RunStatus.EXECUTING, actor="planner", lease_owner="", lease_expires_at=None)
            recorder.emit("plan.updated", plan_payload(plan, reason="steps_started"))
    except StaleTransition:
        return PlanningOutcome("cancelled", text="the run was cancelled while planning")
    return PlanningOutcome("wait")


# --- Continuing after the executors ---------------------------------------------------------------------


def _plan_continue(
    run: Run, plan: Plan, *, model: ModelClient, recorder: DjangoRunRecorder
) -> PlanningOutcome:
    if plan.status == PlanStatus.COMPLETED:  # the synthesis was interrupted: answer again
        return _synthesis(plan, list(PlanStep.objects.filter(plan=plan)), recorder=recorder)
    _steps_sync(plan, recorder=recorder)
    failures = list(PlanStep.objects.filter(plan=plan, status=StepStatus.FAILED, is_replanned=False))
    if failures:
        if (
            plan.replans >= settings.PLANNER_MAX_REPLANS
            or run.agent_config.get("model_provider") == "offline"
        ):
            plan_finish(plan, status=PlanStatus.FAILED, recorder=recorder)
            described = "; ".join(f"step {step.key} ({step.title}) failed: {step.error}" for step in failures)
            return PlanningOutcome("fail", text=f"The plan failed: {described}")
        if (error := _replan(run, plan, failures, model=model, recorder=recorder)) is not None:
            return PlanningOutcome("fail", text=f"The planner could not revise the plan: {error}")
    return _dispatch_ready(run, plan, recorder=recorder)


def _steps_sync(plan: Plan, *, recorder: DjangoRunRecorder) -> None:
    """Record the outcome of every step whose executor run has ended (read from the database)."""
    changed = False
    for step in PlanStep.objects.filter(plan=plan, status=StepStatus.RUNNING).select_related("child_run"):
        child = step.child_run
        if child is None or child.status not in TERMINAL_RUN_STATUSES:
            continue
        if child.status == RunStatus.COMPLETED:
            fields: dict[str, Any] = {"status": StepStatus.COMPLETED, "result": run_final_text(child)}
        else:
            error = child.error or f"the executor run ended {child.status}"
            fields = {"status": StepStatus.FAILED, "error": error}
        PlanStep.objects.filter(pk=step.pk, status=StepStatus.RUNNING).update(
            finished_at=child.finished_at or timezone.now(), **fields
        )
        changed = True
    if changed:
        recorder.emit("plan.updated", plan_payload(plan, reason="steps_finished"))


def _replan(
    run: Run, plan: Plan, failures: list[PlanStep], *, model: ModelClient, recorder: DjangoRunRecorder
) -> str | None:
    """Ask the planner to revise the remaining steps; None when the revised plan is in place."""
    steps = list(PlanStep.objects.filter(plan=plan).order_by("index"))
    done = frozenset(step.key for step in steps if step.status == StepStatus.COMPLETED)
    spec = _ask_for_plan(
        run,
        model=model,
        recorder=recorder,
        prompt=_replan_prompt(run, steps, failures),
        purpose="replan",
        done_keys=done,
        allow_empty=True,
    )
    if isinstance(spec, str):
        plan_finish(plan, status=PlanStatus.FAILED, recorder=recorder)
        return spec
    pending = {step.key: step for step in steps if step.status == StepStatus.PENDING}
    taken = {step.key for step in steps} - set(pending)
    added = sum(1 for step in spec.steps if step.key not in pending)
    if len(steps) + added > settings.PLANNER_MAX_CHILDREN_PER_RUN:
        plan_finish(plan, status=PlanStatus.FAILED, recorder=recorder)
        return (
            f"the revised plan would pass the limit of {settings.PLANNER_MAX_CHILDREN_PER_RUN} steps per run"
        )
    if clashes := sorted(step.key for step in spec.steps if step.key in taken):
        plan_finish(plan, status=PlanStatus.FAILED, recorder=recorder)
        return f"the revised plan reuses the ids of finished steps: {', '.join(clashes)}"
    with transaction.atomic():
        PlanStep.objects.filter(pk__in=[step.pk for step in failures]).update(is_replanned=True)
        kept = {step.key for step in spec.steps}
        PlanStep.objects.filter(plan=plan, status=StepStatus.PENDING).exclude(key__in=kept).update(
            status=StepStatus.SKIPPED, finished_at=timezone.now()
        )
        next_index = len(steps)
        for step in spec.steps:
            if step.key in pending:
                PlanStep.objects.filter(pk=pending[step.key].pk).update(
                    title=step.title,
                    instructions=step.instructions,
                    depends_on=list(step.depends_on),
                    expected_output=step.expected_output,
                    tools=list(step.tools),
                )
            else:
                _plan_step(plan, step, next_index).save()
                next_index += 1
        plan.replans += 1
        plan.revision += 1
        plan.save(update_fields=["replans", "revision", "updated_at"])
        recorder.emit("plan.updated", plan_payload(plan, reason="replanned"))
    return None


def _replan_prompt(run: Run, steps: list[PlanStep], failures: list[PlanStep]) -> str:
    lines = [f"The user's request:\n{_request_text(run)}", "", "The plan so far:"]
    for step in steps:
        outcome = (
            step.result[:RESULT_PREVIEW_CHARACTERS] if step.status == StepStatus.COMPLETED else step.error
        )
        lines.append(f"- {step.key} [{step.status}] {step.title}: {outcome}".rstrip(": "))
    failed = ", ".join(step.key for step in failures)
    lines += [
        "",
        f"Step {failed} failed. Answer with the remaining steps only: keep a pending step you still need "
        "by its id, leave out the ones no longer needed, add new steps with new ids. depends_on may "
        'name completed steps. {"steps": []} means nothing more is needed.',
    ]
    return "\n".join(lines)


def _synthesis(plan: Plan, steps: list[PlanStep], *, recorder: DjangoRunRecorder) -> PlanningOutcome:
    if plan.status != PlanStatus.COMPLETED:
        plan_finish(plan, status=PlanStatus.COMPLETED, recorder=recorder)
    parts = [PLAN_RESULTS_MARKER]
    for step in sorted(steps, key=lambda step: step.index):
        if step.status == StepStatus.COMPLETED:
            parts.append(f"## {step.key}: {step.title}\n{step.result}")
    parts.append(SYNTHESIS_INSTRUCTIONS)
    return PlanningOutcome("synthesize", text="\n\n".join(parts))


def plan_finish(plan: Plan, *, status: str, recorder: DjangoRunRecorder | None = None) -> None:
    Plan.objects.filter(pk=plan.pk).update(status=status, updated_at=timezone.now())
    plan.status = status
    if recorder is not None:
        recorder.emit("plan.updated", plan_payload(plan, reason=status))
