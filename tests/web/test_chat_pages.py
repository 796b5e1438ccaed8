"""The chat page: finished runs rendered from messages, runs in the lane left to the live replay."""

import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from sessions.events import emit_event
from sessions.models import Message, MessageRole, Run, RunStatus, Session, ToolApproval
from tests.factories import last_placed_message_id
from tests.web.conftest import World

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]


def chat_config(body: str) -> dict[str, Any]:
    match = re.search(r'<script id="chat-config" type="application/json">(.*?)</script>', body, re.S)
    assert match is not None
    config: dict[str, Any] = json.loads(match.group(1))
    return config


def add_message(
    session: Session, role: str, content: list[dict[str, Any]], run: Run | None, position: int | None
) -> Message:
    return Message.objects.create(
        tenant=session.tenant,
        session=session,
        parent_id=last_placed_message_id(session),
        role=role,
        content=content,
        run=run,
        position=position,
    )


def tool_conversation(world: World) -> Run:
    session = world.session_a
    question = add_message(session, MessageRole.USER, [{"type": "text", "text": "What is 12*7?"}], None, 3)
    run = Run.objects.create(
        tenant=session.tenant,
        session=session,
        agent=world.agent_a,
        user_message=question,
        created_by=world.cast.bob,
        status=RunStatus.COMPLETED,
        stop_reason="end_turn",
    )
    question.run = run
    question.save(update_fields=["run"])
    call = {"type": "tool_call", "id": "call_1", "name": "calculator", "arguments": {"expression": "12*7"}}
    add_message(
        session,
        MessageRole.ASSISTANT,
        [{"type": "reasoning", "text": "Use the tool."}, {"type": "text", "text": "Let me calculate."}, call],
        run,
        4,
    )
    add_message(
        session,
        MessageRole.TOOL,
        [{"type": "tool_result", "tool_call_id": "call_1", "content": "84", "is_error": False}],
        run,
        5,
    )
    add_message(session, MessageRole.ASSISTANT, [{"type": "text", "text": "12*7 = **84**."}], run, 6)
    return run


def finished_run(world: World, *, question: str, position: int) -> Run:
    session = world.session_a
    message = add_message(session, MessageRole.USER, [{"type": "text", "text": question}], None, position)
    run = Run.objects.create(
        tenant=session.tenant,
        session=session,
        agent=world.agent_a,
        user_message=message,
        created_by=world.cast.bob,
        status=RunStatus.COMPLETED,
        stop_reason="end_turn",
    )
    Message.objects.filter(pk=message.pk).update(run=run)
    return run


def test_finished_runs_render_as_turns_with_tool_cards(world: World, client_for: ClientFor) -> None:
    run = tool_conversation(world)

    body = client_for(world.cast.bob).get(f"/chat/{world.session_a.pk}/").content.decode()

    assert body.count('class="turn turn-user" data-message-id') == 2
    assert body.count('class="turn turn-assistant" id="run-') == 2
    assert f'id="run-{run.pk}"' in body
    card = body[body.index('data-tool-call-id="call_1"') :]
    assert card.index('data-state="done"') < card.index("</details>")
    assert '<span class="tool-name" data-slot="name">calculator</span>' in card
    assert "&quot;expression&quot;: &quot;12*7&quot;" in card
    assert '<pre data-slot="result">84</pre>' in card
    assert '<details class="part-reasoning"><summary>Reasoning</summary>' in body
    assert '<div class="part-text md" data-markdown>12*7 = **84**.</div>' in body
    assert body.index("Let me calculate.") < body.index("call_1") < body.index("12*7 = **84**.")
    assert f'href="/runs/{run.pk}/">Timeline</a>' in body


def test_with_nothing_in_the_lane_the_replay_starts_at_the_sessions_last_event(
    world: World, client_for: ClientFor
) -> None:
    for _ in range(3):
        emit_event(session_id=world.session_a.pk, run_id=world.run_a.pk, event_type="usage", data={})

    config = chat_config(client_for(world.cast.bob).get(f"/chat/{world.session_a.pk}/").content.decode())

    assert config["afterSeq"] == 3
    assert config["laneRuns"] == []
    assert config["settledRunIds"] == []
    assert config["canPost"] is True
    assert config["socketPath"] == f"/ws/sessions/{world.session_a.pk}/"
    assert config["urls"]["cancel"] == "/runs/RUN_ID/cancel/"


