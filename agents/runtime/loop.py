"""The agent loop: call the model, run the tools it asks for, feed the results back, repeat.

Plain Python behind the protocols of ``agents.runtime.types``. The caller opens and closes
the run (``run.*`` events and state); the loop records steps, messages and the
message/tool/usage events in between.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agents.runtime.compaction import CompactionPolicy, ContextCompactor
from agents.runtime.model_turn import TurnInterrupted, call_model
from agents.runtime.plan_tool import PlanRequest, outcome_for_plan, plan_request_in, with_create_plan
from agents.runtime.stop_signal import StopSignal
from agents.runtime.tool_execution import run_tool_calls, tool_calls_in, tool_result_block
from agents.runtime.types import (
    ApprovalCheck,
    ApprovalGate,
    ChatMessage,
    CompactionReason,
    ModelClient,
    ModelRequest,
    ModelResponseCompleted,
    RunRecorder,
    StopRequestReason,
    ToolCallRequested,
    ToolOutcome,
    ToolProvider,
    Usage,
)

LoopStopReason = Literal[
    "end_turn",
    "max_steps",
    "max_tokens",
    "cancelled",
    "timeout",
    "llm_error",
    "context_overflow",
    "insufficient_credits",
    "no_price",
    "lease_lost",
    "shutdown",
    "awaiting_approval",
    "awaiting_input",
    "awaiting_subagents",
    "plan_requested",
]

# What the model is told about a call the run stopped before it finished.
STOPPED_TOOL_OUTCOME = ToolOutcome(content="the run stopped before this tool call finished", is_error=True)


@dataclass
class LoopConfig:
    model: str
    system_prompt: str
    max_model_calls: int
    max_output_tokens: int
    temperature: float | None
    max_parallel_tools: int = 4
    model_timeout_seconds: float = 120.0
    delta_flush_seconds: float = 0.03
    # None switches context compaction off.
    compaction: CompactionPolicy | None = None
    # Offer ``create_plan`` (agents.runtime.plan_tool): the model may hand the request to a planner.
    offers_create_plan: bool = False


@dataclass(frozen=True)
class LoopResult:
    stop_reason: LoopStopReason
    usage: Usage
    final_text: str
    error: str | None
    # plan_requested: the model's create_plan call.
    plan_request: PlanRequest | None = None


def run_agent_loop(
    *,
    config: LoopConfig,
    history: list[ChatMessage],
    model: ModelClient,
    tools: ToolProvider,
    recorder: RunRecorder,
    model_calls_done: int = 0,
    approvals: ApprovalGate | None = None,
) -> LoopResult:
    """Run the conversation in ``history`` until the model ends its turn or a limit or stop hits.

    ``model_calls_done`` counts the model calls of this run made before a resume. When
    ``approvals`` holds a call back, the loop returns ``awaiting_approval`` (a person decides),
    ``awaiting_input`` (the user answers a question) or ``awaiting_subagents`` (a sub-agent
    works) with the calls unanswered; running it again on the stored history resumes from there.
    With ``config.offers_create_plan``, a turn that calls ``create_plan`` ends the loop with
    ``plan_requested``, its calls answered without running.
    """
    loop = _AgentLoop(config, history, model, tools, recorder, model_calls_done, approvals)
    unanswered_calls = unanswered_tool_calls(history)
    if unanswered_calls and (stop_reason := loop.answer_tool_calls(unanswered_calls)):
        return loop.finish(stop_reason)
    while True:
        if stop_reason := loop.stop.check():
            return loop.finish(stop_reason)
        if loop.model_calls_done >= config.max_model_calls:
            return loop.finish("max_steps")
        response = loop.call_model()
        if isinstance(response, TurnInterrupted):
            return loop.finish(response.reason, error=response.error)
        if ending := how_response_ends_loop(response):
            return loop.finish(ending)
        if stop_reason := loop.answer_tool_calls(tool_calls_in(response.content)):
            return loop.finish(stop_reason)


def how_response_ends_loop(response: ModelResponseCompleted) -> Literal["max_tokens", "end_turn"] | None:
    """A response cut at the output limit, or one that calls no tool, is the loop's last."""
    if response.stop_reason == "max_tokens":
        return "max_tokens"
    return None if tool_calls_in(response.content) else "end_turn"


