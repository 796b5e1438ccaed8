import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from agents.runtime.builtin_tools import BUILTIN_TOOLS, StaticToolProvider, ToolEntry
from agents.runtime.coalescer import DeltaCoalescer
from agents.runtime.loop import STOPPED_TOOL_OUTCOME, LoopConfig, LoopResult, run_agent_loop
from agents.runtime.plan_tool import (
    CREATE_PLAN_SPEC,
    NOT_RUN_FOR_PLAN,
    PLAN_STARTED,
    UNSTATED_REASON,
    PlanRequest,
)
from agents.runtime.tool_execution import INTERRUPTED_TOOL_OUTCOME
from agents.runtime.types import (
    ApprovalCheck,
    ChatMessage,
    ModelError,
    ModelResponseCompleted,
    ReasoningDelta,
    StepKind,
    StopRequestReason,
    TextDelta,
    ToolCallRequested,
    ToolOutcome,
    ToolSpec,
    Usage,
)
from tests.runtime.fakes import InMemoryRecorder, Pause, ScriptedModel, Turn

USER_QUESTION = ChatMessage(role="user", content=[{"type": "text", "text": "What is 12*7?"}])


def config(**overrides: Any) -> LoopConfig:
    values: dict[str, Any] = {
        "model": "scripted",
        "system_prompt": "You are a test agent.",
        "max_model_calls": 10,
        "max_output_tokens": 1000,
        "temperature": 0.2,
    }
    return LoopConfig(**(values | overrides))


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def call_block(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}


def result_block(call_id: str, content: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"type": "tool_result", "tool_call_id": call_id, "content": content, "is_error": is_error}


def tool_turn(*calls: tuple[str, str, dict[str, Any]], usage: Usage | None = None) -> Turn:
    """A model turn that asks for the given (id, name, arguments) calls."""
    blocks = [call_block(call_id, name, arguments) for call_id, name, arguments in calls]
    requested: Turn = [
        ToolCallRequested(id=call_id, name=name, arguments=args) for call_id, name, args in calls
    ]
    return [
        *requested,
        ModelResponseCompleted(content=blocks, stop_reason="tool_use", usage=usage or Usage(5, 2)),
    ]


def text_turn(text: str, usage: Usage | None = None) -> Turn:
    return [TextDelta(text), ModelResponseCompleted([text_block(text)], "end_turn", usage or Usage(7, 3))]


def tool(name: str, function: Any, timeout: float = 5.0) -> tuple[str, ToolEntry]:
    spec = ToolSpec(name=name, description=name, input_schema={"type": "object", "properties": {}})
    return name, (spec, function, timeout)


def run(
    model: ScriptedModel, tools: StaticToolProvider, recorder: InMemoryRecorder, **kwargs: Any
) -> LoopResult:
    history = kwargs.pop("history", [USER_QUESTION])
    return run_agent_loop(
        config=kwargs.pop("config", config()),
        history=history,
        model=model,
        tools=tools,
        recorder=recorder,
        **kwargs,
    )


def test_model_tool_model_emits_the_full_event_sequence_and_records_steps_and_messages() -> None:
    model = ScriptedModel(
        [
            [
                TextDelta("Let me compute."),
                ToolCallRequested(id="call-1", name="calculator", arguments={"expression": "12*7"}),
                ModelResponseCompleted(
                    content=[
                        text_block("Let me compute."),
                        call_block("call-1", "calculator", {"expression": "12*7"}),
                    ],
                    stop_reason="tool_use",
                    usage=Usage(input_tokens=10, output_tokens=5, cache_read_tokens=4),
                ),
            ],
            text_turn("12*7 = 84.", Usage(input_tokens=20, output_tokens=4, cache_write_tokens=1)),
        ]
    )
    recorder = InMemoryRecorder()

    result = run(model, StaticToolProvider(BUILTIN_TOOLS), recorder)

    assert result == LoopResult(
        stop_reason="end_turn",
        usage=Usage(input_tokens=30, output_tokens=9, cache_read_tokens=4, cache_write_tokens=1),
        final_text="12*7 = 84.",
        error=None,
    )
    assert recorder.event_types() == [
        "message.started",
        "text.delta",
        "message.completed",
        "usage",
        "tool.call",
        "tool.result",
        "message.started",
        "text.delta",
        "message.completed",
        "usage",
    ]
    assert recorder.events_of("tool.call") == [
        {"tool_call_id": "call-1", "name": "calculator", "arguments": {"expression": "12*7"}}
    ]
    assert recorder.events_of("tool.result") == [
        {"tool_call_id": "call-1", "name": "calculator", "content": "84", "is_error": False}
    ]
    assert recorder.events_of("usage") == [
        {
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_read_tokens": 4,
                "cache_write_tokens": 0,
            },
            "total_usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_read_tokens": 4,
                "cache_write_tokens": 0,
            },
        },
        {
            "usage": {
                "input_tokens": 20,
                "output_tokens": 4,
                "cache_read_tokens": 0,
                "cache_write_tokens": 1,
            },
            "total_usage": {
                "input_tokens": 30,
                "output_tokens": 9,
                "cache_read_tokens": 4,
                "cache_write_tokens": 1,
            },
        },
    ]
    assert [(step.kind, step.status, step.input) for step in recorder.steps] == [
        ("model_call", "completed", {"model": "scripted", "message_count": 1}),
        (
            "tool_call",
            "completed",
            {"tool_call_id": "call-1", "name": "calculator", "arguments": {"expression": "12*7"}},
        ),
        ("model_call", "completed", {"model": "scripted", "message_count": 3}),
    ]
    assert [step.output for step in recorder.steps] == [
        {
            "content": [
                text_block("Let me compute."),
                call_block("call-1", "calculator", {"expression": "12*7"}),
            ],
            "stop_reason": "tool_use",
        },
        {"content": "84", "is_error": False},
        {"content": [text_block("12*7 = 84.")], "stop_reason": "end_turn"},
    ]
    assert [message for message, _usage in recorder.messages] == [
        ChatMessage(
            "assistant",
            [text_block("Let me compute."), call_block("call-1", "calculator", {"expression": "12*7"})],
        ),
        ChatMessage("user", [result_block("call-1", "84")]),
        ChatMessage("assistant", [text_block("12*7 = 84.")]),
    ]
    assert model.requests[1].messages == [USER_QUESTION, *(message for message, _ in recorder.messages[:2])]


