"""What became of a tool call, in one word: the chat's tool cards and the run page (its steps and
its waterfall) say it with these functions, so they never disagree."""

from typing import Literal

from sessions.models import Step, StepStatus

ToolCallOutcome = Literal["pending", "running", "done", "error", "denied", "skipped"]


def tool_call_outcome(*, has_result: bool, is_error: bool, is_denied: bool = False) -> ToolCallOutcome:
    """A call people denied, a call not answered yet, or the kind of answer the model was given."""
    if is_denied:
        return "denied"
    if not has_result:
        return "pending"
    return "error" if is_error else "done"


def tool_step_outcome(step: Step) -> ToolCallOutcome:
    """A tool call step's outcome. A step that ended without finishing (the run stopped) was
    answered to the model as an error, as its chat card shows it."""
    if step.status in (StepStatus.PENDING, StepStatus.RUNNING, StepStatus.SKIPPED):
        return step.status  # type: ignore[return-value]
    is_error = step.status != StepStatus.COMPLETED or bool((step.output or {}).get("is_error"))
    return tool_call_outcome(has_result=True, is_error=is_error)


def step_display_status(step: Step) -> str:
    """The status a page shows for a step: a tool call's outcome, any other step's status."""
    return tool_step_outcome(step) if step.kind == "tool_call" else step.status
