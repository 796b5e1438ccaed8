"""Context compaction in real runs: the fake model server over HTTP, the database, the API."""

import json
from typing import Any

import pytest
from django.db.models import Exists, OuterRef, Q
from rest_framework.test import APIClient

from agents.runtime.compaction import (
    DROPPED_NOTE,
    MEMORY_FLUSH_INSTRUCTION,
    SUMMARY_HEADER,
    SUMMARY_SYSTEM_PROMPT,
    compaction_note,
    with_note,
)
from agents.runtime.types import ChatMessage
from billing.models import CreditAccount, ModelPrice
from billing.services import credits_grant
from sessions import compaction_api
from sessions.compaction import ABANDONED_RUN_STATUSES, chat_message_for, session_transcript
from sessions.models import CompactionSnapshot, Message, Run, RunEvent, Session, Step
from sessions.recorder import message_role_for
from sessions.sequences import next_session_number
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, RecordedRequest, Turn, anthropic_token_count
from tests.test_runs_api import post_message, run_to_end, start_session

pytestmark = pytest.mark.django_db

WINDOW = 3000
THRESHOLD = 2550  # 0.85 of WINDOW
SUMMARY = "The user asked eight questions about numbers; each was computed with the calculator."
FILLER = "lorem ipsum dolor sit amet " * 20  # 540 characters


def exchange(index: int) -> list[ChatMessage]:
    """One question answered through a calculator call: user, call, result, answer."""
    call_id = f"toolu_seed_{index}"
    return [
        ChatMessage(role="user", content=[{"type": "text", "text": f"Question {index}: {FILLER}"}]),
        ChatMessage(
            role="assistant",
            content=[
                {"type": "tool_call", "id": call_id, "name": "calculator", "arguments": {"expression": "1+1"}}
            ],
        ),
        ChatMessage(
            role="user",
            content=[{"type": "tool_result", "tool_call_id": call_id, "content": "2", "is_error": False}],
        ),
        ChatMessage(role="assistant", content=[{"type": "text", "text": f"Answer {index}: {FILLER}"}]),
    ]


def seed(session_id: str, exchanges: int) -> list[ChatMessage]:
    """Store earlier turns of the session, as earlier runs would have."""
    session = Session.objects.get(pk=session_id)
    messages = [message for index in range(exchanges) for message in exchange(index)]
    for message in messages:
        # Each follows the one before, as a run's messages do (sessions.branches).
        previous = Message.objects.filter(session=session).order_by("-position").values_list("id", flat=True)
        Message.objects.create(
            tenant_id=session.tenant_id,
            session=session,
            parent_id=previous.first(),
            position=next_session_number(session_id=session.pk, counter="last_message_position"),
            role=message_role_for(message),
            content=message.content,
        )
    return messages


def set_window(run_id: str, tokens: int) -> None:
    run = Run.objects.get(pk=run_id)
    run.agent_config["context_window_tokens"] = tokens
    run.save(update_fields=["agent_config"])


def script_compaction(fake: FakeModelServer, summary: Turn | None = None) -> None:
    fake.script(summary or Turn(text=SUMMARY), match=SUMMARY_SYSTEM_PROMPT)
    fake.script(Turn(text="Nothing to save."), match=MEMORY_FLUSH_INSTRUCTION)


def kind_of(request: RecordedRequest) -> str:
    body = json.dumps(request.body, ensure_ascii=False)
    if SUMMARY_SYSTEM_PROMPT in body:
        return "summary"
    return "flush" if MEMORY_FLUSH_INSTRUCTION in body else "turn"


def turns(fake: FakeModelServer) -> list[RecordedRequest]:
    return [request for request in fake.requests if kind_of(request) == "turn"]


def anthropic_pairs_are_intact(messages: list[dict[str, Any]]) -> bool:
    """Each tool_use is answered in the very next message, each tool_result answers the one before."""
    for index, message in enumerate(messages):
        blocks = message["content"] if isinstance(message["content"], list) else []
        uses = {block["id"] for block in blocks if block["type"] == "tool_use"}
        results = {block["tool_use_id"] for block in blocks if block["type"] == "tool_result"}
        before = messages[index - 1]["content"] if index else []
        after = messages[index + 1]["content"] if index + 1 < len(messages) else []
        if not results <= {block["id"] for block in before if block["type"] == "tool_use"}:
            return False
        if not uses <= {block["tool_use_id"] for block in after if block["type"] == "tool_result"}:
            return False
    return True