def test_usage_totals_equal_the_sum_of_the_model_steps() -> None:
    model = ScriptedModel(
        [tool_turn(("c1", "calculator", {"expression": "1+1"}), usage=Usage(11, 3, 2, 1))] * 3
    )
    model.turns.append(text_turn("done", Usage(13, 5, 0, 7)))
    recorder = InMemoryRecorder()

    result = run(model, StaticToolProvider(BUILTIN_TOOLS), recorder)

    step_total = Usage()
    for step in recorder.steps:
        if step.kind == "model_call" and step.usage:
            step_total.add(step.usage)
    assert result.usage == step_total == Usage(46, 14, 6, 10)
    assert [usage for _message, usage in recorder.messages if usage] == [
        step.usage for step in recorder.steps if step.usage
    ]
    assert recorder.events_of("usage")[-1]["total_usage"] == step_total.as_dict()


def test_model_request_carries_the_config_and_the_tool_specs() -> None:
    model = ScriptedModel([text_turn("hi")])

    run(
        model, StaticToolProvider(BUILTIN_TOOLS), InMemoryRecorder(), config=config(model_timeout_seconds=9.5)
    )

    request = model.requests[0]
    assert (
        request.model,
        request.system,
        request.max_tokens,
        request.temperature,
        request.timeout_seconds,
    ) == (
        "scripted",
        "You are a test agent.",
        1000,
        0.2,
        9.5,
    )
    assert [spec.name for spec in request.tools] == ["calculator", "current_time"]
    assert request.messages == [USER_QUESTION]


def test_text_deltas_are_coalesced_and_concatenate_to_the_final_text() -> None:
    characters = [chr(ord("a") + index % 26) for index in range(100)]
    final_text = "".join(characters)
    turn: Turn = [TextDelta(character) for character in characters]
    turn.append(ModelResponseCompleted([text_block(final_text)], "end_turn", Usage(1, 100)))
    recorder = InMemoryRecorder()

    # A flush interval far longer than the test: the whole text goes out once, with the message's end.
    result = run(
        ScriptedModel([turn]), StaticToolProvider({}), recorder, config=config(delta_flush_seconds=60)
    )

    assert recorder.events_of("text.delta") == [{"text": final_text}]
    assert result.final_text == final_text


def test_text_deltas_coalesced_with_the_default_interval_keep_the_exact_text() -> None:
    characters = [str(index % 10) for index in range(100)]
    turn: Turn = [TextDelta(character) for character in characters]
    turn.append(ModelResponseCompleted([text_block("".join(characters))], "end_turn", Usage(1, 100)))
    recorder = InMemoryRecorder()

    run(ScriptedModel([turn]), StaticToolProvider({}), recorder)

    deltas = recorder.events_of("text.delta")
    assert len(deltas) <= 5
    assert "".join(delta["text"] for delta in deltas) == "".join(characters)


