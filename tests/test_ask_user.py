"""ask_user: the run waits for the user's answer, which the model receives as the tool result."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from sessions.models import Run, RunEvent, Step, UserQuestion
from sessions.questions import NO_ANSWER_RESULT, QuestionAsker, question_resolve
from sessions.sweeper import sweep_runs
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn

# Tools run on threads of their own: they see only committed rows.
pytestmark = pytest.mark.django_db(transaction=True)
CHOICES = ["Paris", "Rome"]


def asking_run(
    cast: Cast, api: APIClient, fake_model: FakeModelServer, arguments: dict[str, Any] | None = None
) -> str:
    """A run whose model called ask_user, now waiting for the answer; then it answers "done"."""
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    question = arguments or {"question": "Which city?", "choices": CHOICES}
    fake_model.script(Turn(tool_calls=[("ask_user", question)]), Turn(text="done"))
    session_id = api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()["id"]
    response = api.post(f"/api/v1/sessions/{session_id}/messages/", {"content": "plan a trip"}, format="json")
    run_id: str = response.json()["run"]["id"]
    execute_run(run_id)
    return run_id


def call_id(run_id: str) -> str:
    return UserQuestion.objects.get(run_id=run_id).tool_call_id


def answer(api: APIClient, run_id: str, tool_call_id: str, text: Any) -> Any:
    body = {"tool_call_id": tool_call_id, "answer": text}
    return api.post(f"/api/v1/runs/{run_id}/answer/", body, format="json")


def last_tool_result(fake_model: FakeModelServer) -> dict[str, Any]:
    result: dict[str, Any] = fake_model.requests[-1].body["messages"][-1]["content"][0]
    return result


def test_the_run_waits_for_the_answer_and_the_model_receives_it_exactly(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = asking_run(cast, bob_api, fake_model)
    waiting = bob_api.get(f"/api/v1/runs/{run_id}/").json()
    required = RunEvent.objects.get(run_id=run_id, type="input.required").data

    response = answer(bob_api, run_id, call_id(run_id), "Rome")
    queued_status = Run.objects.get(pk=run_id).status
    execute_run(run_id)

    assert (waiting["status"], waiting["questions"][0]["question"], waiting["questions"][0]["choices"]) == (
        "awaiting_input",
        "Which city?",
        CHOICES,
    )
    assert waiting["questions"][0]["status"] == "pending"
    assert Run.objects.get(pk=run_id).lease_owner == ""
    assert (required["tool_call_id"], required["question"], required["choices"]) == (
        call_id(run_id),
        "Which city?",
        CHOICES,
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["answer"], body["answered_by"]) == ("answered", "Rome", "bob@a.test")
    assert queued_status == "queued"
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason) == ("completed", "end_turn")
    tool_result = last_tool_result(fake_model)
    assert (tool_result["type"], tool_result["tool_use_id"]) == ("tool_result", call_id(run_id))
    assert tool_result["content"] == "Rome"
    assert Step.objects.get(run_id=run_id, kind="tool_call").output == {"content": "Rome", "is_error": False}
    resolved = RunEvent.objects.get(run_id=run_id, type="input.resolved").data
    assert (resolved["status"], resolved["answer"], resolved["answered_by"]) == (
        "answered",
        "Rome",
        "bob@a.test",
    )
    statuses = [
        e.data["to"] for e in RunEvent.objects.filter(run_id=run_id, type="run.status").order_by("seq")
    ]
    assert "awaiting_input" in statuses
    assert statuses[statuses.index("awaiting_input") + 1] == "queued"


def test_a_free_text_answer_is_passed_on_verbatim(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = asking_run(cast, bob_api, fake_model, {"question": "Your budget?"})

    response = answer(bob_api, run_id, call_id(run_id), "  about 2 000 €\nno more  ")
    execute_run(run_id)

    assert response.status_code == 200
    assert last_tool_result(fake_model)["content"] == "  about 2 000 €\nno more  "
    assert Run.objects.get(pk=run_id).status == "completed"


def test_an_unanswered_question_expires_and_the_model_is_told(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = asking_run(cast, bob_api, fake_model)
    UserQuestion.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    report = sweep_runs()
    execute_run(run_id)

    assert (report.questions_expired, report.resumed) == (1, 1)
    question = UserQuestion.objects.get(run_id=run_id)
    assert (question.status, question.answer, question.answered_by) == ("expired", "", None)
    assert last_tool_result(fake_model)["content"] == NO_ANSWER_RESULT
    assert Run.objects.get(pk=run_id).status == "completed"
    resolved = RunEvent.objects.get(run_id=run_id, type="input.resolved").data
    assert (resolved["status"], resolved["answered_by"]) == ("expired", None)


def test_the_question_waits_as_long_as_ask_user_ttl_seconds(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, settings: Any
) -> None:
    settings.ASK_USER_TTL_SECONDS = 120
    before = timezone.now()
    run_id = asking_run(cast, bob_api, fake_model)

    question = UserQuestion.objects.get(run_id=run_id)
    assert before + timedelta(seconds=119) < question.expires_at < timezone.now() + timedelta(seconds=121)
    assert sweep_runs().questions_expired == 0


def test_cancelling_a_run_that_waits_for_an_answer_ends_it_at_once(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = asking_run(cast, bob_api, fake_model)

    response = bob_api.post(f"/api/v1/runs/{run_id}/cancel/")
    late = answer(bob_api, run_id, call_id(run_id), "Rome")

    assert response.status_code == 202
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    assert RunEvent.objects.filter(run_id=run_id, type="run.cancelled").count() == 1
    assert late.status_code == 400
    assert late.json()["error"]["fields"] == {
        "tool_call_id": ["This run is cancelled: it no longer waits for an answer."]
    }
    assert UserQuestion.objects.get(run_id=run_id).status == "pending"
    assert not RunEvent.objects.filter(run_id=run_id, type="input.resolved").exists()


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"tool_call_id": "CALL", "answer": ""}, {"answer": ["This field may not be blank."]}),
        ({"tool_call_id": "CALL", "answer": "   "}, {"answer": ["The answer is empty."]}),
        ({"tool_call_id": "CALL"}, {"answer": ["This field is required."]}),
        ({"tool_call_id": "CALL", "answer": "Oslo"}, {"answer": ["Pick one of the choices: Paris, Rome."]}),
        ({"tool_call_id": "CALL", "answer": ["Rome"]}, {"answer": ["Must be a string."]}),
        (
            {"tool_call_id": "nope", "answer": "Rome"},
            {"tool_call_id": ["No question was asked with this tool call."]},
        ),
        ({"answer": "Rome"}, {"tool_call_id": ["This field is required."]}),
    ],
    ids=["empty", "blank", "missing", "not a choice", "not a string", "unknown call", "no call"],
)
def test_bad_answers_are_400_with_a_field_message_and_change_nothing(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, body: dict[str, Any], fields: dict[str, Any]
) -> None:
    run_id = asking_run(cast, bob_api, fake_model)
    if body.get("tool_call_id") == "CALL":
        body = {**body, "tool_call_id": call_id(run_id)}

    response = bob_api.post(f"/api/v1/runs/{run_id}/answer/", body, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == fields
    assert UserQuestion.objects.get(run_id=run_id).status == "pending"
    assert Run.objects.get(pk=run_id).status == "awaiting_input"


def test_answering_twice_is_400_and_keeps_the_first_answer(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = asking_run(cast, bob_api, fake_model)

    first = answer(bob_api, run_id, call_id(run_id), "Paris")
    second = answer(bob_api, run_id, call_id(run_id), "Rome")

    assert (first.status_code, second.status_code) == (200, 400)
    assert second.json()["error"]["fields"] == {"tool_call_id": ["This question was already answered."]}
    assert UserQuestion.objects.get(run_id=run_id).answer == "Paris"
    assert RunEvent.objects.filter(run_id=run_id, type="input.resolved").count() == 1


def test_a_viewer_cannot_answer(
    cast: Cast, bob_api: APIClient, victor_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = asking_run(cast, bob_api, fake_model)

    response = answer(victor_api, run_id, call_id(run_id), "Rome")

    assert response.status_code == 403
    assert UserQuestion.objects.get(run_id=run_id).status == "pending"
    assert Run.objects.get(pk=run_id).status == "awaiting_input"


def test_another_tenant_cannot_answer_or_see_the_question(
    cast: Cast, bob_api: APIClient, carol_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = asking_run(cast, bob_api, fake_model)

    response = answer(carol_api, run_id, call_id(run_id), "Rome")
    detail = carol_api.get(f"/api/v1/runs/{run_id}/")

    assert (response.status_code, detail.status_code) == (404, 404)
    assert UserQuestion.objects.get(run_id=run_id).status == "pending"
    assert Run.objects.get(pk=run_id).status == "awaiting_input"
    assert not RunEvent.objects.filter(run_id=run_id, type="input.resolved").exists()


def test_invalid_ask_user_arguments_are_refused_without_asking(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = asking_run(cast, bob_api, fake_model, {"question": " ", "choices": ["a", "a"]})

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason) == ("completed", "end_turn")
    assert not UserQuestion.objects.exists()
    result = last_tool_result(fake_model)
    assert result["is_error"] is True
    assert "This tool call was refused: invalid arguments: " in str(result["content"])


def test_an_answer_given_before_the_run_paused_still_resumes_it(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user answers between the question's event and the run's move to awaiting_input."""
    ask = QuestionAsker._ask

    def ask_and_answer_at_once(self: QuestionAsker, call: Any) -> UserQuestion:
        question = ask(self, call)
        question_resolve(question=question, answer="Rome", answered_by=cast.bob)
        return question

    monkeypatch.setattr(QuestionAsker, "_ask", ask_and_answer_at_once)
    run_id = asking_run(cast, bob_api, fake_model)
    statuses = [
        e.data["to"] for e in RunEvent.objects.filter(run_id=run_id, type="run.status").order_by("seq")
    ]
    execute_run(run_id)

    assert statuses[-2:] == ["awaiting_input", "queued"]
    assert Run.objects.get(pk=run_id).status == "completed"
    assert last_tool_result(fake_model)["content"] == "Rome"