def compaction_events(session_id: str) -> list[dict[str, Any]]:
    events = RunEvent.objects.filter(session_id=session_id, type="compaction").order_by("seq")
    return [event.data for event in events]


def test_long_conversation_compacts_before_the_window_is_exceeded(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="claude-test")
    session_id = start_session(bob_api, agent.pk)
    seeded = seed(session_id, exchanges=8)  # positions 1-32
    run_id = post_message(bob_api, session_id, "Question 8: and now?")["run"]["id"]  # type: ignore[index]
    set_window(run_id, WINDOW)
    script_compaction(fake_model)
    fake_model.script(Turn(text="Final answer."))

    run = run_to_end(bob_api, run_id)

    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    (answered,) = turns(fake_model)
    sent = answered.body["messages"]
    # The request the model got is under the threshold, by the provider's own count.
    assert anthropic_token_count(answered.body) <= THRESHOLD
    assert anthropic_pairs_are_intact(sent)
    assert sent[0] == {"role": "user", "content": [{"type": "text", "text": f"{SUMMARY_HEADER}\n{SUMMARY}"}]}
    # Kept verbatim: the last call with its result, the last answer and the new question.
    assert [message["role"] for message in sent] == ["user", "assistant", "user", "assistant", "user"]
    assert sent[1]["content"][0]["id"] == "toolu_seed_7"
    assert sent[4]["content"] == [{"type": "text", "text": "Question 8: and now?"}]
    (event,) = compaction_events(session_id)
    assert event["tokens_before"] > THRESHOLD
    assert event == {
        "reason": "threshold",
        "tokens_before": event["tokens_before"],
        "tokens_after": anthropic_token_count(answered.body),
        "messages_before": 33,
        "messages_after": 5,
        "summary": SUMMARY,
        "fallback": False,
        "memories_saved": 0,
    }
    assert [request.path for request in fake_model.token_count_requests] == ["/v1/messages/count_tokens"] * 2
    snapshot = CompactionSnapshot.objects.get(session_id=session_id)
    assert (str(snapshot.run_id), snapshot.reason, snapshot.summary) == (run["id"], "threshold", SUMMARY)
    assert (snapshot.replaces_up_to_position, snapshot.tokens_after) == (29, event["tokens_after"])
    assert Step.objects.filter(run_id=run_id, input__purpose="compaction", status="completed").count() == 1
    # People still see every message.
    assert Message.objects.filter(session_id=session_id).count() == len(seeded) + 2


def test_the_next_run_starts_from_the_summary(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="claude-test")
    session_id = start_session(bob_api, agent.pk)
    seed(session_id, exchanges=8)
    first = post_message(bob_api, session_id, "Question 8: and now?")["run"]["id"]  # type: ignore[index]
    set_window(first, WINDOW)
    script_compaction(fake_model)
    fake_model.script(Turn(text="Final answer."), Turn(text="Follow-up answer."))
    run_to_end(bob_api, first)

    second = post_message(bob_api, session_id, "One more thing.")["run"]["id"]  # type: ignore[index]
    set_window(second, WINDOW)
    run = run_to_end(bob_api, second)

    assert run["status"] == "completed"
    follow_up = turns(fake_model)[-1].body["messages"]
    assert follow_up[0]["content"] == [{"type": "text", "text": f"{SUMMARY_HEADER}\n{SUMMARY}"}]
    texts = [block.get("text") for message in follow_up[1:] for block in message["content"]]
    assert texts[-3:] == ["Question 8: and now?", "Final answer.", "One more thing."]
    assert len(follow_up) == 7
    assert len(compaction_events(session_id)) == 1


