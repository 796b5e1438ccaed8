"""Context compaction in the runtime: cut points, the summary's place, fallback, threshold, overflow."""

from dataclasses import dataclass, field
from typing import Any

import pytest

from agents.runtime.builtin_tools import BUILTIN_TOOLS, StaticToolProvider
from agents.runtime.compaction import (
    DROPPED_NOTE,
    SUMMARY_HEADER,
    SUMMARY_SYSTEM_PROMPT,
    CompactionPolicy,
    ContextCompactor,
    choose_cut,
    cut_points,
    is_note_only,
    with_note,
)
from agents.runtime.loop import LoopConfig, run_agent_loop
from agents.runtime.providers.anthropic_client import AnthropicModelClient
from agents.runtime.providers.openai_client import OpenAIModelClient
from agents.runtime.tokens import (
    context_window_for,
    count_request_tokens,
    estimate_message_tokens,
    estimate_request_tokens,
)
from agents.runtime.types import (
    ChatMessage,
    CompactionRecord,
    ModelError,
    ModelRequest,
    TokenCounter,
    ToolSpec,
)
from tests.fake_model_server import FakeModelServer, anthropic_token_count
from tests.runtime.fakes import InMemoryRecorder, ScriptedModel
from tests.runtime.test_loop import call_block, result_block, text_block, text_turn, tool, tool_turn

SYSTEM_PROMPT = "You are a test agent."


@dataclass
class CompactionRecorder(InMemoryRecorder):
    compactions: list[CompactionRecord] = field(default_factory=list)

    def record_compaction(self, record: CompactionRecord) -> None:
        self.compactions.append(record)


class CountingModel(ScriptedModel):
    """A scripted model with a provider token counter that answers ``counts`` in order."""

    def __init__(self, turns: list[Any], counts: list[int | Exception]) -> None:
        super().__init__(turns)
        self.counts = list(counts)
        self.counted: list[ModelRequest] = []

    def count_tokens(self, request: ModelRequest) -> int:
        self.counted.append(request)
        answer = self.counts.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=[text_block(text)])


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=[text_block(text)])


def calls(*call_ids: str) -> ChatMessage:
    return ChatMessage(
        role="assistant",
        content=[call_block(call_id, "calculator", {"expression": "1+1"}) for call_id in call_ids],
    )


def results(*call_ids: str, content: str = "2") -> ChatMessage:
    return ChatMessage(role="user", content=[result_block(call_id, content) for call_id in call_ids])


# u0, a1(call c1), t2(result c1), a3, u4, a5(calls c2 c3), t6(results c2 c3), a7
CONVERSATION = [
    user("first question"),
    calls("c1"),
    results("c1"),
    assistant("first answer"),
    user("second question"),
    calls("c2", "c3"),
    results("c2", "c3"),
    assistant("second answer"),
]


def opens_no_call_before(messages: list[ChatMessage], cut: int) -> bool:
    """No tool call before ``cut`` is answered at or after it, and the kept part starts with no result."""
    called = {b["id"] for m in messages[:cut] for b in m.content if b["type"] == "tool_call"}
    answered_later = {
        b["tool_call_id"] for m in messages[cut:] for b in m.content if b["type"] == "tool_result"
    }
    starts_with_result = any(b["type"] == "tool_result" for b in messages[cut].content)
    return not (called & answered_later) and not starts_with_result


def pairs_are_intact(messages: list[ChatMessage]) -> bool:
    """Every tool call is answered by the next message and every result answers the message before."""
    for index, message in enumerate(messages):
        call_ids = {b["id"] for b in message.content if b["type"] == "tool_call"}
        result_ids = {b["tool_call_id"] for b in message.content if b["type"] == "tool_result"}
        previous_calls = (
            {b["id"] for b in messages[index - 1].content if b["type"] == "tool_call"} if index else set()
        )
        next_results = (
            {b["tool_call_id"] for b in messages[index + 1].content if b["type"] == "tool_result"}
            if index + 1 < len(messages)
            else call_ids
        )
        if not result_ids <= previous_calls or not call_ids <= next_results:
            return False
    return True


# --- Cut points ---------------------------------------------------------------------------------------


def test_cut_points_skip_every_message_that_carries_tool_results() -> None:
    assert cut_points(CONVERSATION) == [1, 3, 4, 5, 7]
    assert all(opens_no_call_before(CONVERSATION, cut) for cut in cut_points(CONVERSATION))