WaitReason = Literal["awaiting_input", "awaiting_approval", "awaiting_subagents"]
# A batch with several kinds of held calls waits as the first: the user's answer shows first.
WAIT_REASONS: tuple[tuple[str, WaitReason], ...] = (
    ("asking", "awaiting_input"),
    ("pending", "awaiting_approval"),
    ("waiting", "awaiting_subagents"),
)


def _wait_reason(checks: dict[str, ApprovalCheck]) -> WaitReason | None:
    states = {check.state for check in checks.values()}
    return next((reason for state, reason in WAIT_REASONS if state in states), None)


def unanswered_tool_calls(history: list[ChatMessage]) -> list[ToolCallRequested]:
    """The tool calls of a final assistant turn: a run that crashed before recording their results."""
    if not history or history[-1].role != "assistant":
        return []
    return tool_calls_in(history[-1].content)


class _AgentLoop:
    """The state one ``run_agent_loop`` call carries between steps."""

    def __init__(
        self,
        config: LoopConfig,
        history: list[ChatMessage],
        model: ModelClient,
        tools: ToolProvider,
        recorder: RunRecorder,
        model_calls_done: int,
        approvals: ApprovalGate | None = None,
    ) -> None:
        self.approvals = approvals
        self.config = config
        self.messages = list(history)
        self.model = model
        self.tools = tools
        self.tool_specs = with_create_plan(tools.specs()) if config.offers_create_plan else tools.specs()
        self.plan_request: PlanRequest | None = None
        self.recorder = recorder
        self.model_calls_done = model_calls_done
        self.stop = StopSignal(recorder)
        self.usage = Usage()
        self.final_text = ""
        # Tool results already in the model's context, recorded with the next model call's start
        # (one recorder batch: a recorder may store both at once), or when the loop ends first.
        self._unrecorded_results: ChatMessage | None = None
        self.compactor = (
            ContextCompactor(
                policy=config.compaction,
                model=model,
                recorder=recorder,
                stop=self.stop,
                tools=tools,
                max_parallel_tools=config.max_parallel_tools,
            )
            if config.compaction is not None
            else None
        )

    def call_model(self) -> ModelResponseCompleted | TurnInterrupted:
        """One model call; the context is compacted first when it passes the threshold.

        When the provider answers that the context is too long, compact and retry once.
        """
        if self.compactor is not None:
            tokens = self.compactor.tokens_over_threshold(self._model_request())
            if tokens is not None:
                self._compact("threshold", tokens_before=tokens)
        response = self._stream_response()
        if self._is_overflow(response) and self._compact("overflow"):
            response = self._stream_response()
        return response

    def _stream_response(self) -> ModelResponseCompleted | TurnInterrupted:
        self.model_calls_done += 1
        response = call_model(
            self._model_request(),
            model=self.model,
            recorder=self.recorder,
            stop=self.stop,
            flush_seconds=self.config.delta_flush_seconds,
            on_completed=self._record_response,
            record_first=self._record_results,
        )
        if isinstance(response, TurnInterrupted):
            self.usage.add(response.usage)
        return response

    @staticmethod
    def _is_overflow(response: ModelResponseCompleted | TurnInterrupted) -> bool:
        return isinstance(response, TurnInterrupted) and response.reason == "context_overflow"

    def _compact(self, reason: CompactionReason, *, tokens_before: int | None = None) -> bool:
        """Continue from a compacted context; False when compaction is off or found nothing to cut.

        The compaction's own model calls count in the run's usage.
        """
        if self.compactor is None:
            return False
        self._record_results()  # the compaction's snapshot counts what the transcript holds
        compaction = self.compactor.compact(self._model_request(), reason=reason, tokens_before=tokens_before)
        if compaction is None:
            return False
        self.messages = list(compaction.messages)
        spent = compaction.record.usage
        if spent.total_tokens or spent.cache_read_tokens or spent.cache_write_tokens:
            self.usage.add(spent)
            self.recorder.emit("usage", {"usage": spent.as_dict(), "total_usage": self.usage.as_dict()})
        return True

    def answer_tool_calls(
        self, calls: list[ToolCallRequested]
    ) -> WaitReason | StopRequestReason | Literal["plan_requested"] | None:
        """Run the calls and append their results as one user message, in call order.

        Nothing of the batch runs while one call waits: the resumed run answers them all at once.
        Nothing runs either when one asks for a plan.
        """
        if self.config.offers_create_plan and (request := plan_request_in(calls)) is not None:
            self._answer_for_plan(calls, request)
            return "plan_requested"
        checks = self.approvals.check(calls) if self.approvals else {}
        if wait_reason := _wait_reason(checks):
            return wait_reason
        denied = {
            call.id: self._deny(call, checks[call.id])
            for call in calls
            if call.id in checks and checks[call.id].state in ("denied", "refused")
        }
        batch = run_tool_calls(
            [call for call in calls if call.id not in denied],
            tools=self.tools,
            recorder=self.recorder,
            stop=self.stop,
            max_parallel=self.config.max_parallel_tools,
        )
        if batch.stop_reason in ("lease_lost", "shutdown"):
            # Another worker owns the run (or will) and answers these calls when it resumes.
            return batch.stop_reason
        # A stopped run still answers every call, so the transcript stays valid for the next run.
        outcomes = [
            denied.get(call.id) or batch.outcomes.get(call.id, STOPPED_TOOL_OUTCOME) for call in calls
        ]
        blocks = [tool_result_block(call.id, outcome) for call, outcome in zip(calls, outcomes, strict=True)]
        self._unrecorded_results = ChatMessage(role="user", content=blocks)
        self.messages.append(self._unrecorded_results)
        return batch.stop_reason

    def _answer_for_plan(self, calls: list[ToolCallRequested], request: PlanRequest) -> None:
        """The plan takes the request over: every call of the turn is answered, none runs."""
        self.plan_request = request
        answered = [(call, outcome_for_plan(call, request)) for call in calls]
        with self.recorder.batch():  # the results message and their events: stored together
            for call, outcome in answered:
                self.recorder.emit(
                    "tool.result",
                    {
                        "tool_call_id": call.id,
                        "name": call.name,
                        "content": outcome.content,
                        "is_error": outcome.is_error,
                    },
                )
            blocks = [tool_result_block(call.id, outcome) for call, outcome in answered]
            self._unrecorded_results = ChatMessage(role="user", content=blocks)
            self.messages.append(self._unrecorded_results)
            self._record_results()

    def _deny(self, call: ToolCallRequested, check: ApprovalCheck) -> ToolOutcome:
        """A denied or refused call is answered without running; the model sees why."""
        if check.state == "refused":
            content = f"This tool call was refused: {check.reason}"
        else:
            content = "The user denied this tool call." + (f" Reason: {check.reason}" if check.reason else "")
        self.recorder.emit(
            "tool.result",
            {
                "tool_call_id": call.id,
                "name": call.name,
                "content": content,
                "is_error": True,
                check.state: True,
            },
        )
        return ToolOutcome(content=content, is_error=True)

    def finish(self, stop_reason: LoopStopReason, *, error: str | None = None) -> LoopResult:
        self._record_results()
        return LoopResult(
            stop_reason=stop_reason,
            usage=self.usage,
            final_text=self.final_text,
            error=error,
            plan_request=self.plan_request,
        )

    def _model_request(self) -> ModelRequest:
        return ModelRequest(
            model=self.config.model,
            system=self.config.system_prompt,
            messages=list(self.messages),
            tools=self.tool_specs,
            max_tokens=self.config.max_output_tokens,
            temperature=self.config.temperature,
            timeout_seconds=self.config.model_timeout_seconds,
        )

    def _record_response(self, response: ModelResponseCompleted) -> None:
        """The usage and the answer, recorded with the end of the model call that gave them."""
        self.usage.add(response.usage)
        with self.recorder.batch():
            self.recorder.emit(
                "usage", {"usage": response.usage.as_dict(), "total_usage": self.usage.as_dict()}
            )
            self._append(ChatMessage(role="assistant", content=response.content), usage=response.usage)
            if ending := how_response_ends_loop(response):
                self.recorder.loop_ends(ending)
        self.final_text = "".join(block["text"] for block in response.content if block.get("type") == "text")

    def _record_results(self) -> None:
        if self._unrecorded_results is not None:
            results, self._unrecorded_results = self._unrecorded_results, None
            self.recorder.append_message(results)

    def _append(self, message: ChatMessage, *, usage: Usage | None = None) -> None:
        self.messages.append(message)
        self.recorder.append_message(message, usage=usage)
