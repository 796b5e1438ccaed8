"""The model request goes out while the loop stores the start of its step (agents.runtime.early_stream)."""

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest

from agents.runtime import early_stream
from agents.runtime.builtin_tools import StaticToolProvider
from agents.runtime.loop import LoopResult
from agents.runtime.types import (
    ModelRequest,
    ModelResponseCompleted,
    ModelStreamEvent,
    StepKind,
    TextDelta,
    Usage,
)
from tests.runtime.fakes import InMemoryRecorder, Pause, ScriptedModel, Turn
from tests.runtime.test_loop import run, run_cancelled_after, text_block, text_turn


class WatchedModel(ScriptedModel):
    """Notes when and on which thread its stream starts, and when the stream is closed."""

    def __init__(self, turns: list[Turn]) -> None:
        super().__init__(turns)
        self.requested = threading.Event()
        self.closed = threading.Event()
        self.request_threads: list[int] = []

    def stream(self, request: ModelRequest, *, should_stop: Callable[[], bool]) -> Iterator[ModelStreamEvent]:
        self.request_threads.append(threading.get_ident())
        self.requested.set()
        try:
            yield from super().stream(request, should_stop=should_stop)
        finally:
            self.closed.set()


class SlowStartRecorder(InMemoryRecorder):
    """Its first batch (the model call's start) ends only once the model was asked, or after 2 s."""

    def __init__(self, model: WatchedModel) -> None:
        super().__init__()
        self.model = model
        self.requested_while_storing_the_start: bool | None = None

    @contextmanager
    def _waiting_batch(self) -> Iterator[None]:
        yield
        if self.requested_while_storing_the_start is None:
            self.requested_while_storing_the_start = self.model.requested.wait(timeout=2)

    def batch(self) -> AbstractContextManager[None]:
        self._note_caller()
        return self._waiting_batch()


def test_the_model_request_goes_out_while_the_step_start_is_stored() -> None:
    model = WatchedModel([text_turn("hello")])
    recorder = SlowStartRecorder(model)

    result = run(model, StaticToolProvider({}), recorder)

    assert result == LoopResult(stop_reason="end_turn", usage=Usage(7, 3), final_text="hello", error=None)
    assert recorder.requested_while_storing_the_start is True
    assert model.request_threads != [threading.get_ident()]  # opened on a kept thread
    assert recorder.caller_threads == {threading.get_ident()}  # the recorder only on the loop's
    assert recorder.event_types() == ["message.started", "text.delta", "message.completed", "usage"]
    assert [(step.kind, step.status) for step in recorder.steps] == [("model_call", "completed")]


class FailingStartRecorder(InMemoryRecorder):
    def start_step(self, *, kind: StepKind, input: dict[str, object], may_hold: bool = False) -> str:
        raise RuntimeError("the database went away")


def test_a_step_start_that_fails_closes_the_stream_it_opened() -> None:
    model = WatchedModel([text_turn("never read")])

    with pytest.raises(RuntimeError, match="the database went away"):
        run(model, StaticToolProvider({}), FailingStartRecorder())

    assert model.closed.wait(timeout=2)


def test_a_stop_while_the_first_event_is_awaited_cancels_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(early_stream, "STOP_POLL_SECONDS", 0.01)
    silence: Turn = [Pause(0.02) for _ in range(100)]  # two seconds before the first token
    late_answer = ModelResponseCompleted([text_block("late")], "end_turn", Usage())
    turn: Turn = [*silence, TextDelta("late"), late_answer]
    model = WatchedModel([turn])
    model.cancelled_usage = Usage(input_tokens=12)
    recorder = InMemoryRecorder()

    result, elapsed = run_cancelled_after(0.1, model, recorder)

    assert result == LoopResult(
        stop_reason="cancelled", usage=Usage(input_tokens=12), final_text="", error=None
    )
    assert elapsed < 1
    assert [(step.kind, step.status, step.error) for step in recorder.steps] == [
        ("model_call", "failed", "cancelled")
    ]
    assert "text.delta" not in recorder.event_types()
    assert model.closed.is_set()


def test_streams_waiting_for_their_first_event_do_not_wait_for_each_other() -> None:
    """Eight calls at once (more than a CPU-sized pool): each opens while the others wait."""
    all_opened = threading.Barrier(8, timeout=5)

    class WaitsForTheOthers(ScriptedModel):
        def stream(
            self, request: ModelRequest, *, should_stop: Callable[[], bool]
        ) -> Iterator[ModelStreamEvent]:
            all_opened.wait()
            yield from super().stream(request, should_stop=should_stop)

    results: list[LoopResult] = []

    def one_call(index: int) -> None:
        model = WaitsForTheOthers([text_turn(f"answer {index}")])
        results.append(run(model, StaticToolProvider({}), InMemoryRecorder()))

    callers = [threading.Thread(target=one_call, args=(index,)) for index in range(8)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=10)

    assert sorted(result.final_text for result in results) == [f"answer {index}" for index in range(8)]