def test_a_call_left_open_blocks_every_later_cut() -> None:
    messages = [user("q"), calls("c1"), user("interjection"), assistant("a"), results("c1")]

    assert cut_points(messages) == [1]


def test_a_result_answering_nothing_never_starts_the_kept_part() -> None:
    messages = [user("q"), assistant("a"), results("orphan"), assistant("b")]

    assert cut_points(messages) == [1, 3]


@pytest.mark.parametrize(
    ("keep_messages", "expected_cut"),
    [
        (4, 4),  # u4 a5 t6 a7
        (3, 5),  # a5 t6 a7
        (2, 5),  # t6 cannot start the kept part: the call a5 stays with its results
        (1, 7),
        (8, 1),  # fewer messages than asked for: summarize as little as possible
    ],
)
def test_choose_cut_keeps_the_last_messages_from_a_turn_boundary(
    keep_messages: int, expected_cut: int
) -> None:
    cut = choose_cut(CONVERSATION, message_tokens=[10] * 8, keep_messages=keep_messages, recent_budget=1000)

    assert cut == expected_cut
    assert opens_no_call_before(CONVERSATION, expected_cut)


def test_choose_cut_keeps_fewer_messages_when_they_pass_the_recent_budget() -> None:
    # From u4 the kept messages hold 40 tokens, from a5 30, from a7 10: only a7 fits in 25.
    assert choose_cut(CONVERSATION, message_tokens=[10] * 8, keep_messages=4, recent_budget=25) == 7


def test_choose_cut_without_any_boundary_is_none() -> None:
    assert choose_cut([user("only")], message_tokens=[10], keep_messages=4, recent_budget=100) is None


# --- Placing the note ---------------------------------------------------------------------------------


def test_note_before_an_assistant_message_is_its_own_user_message() -> None:
    tail = CONVERSATION[5:]

    placed = with_note("NOTE", tail)

    assert placed == [ChatMessage(role="user", content=[text_block("NOTE")]), *tail]


def test_note_merges_into_a_user_message_that_starts_the_kept_part() -> None:
    tail = CONVERSATION[4:]

    placed = with_note("NOTE", tail)

    assert placed[0] == ChatMessage(role="user", content=[text_block("NOTE"), text_block("second question")])
    assert placed[1:] == tail[1:]
    assert [message.role for message in placed] == ["user", "assistant", "user", "assistant"]


def test_note_follows_tool_results_which_must_lead_a_user_message() -> None:
    placed = with_note("NOTE", [results("c9")])

    assert placed == [ChatMessage(role="user", content=[result_block("c9", "2"), text_block("NOTE")])]


def test_note_alone_when_nothing_is_kept() -> None:
    assert with_note("NOTE", []) == [ChatMessage(role="user", content=[text_block("NOTE")])]


def test_an_earlier_note_alone_is_not_worth_summarizing_again() -> None:
    assert is_note_only([user(f"{SUMMARY_HEADER}\nearlier")]) is True
    assert is_note_only([user(DROPPED_NOTE)]) is True
    assert is_note_only(with_note(f"{SUMMARY_HEADER}\nearlier", [user("new")])[:1]) is False
    assert is_note_only([user("plain"), assistant("text")]) is False


# --- Tokens -------------------------------------------------------------------------------------------


def test_estimate_is_a_quarter_of_the_serialized_request_rounded_up() -> None:
    # {"messages":[],"system":"xxx…","tools":[]}: 25 + 40 + 13 characters.
    request = ModelRequest(model="m", system="x" * 40, messages=[])

    assert estimate_request_tokens(request) == 20


@pytest.mark.parametrize(
    ("model_name", "override", "window"),
    [
        ("claude-sonnet-5", None, 200_000),
        ("gpt-4.1-mini", None, 1_047_576),
        ("gpt-5.4-mini", None, 400_000),
        ("gpt-4o", None, 128_000),
        ("llama3.1:8b", None, 128_000),
        ("claude-sonnet-5", 8_000, 8_000),
        ("claude-sonnet-5", 0, 200_000),
    ],
)
def test_context_window_comes_from_the_table_unless_the_agent_overrides_it(
    model_name: str, override: int | None, window: int
) -> None:
    assert context_window_for(model_name, override=override) == window


def test_threshold_and_overflow_targets() -> None:
    policy = CompactionPolicy(context_window_tokens=1000)

    assert policy.threshold_tokens == 850
    assert policy.target_tokens("threshold", 5000) == 850
    # The provider refused 600 tokens: aim at 85% of that, whatever the table says.
    assert policy.target_tokens("overflow", 600) == 510
    assert policy.target_tokens("overflow", 5000) == 850


