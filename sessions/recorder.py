"""The Django-backed ``RunRecorder``: steps, transcript and events of one run, stored."""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.runtime.types import (
    ChatMessage,
    CompactionRecord,
    StepKind,
    StopRequestReason,
    ToolOutcome,
    Usage,
)
from billing.pricing import Price, cost_micros
from core.connections import release_connection
from core.redaction import redact_tool_arguments
from core.storable import storable_text
from files.citations import with_citations
from sessions.branches import run_context_path
from sessions.compaction import compaction_snapshot_create
from sessions.events import emit_event, events_batched
from sessions.models import Message, MessageRole, Run, Step, StepStatus
from sessions.run_host import RunHandle
from sessions.sequences import next_session_number
from sessions.state import step_transition
from sessions.statements.run_reads import step_count
from sessions.statements.writes import update_row


def message_role_for(message: ChatMessage) -> str:
    """Tool results travel as a user turn to the model but are stored as their own role."""
    if (
        message.role == "user"
        and message.content
        and all(b.get("type") == "tool_result" for b in message.content)
    ):
        return MessageRole.TOOL
    return message.role


class DjangoRunRecorder:
    """Stores what the loop reports, the same way on every database.

    Each write is a transaction with its events; the writes inside ``batch()`` share one, so a
    step's end, its answer and their events commit together, and with them the run's end when
    the loop says the answer is its last (``loop_ends``). Nothing waits inside a batch, and
    after a write the run gives its database connection back (it is about to wait).
    """

    def __init__(
        self,
        run: Run,
        *,
        handle: RunHandle,
        deadline: float | None,
        price: Price | None = None,
        end_run: Callable[[str], None] | None = None,
    ) -> None:
        self.run = run
        # Stores the run's end for the loop's stop reason (sessions.execution); with the last
        # answer's batch, so the two commit together.
        self.end_run = end_run
        # The run's model price (billing): each model call's cost is stored with its step.
        self.price = price
        # Where this process's heartbeat and cancel notices leave a stop request (sessions.run_host).
        self.handle = handle
        # time.monotonic() value after which the run has exceeded its wall-clock limit.
        self.deadline = deadline
        self._steps: dict[str, Step] = {}
        stored = run.stored_step_count  # read by the claim
        self._next_step_index = step_count(run.pk) if stored is None else stored
        # A resumed run (steps stored by an earlier attempt) asks the store about its tool calls.
        self._is_resumed = self._next_step_index > 0
        self._batch_depth = 0
        self._latest_id: Any = None

    @contextmanager
    def batch(self) -> Iterator[None]:
        if self._batch_depth:  # joins the open batch's transaction (no savepoint)
            self._batch_depth += 1
            try:
                yield
            finally:
                self._batch_depth -= 1
            return
        self._batch_depth = 1
        try:
            with transaction.atomic(), events_batched():
                yield
        finally:
            self._batch_depth = 0
        release_connection()

    def emit(self, event_type: str, data: dict[str, Any]) -> None:
        if event_type == "message.completed":
            data = with_citations(data, run_id=self.run.pk)
        with self.batch():
            emit_event(session_id=self.run.session_id, run_id=self.run.pk, event_type=event_type, data=data)

    def start_step(self, *, kind: StepKind, input: dict[str, Any]) -> str:
        with self.batch():
            step = Step.objects.create(
                run=self.run,
                tenant_id=self.run.tenant_id,
                index=self._next_step_index,
                kind=kind,
                status=StepStatus.RUNNING,
                input=redact_tool_arguments(input),
                tool_call_id=str(input.get("tool_call_id", "")),
                started_at=timezone.now(),
            )
            self._next_step_index += 1
            self._steps[str(step.pk)] = step
            self.emit("step.started", {"step_id": str(step.pk), "index": step.index, "kind": kind})
        return str(step.pk)

    def complete_step(self, step_id: str, *, output: dict[str, Any], usage: Usage | None = None) -> None:
        step = self._steps.pop(step_id)
        with self.batch():
            step_transition(
                step,
                StepStatus.COMPLETED,
                output=redact_tool_arguments(output),
                finished_at=timezone.now(),
                **self._spent_fields(step, usage),
            )
            self.emit("step.completed", _step_end_data(step))

    def _spent_fields(self, step: Step, usage: Usage | None) -> dict[str, int]:
        """The step's tokens and cost, added to the run's totals (a model call counts as one)."""
        tokens = usage.as_dict() if usage is not None else {}
        cost = self._cost(step, usage)
        totals = {name: value for name, value in tokens.items() if value}
        if step.kind == "model_call":
            totals["model_calls"] = 1
            if cost is None:
                totals["unpriced_model_calls"] = 1
            elif cost:
                totals["cost_micros"] = cost
        if totals:
            update_row(Run, self.run.pk, increments=totals)
        return {**tokens, **({"cost_micros": cost} if cost is not None else {})}

    def _cost(self, step: Step, usage: Usage | None) -> int | None:
        """A model call's cost; None when its price is unknown (or the step is no model call)."""
        if step.kind != "model_call" or self.price is None:
            return None
        return cost_micros(self.price, usage or Usage())

    def open_model_step_id(self) -> str | None:
        """The model call step started and not yet ended, if any (the credit ledger links to it)."""
        for step_id, step in reversed(self._steps.items()):
            if step.kind == "model_call":
                return step_id
        return None

    def fail_step(self, step_id: str, *, error: str, usage: Usage | None = None) -> None:
        """A stopped model call's ``usage`` counts in the step and the run, as a finished call's."""
        step = self._steps.pop(step_id)
        error = storable_text(error)  # a provider's error text can hold what PostgreSQL refuses
        with self.batch():
            spent = self._spent_fields(step, usage) if usage is not None else {}
            step_transition(step, StepStatus.FAILED, error=error, finished_at=timezone.now(), **spent)
            self.emit("step.completed", {**_step_end_data(step), "error": error})

    def append_message(
        self, message: ChatMessage, *, usage: Usage | None = None, is_stopped: bool = False
    ) -> None:
        with self.batch():
            message_id = Message.objects.create(
                tenant_id=self.run.tenant_id,
                session_id=self.run.session_id,
                parent_id=self._latest_message_id(),
                position=next_session_number(session_id=self.run.session_id, counter="last_message_position"),
                role=message_role_for(message),
                content=message.content,
                run=self.run,
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
                is_stopped=is_stopped,
            ).pk
            self._latest_id = message_id

    def _latest_message_id(self) -> Any:
        """The run's newest message, which the next one follows (sessions.branches): its user
        message at first; a resumed run's from the store."""
        if self._latest_id is None:
            self._latest_id = self.run.user_message_id
            if self._is_resumed:
                own = Message.objects.filter(run=self.run, position__isnull=False).exclude(
                    role=MessageRole.USER
                )
                self._latest_id = (
                    own.order_by("-position").values_list("id", flat=True).first() or self._latest_id
                )
        return self._latest_id

    def record_compaction(self, record: CompactionRecord) -> None:
        """Store the snapshot later runs start their context from (sessions.compaction)."""
        with self.batch():
            compaction_snapshot_create(
                session=self.run.session, run=self.run, record=record, path=run_context_path(self.run)
            )

    def completed_tool_result(self, tool_call_id: str) -> ToolOutcome | None:
        if not self._is_resumed:
            return None
        step = self._tool_steps(tool_call_id).filter(status=StepStatus.COMPLETED).first()
        if step is None:
            return None
        return ToolOutcome(
            content=str(step.output.get("content", "")), is_error=bool(step.output.get("is_error"))
        )

    def tool_call_was_interrupted(self, tool_call_id: str) -> bool:
        """An earlier attempt of the run started this call and never recorded its end."""
        if not self._is_resumed:
            return False
        return self._tool_steps(tool_call_id).exclude(status=StepStatus.COMPLETED).exists()

    def _tool_steps(self, tool_call_id: str) -> Any:
        return Step.objects.filter(run=self.run, kind="tool_call", tool_call_id=tool_call_id)

    def loop_ends(self, stop_reason: str) -> None:
        if self.end_run is not None:
            self.end_run(stop_reason)

    def stop_requested(self) -> StopRequestReason | None:
        """A cancel, a lost lease or a shutdown noticed by this process, or the wall-clock limit.

        The loop asks at every boundary and while it waits on a model or a tool: the moment to
        give back a connection that a read outside the recorder left with the run's thread.
        """
        release_connection()
        if self.deadline is not None and self.deadline <= time.monotonic():
            self.handle.request_stop("timeout")
        return self.handle.stop_reason


def _step_end_data(step: Step) -> dict[str, Any]:
    return {"step_id": str(step.pk), "index": step.index, "kind": step.kind, "status": step.status}