def test_long_turns_within_one_run_compact_between_model_calls(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(
        tenant=cast.tenant_a, model_provider="anthropic", model_name="claude-test", max_steps=10
    )
    session_id = start_session(bob_api, agent.pk)
    run_id = post_message(bob_api, session_id, "Compute a lot.")["run"]["id"]  # type: ignore[index]
    set_window(run_id, WINDOW)
    script_compaction(fake_model)
    long_turn = Turn(text=f"Step: {FILLER * 2}", tool_calls=[("calculator", {"expression": "2*3"})])
    fake_model.script(*[long_turn] * 6, Turn(text="Done."))

    run = run_to_end(bob_api, run_id)

    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    (event,) = compaction_events(session_id)
    after = turns(fake_model)
    compacted = next(request for request in after if SUMMARY_HEADER in json.dumps(request.body))
    before = after[after.index(compacted) - 1]
    assert anthropic_token_count(compacted.body) <= THRESHOLD
    assert anthropic_token_count(compacted.body) == event["tokens_after"]
    assert anthropic_pairs_are_intact(compacted.body["messages"])
    assert event["messages_before"] == len(before.body["messages"]) + 2  # its answer and the tool result
    assert event["messages_after"] == len(compacted.body["messages"])
    assert all(anthropic_token_count(request.body) <= THRESHOLD for request in after)
    # Positions 1.. are the context's messages in order; the note stands alone before the kept ones.
    kept = event["messages_after"] - 1
    snapshot = CompactionSnapshot.objects.get(session_id=session_id)
    assert snapshot.replaces_up_to_position == event["messages_before"] - kept
    assert session_transcript(session_id=session_id)[0].content[0]["text"] == f"{SUMMARY_HEADER}\n{SUMMARY}"


def test_openai_runs_compact_too_with_the_estimate(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(
        tenant=cast.tenant_a, model_provider="openai", model_name="gpt-test", system_prompt="Be helpful."
    )
    session_id = start_session(bob_api, agent.pk)
    seed(session_id, exchanges=8)
    run_id = post_message(bob_api, session_id, "Question 8: and now?")["run"]["id"]  # type: ignore[index]
    set_window(run_id, WINDOW)
    script_compaction(fake_model)
    fake_model.script(Turn(text="Final answer."))

    run = run_to_end(bob_api, run_id)

    assert run["status"] == "completed"
    (answered,) = turns(fake_model)
    sent = answered.body["messages"]
    assert [message["role"] for message in sent] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert sent[1]["content"] == f"{SUMMARY_HEADER}\n{SUMMARY}"
    assert sent[2]["tool_calls"][0]["id"] == sent[3]["tool_call_id"] == "toolu_seed_7"
    (event,) = compaction_events(session_id)
    assert event["tokens_before"] > THRESHOLD >= event["tokens_after"]
    assert fake_model.token_count_requests == []


def test_provider_overflow_compacts_and_retries_once(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="claude-test")
    session_id = start_session(bob_api, agent.pk)
    seed(session_id, exchanges=3)
    run_id = post_message(bob_api, session_id, "Question 3?")["run"]["id"]  # type: ignore[index]
    script_compaction(fake_model)
    fake_model.script(Turn(error_status=400, error_kind="context_overflow"), Turn(text="Answer 3."))

    run = run_to_end(bob_api, run_id)

    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    overflowed, retried = turns(fake_model)
    assert len(overflowed.body["messages"]) == 13
    assert retried.body["messages"][0]["content"][0]["text"] == f"{SUMMARY_HEADER}\n{SUMMARY}"
    assert anthropic_pairs_are_intact(retried.body["messages"])
    (event,) = compaction_events(session_id)
    assert (event["reason"], event["messages_before"], event["fallback"]) == ("overflow", 13, False)
    assert event["tokens_after"] == anthropic_token_count(retried.body)
    assert CompactionSnapshot.objects.get(session_id=session_id).reason == "overflow"


def test_a_second_overflow_fails_the_run_with_context_overflow(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="claude-test")
    session_id = start_session(bob_api, agent.pk)
    seed(session_id, exchanges=3)
    run_id = post_message(bob_api, session_id, "Question 3?")["run"]["id"]  # type: ignore[index]
    script_compaction(fake_model)
    overflow = Turn(error_status=400, error_kind="context_overflow")
    fake_model.script(overflow, overflow, Turn(text="never sent"))

    run = run_to_end(bob_api, run_id)

    assert (run["status"], run["stop_reason"]) == ("failed", "context_overflow")
    assert "prompt is too long" in str(run["error"])
    assert len(turns(fake_model)) == 2
    assert len(compaction_events(session_id)) == 1
    # The failed run's compaction leaves the context with its answers.
    assert SUMMARY_HEADER not in json.dumps([m.content for m in session_transcript(session_id=session_id)])


def test_failed_summary_drops_the_oldest_turns_and_says_so(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="claude-test")
    session_id = start_session(bob_api, agent.pk)
    seed(session_id, exchanges=8)
    run_id = post_message(bob_api, session_id, "Question 8: and now?")["run"]["id"]  # type: ignore[index]
    set_window(run_id, WINDOW)
    script_compaction(fake_model, summary=Turn(error_status=400))
    fake_model.script(Turn(text="Final answer."))

    run = run_to_end(bob_api, run_id)

    assert run["status"] == "completed"
    (answered,) = turns(fake_model)
    assert answered.body["messages"][0]["content"] == [{"type": "text", "text": DROPPED_NOTE}]
    assert anthropic_token_count(answered.body) <= THRESHOLD
    assert anthropic_pairs_are_intact(answered.body["messages"])
    (event,) = compaction_events(session_id)
    assert (event["fallback"], event["summary"]) == (True, "")
    assert event["error"].startswith("summarizing failed, the oldest turns were dropped instead: ")
    snapshot = CompactionSnapshot.objects.get(session_id=session_id)
    assert (snapshot.is_fallback, snapshot.summary) == (True, "")


def test_compaction_switched_off_for_the_agent_sends_the_whole_conversation(
    cast: Cast, alice_api: APIClient, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="claude-test")
    response = alice_api.patch(
        f"/api/v1/agents/{agent.pk}/", {"context_compaction_enabled": False}, format="json"
    )
    assert (response.status_code, response.json()["context_compaction_enabled"]) == (200, False)
    session_id = start_session(bob_api, agent.pk)
    seed(session_id, exchanges=8)
    run_id = post_message(bob_api, session_id, "Question 8: and now?")["run"]["id"]  # type: ignore[index]
    set_window(run_id, WINDOW)
    fake_model.script(Turn(text="Final answer."))

    run = run_to_end(bob_api, run_id)

    assert run["status"] == "completed"
    assert [kind_of(request) for request in fake_model.requests] == ["turn"]
    assert len(fake_model.requests[0].body["messages"]) == 33
    assert compaction_events(session_id) == []
    assert not CompactionSnapshot.objects.filter(session_id=session_id).exists()


# The memory tool writes from a worker thread: it needs committed rows, not the test's transaction.
@pytest.mark.django_db(transaction=True)
def test_memory_flush_saves_through_the_tool_before_summarizing(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="claude-test")
    session_id = start_session(bob_api, agent.pk)
    seed(session_id, exchanges=8)
    run_id = post_message(bob_api, session_id, "Question 8: and now?")["run"]["id"]  # type: ignore[index]
    set_window(run_id, WINDOW)
    save = Turn(tool_calls=[("memory_save", {"content": "Questions here are numeric.", "about": "general"})])
    fake_model.script(save, match=MEMORY_FLUSH_INSTRUCTION)
    fake_model.script(Turn(text=SUMMARY), match=SUMMARY_SYSTEM_PROMPT)
    fake_model.script(Turn(text="Final answer."))

    run = run_to_end(bob_api, run_id)

    assert run["status"] == "completed"
    assert [kind_of(request) for request in fake_model.requests] == ["flush", "summary", "turn"]
    assert [tool["name"] for tool in fake_model.requests[0].body["tools"]] == ["memory_save"]
    saved = Step.objects.get(run_id=run_id, kind="tool_call")
    assert (saved.input["name"], saved.status, saved.output["is_error"]) == (
        "memory_save",
        "completed",
        False,
    )
    assert compaction_events(session_id)[0]["memories_saved"] == 1


# --- POST /api/v1/sessions/{id}/compact/ --------------------------------------------------------------


def compact(api: APIClient, session_id: str) -> Any:
    return api.post(f"/api/v1/sessions/{session_id}/compact/", format="json")


def finished_session(bob_api: APIClient, cast: Cast, exchanges: int = 3) -> str:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="claude-test")
    session_id = start_session(bob_api, agent.pk)
    seed(session_id, exchanges=exchanges)
    return session_id


def test_manual_compaction_summarizes_now_and_later_runs_start_from_it(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    session_id = finished_session(bob_api, cast)  # positions 1-12
    script_compaction(fake_model)

    response = compact(bob_api, session_id)

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["reason"], body["run"], body["summary"], body["is_fallback"]) == (
        "manual",
        None,
        SUMMARY,
        False,
    )
    # Kept: the last exchange (positions 9-12), the summary merged into its question.
    assert (body["replaces_up_to_position"], body["messages_before"], body["messages_after"]) == (8, 12, 4)
    assert body["tokens_after"] < body["tokens_before"]
    assert [kind_of(request) for request in fake_model.requests] == ["summary"]
    (event,) = RunEvent.objects.filter(session_id=session_id, type="compaction")
    assert (event.run_id, event.data["reason"], event.data["summary"]) == (None, "manual", SUMMARY)

    fake_model.script(Turn(text="Sure."))
    run_id = post_message(bob_api, session_id, "Continue.")["run"]["id"]  # type: ignore[index]
    run_to_end(bob_api, run_id)
    sent = turns(fake_model)[0].body["messages"]
    assert sent[0]["content"] == [
        {"type": "text", "text": f"{SUMMARY_HEADER}\n{SUMMARY}"},
        {"type": "text", "text": f"Question 2: {FILLER}"},
    ]
    assert [message["role"] for message in sent] == ["user", "assistant", "user", "assistant", "user"]


def test_manual_compaction_of_another_tenants_session_is_404_and_changes_nothing(
    cast: Cast, bob_api: APIClient, carol_api: APIClient, fake_model: FakeModelServer
) -> None:
    session_id = finished_session(bob_api, cast)
    events_before = RunEvent.objects.filter(session_id=session_id).count()
    script_compaction(fake_model)

    response = compact(carol_api, session_id)

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert fake_model.requests == []
    assert not CompactionSnapshot.objects.filter(session_id=session_id).exists()
    assert RunEvent.objects.filter(session_id=session_id).count() == events_before


def test_manual_compaction_of_a_session_deleted_meanwhile_is_404_and_changes_nothing(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view found the session; another request deleted it before the compaction read it."""
    session_id = finished_session(bob_api, cast)
    script_compaction(fake_model)
    compact_session = compaction_api.session_compact

    def deleted_first(**kwargs: Any) -> CompactionSnapshot:
        Session.objects.filter(pk=session_id).delete()
        return compact_session(**kwargs)

    monkeypatch.setattr(compaction_api, "session_compact", deleted_first)

    response = compact(bob_api, session_id)

    assert (response.status_code, response.json()) == (
        404,
        {"error": {"code": "not_found", "message": "Not found.", "fields": {}}},
    )
    assert fake_model.requests == []
    assert not CompactionSnapshot.objects.filter(session_id=session_id).exists()


def test_manual_compaction_waits_for_the_active_run(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    session_id = finished_session(bob_api, cast)
    run_id = post_message(bob_api, session_id, "Working…")["run"]["id"]  # type: ignore[index]
    Run.objects.filter(pk=run_id).update(status="executing")

    response = compact(bob_api, session_id)

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "run_active"
    assert response.json()["error"]["fields"] == {"active_run": [run_id]}
    assert fake_model.requests == []


def test_manual_compaction_with_nothing_older_is_409(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="claude-test")
    session_id = start_session(bob_api, agent.pk)

    response = compact(bob_api, session_id)

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "nothing_to_compact"


def test_manual_compaction_whose_summary_fails_is_502_and_changes_nothing(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    session_id = finished_session(bob_api, cast)
    script_compaction(fake_model, summary=Turn(error_status=400))

    response = compact(bob_api, session_id)

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "llm_error"
    assert not CompactionSnapshot.objects.filter(session_id=session_id).exists()
    assert not RunEvent.objects.filter(session_id=session_id, type="compaction").exists()


def test_viewers_cannot_compact(
    cast: Cast, bob_api: APIClient, victor_api: APIClient, fake_model: FakeModelServer
) -> None:
    session_id = finished_session(bob_api, cast)

    response = compact(victor_api, session_id)

    assert response.status_code == 403
    assert fake_model.requests == []


def test_admins_compact_any_session_of_their_tenant(
    cast: Cast, alice_api: APIClient, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    session_id = finished_session(bob_api, cast)
    script_compaction(fake_model)

    response = compact(alice_api, session_id)

    assert response.status_code == 200
    assert CompactionSnapshot.objects.get(session_id=session_id).reason == "manual"


# --- The transcript's statements ----------------------------------------------------------------


def _abandoned_run() -> Q:
    """Rows of runs whose answers left the context: failed, timed out, or retried."""
    retried = Run.objects.filter(retry_of_id=OuterRef("run_id"))
    return Q(run__status__in=ABANDONED_RUN_STATUSES) | Q(Exists(retried))


def _orm_transcript(session_id: Any) -> list[ChatMessage]:
    """The whole session's transcript (one branch here) as the ORM selects it: the oracle for
    sessions.statements' ``latest_snapshot`` and ``placed_messages``."""
    snapshot = (
        CompactionSnapshot.objects.filter(session_id=session_id, replaces_up_to_position__isnull=False)
        .exclude(_abandoned_run())
        .order_by("-created_at", "-replaces_up_to_position")
        .first()
    )
    stored = Message.objects.filter(session_id=session_id, position__isnull=False).exclude(
        run__parent_run__isnull=False
    )
    if snapshot is not None:
        stored = stored.filter(position__gt=snapshot.replaces_up_to_position)
    stored = stored.exclude(_abandoned_run() & ~Q(role="user")).order_by("position")
    transcript = [chat_message_for(message) for message in stored if message.role != "system"]
    return with_note(compaction_note(snapshot.summary), transcript) if snapshot else transcript


def test_the_hand_written_transcript_selects_what_the_orm_selects(cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    session = Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.bob)

    def run(status: str, **fields: Any) -> Run:
        return Run.objects.create(
            tenant=cast.tenant_a, session=session, agent=agent, created_by=cast.bob, status=status, **fields
        )

    conversation: list[Message] = []

    def say(role: str, text: str, run: Run | None, *, placed: bool = True) -> None:
        position = (
            next_session_number(session_id=session.pk, counter="last_message_position") if placed else None
        )
        is_executors = run is not None and run.parent_run_id is not None
        message = Message.objects.create(
            tenant=cast.tenant_a,
            session=session,
            # One branch: each conversation message follows the one before (sessions.branches).
            parent=conversation[-1] if conversation and not is_executors else None,
            role=role,
            run=run,
            position=position,
            content=[{"type": "text", "text": text}],
        )
        if placed and not is_executors:
            conversation.append(message)

    def snapshot(summary: str, up_to: int | None, by: Run | None) -> None:
        CompactionSnapshot.objects.create(
            tenant=cast.tenant_a,
            session=session,
            run=by,
            reason="threshold",
            summary=summary,
            replaces_up_to_position=up_to,
            tokens_before=10,
            tokens_after=5,
            messages_before=4,
            messages_after=2,
        )

    done, failed, timed_out = run("completed"), run("failed"), run("timeout")
    retried = run("cancelled")
    run("completed", retry_of=retried)
    executor = run("completed", parent_run=done)
    say("user", "first", done)
    say("assistant", "first answer", done)
    say("user", "kept question of a failed run", failed)
    say("assistant", "answer of a failed run", failed)
    say("tool", "tool result of a timed-out run", timed_out)
    say("assistant", "answer of a retried run", retried)
    say("assistant", "an executor's turn", executor)
    say("system", "a system note", None)
    say("assistant", "a message with no run", None)
    say("user", "queued, not placed yet", None, placed=False)
    assert session_transcript(session_id=session.pk) == _orm_transcript(session.pk)
    assert [message.content[0]["text"] for message in session_transcript(session_id=session.pk)] == [
        "first",
        "first answer",
        "kept question of a failed run",
        "a message with no run",
    ]

    snapshot("summary of a failed run", 2, failed)
    snapshot("summary of a retried run", 2, retried)
    snapshot("a record only", None, done)
    assert session_transcript(session_id=session.pk) == _orm_transcript(session.pk)
    snapshot("the manual summary", 1, None)
    snapshot("the summary that counts", 2, done)
    transcript = session_transcript(session_id=session.pk)
    assert transcript == _orm_transcript(session.pk)
    texts = [[block["text"] for block in message.content] for message in transcript]
    assert texts == [
        [f"{SUMMARY_HEADER}\nthe summary that counts", "kept question of a failed run"],
        ["a message with no run"],
    ]


def test_manual_compaction_beyond_the_credits_is_402_and_changes_nothing(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    session_id = finished_session(bob_api, cast)
    ModelPrice.objects.create(
        provider="anthropic",
        model="claude-test",
        input_per_million=3,
        output_per_million=15,
        as_of="2026-11-01",
    )
    credits_grant(tenant=cast.tenant_a, amount_micros=1)
    script_compaction(fake_model)

    response = compact(bob_api, session_id)

    assert response.status_code == 402
    assert response.json()["error"]["code"] == "insufficient_credits"
    assert fake_model.requests == []
    assert not CompactionSnapshot.objects.filter(session_id=session_id).exists()
    assert CreditAccount.objects.get(tenant=cast.tenant_a).balance_micros == 1