@pytest.mark.parametrize(("counted", "over"), [(850, None), (851, 851)])
def test_compaction_starts_only_past_the_threshold(counted: int, over: int | None) -> None:
    request = ModelRequest(model="m", system="x" * 2000, messages=[user("hello")])
    model = CountingModel([], counts=[counted])
    compactor = ContextCompactor(
        policy=CompactionPolicy(context_window_tokens=1000), model=model, recorder=CompactionRecorder()
    )

    assert compactor.tokens_over_threshold(request) == over


def test_counting_skips_the_provider_far_below_the_budget_and_falls_back_when_it_fails() -> None:
    request = ModelRequest(model="m", system="x" * 40, messages=[user("hello")])
    estimate = estimate_request_tokens(request)
    model = CountingModel([], counts=[ModelError("down", kind="server", is_retryable=True), 77])

    assert count_request_tokens(model, request, budget_tokens=estimate * 3) == estimate
    assert model.counted == []
    assert count_request_tokens(model, request, budget_tokens=estimate) == estimate
    assert count_request_tokens(model, request, budget_tokens=estimate) == 77


def test_anthropic_counts_through_the_counting_endpoint_and_openai_estimates() -> None:
    request = ModelRequest(
        model="claude-test",
        system="Be brief.",
        messages=[user("What is 6*7?"), calls("c1"), results("c1", content="42")],
        tools=[BUILTIN_TOOLS["calculator"][0]],
    )
    with FakeModelServer() as server:
        anthropic = AnthropicModelClient(api_key="test-key", base_url=server.url)
        openai = OpenAIModelClient(api_key="test-key", base_url=server.openai_base_url)

        counted = anthropic.count_tokens(request)
        sent = server.token_count_requests
        server.fail_token_counts(500)
        fallback = count_request_tokens(anthropic, request)

    assert isinstance(anthropic, TokenCounter) and not isinstance(openai, TokenCounter)
    assert [recorded.path for recorded in sent] == ["/v1/messages/count_tokens"]
    assert counted == anthropic_token_count(sent[0].body)
    assert sent[0].body["messages"][1]["content"][0]["type"] == "tool_use"
    assert fallback == estimate_request_tokens(request)
    assert count_request_tokens(openai, request) == estimate_request_tokens(request)


# --- The loop -----------------------------------------------------------------------------------------

LONG = "x" * 1200  # 300 tokens of estimate
HISTORY = [
    user(f"first question {LONG}"),
    calls("c1"),
    results("c1", content=LONG),
    assistant(f"first answer {LONG}"),
    user("second question"),
    calls("c2"),
    results("c2"),
    assistant("second answer"),
    user("third question"),
]


def loop_config(**policy: Any) -> LoopConfig:
    values: dict[str, Any] = {"context_window_tokens": 1000, "keep_recent_share": 1.0} | policy
    return LoopConfig(
        model="scripted",
        system_prompt=SYSTEM_PROMPT,
        max_model_calls=10,
        max_output_tokens=500,
        temperature=None,
        compaction=CompactionPolicy(**values),
    )


def run_loop(
    model: ScriptedModel,
    config: LoopConfig,
    *,
    history: list[ChatMessage] = HISTORY,
    tools: StaticToolProvider | None = None,
) -> tuple[Any, CompactionRecorder]:
    recorder = CompactionRecorder()
    result = run_agent_loop(
        config=config,
        history=history,
        model=model,
        tools=tools or StaticToolProvider({}),
        recorder=recorder,
    )
    return result, recorder


def first_request(config: LoopConfig, history: list[ChatMessage], tools: list[ToolSpec]) -> ModelRequest:
    """The request the loop builds before any compaction."""
    return ModelRequest(
        model=config.model,
        system=config.system_prompt,
        messages=history,
        tools=tools,
        max_tokens=config.max_output_tokens,
        temperature=config.temperature,
        timeout_seconds=config.model_timeout_seconds,
    )