def test_coalescer_emits_at_most_once_per_interval_per_kind_and_keeps_stream_order() -> None:
    now = [0.0]
    emitted: list[tuple[str, dict[str, Any]]] = []
    coalescer = DeltaCoalescer(
        lambda kind, data: emitted.append((kind, data)), flush_seconds=0.03, clock=lambda: now[0]
    )
    now[0] = 0.5  # the model's first token, long after the request: it goes out at once

    coalescer.add("reasoning.delta", "Think")
    coalescer.add("reasoning.delta", "ing")
    coalescer.add("text.delta", "He")  # a change of kind flushes the reasoning first
    coalescer.add("text.delta", "llo")
    now[0] = 0.52
    coalescer.add("text.delta", ",")
    now[0] = 0.531
    coalescer.add("text.delta", " world")
    coalescer.add("text.delta", "")
    coalescer.add("text.delta", "!")
    coalescer.flush()
    coalescer.flush()

    assert emitted == [
        ("reasoning.delta", {"text": "Think"}),
        ("reasoning.delta", {"text": "ing"}),
        ("text.delta", {"text": "He"}),
        ("text.delta", {"text": "llo, world"}),
        ("text.delta", {"text": "!"}),
    ]


def test_coalescer_holds_deltas_that_arrive_within_the_first_interval_after_the_request() -> None:
    now = [0.0]
    emitted: list[tuple[str, dict[str, Any]]] = []
    coalescer = DeltaCoalescer(
        lambda kind, data: emitted.append((kind, data)), flush_seconds=0.03, clock=lambda: now[0]
    )

    now[0] = 0.001
    coalescer.add("text.delta", "Hel")
    now[0] = 0.029
    coalescer.add("text.delta", "lo")
    held = list(emitted)
    now[0] = 0.03
    coalescer.add("text.delta", "!")

    assert held == []
    assert emitted == [("text.delta", {"text": "Hello!"})]


def test_reasoning_and_text_deltas_are_flushed_before_message_completed() -> None:
    turn: Turn = [
        ReasoningDelta("Let me"),
        ReasoningDelta(" think."),
        TextDelta("An"),
        TextDelta("swer."),
        ModelResponseCompleted(
            [{"type": "reasoning", "text": "Let me think.", "signature": None}, text_block("Answer.")],
            "end_turn",
            Usage(1, 1),
        ),
    ]
    recorder = InMemoryRecorder()

    run(ScriptedModel([turn]), StaticToolProvider({}), recorder, config=config(delta_flush_seconds=60))

    # Within the first interval nothing goes out early: the change of kind flushes the reasoning.
    assert recorder.events[:3] == [
        ("message.started", {"role": "assistant"}),
        ("reasoning.delta", {"text": "Let me think."}),
        ("text.delta", {"text": "Answer."}),
    ]
    assert recorder.event_types()[3:] == ["message.completed", "usage"]


def test_tool_calls_of_one_turn_run_concurrently_and_answer_in_one_message_in_call_order() -> None:
    barrier = threading.Barrier(2, timeout=5)
    worker_threads: set[int] = set()

    def meet(label: str, linger: float) -> str:
        worker_threads.add(threading.get_ident())
        barrier.wait()  # both calls must be running at once, or this breaks
        time.sleep(linger)
        return label

    tools = StaticToolProvider(
        dict([tool("first", lambda: meet("A", 0.2)), tool("second", lambda: meet("B", 0))])
    )
    model = ScriptedModel(
        [tool_turn(("call-a", "first", {}), ("call-b", "second", {})), text_turn("both done")]
    )
    recorder = InMemoryRecorder()

    result = run(model, tools, recorder)

    assert result.stop_reason == "end_turn"
    assert recorder.messages[1][0] == ChatMessage(
        "user", [result_block("call-a", "A"), result_block("call-b", "B")]
    )
    # Results are announced as they complete (B first: A lingers), but answered in call order.
    assert recorder.event_types()[3:7] == ["tool.call", "tool.call", "tool.result", "tool.result"]
    assert recorder.events_of("tool.result") == [
        {"tool_call_id": "call-b", "name": "second", "content": "B", "is_error": False},
        {"tool_call_id": "call-a", "name": "first", "content": "A", "is_error": False},
    ]
    assert len(worker_threads) == 2
    assert recorder.caller_threads == {threading.get_ident()}


def test_parallel_tool_calls_are_bounded_by_max_parallel_tools() -> None:
    running, peak = [0], [0]
    lock = threading.Lock()

    def busy() -> str:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return "ok"

    calls: list[tuple[str, str, dict[str, Any]]] = [(f"call-{index}", "busy", {}) for index in range(6)]
    model = ScriptedModel([tool_turn(*calls), text_turn("done")])
    recorder = InMemoryRecorder()

    run(model, StaticToolProvider(dict([tool("busy", busy)])), recorder, config=config(max_parallel_tools=2))

    assert peak[0] == 2
    assert [block["tool_call_id"] for block in recorder.messages[1][0].content] == [call[0] for call in calls]


