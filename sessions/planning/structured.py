"""One non-streamed structured (JSON) model call of the planner, recorded as a model-call step."""

from django.conf import settings

from agents.runtime.types import (
    ChatMessage,
    ModelClient,
    ModelError,
    ModelRequest,
    ModelResponseCompleted,
    StreamCancelled,
)
from sessions.planning.plans import json_object_in
from sessions.recorder import DjangoRunRecorder


class PlannerCallFailed(Exception):
    """The model call failed for good (``is_cancelled``: the run was asked to stop;
    ``stop_reason``: how the run ends)."""

    def __init__(self, message: str, *, is_cancelled: bool = False, stop_reason: str = "error") -> None:
        super().__init__(message)
        self.is_cancelled = is_cancelled
        self.stop_reason = stop_reason


def structured_call(
    *,
    model: ModelClient,
    recorder: DjangoRunRecorder,
    model_name: str,
    system: str,
    messages: list[ChatMessage],
    purpose: str,
) -> tuple[dict[str, object] | None, str]:
    """Ask for a JSON object; returns it (None when the answer holds none) and the raw text.

    The call's usage counts in the run's like any model call (the recorder's step).
    """
    step_id = recorder.start_step(kind="model_call", input={"purpose": purpose})
    request = ModelRequest(
        model=model_name,
        system=system,
        messages=messages,
        max_tokens=4096,
        timeout_seconds=settings.MODEL_TIMEOUT_SECONDS,
    )
    completed: ModelResponseCompleted | None = None
    try:
        for event in model.stream(request, should_stop=lambda: recorder.stop_requested() is not None):
            if isinstance(event, ModelResponseCompleted):
                completed = event
    except StreamCancelled as cancelled:
        recorder.fail_step(step_id, error="cancelled")
        raise PlannerCallFailed("the run was stopped", is_cancelled=True) from cancelled
    except ModelError as error:
        recorder.fail_step(step_id, error=str(error))
        if error.kind in ("insufficient_credits", "no_price"):
            raise PlannerCallFailed(str(error), stop_reason=error.kind) from error
        raise PlannerCallFailed(f"the {purpose} model call failed: {error}") from error
    if completed is None:
        recorder.fail_step(step_id, error="the stream ended without a response")
        raise PlannerCallFailed(f"the {purpose} model call ended without a response")
    text = "".join(block.get("text", "") for block in completed.content if block.get("type") == "text")
    recorder.complete_step(step_id, output={"purpose": purpose, "text": text}, usage=completed.usage)
    recorder.emit("usage", {"usage": completed.usage.as_dict(), "purpose": purpose})
    return json_object_in(text), text
