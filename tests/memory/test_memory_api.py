"""The memories API: list and search, create, edit, review, delete, extraction on demand."""

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from agents.models import Agent
from memory.models import Memory, MemorySource, MemoryStatus
from memory.tasks import extract_memories_task
from tests.conftest import Cast
from tests.factories import make_agent
from tests.memory.factories import make_memory, make_session

# Until config/urls.py routes the memory endpoints (then this module adds nothing).


def _url(agent: Agent) -> str:
    return f"/api/v1/agents/{agent.pk}/memories/"


def _snapshot() -> list[Any]:
    return list(Memory.objects.order_by("pk").values())


def test_admins_add_memories_and_everyone_in_the_tenant_reads_them(
    cast: Cast, agent: Agent, alice_api: APIClient, victor_api: APIClient
) -> None:
    response = alice_api.post(
        _url(agent),
        {
            "content": " The user prefers tea. ",
            "type": "preference",
            "importance": 0.8,
            "subject_user": cast.bob.pk,
        },
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    memory = Memory.objects.get(pk=body["id"])
    assert {key: body[key] for key in ("agent", "type", "content", "importance", "source", "status")} == {
        "agent": str(agent.pk),
        "type": "preference",
        "content": "The user prefers tea.",
        "importance": 0.8,
        "source": MemorySource.MANUAL,
        "status": MemoryStatus.ACTIVE,
    }
    assert (body["subject_user"], body["subject_user_email"], body["created_by"], body["score"]) == (
        cast.bob.pk,
        "bob@a.test",
        "alice@a.test",
        None,
    )
    assert (memory.tenant_id, memory.created_by_id) == (cast.tenant_a.pk, cast.alice.pk)

    listed = victor_api.get(_url(agent)).json()
    assert (listed["count"], [item["id"] for item in listed["results"]]) == (1, [str(memory.pk)])
    assert victor_api.get(f"/api/v1/memories/{memory.pk}/").json()["content"] == "The user prefers tea."


@pytest.mark.parametrize(
    ("payload", "fields"),
    [
        ({"content": ""}, ["content"]),
        ({"content": "x" * 4001}, ["content"]),
        ({"content": "ok", "importance": 1.5}, ["importance"]),
        ({"content": "ok", "importance": "high"}, ["importance"]),
        ({"content": "ok", "type": "rumour"}, ["type"]),
        ({"content": "ok", "embedding": [1, 2]}, ["embedding"]),
    ],
)
def test_invalid_memories_are_refused_with_field_errors(
    agent: Agent, alice_api: APIClient, payload: dict[str, Any], fields: list[str]
) -> None:
    response = alice_api.post(_url(agent), payload, format="json")
    assert response.status_code == 400
    assert sorted(response.json()["error"]["fields"]) == fields
    assert Memory.objects.count() == 0


def test_the_subject_must_be_a_member_of_the_tenant(cast: Cast, agent: Agent, alice_api: APIClient) -> None:
    response = alice_api.post(
        _url(agent), {"content": "About carol", "subject_user": cast.carol.pk}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"subject_user": ["Not a member of this workspace."]}


def test_members_and_viewers_cannot_change_memories(
    agent: Agent, bob_api: APIClient, victor_api: APIClient
) -> None:
    memory = make_memory(agent=agent, content="The user likes jazz.", status=MemoryStatus.SUGGESTED)
    before = _snapshot()
    for client in (bob_api, victor_api):
        assert client.post(_url(agent), {"content": "New"}, format="json").status_code == 403
        assert (
            client.patch(f"/api/v1/memories/{memory.pk}/", {"content": "X"}, format="json").status_code == 403
        )
        assert client.post(f"/api/v1/memories/{memory.pk}/approve/", {}, format="json").status_code == 403
        assert client.post(f"/api/v1/memories/{memory.pk}/reject/").status_code == 403
        assert client.delete(f"/api/v1/memories/{memory.pk}/").status_code == 403
    assert _snapshot() == before


def test_another_tenant_gets_404_everywhere_and_nothing_changes(
    cast: Cast, agent: Agent, carol_api: APIClient
) -> None:
    memory = make_memory(agent=agent, content="The user likes jazz.", status=MemoryStatus.SUGGESTED)
    session = make_session(agent=agent, user=cast.bob)
    before = _snapshot()
    responses = [
        carol_api.get(_url(agent)),
        carol_api.get(_url(agent) + "?q=jazz"),
        carol_api.post(_url(agent), {"content": "Injected"}, format="json"),
        carol_api.get(f"/api/v1/memories/{memory.pk}/"),
        carol_api.patch(f"/api/v1/memories/{memory.pk}/", {"content": "Changed"}, format="json"),
        carol_api.post(f"/api/v1/memories/{memory.pk}/approve/", {}, format="json"),
        carol_api.post(f"/api/v1/memories/{memory.pk}/reject/"),
        carol_api.delete(f"/api/v1/memories/{memory.pk}/"),
        carol_api.post(f"/api/v1/sessions/{session.pk}/extract-memories/", {}, format="json"),
    ]
    assert [response.status_code for response in responses] == [404] * len(responses)
    assert _snapshot() == before


def test_list_filters_and_search_in_retrieval_order(cast: Cast, agent: Agent, alice_api: APIClient) -> None:
    jazz = make_memory(agent=agent, content="The user likes jazz and blues.", importance=0.9)
    blues = make_memory(agent=agent, content="The user likes blues.", importance=0.2)
    suggested = make_memory(
        agent=agent, content="Jazz piano lessons on Fridays.", status=MemoryStatus.SUGGESTED
    )
    about_bob = make_memory(
        agent=agent, content="Bob plays jazz guitar.", subject_user=cast.bob, type="episode"
    )
    make_memory(agent=make_agent(tenant=cast.tenant_a), content="Other agent likes jazz.")

    def ids(query: str) -> list[str]:
        response = alice_api.get(_url(agent) + query)
        assert response.status_code == 200, response.json()
        return [item["id"] for item in response.json()["results"]]

    assert sorted(ids("")) == sorted(str(m.pk) for m in (jazz, blues, suggested, about_bob))
    assert ids("?status=suggested") == [str(suggested.pk)]
    assert ids("?type=episode") == [str(about_bob.pk)]
    assert ids(f"?subject_user={cast.bob.pk}") == [str(about_bob.pk)]
    assert set(ids("?q=blues")) == {str(blues.pk), str(jazz.pk)}
    assert set(ids("?q=jazz")) == {str(jazz.pk), str(suggested.pk), str(about_bob.pk)}
    assert ids("?q=jazz&status=active&type=fact") == [str(jazz.pk)]
    assert ids(f"?q=jazz&subject_user={cast.bob.pk}") == [str(about_bob.pk)]
    scored = alice_api.get(_url(agent) + "?q=jazz&status=active").json()["results"]
    assert [item["score"] > 0 for item in scored] == [True, True]
    assert alice_api.get(_url(agent) + "?status=forgotten").status_code == 400


def test_search_ranks_by_relevance_importance_and_recency(agent: Agent, alice_api: APIClient) -> None:
    make_memory(agent=agent, content="The user drinks green tea at noon.", importance=0.2)
    make_memory(agent=agent, content="The user drinks green tea at dusk.", importance=0.9)
    results = alice_api.get(_url(agent) + "?q=green+tea").json()["results"]
    assert [item["content"] for item in results] == [
        "The user drinks green tea at dusk.",
        "The user drinks green tea at noon.",
    ]
    assert results[0]["score"] > results[1]["score"]


def test_list_takes_a_constant_number_of_queries(cast: Cast, agent: Agent, alice_api: APIClient) -> None:
    def count(path: str) -> int:
        with CaptureQueriesContext(connection) as queries:
            assert alice_api.get(path).status_code == 200
        return len(queries)

    make_memory(agent=agent, content="Jazz one.", subject_user=cast.bob, reviewed_by=cast.alice)
    count(_url(agent))  # the first request also records the API key's use
    one, one_search = count(_url(agent)), count(_url(agent) + "?q=jazz")
    for index in range(6):
        make_memory(agent=agent, content=f"Jazz {index}.", subject_user=cast.bob, reviewed_by=cast.alice)
    assert (count(_url(agent)), count(_url(agent) + "?q=jazz")) == (one, one_search)


def test_edit_archive_and_restore(agent: Agent, alice_api: APIClient) -> None:
    memory = make_memory(agent=agent, content="The user likes jazz.")
    url = f"/api/v1/memories/{memory.pk}/"

    response = alice_api.patch(url, {"content": "The user likes bebop.", "importance": 0.9}, format="json")
    assert (response.status_code, response.json()["content"], response.json()["importance"]) == (
        200,
        "The user likes bebop.",
        0.9,
    )
    assert [item["id"] for item in alice_api.get(_url(agent) + "?q=bebop").json()["results"]] == [
        str(memory.pk)
    ]
    assert alice_api.get(_url(agent) + "?q=jazz").json()["results"] == []

    assert alice_api.patch(url, {"status": "archived"}, format="json").json()["status"] == "archived"
    assert alice_api.patch(url, {"status": "active"}, format="json").json()["status"] == "active"
    refused = alice_api.patch(url, {"status": "suggested"}, format="json")
    assert (refused.status_code, list(refused.json()["error"]["fields"])) == (400, ["status"])


def test_approve_with_edits_and_reject(cast: Cast, agent: Agent, alice_api: APIClient) -> None:
    first = make_memory(agent=agent, content="The usr likes jaz.", status=MemoryStatus.SUGGESTED)
    second = make_memory(agent=agent, content="The user hates Mondays.", status=MemoryStatus.SUGGESTED)

    approved = alice_api.post(
        f"/api/v1/memories/{first.pk}/approve/",
        {"content": "The user likes jazz.", "importance": 0.7},
        format="json",
    ).json()
    assert (approved["status"], approved["content"], approved["importance"], approved["reviewed_by"]) == (
        "active",
        "The user likes jazz.",
        0.7,
        "alice@a.test",
    )
    rejected = alice_api.post(f"/api/v1/memories/{second.pk}/reject/").json()
    assert (rejected["status"], rejected["reviewed_by"]) == ("rejected", "alice@a.test")

    again = alice_api.post(f"/api/v1/memories/{first.pk}/approve/", {}, format="json")
    assert (again.status_code, again.json()["error"]["fields"]) == (
        400,
        {"status": ["This memory is active; only suggested or rejected ones can be."]},
    )
    assert alice_api.post(f"/api/v1/memories/{first.pk}/reject/").status_code == 400
    # A rejected suggestion can still be approved on second thought.
    assert (
        alice_api.post(f"/api/v1/memories/{second.pk}/approve/", {}, format="json").json()["status"]
        == "active"
    )


def test_delete_removes_the_memory_and_its_index_entry(agent: Agent, alice_api: APIClient) -> None:
    memory = make_memory(agent=agent, content="The user likes jazz.")
    assert alice_api.delete(f"/api/v1/memories/{memory.pk}/").status_code == 204
    assert not Memory.objects.filter(pk=memory.pk).exists()
    assert alice_api.get(_url(agent) + "?q=jazz").json()["results"] == []


def test_extraction_on_demand_is_queued_after_commit(
    cast: Cast,
    agent: Agent,
    bob_api: APIClient,
    alice_api: APIClient,
    victor_api: APIClient,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    queued: list[tuple[Any, ...]] = []
    monkeypatch.setattr("memory.tasks.enqueue_task", lambda *args, **kwargs: queued.append(args))
    bobs = make_session(agent=agent, user=cast.bob, messages=(("user", "My name is Bob."),))
    alices = make_session(agent=agent, user=cast.alice)

    with django_capture_on_commit_callbacks(execute=True):
        response = bob_api.post(f"/api/v1/sessions/{bobs.pk}/extract-memories/", {}, format="json")
    assert (response.status_code, response.json()) == (202, {"session": str(bobs.pk), "status": "queued"})
    assert queued == [(extract_memories_task, str(bobs.pk))]

    assert bob_api.post(f"/api/v1/sessions/{alices.pk}/extract-memories/").status_code == 403
    assert victor_api.post(f"/api/v1/sessions/{bobs.pk}/extract-memories/").status_code == 403
    assert (
        alice_api.post(f"/api/v1/sessions/{bobs.pk}/extract-memories/", {"x": 1}, format="json").status_code
        == 400
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert alice_api.post(f"/api/v1/sessions/{bobs.pk}/extract-memories/").status_code == 202
    assert len(queued) == 2

    assert extract_memories_task(str(bobs.pk)) == 1
    assert list(Memory.objects.values_list("content", "status")) == [("The user's name is Bob.", "suggested")]