def test_a_raising_tool_becomes_an_error_result_and_the_run_continues() -> None:
    def broken() -> str:
        raise RuntimeError("boom")

    model = ScriptedModel([tool_turn(("call-1", "broken", {})), text_turn("The tool failed.")])
    recorder = InMemoryRecorder()

    result = run(model, StaticToolProvider(dict([tool("broken", broken)])), recorder)

    assert result.stop_reason == "end_turn"
    assert recorder.events_of("tool.result") == [
        {"tool_call_id": "call-1", "name": "broken", "content": "RuntimeError: boom", "is_error": True}
    ]
    assert recorder.messages[1][0] == ChatMessage(
        "user", [result_block("call-1", "RuntimeError: boom", is_error=True)]
    )
    assert recorder.steps[1].status == "completed"
    assert model.requests[1].messages[-1] == recorder.messages[1][0]


def test_an_unknown_tool_and_bad_arguments_become_error_results() -> None:
    model = ScriptedModel(
        [
            tool_turn(("call-1", "teleport", {}), ("call-2", "calculator", {"expr": "1"})),
            text_turn("ok"),
        ]
    )
    recorder = InMemoryRecorder()

    run(model, StaticToolProvider(BUILTIN_TOOLS), recorder)

    assert recorder.messages[1][0].content == [
        result_block("call-1", "ToolInputError: unknown tool 'teleport'", is_error=True),
        result_block("call-2", "ToolInputError: unexpected arguments for calculator: expr", is_error=True),
    ]


def test_a_tool_that_outlives_its_timeout_becomes_an_error_result() -> None:
    release = threading.Event()
    tools = StaticToolProvider(
        dict([tool("slow", lambda: "late" if release.wait(5) else "never", timeout=0.1)])
    )
    model = ScriptedModel([tool_turn(("call-1", "slow", {})), text_turn("It timed out.")])
    recorder = InMemoryRecorder()

    started = time.monotonic()
    result = run(model, tools, recorder)
    elapsed = time.monotonic() - started
    release.set()

    assert result.stop_reason == "end_turn"
    assert elapsed < 2
    assert recorder.events_of("tool.result") == [
        {
            "tool_call_id": "call-1",
            "name": "slow",
            "content": "tool slow timed out after 0.1s",
            "is_error": True,
        }
    ]
    assert recorder.messages[1][0].content == [
        result_block("call-1", "tool slow timed out after 0.1s", is_error=True)
    ]


def _thread_noting_tool(threads: list[threading.Thread]) -> tuple[str, ToolEntry]:
    def where() -> str:
        threads.append(threading.current_thread())
        return "here"

    return tool("where", where)


def test_the_next_batch_runs_on_the_threads_of_a_batch_whose_calls_all_returned() -> None:
    threads: list[threading.Thread] = []
    tools = StaticToolProvider(dict([_thread_noting_tool(threads)]))
    model = ScriptedModel(
        [tool_turn(("call-1", "where", {})), tool_turn(("call-2", "where", {})), text_turn("Done.")]
    )

    result = run(model, tools, InMemoryRecorder())

    assert result.stop_reason == "end_turn"
    assert len(threads) == 2
    assert threads[0] is threads[1]  # no thread was started for the second batch


def test_a_batch_that_gave_up_on_a_call_leaves_its_thread_to_it() -> None:
    release = threading.Event()
    threads: list[threading.Thread] = []

    def slow() -> str:
        threads.append(threading.current_thread())
        return "late" if release.wait(5) else "never"

    tools = StaticToolProvider(dict([tool("slow", slow, timeout=0.1), _thread_noting_tool(threads)]))
    model = ScriptedModel(
        [tool_turn(("call-1", "slow", {})), tool_turn(("call-2", "where", {})), text_turn("Done.")]
    )

    result = run(model, tools, InMemoryRecorder())
    still_waiting = threads[0].is_alive()
    release.set()

    assert result.stop_reason == "end_turn"
    assert still_waiting
    assert len(threads) == 2
    assert threads[0] is not threads[1]  # the timed-out call still held its thread


def test_reaching_max_model_calls_stops_with_max_steps() -> None:
    model = ScriptedModel(
        [tool_turn((f"call-{index}", "calculator", {"expression": "1+1"})) for index in range(3)]
    )
    recorder = InMemoryRecorder()

    result = run(model, StaticToolProvider(BUILTIN_TOOLS), recorder, config=config(max_model_calls=2))

    assert result.stop_reason == "max_steps"
    assert len(model.requests) == 2
    assert [step.kind for step in recorder.steps] == ["model_call", "tool_call", "model_call", "tool_call"]
    assert result.usage == Usage(10, 4)


def test_model_calls_done_before_a_resume_count_towards_the_limit() -> None:
    model = ScriptedModel([text_turn("never")])

    result = run(
        model,
        StaticToolProvider({}),
        InMemoryRecorder(),
        config=config(max_model_calls=3),
        model_calls_done=3,
    )

    assert result == LoopResult(stop_reason="max_steps", usage=Usage(), final_text="", error=None)
    assert model.requests == []


