"""The compactor: summary and memory-flush calls, the fit under the target, the record and event."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from agents.runtime.compaction.context import (
    choose_cut,
    compaction_note,
    cut_points,
    is_note_only,
    render_transcript,
    with_note,
)
from agents.runtime.stop_signal import StopSignal
from agents.runtime.tokens import (
    CHARACTERS_PER_TOKEN,
    count_request_tokens,
    estimate_message_tokens,
    estimate_request_tokens,
)
from agents.runtime.tool_execution import run_tool_calls, tool_calls_in
from agents.runtime.types import (
    ChatMessage,
    CompactionReason,
    CompactionRecord,
    CompactionRecorder,
    ContentBlock,
    ModelClient,
    ModelError,
    ModelRequest,
    ModelResponseCompleted,
    RunRecorder,
    StreamCancelled,
    ToolProvider,
    Usage,
)

logger = logging.getLogger(__name__)

SUMMARY_SYSTEM_PROMPT = (
    "You compact conversations between a user and an AI agent. Summarize the conversation you are "
    "given so that the agent can continue the work without the original messages. Keep the user's "
    "goals and requests, decisions taken, facts and figures learned (including tool results that "
    "matter), the user's preferences, open questions and unfinished tasks. If the conversation "
    "starts with an earlier summary, fold it in. Write plain, dense prose without a preamble."
)
SUMMARY_INSTRUCTION = "Summarize the conversation above."
MEMORY_SAVE_TOOL = "memory_save"
MEMORY_FLUSH_INSTRUCTION = (
    "The conversation above is about to be replaced by a short summary. Use memory_save for anything "
    "in it you must not lose across conversations: facts about the user, preferences, decisions, "
    "commitments. Save nothing when nothing qualifies, and do not answer otherwise."
)
MAX_MEMORY_SAVES = 8
# The smallest transcript budget, for windows too small to leave room for a summary.
MIN_RENDERED_CHARACTERS = 8_000
EVENT_SUMMARY_CHARACTERS = 500
# Precise re-counts (one provider request each) spent bringing a compacted context under the target.
MAX_FIT_ROUNDS = 3


@dataclass(frozen=True)
class CompactionPolicy:
    """When and how much to compact.

    ``keep_recent_messages``: the newest messages kept verbatim (at least, when they fit);
    ``keep_recent_share``: the most of the target budget the kept messages may take.
    """

    context_window_tokens: int
    threshold: float = 0.85
    keep_recent_messages: int = 4
    keep_recent_share: float = 0.3
    summary_max_tokens: int = 4096
    is_memory_flush_enabled: bool = True

    @property
    def threshold_tokens(self) -> int:
        return int(self.context_window_tokens * self.threshold)

    def target_tokens(self, reason: CompactionReason, tokens_before: int) -> int:
        """What the compacted request should stay under.

        After an overflow the provider's real window is smaller than ``tokens_before``, whatever the
        table says: aim below both.
        """
        if reason == "overflow":
            return min(self.threshold_tokens, int(tokens_before * self.threshold))
        return self.threshold_tokens


@dataclass(frozen=True)
class Compaction:
    messages: list[ChatMessage]
    record: CompactionRecord


def _completed_response(
    model: ModelClient, request: ModelRequest, stop: StopSignal | None
) -> ModelResponseCompleted:
    """Stream a response without publishing it: compaction's own calls are not part of the chat."""
    should_stop = (lambda: stop.check() is not None) if stop is not None else (lambda: False)
    for event in model.stream(request, should_stop=should_stop):
        if isinstance(event, ModelResponseCompleted):
            return event
    raise ModelError("the model stream ended without a completed response", kind="server", is_retryable=True)


def _text_of(content: list[ContentBlock]) -> str:
    return "".join(block["text"] for block in content if block.get("type") == "text").strip()


# --- The compactor ----------------------------------------------------------------------------------


