"""Conversation branches through the API: regenerate, edit and resend, switching, the model's context."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.runtime.compaction import SUMMARY_HEADER
from sessions.branches import message_branch_info
from sessions.models import CompactionSnapshot, Message, Run, RunEvent, Session
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, RecordedRequest, Turn
from tests.test_runs_api import start_session

pytestmark = pytest.mark.django_db


@pytest.fixture
def session_id(cast: Cast, bob_api: APIClient, fake_model: FakeModelServer) -> str:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="claude-test")
    return start_session(bob_api, agent.pk)


def post(api: APIClient, session_id: str, content: str, **extra: Any) -> Any:
    return api.post(f"/api/v1/sessions/{session_id}/messages/", {"content": content, **extra}, format="json")


def ask(
    api: APIClient, fake: FakeModelServer, session_id: str, content: str, answer: str, **extra: Any
) -> Any:
    """Post a message and run it to its scripted answer; the post's 202 body."""
    response = post(api, session_id, content, **extra)
    assert response.status_code == 202, response.content
    fake.script(Turn(text=answer))
    execute_run(response.json()["run"]["id"])
    return response.json()


def regenerate(api: APIClient, fake: FakeModelServer, run_id: str, answer: str) -> Any:
    response = api.post(f"/api/v1/runs/{run_id}/regenerate/")
    assert response.status_code == 202, response.content
    fake.script(Turn(text=answer))
    execute_run(response.json()["run"]["id"])
    return response.json()


def shown(api: APIClient, session_id: str, **params: str) -> list[dict[str, Any]]:
    response = api.get(f"/api/v1/sessions/{session_id}/messages/", params)
    assert response.status_code == 200, response.content
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [message["text"] for message in messages]


def sent(request: RecordedRequest) -> list[tuple[str, str]]:
    """The conversation a model request carried: (role, text) of each message."""
    return [
        (message["role"], "".join(block.get("text", "") for block in message["content"]))
        for message in request.body["messages"]
    ]


def first_message_of(run_id: str) -> str:
    return str(
        Message.objects.filter(run_id=run_id, role="assistant")
        .order_by("position")
        .values_list("id", flat=True)[0]
    )


def state() -> tuple[int, int, int, list[Any]]:
    return (
        Message.objects.count(),
        Run.objects.count(),
        RunEvent.objects.count(),
        list(Session.objects.order_by("pk").values_list("shown_message_id", flat=True)),
    )


