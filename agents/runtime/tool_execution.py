"""Concurrent execution of the tool calls of one model turn.

Worker threads only run the tools; every step, event and outcome is recorded on the
loop's thread, because recorder implementations may not be thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace

from agents.runtime.stop_signal import StopSignal
from agents.runtime.types import (
    ContentBlock,
    RunRecorder,
    StopRequestReason,
    ToolCallRequested,
    ToolOutcome,
    ToolProvider,
)
from core.storable import storable_text

logger = logging.getLogger(__name__)

# How often the loop's thread wakes while tools run, to notice stop requests and timeouts.
POLL_SECONDS = 0.05
# Thread pools of finished batches kept for the next batches (per process).
IDLE_TOOL_POOLS = 8
# What the model is told of a call that changes something and was cut off by a worker's crash
# (or shutdown): it is not run again, since it may have taken effect.
INTERRUPTED_TOOL_OUTCOME = ToolOutcome(
    content=(
        "This tool call was interrupted before it finished (the worker running it stopped), so whether"
        " it took effect is unknown. It was not run again: check its effect before repeating it."
    ),
    is_error=True,
)


@dataclass(frozen=True)
class ToolBatch:
    """Outcomes by tool call id (only the calls that finished) and the stop that cut the batch short."""

    outcomes: dict[str, ToolOutcome]
    stop_reason: StopRequestReason | None


@dataclass
class _CallControl:
    """Shared with the worker thread: when the call started, and whether the loop gave up on it."""

    started_at: float | None = None
    abandoned: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class _RunningCall:
    call: ToolCallRequested
    step_id: str
    timeout_seconds: float
    control: _CallControl
    future: Future[ToolOutcome]


class ToolThreads:
    """Thread pools for tool batches, each lent to one batch at a time.

    Starting a thread costs more than a quick tool's whole call, so the pool of a batch whose
    calls all returned is kept for the next batch of the same width. A batch that gave up on a
    call (a timeout, a stop) does not give its pool back: that call's thread may never return.
    """

    def __init__(self, keep: int = IDLE_TOOL_POOLS) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._idle: list[tuple[int, ThreadPoolExecutor]] = []

    def lend(self, width: int) -> ThreadPoolExecutor:
        with self._lock:
            for index in range(len(self._idle) - 1, -1, -1):  # the most recently returned first
                if self._idle[index][0] == width:
                    return self._idle.pop(index)[1]
        return ThreadPoolExecutor(max_workers=width, thread_name_prefix="agentry-tool")

    def give_back(self, width: int, executor: ThreadPoolExecutor, *, all_returned: bool) -> None:
        with self._lock:
            if all_returned and len(self._idle) < self._keep:
                self._idle.append((width, executor))
                return
        # An abandoned or timed-out tool thread cannot be killed: do not wait for it.
        executor.shutdown(wait=False, cancel_futures=True)


tool_threads = ToolThreads()


def tool_calls_in(content: list[ContentBlock]) -> list[ToolCallRequested]:
    return [
        ToolCallRequested(id=block["id"], name=block["name"], arguments=block["arguments"])
        for block in content
        if block.get("type") == "tool_call"
    ]


def tool_result_block(tool_call_id: str, outcome: ToolOutcome) -> ContentBlock:
    return {
        "type": "tool_result",
        "tool_call_id": tool_call_id,
        "content": outcome.content,
        "is_error": outcome.is_error,
    }


def run_tool_calls(
    calls: list[ToolCallRequested],
    *,
    tools: ToolProvider,
    recorder: RunRecorder,
    stop: StopSignal,
    max_parallel: int,
) -> ToolBatch:
    """Run the calls concurrently. Crash recovery: a call that completed is not run again, nor is
    one that changes something and was interrupted (its outcome is unknown); a read-only one is."""
    outcomes = _recovered_outcomes(calls, recorder, tools)
    fresh_calls = [call for call in calls if call.id not in outcomes]
    if not fresh_calls:
        return ToolBatch(outcomes=outcomes, stop_reason=None)
    if stop.check():
        return ToolBatch(outcomes=outcomes, stop_reason=stop.reason)
    width = max(1, min(max_parallel, len(fresh_calls)))
    executor = tool_threads.lend(width)
    submitted: list[Future[ToolOutcome]] = []
    try:
        with recorder.batch():
            running = [
                _submit(call, executor, tools=tools, recorder=recorder, stop=stop) for call in fresh_calls
            ]
        submitted = [item.future for item in running]
        _collect(running, recorder=recorder, stop=stop, outcomes=outcomes)
    finally:
        all_returned = bool(submitted) and all(future.done() for future in submitted)
        tool_threads.give_back(width, executor, all_returned=all_returned)
    return ToolBatch(outcomes=outcomes, stop_reason=stop.reason)


def _recovered_outcomes(
    calls: list[ToolCallRequested], recorder: RunRecorder, tools: ToolProvider
) -> dict[str, ToolOutcome]:
    outcomes: dict[str, ToolOutcome] = {}
    for call in calls:
        completed = recorder.completed_tool_result(call.id)
        if completed is not None:
            outcomes[call.id] = completed
        elif not tools.is_read_only(call.name) and recorder.tool_call_was_interrupted(call.id):
            outcomes[call.id] = INTERRUPTED_TOOL_OUTCOME
            recorder.emit("tool.result", _result_data(call, INTERRUPTED_TOOL_OUTCOME) | {"interrupted": True})
    return outcomes


def _submit(
    call: ToolCallRequested,
    executor: ThreadPoolExecutor,
    *,
    tools: ToolProvider,
    recorder: RunRecorder,
    stop: StopSignal,
) -> _RunningCall:
    step_id = recorder.start_step(
        kind="tool_call", input={"tool_call_id": call.id, "name": call.name, "arguments": call.arguments}
    )
    recorder.emit("tool.call", {"tool_call_id": call.id, "name": call.name, "arguments": call.arguments})
    control = _CallControl()
    return _RunningCall(
        call=call,
        step_id=step_id,
        timeout_seconds=tools.timeout_for(call.name),
        control=control,
        future=executor.submit(_execute, call, control, tools, stop),
    )


def _execute(
    call: ToolCallRequested, control: _CallControl, tools: ToolProvider, stop: StopSignal
) -> ToolOutcome:
    """Runs on a worker thread: touches the tool only, never the recorder."""
    control.started_at = time.monotonic()
    try:
        outcome = tools.execute(call, should_stop=lambda: stop.is_set() or control.abandoned.is_set())
    # The protocol lets a tool raise anything: the model sees the failure and the run goes on.
    except Exception as error:
        logger.info("tool %s raised", call.name, exc_info=True)
        outcome = ToolOutcome(content=f"{type(error).__name__}: {error}", is_error=True)
    # A result can hold what PostgreSQL refuses (a NUL in a web page, a program's output).
    return replace(outcome, content=storable_text(outcome.content))


def _collect(
    running: list[_RunningCall],
    *,
    recorder: RunRecorder,
    stop: StopSignal,
    outcomes: dict[str, ToolOutcome],
) -> None:
    """Record outcomes as they arrive (completion order) until all are in or a stop is requested."""
    while running:
        wait([item.future for item in running], timeout=_wait_seconds(running), return_when=FIRST_COMPLETED)
        for item in list(running):
            outcome = _finished_outcome(item)
            if outcome is not None:
                running.remove(item)
                outcomes[item.call.id] = outcome
                _record_result(item, outcome, recorder)
        if running and stop.check():
            for item in running:
                item.control.abandoned.set()
                recorder.fail_step(item.step_id, error=stop.reason or "cancelled")
            return


def _wait_seconds(running: list[_RunningCall]) -> float:
    now = time.monotonic()
    deadlines = [
        item.control.started_at + item.timeout_seconds
        for item in running
        if item.control.started_at is not None
    ]
    return max(0.0, min([POLL_SECONDS, *(deadline - now for deadline in deadlines)]))


def _finished_outcome(item: _RunningCall) -> ToolOutcome | None:
    if item.future.done():
        return item.future.result()
    started_at = item.control.started_at
    if started_at is not None and time.monotonic() - started_at >= item.timeout_seconds:
        item.control.abandoned.set()
        return ToolOutcome(
            content=f"tool {item.call.name} timed out after {item.timeout_seconds:g}s", is_error=True
        )
    return None


def _result_data(call: ToolCallRequested, outcome: ToolOutcome) -> dict[str, object]:
    return {
        "tool_call_id": call.id,
        "name": call.name,
        "content": outcome.content,
        "is_error": outcome.is_error,
    }


def _record_result(item: _RunningCall, outcome: ToolOutcome, recorder: RunRecorder) -> None:
    with recorder.batch():
        recorder.emit("tool.result", _result_data(item.call, outcome))
        recorder.complete_step(
            item.step_id, output={"content": outcome.content, "is_error": outcome.is_error}
        )
