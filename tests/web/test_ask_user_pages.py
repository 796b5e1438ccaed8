"""ask_user on the chat page: the answered question in the transcript, and the script's answer fallback."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from sessions.events import emit_event
from sessions.models import Message, MessageRole, Run, RunStatus, UserQuestion
from tests.factories import last_placed_message_id
from tests.web.conftest import World

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]
CALL = {"type": "tool_call", "id": "call_ask", "name": "ask_user", "arguments": {"question": "Which city?"}}


def add_message(world: World, role: str, content: list[dict[str, Any]], run: Run, position: int) -> Message:
    session = world.session_a
    return Message.objects.create(
        tenant=session.tenant,
        session=session,
        parent_id=last_placed_message_id(session),
        role=role,
        content=content,
        run=run,
        position=position,
    )


def asking_run(world: World, *, status: str) -> Run:
    run = Run.objects.create(
        tenant=world.cast.tenant_a,
        session=world.session_a,
        agent=world.agent_a,
        created_by=world.cast.bob,
        status=status,
    )
    add_message(world, MessageRole.ASSISTANT, [CALL], run, 3)
    UserQuestion.objects.create(
        tenant=world.cast.tenant_a,
        run=run,
        tool_call_id="call_ask",
        question="Which city?",
        choices=["Lisbon", "Porto"],
        expires_at=timezone.now() + timedelta(minutes=30),
    )
    return run


def post_answer(client: Client, run: Run, answer: str) -> Any:
    return client.post(
        f"/runs/{run.pk}/answer/",
        {"tool_call_id": "call_ask", "answer": answer},
        HTTP_ACCEPT="application/json",
    )


def test_a_finished_runs_question_shows_with_its_answer(world: World, client_for: ClientFor) -> None:
    run = asking_run(world, status=RunStatus.COMPLETED)
    result = {"type": "tool_result", "tool_call_id": "call_ask", "content": "Porto", "is_error": False}
    add_message(world, MessageRole.TOOL, [result], run, 4)
    UserQuestion.objects.filter(run=run).update(status="answered", answer="Porto", answered_by=world.cast.bob)

    body = client_for(world.cast.bob).get(f"/chat/{world.session_a.pk}/").content.decode()

    card = body[body.index('data-tool-call-id="call_ask"') :]
    card = card[: card.index("</details>")]
    assert '<p class="question-text" data-slot="question-text">Which city?</p>' in card
    assert 'Answered by bob@a.test: <strong data-slot="question-answer">Porto</strong>' in card
    assert "data-choice" not in card


def test_the_chat_answers_a_waiting_question(world: World, client_for: ClientFor) -> None:
    run = asking_run(world, status=RunStatus.AWAITING_INPUT)

    response = post_answer(client_for(world.cast.bob), run, "Porto")

    assert response.json() == {"ok": True, "message": "Answer sent."}
    question = UserQuestion.objects.get(run=run)
    assert (question.status, question.answer, question.answered_by) == ("answered", "Porto", world.cast.bob)
    assert Run.objects.get(pk=run.pk).status == "queued"


def test_an_answer_that_is_not_a_choice_is_refused_with_the_reason(
    world: World, client_for: ClientFor
) -> None:
    run = asking_run(world, status=RunStatus.AWAITING_INPUT)

    response = post_answer(client_for(world.cast.bob), run, "Oslo")

    assert response.status_code == 400
    assert response.json() == {"ok": False, "message": "Pick one of the choices: Lisbon, Porto."}
    assert UserQuestion.objects.get(run=run).status == "pending"
    assert Run.objects.get(pk=run.pk).status == "awaiting_input"


@pytest.mark.parametrize(("who", "status_code"), [("victor", 403), ("carol", 404)])
def test_a_viewer_or_another_tenant_cannot_answer(
    world: World, client_for: ClientFor, who: str, status_code: int
) -> None:
    run = asking_run(world, status=RunStatus.AWAITING_INPUT)

    response = post_answer(client_for(getattr(world.cast, who)), run, "Porto")

    assert response.status_code == status_code
    assert UserQuestion.objects.get(run=run).status == "pending"
    assert Run.objects.get(pk=run.pk).status == "awaiting_input"


def test_the_run_timeline_shows_the_question_and_its_answer(world: World, client_for: ClientFor) -> None:
    run = asking_run(world, status=RunStatus.COMPLETED)
    question = {"tool_call_id": "call_ask", "question": "Which city?", "choices": ["Lisbon", "Porto"]}
    emit_event(session_id=run.session_id, run_id=run.pk, event_type="input.required", data=question)
    answer = {
        "tool_call_id": "call_ask",
        "status": "answered",
        "answer": "Porto",
        "answered_by": "bob@a.test",
    }
    emit_event(session_id=run.session_id, run_id=run.pk, event_type="input.resolved", data=answer)

    body = client_for(world.cast.bob).get(f"/runs/{run.pk}/").content.decode()

    assert "Question to the user" in body
    assert "Which city? (Lisbon / Porto)" in body
    assert "Question answered by bob@a.test" in body
    assert body.index("Question to the user") < body.index("Question answered by bob@a.test")
