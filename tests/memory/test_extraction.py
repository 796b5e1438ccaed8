"""Extraction: suggestions from a conversation (offline rules, or the model's JSON through the
fake model server), stored once per message, reviewed before they are ever retrieved."""

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agents.models import Agent
from billing.models import CreditAccount, ModelPrice
from billing.services import credits_grant
from memory.extraction import (
    ExtractionFailed,
    Proposal,
    extract_memories,
    find_json_items,
    parse_proposals,
    rule_based_proposals,
)
from memory.models import ExtractionState, Memory, MemorySource, MemoryStatus, MemoryType
from memory.retrieval import search_memories
from memory.services import memory_approve, memory_reject
from memory.tasks import extract_idle_sessions, extract_memories_task, sessions_idle_for_extraction
from sessions.models import Message, MessageRole, Run, RunStatus, Session
from tenants.actors import Actor
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.memory.factories import make_memory, make_session

CONVERSATION = (
    ("user", "Hi! My name is Bob Stone. I prefer short answers with bullet points."),
    ("assistant", "Nice to meet you, Bob. Noted."),
    ("user", "Please remember that the staging server is called kestrel. What is 2+2?"),
    ("assistant", "2+2 = 4."),
)


def _admin(cast: Cast) -> Actor:
    return Actor(user=cast.alice, tenant=cast.tenant_a, role="owner")


def _suggestions(session: Session) -> list[tuple[str, str, float, int | None]]:
    memories = Memory.objects.filter(source_session=session).order_by("content")
    assert all(m.status == MemoryStatus.SUGGESTED and m.source == MemorySource.EXTRACTED for m in memories)
    return [(m.type, m.content, m.importance, m.subject_user_id) for m in memories]


def test_offline_agents_extract_with_rules_and_suggestions_wait_for_review(cast: Cast, agent: Agent) -> None:
    session = make_session(agent=agent, user=cast.bob, messages=CONVERSATION)

    created = extract_memories(session)

    assert len(created) == 3
    assert _suggestions(session) == [
        (MemoryType.FACT, "The staging server is called kestrel.", 0.7, cast.bob.pk),
        (MemoryType.PREFERENCE, "The user prefers short answers with bullet points.", 0.6, cast.bob.pk),
        (MemoryType.FACT, "The user's name is Bob Stone.", 0.8, cast.bob.pk),
    ]
    search = lambda query: [  # noqa: E731
        item.memory.content
        for item in search_memories(
            tenant=cast.tenant_a, agent=agent, query=query, subject_user_id=cast.bob.pk
        )
    ]
    assert search("staging server kestrel") == []
    assert search("bullet points answers") == []

    kestrel, bullets, name = Memory.objects.filter(source_session=session).order_by("content")
    memory_approve(actor=_admin(cast), memory=kestrel)
    memory_approve(actor=_admin(cast), memory=name, content="The user's name is Bob Stone; he goes by Bob.")
    memory_reject(actor=_admin(cast), memory=bullets)

    assert search("staging server kestrel") == ["The staging server is called kestrel."]
    assert search("what is my name") == ["The user's name is Bob Stone; he goes by Bob."]
    assert search("bullet points answers") == []
    assert ExtractionState.objects.get(session=session).last_message_position == 4


def test_each_message_is_read_once_and_known_memories_are_not_proposed_again(
    cast: Cast, agent: Agent
) -> None:
    make_memory(agent=agent, content="The user's name is Bob Stone.", subject_user=cast.bob)
    make_memory(
        agent=agent,
        content="The user prefers short answers with bullet points.",
        subject_user=cast.bob,
        status=MemoryStatus.REJECTED,
    )
    session = make_session(agent=agent, user=cast.bob, messages=CONVERSATION)

    assert [m.content for m in extract_memories(session)] == ["The staging server is called kestrel."]
    assert extract_memories(session) == []

    Message.objects.create(
        tenant=cast.tenant_a,
        session=session,
        position=5,
        role=MessageRole.USER,
        content=[{"type": "text", "text": "I live in Lisbon. I prefer short answers with bullet points."}],
    )
    Session.objects.filter(pk=session.pk).update(last_message_position=5)
    assert [m.content for m in extract_memories(session)] == ["The user lives in Lisbon."]
    assert ExtractionState.objects.get(session=session).last_message_position == 5


