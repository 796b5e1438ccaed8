"""One model call of the loop: a step, the streamed message events, and how it ended."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from agents.runtime.coalescer import DeltaCoalescer
from agents.runtime.stop_signal import StopSignal
from agents.runtime.types import (
    ChatMessage,
    ContentBlock,
    ModelClient,
    ModelError,
    ModelRequest,
    ModelResponseCompleted,
    ModelStreamEvent,
    ReasoningDelta,
    RunRecorder,
    StreamCancelled,
    TextDelta,
    Usage,
)

InterruptionReason = Literal[
    "cancelled",
    "timeout",
    "lease_lost",
    "shutdown",
    "llm_error",
    "context_overflow",
    "insufficient_credits",
    "no_price",
]
# Stops that end the run: the answer streamed so far is kept, marked as stopped. After the
# others (a lost lease, a shutdown) another worker resumes the run and asks the model again.
ENDING_STOPS = ("cancelled", "timeout")
# Model errors that end the run with their own stop reason rather than ``llm_error``.
ERROR_KIND_REASONS: dict[str, InterruptionReason] = {
    "context_overflow": "context_overflow",
    "insufficient_credits": "insufficient_credits",
    "no_price": "no_price",
}


@dataclass(frozen=True)
class TurnInterrupted:
    """A model call that produced no response. ``usage`` holds the tokens spent anyway."""

    reason: InterruptionReason
    usage: Usage
    error: str | None = None


def call_model(
    request: ModelRequest,
    *,
    model: ModelClient,
    recorder: RunRecorder,
    stop: StopSignal,
    flush_seconds: float,
    on_completed: Callable[[ModelResponseCompleted], None] | None = None,
    record_first: Callable[[], None] | None = None,
) -> ModelResponseCompleted | TurnInterrupted:
    """Stream one response as ``message.*`` and delta events inside a ``model_call`` step.

    ``on_completed`` records what follows from a complete response (the answer joining the
    transcript) in the same recorder batch as the step's end, so a recorder can store both at once.
    ``record_first`` records what precedes the call (tool results) in the batch of its start.
    """
    with recorder.batch():
        if record_first is not None:
            record_first()
        step_id = recorder.start_step(
            kind="model_call", input={"model": request.model, "message_count": len(request.messages)}
        )
        recorder.emit("message.started", {"role": "assistant"})
    coalescer = DeltaCoalescer(recorder.emit, flush_seconds=flush_seconds)
    streamed: list[str] = []
    try:
        events = model.stream(request, should_stop=lambda: stop.check() is not None)
        response = _stream_response(events, coalescer=coalescer, streamed=streamed)
    except StreamCancelled as cancelled:
        reason = stop.reason or "cancelled"
        _record_stopped_answer(
            recorder, step_id, reason=reason, usage=cancelled.usage, text="".join(streamed)
        )
        return TurnInterrupted(reason=reason, usage=cancelled.usage)
    except ModelError as error:
        recorder.fail_step(step_id, error=str(error))
        failure = ERROR_KIND_REASONS.get(error.kind, "llm_error")
        return TurnInterrupted(reason=failure, usage=Usage(), error=str(error))
    with recorder.batch():
        coalescer.flush()  # the last deltas are stored with the message's end
        recorder.emit("message.completed", {"content": response.content})
        recorder.complete_step(
            step_id,
            output={"content": response.content, "stop_reason": response.stop_reason},
            usage=response.usage,
        )
        if on_completed is not None:
            on_completed(response)
    return response


def _record_stopped_answer(
    recorder: RunRecorder, step_id: str, *, reason: InterruptionReason, usage: Usage, text: str
) -> None:
    """The stopped call's step with the tokens it spent and, when the stop ends the run, the text
    people saw stream: it joins the transcript marked as stopped, like a finished answer."""
    with recorder.batch():
        recorder.fail_step(step_id, error=reason, usage=usage)
        if not text or reason not in ENDING_STOPS:
            return
        content: list[ContentBlock] = [{"type": "text", "text": text}]
        recorder.emit("message.completed", {"content": content, "is_stopped": True})
        recorder.append_message(ChatMessage(role="assistant", content=content), usage=usage, is_stopped=True)


def _stream_response(
    events: Iterator[ModelStreamEvent], *, coalescer: DeltaCoalescer, streamed: list[str]
) -> ModelResponseCompleted:
    """The completed response; ``streamed`` collects its text as it arrives (kept when it stops)."""
    completed: ModelResponseCompleted | None = None
    try:
        # Tool calls are read from the completed content, so ToolCallRequested needs no handling.
        for event in events:
            if isinstance(event, TextDelta):
                streamed.append(event.text)
                coalescer.add("text.delta", event.text)
            elif isinstance(event, ReasoningDelta):
                coalescer.add("reasoning.delta", event.text)
            elif isinstance(event, ModelResponseCompleted):
                completed = event
    except BaseException:
        coalescer.flush()  # what streamed before the failure is kept
        raise
    if completed is None:
        coalescer.flush()
        raise ModelError(
            "the model stream ended without a completed response", kind="server", is_retryable=True
        )
    return completed
