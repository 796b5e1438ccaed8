"""Test doubles for the runtime protocols: a scripted model and an in-memory recorder."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from agents.runtime.types import (
    ChatMessage,
    ModelRequest,
    ModelStreamEvent,
    StepKind,
    StopRequestReason,
    StreamCancelled,
    ToolOutcome,
    Usage,
)


@dataclass(frozen=True)
class Pause:
    """A scripted turn item: the fake model waits this long before its next event."""

    seconds: float


ScriptItem = ModelStreamEvent | Pause | Exception
Turn = list[ScriptItem]


class ScriptedModel:
    """Plays one scripted turn per ``stream`` call and keeps every request it received.

    Between items it polls ``should_stop`` like a real client and raises ``StreamCancelled``
    carrying ``cancelled_usage``.
    """

    def __init__(self, turns: list[Turn], *, cancelled_usage: Usage | None = None) -> None:
        self.turns = list(turns)
        self.requests: list[ModelRequest] = []
        self.cancelled_usage = cancelled_usage or Usage()

    def stream(self, request: ModelRequest, *, should_stop: Callable[[], bool]) -> Iterator[ModelStreamEvent]:
        self.requests.append(request)
        for item in self.turns.pop(0):
            if should_stop():
                raise StreamCancelled(self.cancelled_usage)
            if isinstance(item, Pause):
                time.sleep(item.seconds)
            elif isinstance(item, Exception):
                raise item
            else:
                yield item


@dataclass
class StepRecord:
    id: str
    kind: StepKind
    input: dict[str, Any]
    status: str = "running"
    output: dict[str, Any] | None = None
    usage: Usage | None = None
    error: str | None = None


@dataclass
class InMemoryRecorder:
    """A ``RunRecorder`` that keeps everything in lists and notes which threads called it."""

    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    messages: list[tuple[ChatMessage, Usage | None]] = field(default_factory=list)
    # The answers appended as stopped while they streamed (also in ``messages``).
    stopped_messages: list[ChatMessage] = field(default_factory=list)
    completed_results: dict[str, ToolOutcome] = field(default_factory=dict)
    # Tool calls an earlier attempt started and never ended (crash recovery).
    interrupted_calls: set[str] = field(default_factory=set)
    requested_stop: StopRequestReason | None = None
    # What the loop announced, inside the batch of its last response, it ends with.
    loop_endings: list[str] = field(default_factory=list)
    caller_threads: set[int] = field(default_factory=set)
    _step_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def emit(self, event_type: str, data: dict[str, Any]) -> None:
        self._note_caller()
        self.events.append((event_type, data))

    def batch(self) -> AbstractContextManager[None]:
        self._note_caller()
        return nullcontext()

    def start_step(self, *, kind: StepKind, input: dict[str, Any]) -> str:
        self._note_caller()
        step = StepRecord(id=f"step-{next(self._step_ids)}", kind=kind, input=input)
        self.steps.append(step)
        return step.id

    def complete_step(self, step_id: str, *, output: dict[str, Any], usage: Usage | None = None) -> None:
        self._note_caller()
        step = self._running_step(step_id)
        step.status, step.output, step.usage = "completed", output, usage

    def fail_step(self, step_id: str, *, error: str, usage: Usage | None = None) -> None:
        self._note_caller()
        step = self._running_step(step_id)
        step.status, step.error, step.usage = "failed", error, usage

    def append_message(
        self, message: ChatMessage, *, usage: Usage | None = None, is_stopped: bool = False
    ) -> None:
        self._note_caller()
        self.messages.append((message, usage))
        if is_stopped:
            self.stopped_messages.append(message)

    def completed_tool_result(self, tool_call_id: str) -> ToolOutcome | None:
        self._note_caller()
        return self.completed_results.get(tool_call_id)

    def tool_call_was_interrupted(self, tool_call_id: str) -> bool:
        self._note_caller()
        return tool_call_id in self.interrupted_calls

    def stop_requested(self) -> StopRequestReason | None:
        self._note_caller()
        return self.requested_stop

    def loop_ends(self, stop_reason: str) -> None:
        self._note_caller()
        self.loop_endings.append(stop_reason)

    # Helpers for assertions.

    def event_types(self) -> list[str]:
        return [event_type for event_type, _data in self.events]

    def events_of(self, event_type: str) -> list[dict[str, Any]]:
        return [data for recorded_type, data in self.events if recorded_type == event_type]

    def _running_step(self, step_id: str) -> StepRecord:
        step = next(step for step in self.steps if step.id == step_id)
        assert step.status == "running", f"{step_id} is already {step.status}"
        return step

    def _note_caller(self) -> None:
        self.caller_threads.add(threading.get_ident())
