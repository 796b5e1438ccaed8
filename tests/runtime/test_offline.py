import math
from typing import Any

import pytest

from agents.runtime.builtin_tools import BUILTIN_TOOLS, CALCULATOR_SPEC, CURRENT_TIME_SPEC, StaticToolProvider
from agents.runtime.loop import LoopConfig, run_agent_loop
from agents.runtime.offline import (
    OFFLINE_MODEL_NAME,
    PLAN_RESULTS_MARKER,
    PROVIDER_HINT,
    OfflineModelClient,
    find_arithmetic,
    list_items,
    reason_to_plan,
)
from agents.runtime.plan_tool import CREATE_PLAN_SPEC, PLAN_STARTED, PlanRequest
from agents.runtime.types import (
    ChatMessage,
    ModelRequest,
    ModelResponseCompleted,
    ModelStreamEvent,
    StreamCancelled,
    TextDelta,
    ToolCallRequested,
    ToolSpec,
    Usage,
)
from core.markdown import markdown_escape
from tests.runtime.fakes import InMemoryRecorder

BOTH_TOOLS = [CALCULATOR_SPEC, CURRENT_TIME_SPEC]


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=[{"type": "text", "text": text}])


def request(*messages: ChatMessage, tools: list[ToolSpec] | None = None, system: str = "") -> ModelRequest:
    return ModelRequest(model=OFFLINE_MODEL_NAME, system=system, messages=list(messages), tools=tools or [])


def stream(model_request: ModelRequest, **kwargs: Any) -> list[ModelStreamEvent]:
    return list(OfflineModelClient(**kwargs).stream(model_request, should_stop=lambda: False))


def completed(events: list[ModelStreamEvent]) -> ModelResponseCompleted:
    last = events[-1]
    assert isinstance(last, ModelResponseCompleted)
    return last


def reply_text(events: list[ModelStreamEvent]) -> str:
    return "".join(event.text for event in events if isinstance(event, TextDelta))


@pytest.mark.parametrize(
    ("message", "expression"),
    [
        ("what is 12*7", "12*7"),
        ("calculate (3+4)/2", "(3+4)/2"),
        ("2+2?", "2+2"),
        ("What's 2^10?", "2**10"),
        ("Can you compute sqrt(16) + 1 for me?", "sqrt(16) + 1"),
        ("what is -5 + 3", "-5 + 3"),
        ("12 \u00d7 3 =", "12 * 3"),
    ],
)
def test_arithmetic_becomes_a_calculator_call(message: str, expression: str) -> None:
    events = stream(request(user(message), tools=BOTH_TOOLS))

    response = completed(events)
    call = next(event for event in events if isinstance(event, ToolCallRequested))
    assert (call.name, call.arguments) == ("calculator", {"expression": expression})
    assert response.stop_reason == "tool_use"
    assert response.content == [
        # The expression is text in a Markdown answer: escaped, it renders as typed.
        {"type": "text", "text": f"Let me calculate {markdown_escape(expression)} with the calculator."},
        {"type": "tool_call", "id": call.id, "name": "calculator", "arguments": {"expression": expression}},
    ]


@pytest.mark.parametrize(
    "message", ["hello there", "What happened on 2024-01-05?", "what is 2", "I have 3 cats"]
)
def test_messages_without_arithmetic_find_none(message: str) -> None:
    assert find_arithmetic(message) is None


def test_arithmetic_without_a_calculator_is_echoed() -> None:
    events = stream(request(user("what is 12*7"), tools=[CURRENT_TIME_SPEC]))

    assert completed(events).content == [
        {"type": "text", "text": f'(offline demo model) You said: "what is 12\\*7". {PROVIDER_HINT}'}
    ]


@pytest.mark.parametrize(
    "message", ["What time is it?", "what's today's date", "Tell me the current time please"]
)
def test_questions_about_the_time_call_current_time(message: str) -> None:
    events = stream(request(user(message), tools=BOTH_TOOLS))

    response = completed(events)
    assert response.stop_reason == "tool_use"
    assert response.content[0] == {"type": "text", "text": "Let me check the current time."}
    assert response.content[1]["name"] == "current_time"
    assert response.content[1]["arguments"] == {}