def test_max_tokens_from_the_model_stops_the_loop() -> None:
    turn: Turn = [
        TextDelta("Trunc"),
        ModelResponseCompleted([text_block("Trunc")], "max_tokens", Usage(3, 1000)),
    ]
    recorder = InMemoryRecorder()

    result = run(ScriptedModel([turn]), StaticToolProvider({}), recorder)

    assert result == LoopResult(
        stop_reason="max_tokens", usage=Usage(3, 1000), final_text="Trunc", error=None
    )
    assert [message for message, _usage in recorder.messages] == [
        ChatMessage("assistant", [text_block("Trunc")])
    ]


@pytest.mark.parametrize(
    ("turns", "max_model_calls", "endings"),
    [
        ([text_turn("Hi.")], 10, ["end_turn"]),
        ([tool_turn(("call-1", "calculator", {"expression": "6*7"})), text_turn("42.")], 10, ["end_turn"]),
        ([[ModelResponseCompleted([text_block("Tru")], "max_tokens", Usage(3, 9))]], 10, ["max_tokens"]),
        ([tool_turn(("call-1", "calculator", {"expression": "1+1"}))] * 2, 1, []),
    ],
    ids=["answer", "tool then answer", "cut at max_tokens", "max_steps after tools"],
)
def test_the_loop_tells_its_recorder_when_a_response_is_its_last(
    turns: list[Turn], max_model_calls: int, endings: list[str]
) -> None:
    recorder = InMemoryRecorder()

    result = run(
        ScriptedModel(turns),
        StaticToolProvider(BUILTIN_TOOLS),
        recorder,
        config=config(max_model_calls=max_model_calls),
    )

    assert recorder.loop_endings == endings
    assert result.stop_reason == (endings[0] if endings else "max_steps")


def test_a_model_error_stops_with_llm_error_and_fails_the_step() -> None:
    error = ModelError("overloaded, retries exhausted", kind="overloaded", is_retryable=True, status_code=529)
    model = ScriptedModel(
        [tool_turn(("call-1", "calculator", {"expression": "2+2"})), [TextDelta("Par"), error]]
    )
    recorder = InMemoryRecorder()

    result = run(model, StaticToolProvider(BUILTIN_TOOLS), recorder)

    assert result == LoopResult(
        stop_reason="llm_error", usage=Usage(5, 2), final_text="", error="overloaded, retries exhausted"
    )
    assert [(step.kind, step.status, step.error) for step in recorder.steps] == [
        ("model_call", "completed", None),
        ("tool_call", "completed", None),
        ("model_call", "failed", "overloaded, retries exhausted"),
    ]
    assert recorder.event_types()[-2:] == ["message.started", "text.delta"]
    assert len(recorder.messages) == 2


def test_a_stream_that_ends_without_completion_is_an_llm_error() -> None:
    recorder = InMemoryRecorder()

    result = run(ScriptedModel([[TextDelta("Hello")]]), StaticToolProvider({}), recorder)

    assert (result.stop_reason, result.error) == (
        "llm_error",
        "the model stream ended without a completed response",
    )
    assert recorder.steps[0].status == "failed"


def run_cancelled_after(
    seconds: float, model: ScriptedModel, recorder: InMemoryRecorder
) -> tuple[LoopResult, float]:
    """Run the loop with a cancel requested ``seconds`` after it starts; also returns how long it took."""
    canceller = threading.Timer(seconds, lambda: setattr(recorder, "requested_stop", "cancelled"))
    canceller.start()
    started = time.monotonic()
    result = run(model, StaticToolProvider({}), recorder)
    return result, time.monotonic() - started


def test_a_cancel_during_a_slow_stream_keeps_the_streamed_text_as_a_stopped_answer_with_its_tokens() -> None:
    full_text = "word " * 500
    turn: Turn = []
    for _ in range(500):
        turn += [TextDelta("word "), Pause(0.01)]
    turn.append(ModelResponseCompleted([text_block(full_text)], "end_turn", Usage(10, 500)))
    model = ScriptedModel([turn], cancelled_usage=Usage(input_tokens=10, output_tokens=7))
    recorder = InMemoryRecorder()

    result, elapsed = run_cancelled_after(0.1, model, recorder)

    assert result == LoopResult(stop_reason="cancelled", usage=Usage(10, 7), final_text="", error=None)
    assert elapsed < 2
    streamed = "".join(delta["text"] for delta in recorder.events_of("text.delta"))
    assert streamed and full_text.startswith(streamed) and streamed != full_text
    stopped = [{"type": "text", "text": streamed}]
    assert recorder.events_of("message.completed") == [{"content": stopped, "is_stopped": True}]
    assert [(step.kind, step.status, step.error, step.usage) for step in recorder.steps] == [
        ("model_call", "failed", "cancelled", Usage(10, 7))
    ]
    assert recorder.messages == [(ChatMessage(role="assistant", content=stopped), Usage(10, 7))]
    assert recorder.stopped_messages == [ChatMessage(role="assistant", content=stopped)]