def test_an_active_run_is_left_to_the_replay_from_before_its_first_event(
    world: World, client_for: ClientFor
) -> None:
    session = world.session_a
    emit_event(session_id=session.pk, run_id=world.run_a.pk, event_type="run.completed", data={})
    question = add_message(session, MessageRole.USER, [{"type": "text", "text": "Count slowly"}], None, 3)
    active = Run.objects.create(
        tenant=session.tenant,
        session=session,
        agent=world.agent_a,
        user_message=question,
        created_by=world.cast.bob,
        status=RunStatus.EXECUTING,
    )
    question.run = active
    question.save(update_fields=["run"])
    emit_event(
        session_id=session.pk,
        run_id=active.pk,
        event_type="run.queued",
        data={"message_id": str(question.pk)},
    )
    add_message(session, MessageRole.ASSISTANT, [{"type": "text", "text": "One, two"}], active, 4)
    queued_question = add_message(
        session, MessageRole.USER, [{"type": "text", "text": "And then?"}], None, None
    )
    queued = Run.objects.create(
        tenant=session.tenant,
        session=session,
        agent=world.agent_a,
        user_message=queued_question,
        created_by=world.cast.bob,
        status=RunStatus.QUEUED,
    )
    queued_question.run = queued
    queued_question.save(update_fields=["run"])
    emit_event(
        session_id=session.pk,
        run_id=queued.pk,
        event_type="run.queued",
        data={"message_id": str(queued_question.pk)},
    )
    emit_event(session_id=session.pk, run_id=world.run_a.pk, event_type="usage", data={})

    body = client_for(world.cast.bob).get(f"/chat/{session.pk}/").content.decode()
    config = chat_config(body)

    assert "One, two" not in body
    assert body.index("Count slowly") < body.index("And then?")
    assert config["afterSeq"] == 1
    assert config["settledRunIds"] == [str(world.run_a.pk)]
    assert config["laneRuns"] == [
        {"id": str(active.pk), "status": "executing", "messageId": str(question.pk)},
        {"id": str(queued.pk), "status": "queued", "messageId": str(queued_question.pk)},
    ]
    queued_turn = body[body.index(f'data-message-id="{queued_question.pk}"') :]
    assert queued_turn.index("data-queued>queued</span>") < queued_turn.index("</article>")
    assert f'action="/runs/{queued.pk}/cancel/"' in queued_turn
    assert 'id="chat-status" data-chat-status>running</span>' in body


def test_a_failed_run_shows_its_error_and_a_retry_button(world: World, client_for: ClientFor) -> None:
    world.run_a.status = RunStatus.FAILED
    world.run_a.stop_reason = "llm_error"
    world.run_a.error = "The provider answered 529 overloaded."
    world.run_a.save()

    body = client_for(world.cast.bob).get(f"/chat/{world.session_a.pk}/").content.decode()
    viewer_body = client_for(world.cast.victor).get(f"/chat/{world.session_a.pk}/").content.decode()

    assert "The provider answered 529 overloaded." in body
    assert "llm error" in body
    assert f'action="/runs/{world.run_a.pk}/retry/"' in body
    assert f'action="/runs/{world.run_a.pk}/retry/"' not in viewer_body


def test_a_retried_run_offers_retry_only_on_its_retry(world: World, client_for: ClientFor) -> None:
    # Both runs failed before answering: each shows how it ended, after the question.
    Message.objects.filter(run=world.run_a).exclude(role=MessageRole.USER).delete()
    world.run_a.status = RunStatus.FAILED
    world.run_a.stop_reason = "llm_error"
    world.run_a.error = "The provider answered 529 overloaded."
    world.run_a.save()
    retry = Run.objects.get(pk=world.run_a.pk)
    retry.pk = uuid.uuid4()
    retry.retry_of = world.run_a
    retry.error = "Still overloaded."
    retry.save(force_insert=True)

    body = client_for(world.cast.bob).get(f"/chat/{world.session_a.pk}/").content.decode()

    assert "The provider answered 529 overloaded." in body
    assert "Still overloaded." in body
    assert re.findall(r'action="/runs/([^/]+)/retry/"', body) == [str(retry.pk)]


def test_a_denied_approval_shows_on_its_card(world: World, client_for: ClientFor) -> None:
    run = tool_conversation(world)
    ToolApproval.objects.create(
        tenant=world.cast.tenant_a,
        run=run,
        tool_call_id="call_1",
        tool_name="calculator",
        status="denied",
        decision="deny",
        decided_by=world.cast.alice,
        reason="not now",
        expires_at=run.created_at,
    )

    body = client_for(world.cast.bob).get(f"/chat/{world.session_a.pk}/").content.decode()

    card = body[body.index('data-tool-call-id="call_1"') :]
    assert card.startswith('data-tool-call-id="call_1" data-state="denied"')
    assert "Denied by alice@a.test: not now" in card