def test_loop_summarizes_older_turns_before_the_call_that_would_pass_the_threshold() -> None:
    config = loop_config()
    model = ScriptedModel([text_turn("They asked two questions."), text_turn("Third answer.")])

    result, recorder = run_loop(model, config)

    tokens_before = estimate_request_tokens(first_request(config, HISTORY, []))
    summary_request, answered = model.requests
    assert tokens_before > 850
    assert (summary_request.system, summary_request.tools) == (SUMMARY_SYSTEM_PROMPT, [])
    summarized = summary_request.messages[0].content[0]["text"]
    assert "User: first question" in summarized and "second question" in summarized
    assert "third question" not in summarized
    # Messages 0-4 are summarized; a5 (call), t6 (its result), a7 and u8 are kept verbatim.
    note = f"{SUMMARY_HEADER}\nThey asked two questions."
    assert answered.messages == [user(note), *HISTORY[5:]]
    assert (answered.system, answered.tools) == (SYSTEM_PROMPT, [])
    tokens_after = estimate_request_tokens(answered)
    assert tokens_after <= 850
    assert recorder.events_of("compaction") == [
        {
            "reason": "threshold",
            "tokens_before": tokens_before,
            "tokens_after": tokens_after,
            "messages_before": 9,
            "messages_after": 5,
            "summary": "They asked two questions.",
            "fallback": False,
            "memories_saved": 0,
        }
    ]
    assert [record.kept_tail for record in recorder.compactions] == [HISTORY[5:]]
    assert [(step.kind, step.input.get("purpose"), step.status) for step in recorder.steps] == [
        ("model_call", "compaction", "completed"),
        ("model_call", None, "completed"),
    ]
    # The summary's tokens count in the run's usage: 7 + 7 input, 3 + 3 output.
    assert (result.stop_reason, result.usage.input_tokens, result.usage.output_tokens) == ("end_turn", 14, 6)
    assert recorder.messages == [(assistant("Third answer."), recorder.messages[0][1])]


def test_loop_under_the_threshold_does_not_compact() -> None:
    model = ScriptedModel([text_turn("Fine.")])

    result, recorder = run_loop(model, loop_config(context_window_tokens=100_000))

    assert result.stop_reason == "end_turn"
    assert model.requests[0].messages == HISTORY
    assert recorder.events_of("compaction") == []


def test_failed_summary_falls_back_to_dropping_the_oldest_whole_turns() -> None:
    # Threshold 595. keep_recent_messages=9 asks to keep everything: only the drop rule decides the cut.
    config = loop_config(context_window_tokens=700, keep_recent_messages=9)
    failure = ModelError("summary model down", kind="server", is_retryable=True)
    model = ScriptedModel([[failure], text_turn("Third answer.")])

    result, recorder = run_loop(model, config)

    answered = model.requests[1]
    kept = answered.messages[1:]
    cut = len(HISTORY) - len(kept)
    assert result.stop_reason == "end_turn"
    assert answered.messages[0] == user(DROPPED_NOTE)
    assert kept == HISTORY[cut:] and cut in cut_points(HISTORY)
    assert pairs_are_intact(answered.messages)
    assert estimate_request_tokens(answered) <= 595
    # Dropping one turn less would not have fitted.
    previous_cut = max(point for point in cut_points(HISTORY) if point < cut)
    assert (
        estimate_request_tokens(replace_messages(answered, [user(DROPPED_NOTE), *HISTORY[previous_cut:]]))
        > 595
    )
    (event,) = recorder.events_of("compaction")
    assert (event["fallback"], event["summary"]) == (True, "")
    assert event["error"] == "summarizing failed, the oldest turns were dropped instead: summary model down"
    assert recorder.steps[0].status == "failed"


def replace_messages(request: ModelRequest, messages: list[ChatMessage]) -> ModelRequest:
    return ModelRequest(
        model=request.model,
        system=request.system,
        messages=messages,
        tools=request.tools,
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        timeout_seconds=request.timeout_seconds,
    )


def test_a_long_summary_drops_further_whole_turns() -> None:
    long_summary = "s" * 2900  # 725 tokens: the note alone nearly fills the 850 budget
    model = ScriptedModel([text_turn(long_summary), text_turn("Third answer.")])

    result, recorder = run_loop(model, loop_config())

    answered = model.requests[1]
    assert result.stop_reason == "end_turn"
    assert answered.messages[0].content[0]["text"] == f"{SUMMARY_HEADER}\n{long_summary}"
    assert pairs_are_intact(answered.messages)
    assert estimate_request_tokens(answered) <= 850
    # The four newest messages do not fit beside the note: only a7 and u8 stay.
    assert recorder.compactions[0].kept_tail == HISTORY[7:]
    assert answered.messages == [
        ChatMessage(role="user", content=[text_block(f"{SUMMARY_HEADER}\n{long_summary}")]),
        *HISTORY[7:],
    ]


OVERFLOW = ModelError("prompt is too long", kind="context_overflow", is_retryable=False)