def test_messages_name_their_parent_and_siblings(
    bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    ask(bob_api, fake_model, session_id, "Q1", "A1")
    ask(bob_api, fake_model, session_id, "Q2", "A2")

    messages = shown(bob_api, session_id)

    assert texts(messages) == ["Q1", "A1", "Q2", "A2"]
    assert [message["parent_id"] for message in messages] == [
        None,
        *(message["id"] for message in messages[:3]),
    ]
    assert [(m["branch_index"], m["branch_count"], m["sibling_ids"]) for m in messages] == [
        (1, 1, [m["id"]]) for m in messages
    ]


def test_regenerate_answers_the_same_message_again_as_a_sibling_shown_from_then_on(
    bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    ask(bob_api, fake_model, session_id, "Q1", "A1")
    first = ask(bob_api, fake_model, session_id, "Q2", "A2")

    body = regenerate(bob_api, fake_model, first["run"]["id"], "A2 again")

    assert body["message"]["id"] == first["message"]["id"]
    assert body["run"]["status"] == "queued"
    assert sent(fake_model.requests[-1]) == [("user", "Q1"), ("assistant", "A1"), ("user", "Q2")]
    messages = shown(bob_api, session_id)
    assert texts(messages) == ["Q1", "A1", "Q2", "A2 again"]
    old_answer = first_message_of(first["run"]["id"])
    new_answer = messages[3]
    assert (new_answer["branch_index"], new_answer["branch_count"]) == (2, 2)
    assert new_answer["sibling_ids"] == [old_answer, new_answer["id"]]
    assert new_answer["parent_id"] == first["message"]["id"]
    older = shown(bob_api, session_id, leaf=old_answer)
    assert texts(older) == ["Q1", "A1", "Q2", "A2"]
    assert (older[3]["branch_index"], older[3]["branch_count"]) == (1, 2)


def test_edit_and_resend_forks_at_the_message_and_the_model_sees_only_its_branch(
    bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    ask(bob_api, fake_model, session_id, "Q1", "A1")
    second = ask(bob_api, fake_model, session_id, "Q2", "A2")
    ask(bob_api, fake_model, session_id, "Q3", "A3")
    a1 = shown(bob_api, session_id)[1]["id"]

    edited = ask(bob_api, fake_model, session_id, "Q2 edited", "A2 edited", parent_id=a1)

    assert sent(fake_model.requests[-1]) == [("user", "Q1"), ("assistant", "A1"), ("user", "Q2 edited")]
    messages = shown(bob_api, session_id)
    assert texts(messages) == ["Q1", "A1", "Q2 edited", "A2 edited"]
    assert messages[2]["sibling_ids"] == [second["message"]["id"], edited["message"]["id"]]
    assert (messages[2]["branch_index"], messages[2]["branch_count"]) == (2, 2)
    assert texts(shown(bob_api, session_id, leaf=second["message"]["id"])) == [
        "Q1",
        "A1",
        "Q2",
        "A2",
        "Q3",
        "A3",
    ]


def test_the_shown_branch_persists_and_new_messages_post_on_it(
    bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    ask(bob_api, fake_model, session_id, "Q1", "A1")
    second = ask(bob_api, fake_model, session_id, "Q2", "A2")
    a1 = shown(bob_api, session_id)[1]["id"]
    ask(bob_api, fake_model, session_id, "Q2 edited", "A2 edited", parent_id=a1)

    response = bob_api.post(
        f"/api/v1/sessions/{session_id}/branch/", {"message_id": second["message"]["id"]}, format="json"
    )

    assert response.status_code == 200
    assert texts(response.json()["results"]) == ["Q1", "A1", "Q2", "A2"]
    assert str(Session.objects.get(pk=session_id).shown_message_id) == second["message"]["id"]
    assert texts(shown(bob_api, session_id)) == ["Q1", "A1", "Q2", "A2"]
    ask(bob_api, fake_model, session_id, "Q3", "A3")
    assert sent(fake_model.requests[-1]) == [
        ("user", "Q1"),
        ("assistant", "A1"),
        ("user", "Q2"),
        ("assistant", "A2"),
        ("user", "Q3"),
    ]
    assert texts(shown(bob_api, session_id)) == ["Q1", "A1", "Q2", "A2", "Q3", "A3"]


def test_editing_the_first_message_starts_a_new_conversation_branch(
    bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    first = ask(bob_api, fake_model, session_id, "Q1", "A1")

    edited = ask(bob_api, fake_model, session_id, "Q1 edited", "A1 edited", parent_id=None)

    assert sent(fake_model.requests[-1]) == [("user", "Q1 edited")]
    messages = shown(bob_api, session_id)
    assert texts(messages) == ["Q1 edited", "A1 edited"]
    assert messages[0]["sibling_ids"] == [first["message"]["id"], edited["message"]["id"]]
    assert messages[0]["parent_id"] is None


def test_a_message_posted_while_the_answer_is_coming_follows_the_whole_answer(
    bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    first = post(bob_api, session_id, "Q1").json()
    second = post(bob_api, session_id, "Q2").json()
    assert texts(shown(bob_api, session_id)) == ["Q1", "Q2"]
    fake_model.script(
        Turn(tool_calls=[("calculator", {"expression": "6*7"})]), Turn(text="A1 is 42"), Turn(text="A2")
    )

    execute_run(first["run"]["id"])
    execute_run(second["run"]["id"])

    assert sent(fake_model.requests[-1])[-2:] == [("assistant", "A1 is 42"), ("user", "Q2")]
    messages = shown(bob_api, session_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert messages[4]["parent_id"] == messages[3]["id"]
    assert [m["branch_count"] for m in messages] == [1] * 6
    # Each run's start names its message as placed: the chat offers Edit from it, with this parent.
    started = RunEvent.objects.filter(type="run.started", session_id=session_id).order_by("seq")
    assert [(event.data["message_id"], event.data["message_parent_id"]) for event in started] == [
        (first["message"]["id"], None),
        (second["message"]["id"], messages[3]["id"]),
    ]


def test_a_summary_applies_to_the_branches_that_share_what_it_summarized(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    first = ask(bob_api, fake_model, session_id, "Q1", "A1")
    ask(bob_api, fake_model, session_id, "Q2", "A2")
    a1 = Message.objects.get(run_id=first["run"]["id"], role="assistant")
    CompactionSnapshot.objects.create(
        tenant=cast.tenant_a,
        session_id=session_id,
        reason="manual",
        summary="They said hello.",
        replaces_up_to_position=a1.position,
        tokens_before=100,
        tokens_after=10,
        messages_before=2,
        messages_after=1,
    )

    ask(bob_api, fake_model, session_id, "Q2 edited", "A2 edited", parent_id=str(a1.pk))
    on_shared_prefix = sent(fake_model.requests[-1])
    ask(bob_api, fake_model, session_id, "Q1 edited", "A1 edited", parent_id=None)
    diverged_before = sent(fake_model.requests[-1])

    assert on_shared_prefix == [("user", f"{SUMMARY_HEADER}\nThey said hello.Q2 edited")]
    assert diverged_before == [("user", "Q1 edited")]


@pytest.mark.parametrize(
    ("parent", "message"),
    [
        ("00000000-0000-0000-0000-000000000000", "No such message in this conversation."),
        ("other session", "No such message in this conversation."),
        ("other tenant", "No such message in this conversation."),
        ("answered question", "An answer follows this message: post after the answer."),
        ("queued", "This message's turn is still being answered."),
    ],
)
def test_a_post_on_a_parent_it_cannot_follow_is_400_and_changes_nothing(
    cast: Cast,
    bob_api: APIClient,
    carol_api: APIClient,
    fake_model: FakeModelServer,
    session_id: str,
    parent: str,
    message: str,
) -> None:
    first = ask(bob_api, fake_model, session_id, "Q1", "A1")
    other_session = start_session(bob_api, make_agent(tenant=cast.tenant_a).pk)
    elsewhere = post(bob_api, other_session, "elsewhere").json()["message"]["id"]
    carol_session = start_session(carol_api, make_agent(tenant=cast.tenant_b).pk)
    carols = post(carol_api, carol_session, "carol's").json()["message"]["id"]
    queued = post(bob_api, session_id, "Q2").json()["message"]["id"]
    parent_id = {
        "other session": elsewhere,
        "other tenant": carols,
        "answered question": first["message"]["id"],
        "queued": queued,
    }.get(parent, parent)
    before = state()

    response = post(bob_api, session_id, "edited", parent_id=parent_id)

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"parent_id": [message]}
    assert state() == before


def test_a_parent_id_that_is_no_uuid_is_400(bob_api: APIClient, session_id: str) -> None:
    response = post(bob_api, session_id, "edited", parent_id="nope")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"parent_id": ["Must be a valid UUID."]}
    assert Message.objects.count() == 0


def test_regenerating_while_the_message_is_still_answered_is_409_and_changes_nothing(
    bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    queued = post(bob_api, session_id, "Q1").json()
    before = state()

    response = bob_api.post(f"/api/v1/runs/{queued['run']['id']}/regenerate/")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "run_active"
    assert response.json()["error"]["fields"] == {"run": [queued["run"]["id"]]}
    assert state() == before


def test_regenerating_twice_while_the_first_regenerate_waits_is_409(
    bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    first = ask(bob_api, fake_model, session_id, "Q1", "A1")
    again = bob_api.post(f"/api/v1/runs/{first['run']['id']}/regenerate/").json()
    before = state()

    response = bob_api.post(f"/api/v1/runs/{first['run']['id']}/regenerate/")

    assert response.status_code == 409
    assert response.json()["error"]["fields"] == {"run": [again["run"]["id"]]}
    assert state() == before


@pytest.mark.parametrize("leaf", ["nope", "00000000-0000-0000-0000-000000000000"])
def test_listing_another_branch_of_an_unknown_message_is_400(
    bob_api: APIClient, session_id: str, leaf: str
) -> None:
    response = bob_api.get(f"/api/v1/sessions/{session_id}/messages/", {"leaf": leaf})

    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["leaf"]


def test_showing_a_branch_of_a_message_of_another_session_is_400_and_changes_nothing(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    ask(bob_api, fake_model, session_id, "Q1", "A1")
    other_session = start_session(bob_api, make_agent(tenant=cast.tenant_a).pk)
    elsewhere = post(bob_api, other_session, "elsewhere").json()["message"]["id"]
    before = state()

    response = bob_api.post(
        f"/api/v1/sessions/{session_id}/branch/", {"message_id": elsewhere}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"message_id": ["No such message in this conversation."]}
    assert state() == before


@pytest.mark.parametrize(
    ("method", "path", "payload"),
    [
        ("post", "/api/v1/runs/{run}/regenerate/", None),
        ("post", "/api/v1/sessions/{session}/branch/", {"message_id": "{message}"}),
        ("get", "/api/v1/sessions/{session}/messages/?leaf={message}", None),
    ],
)
def test_another_tenants_branches_are_404_and_unchanged(
    bob_api: APIClient,
    carol_api: APIClient,
    fake_model: FakeModelServer,
    session_id: str,
    method: str,
    path: str,
    payload: dict[str, str] | None,
) -> None:
    first = ask(bob_api, fake_model, session_id, "Q1", "A1")
    ids = {"run": first["run"]["id"], "session": session_id, "message": first["message"]["id"]}
    body = {key: value.format(**ids) for key, value in payload.items()} if payload else None
    before = state()

    response = getattr(carol_api, method)(path.format(**ids), body, format="json")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert state() == before


def test_an_edit_is_a_sibling_in_its_posts_answer_already(
    bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    first = ask(bob_api, fake_model, session_id, "Q1", "A1")

    response = post(bob_api, session_id, "Q1 edited", parent_id=None)

    message = response.json()["message"]
    assert (message["is_queued"], message["parent_id"], message["branch_index"], message["branch_count"]) == (
        True,
        None,
        2,
        2,
    )
    assert message["sibling_ids"] == [first["message"]["id"], message["id"]]


def test_a_viewer_cannot_regenerate_or_switch_branches(
    cast: Cast, bob_api: APIClient, victor_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    first = ask(bob_api, fake_model, session_id, "Q1", "A1")
    before = state()

    regenerated = victor_api.post(f"/api/v1/runs/{first['run']['id']}/regenerate/")
    switched = victor_api.post(
        f"/api/v1/sessions/{session_id}/branch/", {"message_id": first["message"]["id"]}, format="json"
    )

    assert (regenerated.status_code, switched.status_code) == (403, 403)
    assert state() == before
    assert texts(shown(victor_api, session_id)) == ["Q1", "A1"]


def test_an_executors_run_is_not_regenerated(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    first = ask(bob_api, fake_model, session_id, "Q1", "A1")
    parent = Run.objects.get(pk=first["run"]["id"])
    prompt = Message.objects.create(tenant=cast.tenant_a, session_id=session_id, role="user", content=[])
    executor = Run.objects.create(
        tenant=cast.tenant_a,
        session_id=session_id,
        agent=parent.agent,
        user_message=prompt,
        parent_run=parent,
        status="completed",
    )
    before = state()

    response = bob_api.post(f"/api/v1/runs/{executor.pk}/regenerate/")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "run": ["Only an answer in the conversation can be regenerated."]
    }
    assert state() == before


def test_a_posts_answer_places_its_message_as_a_fresh_read_of_the_tree_does(
    bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    """The post reads the conversation's tree once and places its message on it
    (``PostParent.branch_of``): the same branch info as reading the tree after the post."""

    def placed_as_read_again(body: dict[str, Any]) -> None:
        info = message_branch_info(Message.objects.get(pk=body["message"]["id"]))
        assert (
            body["message"]["parent_id"],
            body["message"]["branch_index"],
            body["message"]["branch_count"],
            body["message"]["sibling_ids"],
        ) == (
            str(info.parent_id) if info.parent_id else None,
            info.branch_index,
            info.branch_count,
            [str(sibling) for sibling in info.sibling_ids],
        )

    first = ask(bob_api, fake_model, session_id, "first", "one")
    placed_as_read_again(first)
    second = ask(bob_api, fake_model, session_id, "second", "two")
    placed_as_read_again(second)
    edit_of_first = post(bob_api, session_id, "first, edited", parent_id=None).json()
    placed_as_read_again(edit_of_first)
    assert edit_of_first["message"]["branch_count"] == 2
    queued_behind = post(bob_api, session_id, "while it waits").json()
    placed_as_read_again(queued_behind)
    fake_model.script(Turn(text="edited one"), Turn(text="waited"))
    execute_run(edit_of_first["run"]["id"])
    execute_run(queued_behind["run"]["id"])
    edit_of_second = post(
        bob_api, session_id, "second, edited", parent_id=second["message"]["parent_id"]
    ).json()
    placed_as_read_again(edit_of_second)
    assert edit_of_second["message"]["branch_count"] == 2