def test_starting_a_chat_creates_the_session_and_queues_the_first_message(
    world: World, client_for: ClientFor
) -> None:
    client = client_for(world.cast.bob)

    response = client.post("/chat/new/", {"agent": str(world.agent_a.pk), "content": "What time is it?"})

    session = Session.objects.exclude(pk=world.session_a.pk).get(tenant=world.cast.tenant_a)
    assert (response.status_code, response["Location"]) == (302, f"/chat/{session.pk}/")
    assert (session.title, session.created_by, session.agent) == (
        "What time is it?",
        world.cast.bob,
        world.agent_a,
    )
    message = Message.objects.get(session=session)
    assert (message.text, message.position, message.run.status) == ("What time is it?", None, "queued")
    page = client.get(response["Location"]).content.decode()
    assert "What time is it?" in page and "data-queued>queued</span>" in page


def test_posting_without_the_script_queues_the_message(world: World, client_for: ClientFor) -> None:
    response = client_for(world.cast.bob).post(f"/chat/{world.session_a.pk}/send/", {"content": "Next one"})

    assert (response.status_code, response["Location"]) == (302, f"/chat/{world.session_a.pk}/")
    assert Message.objects.filter(session=world.session_a, role="user").count() == 2
    assert Run.objects.filter(session=world.session_a, status="queued").count() == 1


def test_an_empty_message_is_refused_with_a_toast(world: World, client_for: ClientFor) -> None:
    client = client_for(world.cast.bob)

    response = client.post(f"/chat/{world.session_a.pk}/send/", {"content": "   "}, follow=True)

    assert "Message cannot be empty." in response.content.decode()
    assert Message.objects.filter(session=world.session_a).count() == 2


def test_viewers_cannot_start_chats_or_post(world: World, client_for: ClientFor) -> None:
    client = client_for(world.cast.victor)

    started = client.post("/chat/new/", {"agent": str(world.agent_a.pk)})
    posted = client.post(f"/chat/{world.session_a.pk}/send/", {"content": "hi"})

    assert (started.status_code, posted.status_code) == (403, 403)
    assert Session.objects.filter(tenant=world.cast.tenant_a).count() == 1


def test_cancelling_a_queued_run_answers_json_to_the_script(world: World, client_for: ClientFor) -> None:
    queued = Run.objects.create(
        tenant=world.cast.tenant_a,
        session=world.session_a,
        agent=world.agent_a,
        created_by=world.cast.bob,
        status=RunStatus.QUEUED,
    )

    response = client_for(world.cast.bob).post(f"/runs/{queued.pk}/cancel/", HTTP_ACCEPT="application/json")

    queued.refresh_from_db()
    assert response.json() == {"ok": True, "message": "Cancelling the run."}
    assert (queued.status, queued.stop_reason) == ("cancelled", "cancelled")


def test_retrying_a_finished_run_is_refused_with_the_reason(world: World, client_for: ClientFor) -> None:
    response = client_for(world.cast.bob).post(
        f"/runs/{world.run_a.pk}/retry/", HTTP_ACCEPT="application/json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "ok": False,
        "message": "Only failed, cancelled or timed-out runs can be retried.",
    }
    assert Run.objects.filter(session=world.session_a).count() == 1


def test_the_session_list_fragment_shows_lane_status(world: World, client_for: ClientFor) -> None:
    Run.objects.create(
        tenant=world.cast.tenant_a,
        session=world.session_a,
        agent=world.agent_a,
        status=RunStatus.AWAITING_APPROVAL,
    )

    body = client_for(world.cast.bob).get(f"/chat/sessions/?current={world.session_a.pk}").content.decode()

    assert body.strip().startswith('<ul class="session-list">')
    assert 'aria-current="page" data-session-id' in body
    assert '<span class="badge tone-warn" data-session-status>awaiting approval</span>' in body
    assert "Carol" not in body


def test_the_message_fragment_renders_one_user_turn(world: World, client_for: ClientFor) -> None:
    message = Message.objects.get(session=world.session_a, role="user")

    body = (
        client_for(world.cast.victor)
        .get(f"/chat/{world.session_a.pk}/messages/{message.pk}/")
        .content.decode()
    )

    assert body.strip().startswith(f'<article class="turn turn-user" data-message-id="{message.pk}"')
    assert "What is 2+2?" in body


