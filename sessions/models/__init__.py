"""Sessions, messages, runs, steps and run events (DESIGN.md sections 2-4), by part."""

from sessions.models.compaction import CompactionReason, CompactionSnapshot
from sessions.models.conversations import Message, MessageRole, Session
from sessions.models.plans import Plan, PlanStatus, PlanStep
from sessions.models.run_hosts import RunHostHeartbeat
from sessions.models.runs import (
    IdempotencyRecord,
    Run,
    RunEvent,
    RunRoute,
    RunStatus,
    Step,
    StepKind,
    StepStatus,
    StopReason,
)
from sessions.models.waits import ApprovalStatus, QuestionStatus, ToolApproval, UserQuestion

__all__ = [
    "ApprovalStatus",
    "CompactionReason",
    "CompactionSnapshot",
    "IdempotencyRecord",
    "Message",
    "MessageRole",
    "Plan",
    "PlanStatus",
    "PlanStep",
    "QuestionStatus",
    "Run",
    "RunEvent",
    "RunHostHeartbeat",
    "RunRoute",
    "RunStatus",
    "Session",
    "Step",
    "StepKind",
    "StepStatus",
    "StopReason",
    "ToolApproval",
    "UserQuestion",
]