def test_overflow_compacts_and_retries_once() -> None:
    model = ScriptedModel([[OVERFLOW], text_turn("Summary."), text_turn("Third answer.")])

    result, recorder = run_loop(model, loop_config(context_window_tokens=100_000))

    overflowed, summary_request, retried = model.requests
    assert result.stop_reason == "end_turn"
    assert overflowed.messages == HISTORY
    assert summary_request.system == SUMMARY_SYSTEM_PROMPT
    assert retried.messages == [user(f"{SUMMARY_HEADER}\nSummary."), *HISTORY[5:]]
    (event,) = recorder.events_of("compaction")
    assert (event["reason"], event["messages_before"], event["messages_after"]) == ("overflow", 9, 5)
    assert event["tokens_after"] == estimate_request_tokens(retried)
    assert event["tokens_after"] <= 0.85 * event["tokens_before"]


def test_a_second_overflow_ends_the_run_with_context_overflow() -> None:
    model = ScriptedModel([[OVERFLOW], text_turn("Summary."), [OVERFLOW]])

    result, recorder = run_loop(model, loop_config(context_window_tokens=100_000))

    assert (result.stop_reason, result.error) == ("context_overflow", "prompt is too long")
    assert len(model.requests) == 3
    assert len(recorder.events_of("compaction")) == 1


def test_overflow_without_compaction_ends_the_run_at_once() -> None:
    model = ScriptedModel([[OVERFLOW]])
    config = loop_config()
    config.compaction = None

    result, recorder = run_loop(model, config)

    assert result.stop_reason == "context_overflow"
    assert len(model.requests) == 1
    assert recorder.events_of("compaction") == []


def test_an_earlier_summary_alone_is_not_summarized_again() -> None:
    history = [user(f"{SUMMARY_HEADER}\n{LONG}{LONG}"), assistant(LONG), user("go on")]
    model = ScriptedModel([text_turn("Going on.")])

    result, recorder = run_loop(model, loop_config(context_window_tokens=600), history=history)

    assert result.stop_reason == "end_turn"
    assert model.requests[0].messages == history
    assert recorder.events_of("compaction") == []


# --- Memory flush -------------------------------------------------------------------------------------


def memory_tools(saved: list[str], calculated: list[str]) -> StaticToolProvider:
    def memory_save(content: str) -> str:
        saved.append(content)
        return "saved"

    def calculator(expression: str) -> str:
        calculated.append(expression)
        return "2"

    save_name, save_entry = tool("memory_save", memory_save)
    calc_name, calc_entry = tool("calculator", calculator)
    return StaticToolProvider({save_name: save_entry, calc_name: calc_entry})


def test_memory_flush_offers_only_memory_save_and_runs_only_its_calls() -> None:
    saved: list[str] = []
    calculated: list[str] = []
    flush_turn = tool_turn(
        ("m1", "memory_save", {"content": "The user likes tea."}), ("m2", "calculator", {"expression": "1+1"})
    )
    model = ScriptedModel([flush_turn, text_turn("Summary."), text_turn("Third answer.")])

    result, recorder = run_loop(model, loop_config(), tools=memory_tools(saved, calculated))

    flush_request, _summary_request, answered = model.requests
    assert result.stop_reason == "end_turn"
    assert [spec.name for spec in flush_request.tools] == ["memory_save"]
    assert flush_request.system == SYSTEM_PROMPT
    assert "memory_save" in flush_request.messages[0].content[0]["text"]
    assert (saved, calculated) == (["The user likes tea."], [])
    assert recorder.events_of("tool.call") == [
        {"tool_call_id": "m1", "name": "memory_save", "arguments": {"content": "The user likes tea."}}
    ]
    assert recorder.events_of("compaction")[0]["memories_saved"] == 1
    # The flush turn is not part of the conversation.
    assert answered.messages[0] == user(f"{SUMMARY_HEADER}\nSummary.")
    assert [message for message, _usage in recorder.messages] == [assistant("Third answer.")]


def test_memory_flush_is_skipped_when_the_policy_forbids_it() -> None:
    saved: list[str] = []
    model = ScriptedModel([text_turn("Summary."), text_turn("Third answer.")])

    run_loop(model, loop_config(is_memory_flush_enabled=False), tools=memory_tools(saved, []))

    assert model.requests[0].system == SUMMARY_SYSTEM_PROMPT
    assert saved == []


def test_a_tiny_message_estimate_matches_its_serialization() -> None:
    # {"content":[],"role":"user"}: 28 characters.
    assert estimate_message_tokens(ChatMessage(role="user", content=[])) == 7