class ContextCompactor:
    """Compacts the context of one run (or of a session, for a manual compaction).

    ``tools`` is where memory-flush calls run; without it (or without ``memory_save`` among the
    request's tools) the flush is skipped. ``stop`` lets a cancelled run interrupt the summary.
    """

    def __init__(
        self,
        *,
        policy: CompactionPolicy,
        model: ModelClient,
        recorder: RunRecorder,
        stop: StopSignal | None = None,
        tools: ToolProvider | None = None,
        max_parallel_tools: int = 4,
    ) -> None:
        self.policy = policy
        self.model = model
        self.recorder = recorder
        self.stop = stop
        self.tools = tools
        self.max_parallel_tools = max_parallel_tools

    def count_tokens(self, request: ModelRequest) -> int:
        """The provider's count when it has one, else the estimate."""
        return count_request_tokens(self.model, request)

    def tokens_over_threshold(self, request: ModelRequest) -> int | None:
        """The request's tokens when they pass the threshold, else None.

        Far below the threshold the estimate decides alone, sparing a counting request per call.
        """
        threshold = self.policy.threshold_tokens
        tokens = count_request_tokens(self.model, request, budget_tokens=threshold)
        return tokens if tokens > threshold else None

    def compact(
        self,
        request: ModelRequest,
        *,
        reason: CompactionReason,
        tokens_before: int | None = None,
        is_fallback_allowed: bool = True,
    ) -> Compaction | None:
        """Compact ``request.messages``; None when nothing can be cut or a stop interrupted it.

        Without ``is_fallback_allowed`` a failed summary raises its ``ModelError`` and nothing is
        recorded.
        """
        if tokens_before is None:
            tokens_before = self.count_tokens(request)
        plan = _Plan.for_request(request, tokens_before=tokens_before, policy=self.policy, reason=reason)
        cut = plan.first_cut()
        if cut is None or is_note_only(request.messages[:cut]):
            return None
        usage = Usage()
        try:
            saved_memories = self._flush_memories(request, request.messages[:cut], usage)
            summary, error = self._summary_or_error(request, request.messages[:cut], usage)
        except StreamCancelled:
            # The run is stopping: its next model call notices and ends it.
            return None
        if error is not None and not is_fallback_allowed:
            raise error
        messages, cut, tokens_after = self._fit(request, compaction_note(summary), cut, plan)
        record = CompactionRecord(
            reason=reason,
            summary=summary,
            is_fallback=error is not None,
            kept_tail=list(request.messages[cut:]),
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            messages_before=len(request.messages),
            messages_after=len(messages),
            usage=usage,
            error=str(error) if error is not None else None,
        )
        self._record(record, saved_memories=saved_memories)
        return Compaction(messages=messages, record=record)

    # Steps of a compaction

    def _flush_memories(self, request: ModelRequest, older: list[ChatMessage], usage: Usage) -> int:
        """One turn with only ``memory_save`` offered; returns how many saves succeeded."""
        spec = next((spec for spec in request.tools if spec.name == MEMORY_SAVE_TOOL), None)
        if spec is None or self.tools is None or not self.policy.is_memory_flush_enabled:
            return 0
        flush_request = replace(
            request,
            messages=[self._transcript_message(older, MEMORY_FLUSH_INSTRUCTION)],
            tools=[spec],
            max_tokens=self.policy.summary_max_tokens,
        )
        try:
            response = self._side_call(flush_request, purpose="memory_flush", usage=usage)
        except ModelError as error:
            logger.info("memory flush before compaction failed: %s", error)
            return 0
        calls = [call for call in tool_calls_in(response.content) if call.name == MEMORY_SAVE_TOOL]
        if not calls:
            return 0
        batch = run_tool_calls(
            calls[:MAX_MEMORY_SAVES],
            tools=self.tools,
            recorder=self.recorder,
            stop=self.stop or StopSignal(self.recorder),
            max_parallel=self.max_parallel_tools,
        )
        return sum(1 for outcome in batch.outcomes.values() if not outcome.is_error)

    def _summary_or_error(
        self, request: ModelRequest, older: list[ChatMessage], usage: Usage
    ) -> tuple[str, ModelError | None]:
        summary_request = ModelRequest(
            model=request.model,
            system=SUMMARY_SYSTEM_PROMPT,
            messages=[self._transcript_message(older, SUMMARY_INSTRUCTION)],
            max_tokens=self.policy.summary_max_tokens,
            timeout_seconds=request.timeout_seconds,
        )
        try:
            response = self._side_call(summary_request, purpose="compaction", usage=usage)
        except ModelError as error:
            return "", error
        summary = _text_of(response.content)
        if not summary:
            return "", ModelError("the model wrote an empty summary", kind="bad_request", is_retryable=False)
        return summary, None

    def _fit(
        self, request: ModelRequest, note: str, cut: int, plan: _Plan
    ) -> tuple[list[ChatMessage], int, int]:
        """Drop further whole turns while the compacted request stays over the target."""
        later = [point for point in cut_points(request.messages) if point > cut]
        note_tokens = estimate_message_tokens(
            ChatMessage(role="user", content=[{"type": "text", "text": note}])
        )
        for fit_round in range(1, MAX_FIT_ROUNDS + 1):
            while later and plan.estimated_with_tail(cut, note_tokens) > plan.target:
                cut = later.pop(0)
            messages = with_note(note, request.messages[cut:])
            tokens_after = self.count_tokens(replace(request, messages=messages))
            if tokens_after <= plan.target or not later or fit_round == MAX_FIT_ROUNDS:
                break
            plan.recalibrate(tokens_after, replace(request, messages=messages))
            cut = later.pop(0)
        return messages, cut, tokens_after

    def _record(self, record: CompactionRecord, *, saved_memories: int) -> None:
        if isinstance(self.recorder, CompactionRecorder):
            self.recorder.record_compaction(record)
        data: dict[str, object] = {
            "reason": record.reason,
            "tokens_before": record.tokens_before,
            "tokens_after": record.tokens_after,
            "messages_before": record.messages_before,
            "messages_after": record.messages_after,
            "summary": record.summary[:EVENT_SUMMARY_CHARACTERS],
            "fallback": record.is_fallback,
            "memories_saved": saved_memories,
        }
        if record.error is not None:
            data["error"] = f"summarizing failed, the oldest turns were dropped instead: {record.error}"
        self.recorder.emit("compaction", data)

    # Model calls of their own

    def _transcript_message(self, messages: list[ChatMessage], instruction: str) -> ChatMessage:
        budget_tokens = self.policy.context_window_tokens - 2 * self.policy.summary_max_tokens
        max_characters = max(MIN_RENDERED_CHARACTERS, budget_tokens * CHARACTERS_PER_TOKEN)
        transcript = render_transcript(messages, max_characters=max_characters)
        text = f"<conversation>\n{transcript}\n</conversation>\n\n{instruction}"
        return ChatMessage(role="user", content=[{"type": "text", "text": text}])

    def _side_call(self, request: ModelRequest, *, purpose: str, usage: Usage) -> ModelResponseCompleted:
        """A model call recorded as a step but not streamed as a message of the conversation."""
        step_id = self.recorder.start_step(
            kind="model_call",
            input={"model": request.model, "purpose": purpose, "message_count": len(request.messages)},
        )
        try:
            response = _completed_response(self.model, request, self.stop)
        except StreamCancelled:
            self.recorder.fail_step(step_id, error=(self.stop.reason if self.stop else None) or "cancelled")
            raise
        except ModelError as error:
            self.recorder.fail_step(step_id, error=str(error))
            raise
        usage.add(response.usage)
        self.recorder.complete_step(
            step_id, output={"purpose": purpose, "content": response.content}, usage=response.usage
        )
        return response