@pytest.mark.parametrize("reason", ["cancelled", "timeout", "lease_lost"])
def test_a_stop_requested_before_the_first_model_call_makes_no_call(reason: StopRequestReason) -> None:
    model = ScriptedModel([text_turn("never")])
    recorder = InMemoryRecorder(requested_stop=reason)

    result = run(model, StaticToolProvider({}), recorder)

    assert result == LoopResult(stop_reason=reason, usage=Usage(), final_text="", error=None)
    assert model.requests == []
    assert recorder.events == []


@pytest.mark.parametrize("reason", ["cancelled", "timeout"])
def test_a_stop_during_tools_fails_running_steps_and_still_answers_every_call(
    reason: StopRequestReason,
) -> None:
    recorder = InMemoryRecorder()
    release = threading.Event()

    def quick() -> str:
        return "quick result"

    def stuck() -> str:
        recorder.requested_stop = reason
        release.wait(5)
        return "too late"

    tools = StaticToolProvider(dict([tool("quick", quick), tool("stuck", stuck)]))
    model = ScriptedModel([tool_turn(("call-1", "quick", {}), ("call-2", "stuck", {})), text_turn("never")])

    started = time.monotonic()
    result = run(model, tools, recorder)
    elapsed = time.monotonic() - started
    release.set()

    assert result.stop_reason == reason
    assert elapsed < 2
    assert len(model.requests) == 1
    assert [(step.kind, step.status, step.error) for step in recorder.steps] == [
        ("model_call", "completed", None),
        ("tool_call", "completed", None),
        ("tool_call", "failed", reason),
    ]
    assert recorder.events_of("tool.result") == [
        {"tool_call_id": "call-1", "name": "quick", "content": "quick result", "is_error": False}
    ]
    assert recorder.messages[-1][0].content == [
        result_block("call-1", "quick result"),
        result_block("call-2", STOPPED_TOOL_OUTCOME.content, is_error=True),
    ]


def test_a_lost_lease_during_tools_leaves_the_calls_to_the_next_owner() -> None:
    recorder = InMemoryRecorder()
    release = threading.Event()

    def stuck() -> str:
        recorder.requested_stop = "lease_lost"
        release.wait(5)
        return "too late"

    model = ScriptedModel([tool_turn(("call-1", "stuck", {})), text_turn("never")])

    result = run(model, StaticToolProvider(dict([tool("stuck", stuck)])), recorder)
    release.set()

    assert result.stop_reason == "lease_lost"
    assert [(step.kind, step.status, step.error) for step in recorder.steps][-1] == (
        "tool_call",
        "failed",
        "lease_lost",
    )
    assert [message.role for message, _usage in recorder.messages] == ["assistant"]


def test_a_resumed_run_executes_only_the_tool_calls_that_did_not_complete() -> None:
    executed: list[str] = []

    def counted(label: str) -> str:
        executed.append(label)
        return f"{label} result"

    tools = StaticToolProvider(
        dict([tool("first", lambda: counted("A")), tool("second", lambda: counted("B"))])
    )
    history = [
        USER_QUESTION,
        ChatMessage("assistant", [call_block("call-a", "first", {}), call_block("call-b", "second", {})]),
    ]
    recorder = InMemoryRecorder(completed_results={"call-a": ToolOutcome("A result from before the crash")})
    model = ScriptedModel([text_turn("Both answered.")])

    result = run(model, tools, recorder, history=history, model_calls_done=1)

    assert result.stop_reason == "end_turn"
    assert executed == ["B"]
    assert recorder.events_of("tool.call") == [{"tool_call_id": "call-b", "name": "second", "arguments": {}}]
    assert [(step.kind, step.input.get("tool_call_id")) for step in recorder.steps] == [
        ("tool_call", "call-b"),
        ("model_call", None),
    ]
    tool_results = ChatMessage(
        "user", [result_block("call-a", "A result from before the crash"), result_block("call-b", "B result")]
    )
    assert recorder.messages[0][0] == tool_results
    assert model.requests[0].messages == [*history, tool_results]


def test_a_resumed_run_whose_calls_all_completed_makes_no_tool_steps() -> None:
    history = [
        USER_QUESTION,
        ChatMessage("assistant", [call_block("call-a", "calculator", {"expression": "1+1"})]),
    ]
    recorder = InMemoryRecorder(completed_results={"call-a": ToolOutcome("2")})

    run(ScriptedModel([text_turn("Two.")]), StaticToolProvider(BUILTIN_TOOLS), recorder, history=history)

    assert [step.kind for step in recorder.steps] == ["model_call"]
    assert recorder.messages[0][0] == ChatMessage("user", [result_block("call-a", "2")])


class WaitingGate:
    """An approval gate whose ``delegate`` calls wait on a sub-agent until ``done`` is set."""

    def __init__(self) -> None:
        self.done = False

    def check(self, calls: list[ToolCallRequested]) -> dict[str, ApprovalCheck]:
        if self.done:
            return {}
        return {call.id: ApprovalCheck(state="waiting") for call in calls if call.name == "delegate"}


