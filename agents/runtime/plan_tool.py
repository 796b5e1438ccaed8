"""``create_plan``: the tool with which an agent's own model asks for a plan (planning mode ``auto``).

Plain data the loop offers next to the run's tools, so deciding to plan costs no model call of its
own. The loop never runs it: a turn that calls it ends the loop with ``plan_requested``, every call
of the turn answered, and the caller plans the request with executor sub-agents.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.runtime.types import ToolCallRequested, ToolOutcome, ToolSpec

CREATE_PLAN = "create_plan"
MAX_REASON_CHARACTERS = 1000
CREATE_PLAN_SPEC = ToolSpec(
    name=CREATE_PLAN,
    description=(
        "Hand this request to a planner: it splits the request into steps that sub-agents carry out "
        "separately (in parallel where they do not need each other's results), then you answer from "
        "their results. Call it only for a request with several independent parts, such as several "
        "listed tasks or research across sources; answer anything else yourself, with your other tools "
        "if needed. Call it alone: no other tool call of the same turn runs."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "reason": {
                "type": "string",
                "maxLength": MAX_REASON_CHARACTERS,
                "description": "Why this request needs a plan, in one sentence.",
            }
        },
        "required": ["reason"],
        "additionalProperties": False,
    },
)
# What the model reads as the results of the turn that asked for a plan.
PLAN_STARTED = ToolOutcome(
    content="The plan was started: sub-agents carry out its steps, and their results follow."
)
NOT_RUN_FOR_PLAN = ToolOutcome(content="Not run: a plan was started for this request instead.", is_error=True)
UNSTATED_REASON = "the model asked for a plan"


@dataclass(frozen=True)
class PlanRequest:
    """The ``create_plan`` call that ended the loop, and the reason the model gave."""

    tool_call_id: str
    reason: str


def with_create_plan(specs: list[ToolSpec]) -> list[ToolSpec]:
    """The run's tools and ``create_plan`` (which takes the place of any tool of the same name)."""
    return [*(spec for spec in specs if spec.name != CREATE_PLAN), CREATE_PLAN_SPEC]


def plan_request_in(calls: list[ToolCallRequested]) -> PlanRequest | None:
    """The turn's first ``create_plan`` call, if any."""
    for call in calls:
        if call.name == CREATE_PLAN:
            reason = " ".join(str(call.arguments.get("reason") or "").split())
            return PlanRequest(tool_call_id=call.id, reason=reason[:MAX_REASON_CHARACTERS] or UNSTATED_REASON)
    return None


def outcome_for_plan(call: ToolCallRequested, request: PlanRequest) -> ToolOutcome:
    """Every call of the turn that asked for a plan is answered without running."""
    return PLAN_STARTED if call.id == request.tool_call_id else NOT_RUN_FOR_PLAN