@dataclass
class _Plan:
    """Token estimates of one request's messages, scaled to the provider's count."""

    messages: list[ChatMessage]
    message_tokens: list[int]
    overhead_tokens: int
    scale: float
    target: int
    policy: CompactionPolicy

    @classmethod
    def for_request(
        cls, request: ModelRequest, *, tokens_before: int, policy: CompactionPolicy, reason: CompactionReason
    ) -> _Plan:
        plan = cls(
            messages=request.messages,
            message_tokens=[estimate_message_tokens(message) for message in request.messages],
            overhead_tokens=estimate_request_tokens(replace(request, messages=[])),
            scale=1.0,
            target=policy.target_tokens(reason, tokens_before),
            policy=policy,
        )
        plan.recalibrate(tokens_before, request)
        return plan

    def recalibrate(self, counted_tokens: int, request: ModelRequest) -> None:
        """Scale estimates so they agree with the provider's count of ``request``."""
        self.scale = counted_tokens / max(1, estimate_request_tokens(request))

    def first_cut(self) -> int | None:
        return choose_cut(
            self.messages,
            message_tokens=[round(tokens * self.scale) for tokens in self.message_tokens],
            keep_messages=self.policy.keep_recent_messages,
            recent_budget=self.policy.keep_recent_share * self.target,
        )

    def estimated_with_tail(self, cut: int, note_tokens: int) -> float:
        return (self.overhead_tokens + note_tokens + sum(self.message_tokens[cut:])) * self.scale