def test_a_session_being_extracted_elsewhere_is_left_alone(cast: Cast, agent: Agent) -> None:
    session = make_session(agent=agent, user=cast.bob, messages=CONVERSATION)
    ExtractionState.objects.create(session=session, lease_expires_at=timezone.now() + timedelta(minutes=5))
    assert extract_memories(session) == []
    assert Memory.objects.count() == 0
    ExtractionState.objects.filter(session=session).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert len(extract_memories(session)) == 3


MODEL_ANSWER = """Here is what is worth remembering:
```json
[
  {"type": "preference", "content": "The user prefers  metric units.", "importance": 0.7},
  {"type": "fact", "content": "The team's release train leaves every second Friday.", "importance": 0.9,
   "about": "general"},
  {"type": "context", "content": "The user is migrating the billing service to Go.", "importance": "0.8"},
  {"type": "gossip", "content": "Not a valid type.", "importance": 0.5},
  {"type": "fact", "content": "", "importance": 0.5},
  {"type": "fact", "content": "Importance out of range is clamped.", "importance": 7},
  {"type": "fact", "content": "A boolean is not an importance.", "importance": true},
  "not an object"
]
```
That's all."""


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_real_models_propose_memories_as_json(cast: Cast, fake_model: FakeModelServer, provider: str) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider=provider)
    session = make_session(
        agent=agent,
        user=cast.bob,
        messages=(
            ("user", "Use metric units please; we ship every second Friday."),
            ("assistant", "Will do."),
        ),
    )
    fake_model.script(Turn(text=MODEL_ANSWER))

    created = extract_memories(session)

    assert len(created) == 4
    assert _suggestions(session) == [
        (MemoryType.FACT, "Importance out of range is clamped.", 1.0, cast.bob.pk),
        (MemoryType.FACT, "The team's release train leaves every second Friday.", 0.9, None),
        (MemoryType.CONTEXT, "The user is migrating the billing service to Go.", 0.8, cast.bob.pk),
        (MemoryType.PREFERENCE, "The user prefers metric units.", 0.7, cast.bob.pk),
    ]
    (request,) = fake_model.requests
    body = json.dumps(request.body)
    assert "User: Use metric units please; we ship every second Friday." in body
    assert "Assistant: Will do." in body
    assert "Answer with only a JSON array" in body


def test_an_answer_without_json_fails_and_backs_off(cast: Cast, fake_model: FakeModelServer) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    session = make_session(agent=agent, user=cast.bob, messages=CONVERSATION)
    fake_model.script(Turn(text="Nothing comes to mind."))

    with pytest.raises(ExtractionFailed):
        extract_memories(session)

    state = ExtractionState.objects.get(session=session)
    assert (state.last_message_position, state.failed_attempts, state.lease_expires_at) == (0, 1, None)
    assert state.last_error == "the model's answer held no JSON array"
    assert state.next_attempt_at is not None and state.next_attempt_at > timezone.now() + timedelta(minutes=4)
    assert list(sessions_idle_for_extraction(0)) == []  # backing off

    fake_model.script(Turn(text="[]"))
    assert extract_memories(session) == []  # on demand ignores the back-off
    state.refresh_from_db()
    assert (state.last_message_position, state.failed_attempts, state.next_attempt_at) == (4, 0, None)


def test_a_provider_without_a_key_fails_without_a_request(cast: Cast, settings: Any) -> None:
    settings.OPENAI_API_KEY = ""
    agent = make_agent(tenant=cast.tenant_a, model_provider="openai")
    session = make_session(agent=agent, user=cast.bob, messages=CONVERSATION)
    assert extract_memories_task(str(session.pk)) == 0
    assert "No API key for openai" in ExtractionState.objects.get(session=session).last_error


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[{"content": "a"}]', [{"content": "a"}]),
        ('Sure! {"memories": [{"content": "b"}]}', [{"content": "b"}]),
        ("Prose [not json] then [1, 2]", [1, 2]),
        ("[]", []),
        ("no json at all", None),
        ('[{"content": "unterminated"', None),
    ],
)
def test_the_json_is_found_wherever_the_model_put_it(text: str, expected: Any) -> None:
    assert find_json_items(text) == expected