def test_a_call_waiting_on_a_subagent_pauses_the_loop_and_the_replay_answers_the_whole_turn() -> None:
    ran: list[str] = []

    def delegate() -> str:
        ran.append("delegate")
        return "the answer"

    tools = StaticToolProvider(dict([tool("delegate", delegate), *BUILTIN_TOOLS.items()]))
    turn = tool_turn(("call-1", "delegate", {}), ("call-2", "calculator", {"expression": "1+1"}))
    gate = WaitingGate()
    recorder = InMemoryRecorder()

    paused = run(ScriptedModel([turn]), tools, recorder, approvals=gate)

    assert (paused.stop_reason, ran) == ("awaiting_subagents", [])
    assert recorder.event_types() == ["message.started", "message.completed", "usage"]
    assert [message.role for message, _usage in recorder.messages] == ["assistant"]

    gate.done = True
    history = [USER_QUESTION, recorder.messages[0][0]]
    resumed = run(
        ScriptedModel([text_turn("done")]), tools, InMemoryRecorder(), history=history, approvals=gate
    )

    assert (resumed.stop_reason, resumed.final_text, ran) == ("end_turn", "done", ["delegate"])


class _BatchNotingRecorder(InMemoryRecorder):
    """Notes batches, starts and appended messages in the order the loop makes them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    @contextmanager
    def batch(self) -> Iterator[None]:
        self.calls.append("batch")
        yield
        self.calls.append("end")

    def start_step(self, *, kind: StepKind, input: dict[str, Any]) -> str:
        self.calls.append(f"start {kind}")
        return super().start_step(kind=kind, input=input)

    def append_message(
        self, message: ChatMessage, *, usage: Usage | None = None, is_stopped: bool = False
    ) -> None:
        self.calls.append(f"append {message.role}")
        super().append_message(message, usage=usage, is_stopped=is_stopped)


def test_tool_results_are_recorded_in_the_batch_that_starts_the_next_model_call() -> None:
    model = ScriptedModel([tool_turn(("call-1", "calculator", {"expression": "6*7"})), text_turn("42")])
    recorder = _BatchNotingRecorder()

    run(model, StaticToolProvider(BUILTIN_TOOLS), recorder)

    second_call = recorder.calls.index("start model_call", recorder.calls.index("start tool_call"))
    assert recorder.calls[second_call - 2 : second_call + 1] == ["batch", "append user", "start model_call"]
    assert [message.content for message, _usage in recorder.messages][1] == [result_block("call-1", "42")]


def test_tool_results_of_a_loop_that_stops_before_the_next_call_are_still_recorded() -> None:
    model = ScriptedModel([tool_turn(("call-1", "calculator", {"expression": "1+1"}))])
    recorder = _BatchNotingRecorder()

    result = run(model, StaticToolProvider(BUILTIN_TOOLS), recorder, config=config(max_model_calls=1))

    assert result.stop_reason == "max_steps"
    assert recorder.calls[-1] == "append user"
    assert [message.role for message, _usage in recorder.messages] == ["assistant", "user"]
    assert recorder.messages[-1][0].content == [result_block("call-1", "2")]


def _resumed_with_calls_an_earlier_attempt_cut_off(
    recorder: InMemoryRecorder, executed: list[str]
) -> tuple[LoopResult, list[ChatMessage]]:
    """A run resumed after its worker died inside two calls: one read-only, one that changes something."""

    def lookup() -> str:
        executed.append("lookup")
        return "found"

    def send_email() -> str:
        executed.append("send_email")
        return "sent"

    tools = StaticToolProvider(
        dict([tool("lookup", lookup), tool("send_email", send_email)]), read_only=frozenset({"lookup"})
    )
    history = [
        ChatMessage(role="user", content=[{"type": "text", "text": "look it up and mail it"}]),
        ChatMessage(
            role="assistant",
            content=[
                {"type": "tool_call", "id": "call-1", "name": "lookup", "arguments": {}},
                {"type": "tool_call", "id": "call-2", "name": "send_email", "arguments": {}},
            ],
        ),
    ]
    result = run_agent_loop(
        config=config(),
        history=history,
        model=ScriptedModel([text_turn("done")]),
        tools=tools,
        recorder=recorder,
    )
    return result, [message for message, _usage in recorder.messages]


def test_a_resumed_run_does_not_repeat_an_interrupted_call_that_changes_something() -> None:
    recorder = InMemoryRecorder(interrupted_calls={"call-1", "call-2"})
    executed: list[str] = []

    result, messages = _resumed_with_calls_an_earlier_attempt_cut_off(recorder, executed)

    # The read-only call runs again; the other is answered as interrupted, with an unknown outcome.
    assert result.stop_reason == "end_turn"
    assert executed == ["lookup"]
    assert messages[0].content == [
        result_block("call-1", "found"),
        {
            "type": "tool_result",
            "tool_call_id": "call-2",
            "content": INTERRUPTED_TOOL_OUTCOME.content,
            "is_error": True,
        },
    ]
    assert recorder.events_of("tool.result")[0] == {
        "tool_call_id": "call-2",
        "name": "send_email",
        "content": INTERRUPTED_TOOL_OUTCOME.content,
        "is_error": True,
        "interrupted": True,
    }
    assert [step.input["tool_call_id"] for step in recorder.steps if step.kind == "tool_call"] == ["call-1"]


def test_a_resumed_run_runs_calls_no_earlier_attempt_started() -> None:
    recorder = InMemoryRecorder()
    executed: list[str] = []

    result, _messages = _resumed_with_calls_an_earlier_attempt_cut_off(recorder, executed)

    assert result.stop_reason == "end_turn"
    assert sorted(executed) == ["lookup", "send_email"]


def test_create_plan_is_offered_only_when_the_config_says_so_and_replaces_a_tool_of_its_name() -> None:
    tools = StaticToolProvider(dict([*BUILTIN_TOOLS.items(), tool("create_plan", lambda: "mine")]))
    offered, plain = ScriptedModel([text_turn("hi")]), ScriptedModel([text_turn("hi")])

    run(offered, tools, InMemoryRecorder(), config=config(offers_create_plan=True))
    run(plain, tools, InMemoryRecorder())

    assert offered.requests[0].tools == [*StaticToolProvider(BUILTIN_TOOLS).specs(), CREATE_PLAN_SPEC]
    assert [spec.name for spec in plain.requests[0].tools] == ["calculator", "current_time", "create_plan"]
    assert plain.requests[0].tools[-1] != CREATE_PLAN_SPEC


def test_a_create_plan_call_ends_the_loop_with_every_call_of_its_turn_answered_and_none_run() -> None:
    ran: list[str] = []

    def note() -> str:
        ran.append("note")
        return "noted"

    tools = StaticToolProvider(dict([tool("note", note), *BUILTIN_TOOLS.items()]))
    turn = tool_turn(
        ("call-1", "note", {}),
        ("call-2", "create_plan", {"reason": "  two   independent parts "}),
        ("call-3", "create_plan", {"reason": "again"}),
    )
    model = ScriptedModel([turn, text_turn("never asked")])
    recorder = _BatchNotingRecorder()

    result = run(model, tools, recorder, config=config(offers_create_plan=True), approvals=WaitingGate())

    assert (result.stop_reason, result.plan_request) == (
        "plan_requested",
        PlanRequest(tool_call_id="call-2", reason="two independent parts"),
    )
    assert (len(model.requests), ran, [step.kind for step in recorder.steps]) == (1, [], ["model_call"])
    assert [message.role for message, _usage in recorder.messages] == ["assistant", "user"]
    assert recorder.messages[1][0].content == [
        result_block("call-1", NOT_RUN_FOR_PLAN.content, is_error=True),
        result_block("call-2", PLAN_STARTED.content),
        result_block("call-3", NOT_RUN_FOR_PLAN.content, is_error=True),
    ]
    assert recorder.events_of("tool.result") == [
        {"tool_call_id": "call-1", "name": "note", "content": NOT_RUN_FOR_PLAN.content, "is_error": True},
        {"tool_call_id": "call-2", "name": "create_plan", "content": PLAN_STARTED.content, "is_error": False},
        {
            "tool_call_id": "call-3",
            "name": "create_plan",
            "content": NOT_RUN_FOR_PLAN.content,
            "is_error": True,
        },
    ]
    assert recorder.calls[-3:] == ["batch", "append user", "end"]


def test_a_replayed_turn_that_asked_for_a_plan_asks_again_without_a_model_call() -> None:
    asked = ChatMessage(role="assistant", content=[call_block("call-1", "create_plan", {})])
    model = ScriptedModel([text_turn("never asked")])

    result = run(
        model,
        StaticToolProvider(BUILTIN_TOOLS),
        InMemoryRecorder(),
        config=config(offers_create_plan=True),
        history=[USER_QUESTION, asked],
    )

    assert (result.stop_reason, result.plan_request, model.requests) == (
        "plan_requested",
        PlanRequest(tool_call_id="call-1", reason=UNSTATED_REASON),
        [],
    )


def test_a_create_plan_call_of_a_loop_that_does_not_offer_it_is_an_unknown_tool() -> None:
    model = ScriptedModel([tool_turn(("call-1", "create_plan", {"reason": "parts"})), text_turn("ok")])
    recorder = InMemoryRecorder()

    result = run(model, StaticToolProvider(BUILTIN_TOOLS), recorder)

    assert (result.stop_reason, result.plan_request, result.final_text) == ("end_turn", None, "ok")
    assert recorder.messages[1][0].content == [
        result_block("call-1", "ToolInputError: unknown tool 'create_plan'", is_error=True)
    ]
