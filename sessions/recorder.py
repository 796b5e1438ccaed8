"""The Django-backed ``RunRecorder``: steps, transcript and events of one run, stored."""

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import wraps
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import F
from django.utils import timezone

from agents.runtime.types import (
    ChatMessage,
    CompactionRecord,
    StepKind,
    StopRequestReason,
    ToolOutcome,
    Usage,
)
from core.connections import release_connection
from core.redaction import redact_tool_arguments
from sessions import one_statement
from sessions.compaction import compaction_snapshot_create
from sessions.events import (
    PendingEvent,
    emit_event,
    events_batched,
    flush_batched_events,
    has_batched_events,
    take_batched_events,
)
from sessions.models import Message, MessageRole, Run, Step, StepStatus
from sessions.run_host import RunHandle
from sessions.sequences import next_session_number
from sessions.state import StaleTransition, require_step_transition, stale_answer, step_transition

logger = logging.getLogger(__name__)

# Events whose data can carry a model's tool arguments (which may hold secrets).
ARGUMENT_BEARING_EVENTS = frozenset({"tool.call", "message.completed", "approval.required"})


def message_role_for(message: ChatMessage) -> str:
    """Tool results travel as a user turn to the model but are stored as their own role."""
    if (
        message.role == "user"
        and message.content
        and all(b.get("type") == "tool_result" for b in message.content)
    ):
        return MessageRole.TOOL
    return message.role