def test_parse_proposals_keeps_only_valid_items() -> None:
    assert parse_proposals('[{"content": " The user  likes jazz. "}, {"content": 3}]') == [
        Proposal(type="fact", content="The user likes jazz.", importance=0.5)
    ]
    with pytest.raises(ExtractionFailed):
        parse_proposals("I found nothing.")


def test_the_offline_rules() -> None:
    assert rule_based_proposals(
        [
            "I'm allergic to shellfish! I work as a nurse. I don't like loud music.",
            "Remember that my sister visits in May. Nothing else here.",
        ]
    ) == [
        Proposal(type="fact", content="The user is allergic to shellfish.", importance=0.9),
        Proposal(type="fact", content="The user works as a nurse.", importance=0.6),
        Proposal(type="preference", content="The user dislikes loud music.", importance=0.5),
        Proposal(type="fact", content="The user's sister visits in May.", importance=0.7),
    ]


# --- Idle sessions --------------------------------------------------------------------------------


def _idle(session: Session, *, minutes: float) -> None:
    moment = timezone.now() - timedelta(minutes=minutes)
    Session.objects.filter(pk=session.pk).update(updated_at=moment)
    Message.objects.filter(session=session).update(created_at=moment)


def test_idle_sessions_with_unread_messages_are_chosen(cast: Cast, agent: Agent) -> None:
    idle = make_session(agent=agent, user=cast.bob, messages=CONVERSATION, title="idle")
    recent = make_session(agent=agent, user=cast.bob, messages=CONVERSATION, title="recent")
    busy = make_session(agent=agent, user=cast.bob, messages=CONVERSATION, title="busy")
    read = make_session(agent=agent, user=cast.bob, messages=CONVERSATION, title="read")
    empty = make_session(agent=agent, user=cast.bob, title="empty")
    for session in (idle, busy, read, empty):
        _idle(session, minutes=31)
    _idle(recent, minutes=10)
    Run.objects.create(tenant=cast.tenant_a, session=busy, agent=agent, status=RunStatus.QUEUED)
    ExtractionState.objects.create(session=read, last_message_position=4)

    assert [s.title for s in sessions_idle_for_extraction(1800)] == ["idle"]
    assert sorted(s.title for s in sessions_idle_for_extraction(300)) == ["idle", "recent"]


def test_the_schedule_queues_idle_sessions_and_can_be_switched_off(
    cast: Cast, agent: Agent, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    queued: list[tuple[Any, ...]] = []
    monkeypatch.setattr("memory.tasks.enqueue_task", lambda *args, **kwargs: queued.append(args))
    session = make_session(agent=agent, user=cast.bob, messages=CONVERSATION)
    _idle(session, minutes=31)

    assert extract_idle_sessions() == 1
    assert queued == [(extract_memories_task, str(session.pk))]
    assert extract_memories_task(str(session.pk)) == 3
    assert extract_idle_sessions() == 0  # read up to the last message: nothing new

    settings.MEMORY_EXTRACTION_IDLE_SECONDS = 0
    assert extract_idle_sessions() == 0
    assert extract_memories_task("00000000-0000-0000-0000-000000000000") == 0


def test_nothing_about_a_deleted_user_is_stored_as_general(cast: Cast, agent: Agent) -> None:
    session = make_session(agent=agent, user=None, messages=CONVERSATION)
    assert extract_memories(session) == []
    assert Memory.objects.count() == 0
    assert ExtractionState.objects.get(session=session).last_message_position == 4


def test_extraction_is_paid_from_credits_and_refused_without_them(
    cast: Cast, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model")
    ModelPrice.objects.create(
        provider="anthropic",
        model="test-model",
        input_per_million=3,
        output_per_million=15,
        as_of="2026-11-01",
    )
    credits_grant(tenant=cast.tenant_a, amount_micros=1)
    session = make_session(agent=agent, user=cast.bob, messages=CONVERSATION)

    with pytest.raises(ExtractionFailed, match="Insufficient credits"):
        extract_memories(session)

    assert fake_model.requests == []
    assert CreditAccount.objects.get(tenant=cast.tenant_a).balance_micros == 1