def test_deleting_a_conversation(world: World, client_for: ClientFor) -> None:
    response = client_for(world.cast.bob).post(f"/chat/{world.session_a.pk}/delete/")

    assert (response.status_code, response["Location"]) == (302, "/chat/")
    assert not Session.objects.filter(pk=world.session_a.pk).exists()


def child_run(parent: Run, *, title: str, answer: str, position: int, tool_call_id: str = "") -> Run:
    """A finished child run of ``parent`` with its prompt and answer, as the worker stores them."""
    session = parent.session
    prompt = add_message(
        session, MessageRole.USER, [{"type": "text", "text": f"PROMPT {title}"}], None, position
    )
    child = Run.objects.create(
        tenant=session.tenant,
        session=session,
        agent=parent.agent,
        user_message=prompt,
        parent_run=parent,
        parent_tool_call_id=tool_call_id,
        title=title,
        status=RunStatus.COMPLETED,
        stop_reason="end_turn",
    )
    Message.objects.filter(pk=prompt.pk).update(run=child)
    add_message(session, MessageRole.ASSISTANT, [{"type": "text", "text": answer}], child, position + 1)
    return child


def test_child_runs_render_as_labelled_blocks_inside_their_parents_answer(
    world: World, client_for: ClientFor
) -> None:
    session = world.session_a
    planner = finished_run(world, question="Compare Paris and Rome", position=3)
    executor = child_run(planner, title="s1: Paris", answer="Paris has 2.1M.", position=4)
    add_message(session, MessageRole.ASSISTANT, [{"type": "text", "text": "Rome is larger."}], planner, 6)
    delegating = finished_run(world, question="How big is Rome?", position=7)
    call = {"type": "tool_call", "id": "call_9", "name": "spawn_subagent", "arguments": {"task": "Rome"}}
    add_message(session, MessageRole.ASSISTANT, [call], delegating, 8)
    subagent = child_run(delegating, title="Rome", answer="Rome has 2.8M.", position=9, tool_call_id="call_9")
    result = {"type": "tool_result", "tool_call_id": "call_9", "content": "Rome has 2.8M.", "is_error": False}
    add_message(session, MessageRole.TOOL, [result], delegating, 11)
    add_message(session, MessageRole.ASSISTANT, [{"type": "text", "text": "About 2.8M."}], delegating, 12)

    body = client_for(world.cast.bob).get(f"/chat/{session.pk}/").content.decode()

    assert body.count('class="turn turn-assistant" id="run-') == 3
    assert body.count('<details class="child-run" id="run-') == 2
    assert "PROMPT" not in body
    planner_turn = body[body.index(f'id="run-{planner.pk}"') : body.index(f'id="run-{delegating.pk}"')]
    block = planner_turn[planner_turn.index(f'id="run-{executor.pk}"') :]
    assert '<span class="child-run-kind" data-slot="kind">Executor</span>' in block
    assert '<span class="child-run-title" data-slot="title">s1: Paris</span>' in block
    assert block.index("Paris has 2.1M.") < block.index("</details>") < block.index("Rome is larger.")
    delegating_turn = body[body.index(f'id="run-{delegating.pk}"') :]
    after_card = delegating_turn[delegating_turn.index('data-tool-call-id="call_9"') :]
    assert after_card.index("</details>") < after_card.index(f'id="run-{subagent.pk}"')
    assert '<span class="child-run-kind" data-slot="kind">Sub-agent</span>' in after_card
    assert after_card.index("Rome has 2.8M.") < after_card.index("About 2.8M.")
    assert f'data-retry="{executor.pk}"' not in body


def test_the_children_of_a_parent_in_the_lane_are_replayed_with_it(
    world: World, client_for: ClientFor
) -> None:
    session = world.session_a
    parent = finished_run(world, question="Compare Paris and Rome", position=3)
    Run.objects.filter(pk=parent.pk).update(status=RunStatus.EXECUTING, stop_reason="")
    emit_event(session_id=session.pk, run_id=parent.pk, event_type="run.queued", data={})
    child = child_run(parent, title="s1: Paris", answer="Paris has 2.1M.", position=4)
    emit_event(session_id=session.pk, run_id=child.pk, event_type="run.completed", data={})

    body = client_for(world.cast.bob).get(f"/chat/{session.pk}/").content.decode()
    config = chat_config(body)

    assert "Paris has 2.1M." not in body
    assert config["afterSeq"] == 0
    assert config["settledRunIds"] == []
    assert [run["id"] for run in config["laneRuns"]] == [str(parent.pk)]