def test_tool_results_become_the_final_answer() -> None:
    history = [
        user("what is 12*7 and what time is it"),
        ChatMessage(
            "assistant",
            [
                {"type": "tool_call", "id": "c1", "name": "calculator", "arguments": {"expression": "12*7"}},
                {"type": "tool_call", "id": "c2", "name": "current_time", "arguments": {}},
                {"type": "tool_call", "id": "c3", "name": "calculator", "arguments": {"expression": "1/0"}},
            ],
        ),
        ChatMessage(
            "user",
            [
                {"type": "tool_result", "tool_call_id": "c1", "content": "84", "is_error": False},
                {
                    "type": "tool_result",
                    "tool_call_id": "c2",
                    "content": "2026-01-05T13:04:05+00:00",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_call_id": "c3",
                    "content": "division by zero",
                    "is_error": True,
                },
            ],
        ),
    ]

    events = stream(request(*history, tools=BOTH_TOOLS))

    expected = (
        "12\\*7 = 84. The current time is 2026-01-05T13:04:05+00:00. "
        "I could not calculate 1/0: division by zero"
    )
    assert completed(events).content == [{"type": "text", "text": expected}]
    assert completed(events).stop_reason == "end_turn"
    assert reply_text(events) == expected


@pytest.mark.parametrize("message", ["Who are you?", "which model is this"])
def test_it_says_it_is_an_offline_demo_model(message: str) -> None:
    text = reply_text(stream(request(user(message))))

    assert text.startswith("I am offline-demo, the offline demo model built into Agentry.")
    assert text.endswith(PROVIDER_HINT)
    assert OfflineModelClient.model_name == "offline-demo"


def test_anything_else_is_echoed_with_a_provider_hint() -> None:
    events = stream(request(user("  Plan my\n trip to Lisbon  "), tools=BOTH_TOOLS))

    assert reply_text(events) == f'(offline demo model) You said: "Plan my trip to Lisbon". {PROVIDER_HINT}'
    assert completed(events).stop_reason == "end_turn"


def test_long_messages_are_shortened_in_the_echo() -> None:
    text = reply_text(stream(request(user("a" * 300))))

    assert text == f'(offline demo model) You said: "{"a" * 200}…". {PROVIDER_HINT}'


def test_text_streams_in_several_deltas_with_exact_usage() -> None:
    model_request = request(user("Hello"), system="Be brief.")
    events = stream(model_request)

    deltas = [event.text for event in events if isinstance(event, TextDelta)]
    response = completed(events)
    text = response.content[0]["text"]
    assert len(deltas) == len(text.split())
    assert "".join(deltas) == text
    prompt = 'Be brief.[{"content": [{"text": "Hello", "type": "text"}], "role": "user"}]'
    assert response.usage == Usage(
        input_tokens=math.ceil(len(prompt) / 4), output_tokens=math.ceil(len(text) / 4)
    )


def test_the_same_request_gives_the_same_stream() -> None:
    model_request = request(user("what is 6*7"), tools=BOTH_TOOLS)

    assert stream(model_request) == stream(model_request)


def test_should_stop_cancels_the_stream_with_the_usage_so_far() -> None:
    polls = iter([False, False, True])
    events: list[ModelStreamEvent] = []

    with pytest.raises(StreamCancelled) as raised:
        for event in OfflineModelClient().stream(request(user("Hello")), should_stop=lambda: next(polls)):
            events.append(event)

    assert [event.text for event in events if isinstance(event, TextDelta)] == ["(offline ", "demo "]
    assert raised.value.usage.output_tokens == math.ceil(len("(offline demo ") / 4)


def test_delay_seconds_pauses_before_each_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr("agents.runtime.offline.time.sleep", sleeps.append)

    events = stream(request(user("Hello")), delay_seconds=0.05)

    assert sleeps == [0.05] * sum(isinstance(event, TextDelta) for event in events)


def test_the_loop_answers_arithmetic_with_the_offline_model_and_the_calculator() -> None:
    recorder = InMemoryRecorder()

    result = run_agent_loop(
        config=LoopConfig(
            model=OFFLINE_MODEL_NAME,
            system_prompt="",
            max_model_calls=5,
            max_output_tokens=500,
            temperature=None,
        ),
        history=[user("What is 12*7?")],
        model=OfflineModelClient(),
        tools=StaticToolProvider(BUILTIN_TOOLS),
        recorder=recorder,
    )

    assert (result.stop_reason, result.final_text) == ("end_turn", "12\\*7 = 84.")
    assert recorder.events_of("tool.result") == [
        {
            "tool_call_id": recorder.events_of("tool.call")[0]["tool_call_id"],
            "name": "calculator",
            "content": "84",
            "is_error": False,
        }
    ]
    assert [step.kind for step in recorder.steps] == ["model_call", "tool_call", "model_call"]


SPAWN_SPEC = ToolSpec(name="spawn_subagent", description="Delegate a task.", input_schema={"type": "object"})