def _then_release_connection(method: Callable[..., Any]) -> Callable[..., Any]:
    """After a write outside a batch, the run gives its connection back (core.connections)."""

    @wraps(method)
    def releasing(self: "DjangoRunRecorder", *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        if not self._batch_depth:
            release_connection()
        return result

    return releasing


class DjangoRunRecorder:
    def __init__(self, run: Run, *, handle: RunHandle, deadline: float | None) -> None:
        self.run = run
        # Where this process's heartbeat and cancel notices leave a stop request (sessions.run_host).
        self.handle = handle
        # time.monotonic() value after which the run has exceeded its wall-clock limit.
        self.deadline = deadline
        self._steps: dict[str, Step] = {}
        prefetched = run.__dict__.get("prefetched")
        self._next_step_index = (
            prefetched.step_count if prefetched is not None else Step.objects.filter(run=run).count()
        )
        # A run with no steps yet (not a replay): what it did is all known here, no need to ask.
        self._is_first_pass = self._next_step_index == 0
        self._tool_calls_started = 0
        self._tool_results: dict[str, ToolOutcome] = {}
        # PostgreSQL: steps started inside a batch, inserted with the batch's events at its end,
        # after the transcript message the batch appended (if any) in the same round trip.
        self._batch_depth = 0
        self._unsaved_steps: list[Step] = []
        self._unsaved_message: Message | None = None
        # PostgreSQL: a model call's end, stored with the answer the same batch appends (one
        # statement instead of two), else at the batch's end. Never alongside unsaved steps.
        self._deferred_completion: _StepCompletion | None = None
        # PostgreSQL, once the run's executor sets ``holds_writes``, three writes wait for what
        # follows them, to be stored with it in one round trip and one commit:
        # - a model call's end and its answer: with the tool steps the answer starts (a batch's
        #   end), or with the run's end when the answer ends the loop (``take_held_answer``);
        # - the end of the last running tool call: with the results message and the next model
        #   call's start (a batch's end). An earlier call's end is stored at once: its result is
        #   not kept from watchers while other calls run;
        # - the starts of read-only tool calls (``start_step(may_hold=True)``), held with the
        #   answer that asked for them, to be stored with their ends: with the results message and
        #   the next model call's start, or when the loop stops waiting (``store_held_writes``).
        # Anything else the recorder writes first stores them before it, and so must any other
        # writer of the run's events (``store_held_writes``).
        self.holds_writes = False
        self._held_answer: one_statement.AnswerCompletion | None = None
        self._held_tool_completion: one_statement.ToolCompletion | None = None
        self._held_steps: list[Step] = []
        self._held_step_events: list[PendingEvent] = []
        self._holdable_step_ids: set[str] = set()  # unsaved steps started with may_hold

    @contextmanager
    def batch(self) -> Iterator[None]:
        with events_batched():
            self._batch_depth += 1
            try:
                yield
            except BaseException:
                self._save_held_writes_after_failure()
                self._save_message_after_failure()
                self._save_steps_after_failure()  # the batch's stored events name these steps
                self._save_completion_after_failure()
                raise
            finally:
                self._batch_depth -= 1
            if self._batch_depth == 0:
                self._store_deferred_completion_first()
                self._store_batch_rows()
                release_connection()

    def _store_batch_rows(self) -> None:
        """The batch's message and steps with its events: one statement each, one round trip.

        A held answer goes first: in the same round trip when the batch starts steps only (the
        tool calls it asked for), else on its own; it stays held through a batch that stores nothing.
        """
        message, self._unsaved_message = self._unsaved_message, None
        steps, self._unsaved_steps = self._unsaved_steps, []
        holdable_ids, self._holdable_step_ids = self._holdable_step_ids, set()
        if self._held_answer is not None and steps and message is None and not self._held_steps:
            if self._can_hold(steps, holdable_ids):
                self._held_steps = steps
                self._held_step_events = take_batched_events(self.run.session_id)
                return
            self._store_held_answer_with_steps(steps)
            return
        if self._held_steps and self._held_answer is not None and message is not None and steps:
            self._store_held_steps_with(message, steps)
            return
        if (
            self._held_tool_completion is not None
            and self._held_answer is None
            and message is not None
            and steps
        ):
            self._store_held_tool_completion_with(message, steps)
            return
        if message is not None or steps or has_batched_events():
            self._store_held_first()
        if message is None and not steps:
            return
        events = take_batched_events(self.run.session_id)
        if message is not None and steps:
            one_statement.append_message_and_insert_steps(message, steps, events=events)
        elif message is not None:
            one_statement.append_message(message, events=events)
        else:
            one_statement.insert_steps(steps, events=events)

    def _can_hold(self, steps: list[Step], holdable_ids: set[str]) -> bool:
        return self.holds_writes and all(str(step.pk) in holdable_ids for step in steps)

    def _store_held_answer_with_steps(
        self,
        steps: list[Step],
        *,
        events: list[PendingEvent] | None = None,
        message: Message | None = None,
    ) -> None:
        """The held answer, then ``message`` (if any), then ``steps`` with ``events`` (by default
        the batch's): one round trip."""
        held, self._held_answer = self._held_answer, None
        assert held is not None
        if events is None:
            events = take_batched_events(self.run.session_id)
        answer_stored, _rest_stored = one_statement.store_answer_and_insert_steps(
            held, steps, events=events, message=message
        )
        if not answer_stored:  # nothing was written: the rest was conditional on the answer
            raise stale_answer(held)
        self._count_completed(held.step, output=held.output, tokens=held.tokens)

    def _store_held_steps_with(self, message: Message, steps: list[Step]) -> None:
        """The held answer, the held tool calls (ended by now), the results message and the next
        steps, each with its events: one round trip where holding nothing takes two."""
        tool_steps, self._held_steps = self._held_steps, []
        events = [*self._take_held_step_events(), *take_batched_events(self.run.session_id)]
        self._store_held_answer_with_steps([*tool_steps, *steps], events=events, message=message)

    def _take_held_step_events(self) -> list[PendingEvent]:
        events, self._held_step_events = self._held_step_events, []
        return events

    def _store_held_tool_completion_with(self, message: Message, steps: list[Step]) -> None:
        held, self._held_tool_completion = self._held_tool_completion, None
        assert held is not None
        events = take_batched_events(self.run.session_id)
        completed, _stored = one_statement.complete_tool_step_append_message_and_insert_steps(
            held, message, steps, events=events
        )
        if not completed:  # nothing was written: the message and steps were conditional on it
            raise _stale(held.step)

    def _save_held_writes_after_failure(self) -> None:
        try:
            self._store_held_first()
        except (DatabaseError, StaleTransition):
            logger.warning("could not store what a failed batch held back", exc_info=True)

    def _save_message_after_failure(self) -> None:
        message, self._unsaved_message = self._unsaved_message, None
        if message is None:
            return
        try:
            one_statement.append_message(message, events=[])
        except DatabaseError:
            logger.warning("could not store the message of a failed batch", exc_info=True)

    def _save_steps_after_failure(self) -> None:
        """Keep the steps if the database still can; never hide the error that ended the batch."""
        steps, self._unsaved_steps = self._unsaved_steps, []
        try:
            for step in steps:
                step.save(force_insert=True)
        except DatabaseError:
            logger.warning("could not store %d steps of a failed batch", len(steps), exc_info=True)

    def _save_completion_after_failure(self) -> None:
        if self._deferred_completion is None:
            return
        try:
            self._store_deferred_completion(answer=None)
        except (DatabaseError, StaleTransition):
            logger.warning("could not store the completion of a failed batch", exc_info=True)

    @_then_release_connection
    def emit(self, event_type: str, data: dict[str, Any]) -> None:
        if not self._batch_depth:  # a batch's events are stored at its end, after a held answer
            self._store_held_first()
        if event_type in ARGUMENT_BEARING_EVENTS:
            data = redact_tool_arguments(data)
        emit_event(session_id=self.run.session_id, run_id=self.run.pk, event_type=event_type, data=data)

    @_then_release_connection
    def start_step(self, *, kind: StepKind, input: dict[str, Any], may_hold: bool = False) -> str:
        step = Step(
            run=self.run,
            index=self._next_step_index,
            kind=kind,
            status=StepStatus.RUNNING,
            input=input,
            tool_call_id=str(input.get("tool_call_id", "")),
            started_at=timezone.now(),
        )
        if self._batch_depth and connection.vendor == "postgresql":
            self._store_deferred_completion_first()
            self._unsaved_steps.append(step)  # inserted with the batch's events (batch)
            if may_hold:
                self._holdable_step_ids.add(str(step.pk))
        else:
            self._store_held_first()
            step.save(force_insert=True)
        self._next_step_index += 1
        self._tool_calls_started += kind == "tool_call"
        self._steps[str(step.pk)] = step
        self.emit("step.started", {"step_id": str(step.pk), "index": step.index, "kind": kind})
        return str(step.pk)

    @_then_release_connection
    def complete_step(self, step_id: str, *, output: dict[str, Any], usage: Usage | None = None) -> None:
        if any(held is self._steps[step_id] for held in self._held_steps):
            self._complete_held_step(self._steps.pop(step_id), output=output)
            return
        self._store_held_first()
        step = self._steps.pop(step_id)
        tokens = _usage_fields(usage)
        if connection.vendor != "postgresql":
            self._complete_step_with_orm(step, output=output, tokens=tokens)
        elif self.holds_writes and step.kind == "tool_call" and not self._has_running_tool_calls():
            self._hold_tool_completion(step, output=output)
        elif self._batch_depth and step.kind == "model_call" and not self._unsaved_steps:
            require_step_transition(step, StepStatus.COMPLETED)
            self._deferred_completion = _StepCompletion(step, output, tokens, finished_at=timezone.now())
            self.emit("step.completed", _completed_data(step))
            return
        else:
            self._complete_step_in_one_statement(step, output=output, tokens=tokens)
        self._count_completed(step, output=output, tokens=tokens)

    def _has_running_tool_calls(self) -> bool:
        return any(step.kind == "tool_call" for step in self._steps.values())

    def _complete_held_step(self, step: Step, *, output: dict[str, Any]) -> None:
        """A held tool call ends before its start was stored: it will be inserted completed, as
        the transition would have left it, after the events of its start."""
        require_step_transition(step, StepStatus.COMPLETED)
        step.status, step.version = StepStatus.COMPLETED, step.version + 1
        step.output, step.finished_at = redact_tool_arguments(output), timezone.now()
        self._held_step_events += [
            *take_batched_events(self.run.session_id),
            PendingEvent(
                self.run.session_id, self.run.pk, "step.completed", _completed_data(step), step.finished_at
            ),
        ]
        self._count_completed(step, output=output, tokens={})

    def _hold_tool_completion(self, step: Step, *, output: dict[str, Any]) -> None:
        require_step_transition(step, StepStatus.COMPLETED)
        now = timezone.now()
        events = [
            *take_batched_events(self.run.session_id),
            PendingEvent(self.run.session_id, self.run.pk, "step.completed", _completed_data(step), now),
        ]
        self._held_tool_completion = one_statement.ToolCompletion(
            step=step, output=redact_tool_arguments(output), finished_at=now, events=events
        )

    def _count_completed(self, step: Step, *, output: dict[str, Any], tokens: dict[str, int]) -> None:
        # The run in memory keeps the totals the database now holds (run_finish announces them).
        for name, value in tokens.items():
            setattr(self.run, name, getattr(self.run, name) + value)
        self.run.model_calls += step.kind == "model_call"
        if step.kind == "tool_call":
            self._tool_results[step.tool_call_id] = ToolOutcome(
                content=str(output.get("content", "")), is_error=bool(output.get("is_error"))
            )

    def _complete_step_with_orm(self, step: Step, *, output: dict[str, Any], tokens: dict[str, int]) -> None:
        with transaction.atomic():
            step_transition(
                step,
                StepStatus.COMPLETED,
                output=redact_tool_arguments(output),
                finished_at=timezone.now(),
                **tokens,
            )
            run_update: dict[str, Any] = {name: F(name) + value for name, value in tokens.items() if value}
            if step.kind == "model_call":
                run_update["model_calls"] = F("model_calls") + 1
            if run_update:
                Run.objects.filter(pk=self.run.pk).update(**run_update)
            self.emit("step.completed", _completed_data(step))
            flush_batched_events()  # the step's events commit with it

    def _complete_step_in_one_statement(
        self, step: Step, *, output: dict[str, Any], tokens: dict[str, int]
    ) -> None:
        require_step_transition(step, StepStatus.COMPLETED)
        now = timezone.now()
        events = [
            *take_batched_events(self.run.session_id),
            PendingEvent(self.run.session_id, self.run.pk, "step.completed", _completed_data(step), now),
        ]
        is_completed = one_statement.complete_step(
            step,
            output=redact_tool_arguments(output),
            finished_at=now,
            tokens=tokens,
            model_calls=1 if step.kind == "model_call" else 0,
            events=events,
        )
        if not is_completed:
            raise _stale(step)

    def _store_deferred_completion(self, *, answer: Message | None) -> None:
        """The deferred model-call end with the batch's events, and the answer if one is given."""
        if answer is not None:
            self._store_answer(self._answer_completion(answer))
            return
        assert self._deferred_completion is not None
        completion, self._deferred_completion = self._deferred_completion, None
        step = completion.step
        is_completed = one_statement.complete_step(
            step,
            output=redact_tool_arguments(completion.output),
            finished_at=completion.finished_at,
            tokens=completion.tokens,
            model_calls=1,
            events=take_batched_events(self.run.session_id),
        )
        if not is_completed:
            raise _stale(step)
        self._count_completed(step, output=completion.output, tokens=completion.tokens)

    def _answer_completion(self, answer: Message) -> one_statement.AnswerCompletion:
        """The deferred model-call end with its answer and the batch's events, to store together."""
        assert self._deferred_completion is not None
        completion, self._deferred_completion = self._deferred_completion, None
        return one_statement.AnswerCompletion(
            step=completion.step,
            output=redact_tool_arguments(completion.output),
            finished_at=completion.finished_at,
            tokens=completion.tokens,
            message=answer,
            events=take_batched_events(self.run.session_id),
        )

    def _store_answer(self, answer: one_statement.AnswerCompletion) -> None:
        if not one_statement.store_answer(answer):
            raise stale_answer(answer)
        self._count_completed(answer.step, output=answer.output, tokens=answer.tokens)

    def _store_held_first(self) -> None:
        if self._held_steps:
            steps, self._held_steps = self._held_steps, []
            events = self._take_held_step_events()
            if self._held_answer is not None:
                self._store_held_answer_with_steps(steps, events=events)
            else:
                one_statement.insert_steps(steps, events=events)
        if self._held_answer is not None:
            held, self._held_answer = self._held_answer, None
            self._store_answer(held)
        if self._held_tool_completion is not None:
            completion, self._held_tool_completion = self._held_tool_completion, None
            if not one_statement.complete_tool_step(completion):
                raise _stale(completion.step)

    @_then_release_connection
    def store_held_writes(self) -> None:
        """Store what the recorder holds back now: before a write of the run's events that does
        not go through the recorder, or when the run does not end here."""
        self._store_held_first()

    def take_held_answer(self) -> one_statement.AnswerCompletion | None:
        """The held-back answer, for the run's end to store (PostgreSQL). The run in memory
        counts its tokens from here on, as the end's event reports them."""
        if self._held_steps:  # the answer asked for tools: it goes first, with them
            self._store_held_first()
        held, self._held_answer = self._held_answer, None
        self._store_held_first()  # a held tool call's end (the loop recorded its results after it)
        if held is not None:
            self._count_completed(held.step, output=held.output, tokens=held.tokens)
        return held

    def _store_deferred_completion_first(self) -> None:
        """Before a write that stores the batch's events itself: the deferred end goes first,
        with the events emitted up to it."""
        if self._deferred_completion is not None:
            self._store_deferred_completion(answer=None)

    @_then_release_connection
    def fail_step(self, step_id: str, *, error: str) -> None:
        self._store_held_first()
        self._store_deferred_completion_first()
        step = self._steps.pop(step_id)
        with transaction.atomic():
            step_transition(step, StepStatus.FAILED, error=error, finished_at=timezone.now())
            self.emit(
                "step.completed",
                {
                    "step_id": step_id,
                    "index": step.index,
                    "kind": step.kind,
                    "status": StepStatus.FAILED,
                    "error": error,
                },
            )
            flush_batched_events()

    @_then_release_connection
    def append_message(self, message: ChatMessage, *, usage: Usage | None = None) -> None:
        if self._deferred_completion is not None:  # PostgreSQL: the answer of the call ending in this batch
            answer = self._answer_completion(self._new_message(message, usage))
            if self.holds_writes:
                self._held_answer = answer
            else:
                self._store_answer(answer)
            return
        if connection.vendor == "postgresql" and self._batch_depth:  # stored at the batch's end
            assert self._unsaved_message is None, "one transcript message per batch"
            self._unsaved_message = self._new_message(message, usage)
            return
        self._store_held_first()
        if connection.vendor == "postgresql":  # the message and the batch's events in one statement
            events = take_batched_events(self.run.session_id)
            one_statement.append_message(self._new_message(message, usage), events=events)
            return
        with transaction.atomic():
            position = next_session_number(session_id=self.run.session_id, counter="last_message_position")
            Message.objects.create(
                tenant_id=self.run.tenant_id,
                session_id=self.run.session_id,
                position=position,
                role=message_role_for(message),
                content=message.content,
                run=self.run,
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
            )
            flush_batched_events()

    def _new_message(self, message: ChatMessage, usage: Usage | None) -> Message:
        return Message(
            tenant_id=self.run.tenant_id,
            session_id=self.run.session_id,
            role=message_role_for(message),
            content=message.content,
            run=self.run,
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
        )

    @_then_release_connection
    def record_compaction(self, record: CompactionRecord) -> None:
        """Store the snapshot later runs start their context from (sessions.compaction)."""
        self._store_held_first()
        self._store_deferred_completion_first()
        compaction_snapshot_create(session=self.run.session, run=self.run, record=record)

    def tool_calls_so_far(self) -> int:
        """Tool calls this run has started, replays included (the per-run cap counts them)."""
        if self._is_first_pass:
            return self._tool_calls_started
        return Step.objects.filter(run=self.run, kind="tool_call").count()

    def completed_tool_result(self, tool_call_id: str) -> ToolOutcome | None:
        if self._is_first_pass:
            return self._tool_results.get(tool_call_id)
        step = Step.objects.filter(
            run=self.run, kind="tool_call", tool_call_id=tool_call_id, status=StepStatus.COMPLETED
        ).first()
        if step is None:
            return None
        return ToolOutcome(
            content=str(step.output.get("content", "")), is_error=bool(step.output.get("is_error"))
        )

    def stop_requested(self) -> StopRequestReason | None:
        """A cancel, a lost lease or a shutdown noticed by this process, or the wall-clock limit.

        The loop asks at every boundary and while it waits on a model or a tool: the moment to
        give back a connection that a read outside the recorder left with the run's thread.
        """
        release_connection()
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.handle.request_stop("timeout")
        return self.handle.stop_reason


@dataclass
class _StepCompletion:
    step: Step
    output: dict[str, Any]
    tokens: dict[str, int]
    finished_at: datetime


def _stale(step: Step) -> StaleTransition:
    return StaleTransition(f"step {step.pk} is no longer {step.status} at version {step.version}")


def _completed_data(step: Step) -> dict[str, Any]:
    return {"step_id": str(step.pk), "index": step.index, "kind": step.kind, "status": StepStatus.COMPLETED}


def _usage_fields(usage: Usage | None) -> dict[str, int]:
    if usage is None:
        return {}
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }
