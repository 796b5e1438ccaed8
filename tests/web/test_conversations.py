"""Conversations: searched by title and message text, renamed, and a new chat that starts with
the agent last used; over the API and in the chat's sidebar."""

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from sessions.models import Message, MessageRole, Session
from tests.conftest import api_client_for
from tests.factories import field_values, last_placed_message_id, make_agent
from tests.web.conftest import World, finished_conversation

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]


def listed_titles(api: APIClient, query: str) -> list[str]:
    response = api.get("/api/v1/sessions/", {"q": query})
    assert response.status_code == 200
    return sorted(session["title"] for session in response.json()["results"])


@pytest.fixture
def conversations(world: World) -> World:
    """Tenant A: "Bob's sums" (2+2) and a garden chat whose answer talks of tomatoes; tenant B:
    carol's chats, one titled and one answered with the same words."""
    garden = Session.objects.create(
        tenant=world.cast.tenant_a, agent=world.agent_a, created_by=world.cast.alice, title="Garden plans"
    )
    finished_conversation(garden, question="What grows in shade?", answer="Lettuce, and TOMATOES need sun.")
    tomatoes = Session.objects.create(
        tenant=world.cast.tenant_b, agent=world.agent_b, created_by=world.cast.carol, title="Tomato notes"
    )
    finished_conversation(tomatoes, question="Plans?", answer="Garden plans with tomatoes.")
    return world


@pytest.mark.parametrize(
    ("query", "titles"),
    [
        ("tomatoes", ["Garden plans"]),  # only in an assistant's answer, in another case
        ("grows in SHADE", ["Garden plans"]),  # only in a user's message
        ("garden", ["Garden plans"]),  # in the title (and in carol's answer, which stays hers)
        ("2+2", ["Bob's sums"]),
        ("sums", ["Bob's sums"]),
        ("  ", ["Bob's sums", "Garden plans"]),  # blank: no filter
        ("type", []),  # the content's JSON keys are not its text
        ("Carol", []),
    ],
)
def test_api_search_matches_titles_and_message_text_in_the_tenant_only(
    conversations: World, query: str, titles: list[str]
) -> None:
    alice_api = api_client_for(conversations.cast.tenant_a, conversations.cast.alice)

    assert listed_titles(alice_api, query) == titles


def test_api_search_of_carol_never_lists_tenant_a(conversations: World) -> None:
    carol_api = api_client_for(conversations.cast.tenant_b, conversations.cast.carol)

    assert listed_titles(carol_api, "garden") == ["Tomato notes"]
    assert listed_titles(carol_api, "2+2") == []


def test_api_search_refuses_an_overlong_query(conversations: World) -> None:
    alice_api = api_client_for(conversations.cast.tenant_a, conversations.cast.alice)

    response = alice_api.get("/api/v1/sessions/", {"q": "x" * 201})

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "q": ["Ensure this value has at most 200 characters (it has 201)."]
    }


def test_api_rename_changes_only_the_title(world: World) -> None:
    bob_api = api_client_for(world.cast.tenant_a, world.cast.bob)
    before = field_values(world.session_a)

    response = bob_api.patch(
        f"/api/v1/sessions/{world.session_a.pk}/", {"title": "  Sums, renamed "}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["title"] == "Sums, renamed"
    assert field_values(Session.objects.get(pk=world.session_a.pk)) == {**before, "title": "Sums, renamed"}


def test_api_rename_of_another_tenants_session_is_404_and_changes_nothing(world: World) -> None:
    carol_api = api_client_for(world.cast.tenant_b, world.cast.carol)
    before = field_values(world.session_a)

    response = carol_api.patch(
        f"/api/v1/sessions/{world.session_a.pk}/", {"title": "Mine now"}, format="json"
    )

    assert response.status_code == 404
    assert field_values(Session.objects.get(pk=world.session_a.pk)) == before


def test_api_rename_by_a_viewer_or_another_member_is_403(world: World) -> None:
    victor_api = api_client_for(world.cast.tenant_a, world.cast.victor)
    own = Session.objects.create(tenant=world.cast.tenant_a, agent=world.agent_a, created_by=world.cast.alice)
    bob_api = api_client_for(world.cast.tenant_a, world.cast.bob)

    by_viewer = victor_api.patch(f"/api/v1/sessions/{world.session_a.pk}/", {"title": "V"}, format="json")
    by_other_member = bob_api.patch(f"/api/v1/sessions/{own.pk}/", {"title": "B"}, format="json")

    assert (by_viewer.status_code, by_other_member.status_code) == (403, 403)
    assert Session.objects.get(pk=world.session_a.pk).title == "Bob's sums"
    assert Session.objects.get(pk=own.pk).title == ""


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"title": ""}, "This field may not be blank."),
        ({"title": "   "}, "This field may not be blank."),
        ({"title": "x" * 10_000}, "Ensure this field has no more than 200 characters."),
        ({"title": 123}, "Must be a string."),
        ({"title": None}, "This field may not be null."),
        ({"title": ["a"]}, "Must be a string."),
    ],
)
def test_api_rename_refuses_bad_titles_with_field_messages(
    world: World, payload: dict[str, object], message: str
) -> None:
    bob_api = api_client_for(world.cast.tenant_a, world.cast.bob)
    before = field_values(world.session_a)

    response = bob_api.patch(f"/api/v1/sessions/{world.session_a.pk}/", payload, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"title": [message]}
    assert field_values(Session.objects.get(pk=world.session_a.pk)) == before


def test_api_patch_without_a_title_changes_nothing(world: World) -> None:
    bob_api = api_client_for(world.cast.tenant_a, world.cast.bob)
    before = field_values(world.session_a)

    response = bob_api.patch(f"/api/v1/sessions/{world.session_a.pk}/", {}, format="json")

    assert response.status_code == 200
    assert response.json()["title"] == "Bob's sums"
    assert field_values(Session.objects.get(pk=world.session_a.pk)) == before


def test_api_rename_refuses_unknown_fields(world: World) -> None:
    bob_api = api_client_for(world.cast.tenant_a, world.cast.bob)

    response = bob_api.patch(
        f"/api/v1/sessions/{world.session_a.pk}/",
        {"title": "Fine", "agent": str(world.agent_b.pk)},
        format="json",
    )

    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["agent"]
    assert Session.objects.get(pk=world.session_a.pk).title == "Bob's sums"


def sidebar_titles(body: str) -> list[str]:
    return re.findall(r'<span class="session-title">([^<]*)</span>', body)


@pytest.mark.parametrize(
    ("query", "titles"),
    [("tomatoes", ["Garden plans"]), ("garden", ["Garden plans"]), ("2+2", ["Bob&#x27;s sums"])],
)
def test_sidebar_search_finds_by_title_and_text_in_the_tenant_only(
    conversations: World, client_for: ClientFor, query: str, titles: list[str]
) -> None:
    response = client_for(conversations.cast.alice).get("/chat/sessions/", {"q": query})

    assert response.status_code == 200
    assert sidebar_titles(response.content.decode()) == titles


def test_sidebar_search_says_when_nothing_matches(conversations: World, client_for: ClientFor) -> None:
    body = client_for(conversations.cast.alice).get("/chat/sessions/", {"q": "Tomato notes"}).content.decode()

    assert sidebar_titles(body) == []
    assert "No conversations match “Tomato notes”." in body


def test_chat_page_keeps_the_search_in_its_box_and_list(conversations: World, client_for: ClientFor) -> None:
    body = client_for(conversations.cast.alice).get("/chat/", {"q": "shade"}).content.decode()

    assert 'name="q" value="shade"' in body
    assert sidebar_titles(body) == ["Garden plans"]
    assert "{#" not in body


def checked_agent(body: str) -> str:
    checked = re.findall(r'name="agent" value="([^"]+)" required checked', body)
    assert len(checked) == 1
    return checked[0]


def test_new_chat_starts_with_the_agent_of_the_members_latest_session(
    world: World, client_for: ClientFor
) -> None:
    # "Aardvark" sorts first, so the first agent is not the one picked.
    aardvark = make_agent(tenant=world.cast.tenant_a, name="Aardvark")
    zebra = make_agent(tenant=world.cast.tenant_a, name="Zebra")
    Session.objects.create(tenant=world.cast.tenant_a, agent=zebra, created_by=world.cast.bob)
    # Alice's later session with another agent is hers, not bob's.
    Session.objects.create(tenant=world.cast.tenant_a, agent=aardvark, created_by=world.cast.alice)

    assert checked_agent(client_for(world.cast.bob).get("/chat/").content.decode()) == str(zebra.pk)
    assert checked_agent(client_for(world.cast.alice).get("/chat/").content.decode()) == str(aardvark.pk)


def test_new_chat_falls_back_to_the_first_active_agent(world: World, client_for: ClientFor) -> None:
    aardvark = make_agent(tenant=world.cast.tenant_a, name="Aardvark")
    world.agent_a.is_active = False
    world.agent_a.save(update_fields=["is_active"])

    body = client_for(world.cast.bob).get("/chat/").content.decode()

    assert checked_agent(body) == str(aardvark.pk)


def test_new_chat_with_an_agent_filter_starts_with_that_agent(world: World, client_for: ClientFor) -> None:
    zebra = make_agent(tenant=world.cast.tenant_a, name="Zebra")

    body = client_for(world.cast.bob).get("/chat/", {"agent": str(zebra.pk)}).content.decode()

    assert checked_agent(body) == str(zebra.pk)


def test_message_text_search_ignores_tool_results(world: World) -> None:
    Message.objects.create(
        tenant=world.cast.tenant_a,
        session=world.session_a,
        parent_id=last_placed_message_id(world.session_a),
        position=9,
        role=MessageRole.TOOL,
        content=[{"type": "text", "text": "secret-tool-output"}],
    )
    alice_api = api_client_for(world.cast.tenant_a, world.cast.alice)

    assert listed_titles(alice_api, "secret-tool-output") == []