def test_delegate_calls_spawn_subagent_when_offered_and_its_answer_becomes_the_reply() -> None:
    asked = request(user("Delegate: what is 6*7?"), tools=[*BOTH_TOOLS, SPAWN_SPEC])

    response = completed(stream(asked))

    assert response.stop_reason == "tool_use"
    call = response.content[1]
    assert (response.content[0]["text"], call["name"], call["arguments"]) == (
        "Let me hand this to a sub-agent.",
        "spawn_subagent",
        {"task": "what is 6*7?"},
    )
    result = ChatMessage(
        role="user",
        content=[
            {"type": "tool_result", "tool_call_id": call["id"], "content": "6*7 = 42.", "is_error": False}
        ],
    )
    answer = completed(
        stream(request(asked.messages[0], ChatMessage(role="assistant", content=response.content), result))
    )
    assert answer.content == [{"type": "text", "text": "The sub-agent answered: 6*7 = 42."}]


def test_delegate_without_spawn_subagent_is_not_a_tool_call() -> None:
    response = completed(stream(request(user("delegate: what is 6*7?"), tools=BOTH_TOOLS)))

    assert (response.stop_reason, response.content[1]["name"]) == ("tool_use", "calculator")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("1. find flights\n2. book a hotel", "the message lists 2 tasks"),
        ("- one\n- two\n- three", "the message lists 3 tasks"),
        ("Plan a trip to Rome and a budget", "the message asks to plan or research several things"),
        ("1. only one task", None),
        ("What is 12*7?", None),
        ("delegate: summarize the notes", None),
        ("hello", None),
    ],
)
def test_requests_of_several_parts_are_the_ones_to_plan(text: str, reason: str | None) -> None:
    assert reason_to_plan(text) == reason


def test_list_items_become_the_offline_plan_steps() -> None:
    assert list_items("Do:\n1. first thing\n2) second\n- third") == ["first thing", "second", "third"]


NUMBERED_LIST = "Please:\n1. what is 2+3?\n2. what is 4*5?"


def test_a_numbered_list_calls_create_plan_when_offered() -> None:
    events = stream(request(user(NUMBERED_LIST), tools=[*BOTH_TOOLS, CREATE_PLAN_SPEC]))

    response = completed(events)
    call = next(event for event in events if isinstance(event, ToolCallRequested))
    assert (call.name, call.arguments, response.stop_reason) == (
        "create_plan",
        {"reason": "the message lists 2 tasks"},
        "tool_use",
    )
    assert response.content == [
        {"type": "text", "text": "This request has several parts: I will have them planned."},
        {"type": "tool_call", "id": call.id, "name": "create_plan", "arguments": call.arguments},
    ]


def test_a_numbered_list_without_create_plan_is_answered_with_the_tools() -> None:
    response = completed(stream(request(user(NUMBERED_LIST), tools=BOTH_TOOLS)))

    assert (response.content[1]["name"], response.content[1]["arguments"]) == (
        "calculator",
        {"expression": "2+3"},
    )


def test_a_synthesis_after_create_plan_answers_from_the_step_results() -> None:
    asked = ChatMessage(
        role="assistant",
        content=[{"type": "tool_call", "id": "c1", "name": "create_plan", "arguments": {"reason": "parts"}}],
    )
    results = ChatMessage(
        role="user",
        content=[
            {"type": "tool_result", "tool_call_id": "c1", "content": PLAN_STARTED.content, "is_error": False},
            {"type": "text", "text": f"{PLAN_RESULTS_MARKER}\n\n## s1: add\n5\n\n## s2: multiply\n20"},
        ],
    )

    text = reply_text(stream(request(user(NUMBERED_LIST), asked, results)))

    assert text == "Here is what the plan's steps found:\n- add [s1]: 5\n- multiply [s2]: 20"


def test_the_loop_offering_create_plan_stops_at_the_offline_models_plan_request() -> None:
    recorder = InMemoryRecorder()

    result = run_agent_loop(
        config=LoopConfig(
            model=OFFLINE_MODEL_NAME,
            system_prompt="",
            max_model_calls=5,
            max_output_tokens=500,
            temperature=None,
            offers_create_plan=True,
        ),
        history=[user(NUMBERED_LIST)],
        model=OfflineModelClient(),
        tools=StaticToolProvider(BUILTIN_TOOLS),
        recorder=recorder,
    )

    call_id = recorder.events_of("message.completed")[0]["content"][1]["id"]
    assert (result.stop_reason, result.plan_request) == (
        "plan_requested",
        PlanRequest(tool_call_id=call_id, reason="the message lists 2 tasks"),
    )
    assert [step.kind for step in recorder.steps] == ["model_call"]
