import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from agents.models import Agent
from tests.conftest import Cast, api_client_for
from tests.factories import make_agent

pytestmark = pytest.mark.django_db

VALID_AGENT = {"name": "Researcher", "model_provider": "anthropic", "temperature": 0.5, "max_steps": 10}


def agent_snapshot(agent_id: object) -> dict[str, object]:
    return dict(Agent.objects.filter(pk=str(agent_id)).values().get())


def test_create_agent_returns_201_and_stores_it(cast: Cast, alice_api: APIClient) -> None:
    response = alice_api.post("/api/v1/agents/", VALID_AGENT, format="json")

    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "Researcher"
    assert body["model_provider"] == "anthropic"
    assert body["model_label"] == "anthropic:claude-sonnet-5"
    assert body["created_by"] == "alice@a.test"
    agent = Agent.objects.get(pk=body["id"])
    assert agent.tenant == cast.tenant_a
    assert agent.max_steps == 10
    assert (body["planning_mode"], agent.planning_mode) == ("auto", "auto")


def test_offline_agent_is_labelled_as_a_demo_model(alice_api: APIClient) -> None:
    response = alice_api.post("/api/v1/agents/", {"name": "Demo", "model_provider": "offline"}, format="json")

    assert response.json()["model_label"] == "offline-demo (local demo model, not an LLM)"


def test_each_tenant_lists_only_its_own_agents(
    cast: Cast, alice_api: APIClient, carol_api: APIClient
) -> None:
    make_agent(tenant=cast.tenant_a, name="A1")
    make_agent(tenant=cast.tenant_a, name="A2")
    make_agent(tenant=cast.tenant_b, name="B1")

    names_a = [agent["name"] for agent in alice_api.get("/api/v1/agents/").json()["results"]]
    names_b = [agent["name"] for agent in carol_api.get("/api/v1/agents/").json()["results"]]

    assert names_a == ["A1", "A2"]
    assert names_b == ["B1"]


def test_list_is_paginated_with_next_link(cast: Cast, alice_api: APIClient) -> None:
    for number in range(3):
        make_agent(tenant=cast.tenant_a, name=f"agent-{number}")

    body = alice_api.get("/api/v1/agents/?page_size=2").json()

    assert body["count"] == 3
    assert [agent["name"] for agent in body["results"]] == ["agent-0", "agent-1"]
    assert body["next"].endswith("/api/v1/agents/?page=2&page_size=2")


def test_list_filters_and_searches(cast: Cast, alice_api: APIClient) -> None:
    make_agent(tenant=cast.tenant_a, name="Writer", model_provider="openai", description="drafts posts")
    make_agent(tenant=cast.tenant_a, name="Coder", model_provider="anthropic", description="writes code")

    by_provider = alice_api.get("/api/v1/agents/?model_provider=openai").json()["results"]
    by_search = alice_api.get("/api/v1/agents/?search=code").json()["results"]

    assert [agent["name"] for agent in by_provider] == ["Writer"]
    assert [agent["name"] for agent in by_search] == ["Coder"]


def test_list_uses_a_constant_number_of_queries(cast: Cast, alice_api: APIClient) -> None:
    make_agent(tenant=cast.tenant_a, created_by=cast.alice)
    alice_api.get("/api/v1/agents/")  # the first use of a key records last_used_at
    with CaptureQueriesContext(connection) as one_agent:
        alice_api.get("/api/v1/agents/")
    for _ in range(5):
        make_agent(tenant=cast.tenant_a, created_by=cast.alice)
    with CaptureQueriesContext(connection) as six_agents:
        alice_api.get("/api/v1/agents/")

    assert len(six_agents) == len(one_agent)


@pytest.mark.parametrize(
    ("method", "payload"),
    [("get", None), ("patch", {"name": "stolen"}), ("put", VALID_AGENT), ("delete", None)],
)
def test_another_tenants_agent_is_not_found_and_unchanged(
    cast: Cast, carol_api: APIClient, method: str, payload: dict[str, object] | None
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Private")
    before = agent_snapshot(agent.pk)

    response = getattr(carol_api, method)(f"/api/v1/agents/{agent.pk}/", payload, format="json")

    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "Not found.", "fields": {}}}
    assert agent_snapshot(agent.pk) == before


def test_unknown_and_malformed_ids_are_not_found(alice_api: APIClient) -> None:
    assert alice_api.get("/api/v1/agents/00000000-0000-0000-0000-000000000000/").status_code == 404
    assert alice_api.get("/api/v1/agents/not-a-uuid/").status_code == 404


def test_viewer_reads_but_cannot_write(cast: Cast, victor_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Existing")

    assert victor_api.get("/api/v1/agents/").status_code == 200
    create = victor_api.post("/api/v1/agents/", VALID_AGENT, format="json")
    update = victor_api.patch(f"/api/v1/agents/{agent.pk}/", {"name": "x"}, format="json")
    delete = victor_api.delete(f"/api/v1/agents/{agent.pk}/")

    assert (create.status_code, update.status_code, delete.status_code) == (403, 403, 403)
    assert create.json()["error"]["code"] == "permission_denied"
    assert Agent.objects.filter(tenant=cast.tenant_a).count() == 1
    assert Agent.objects.get(pk=agent.pk).name == "Existing"


def test_read_only_key_of_an_owner_cannot_write(cast: Cast) -> None:
    client = api_client_for(cast.tenant_a, cast.alice, scope="read")

    assert client.get("/api/v1/agents/").status_code == 200
    assert client.post("/api/v1/agents/", VALID_AGENT, format="json").status_code == 403
    assert Agent.objects.count() == 0


def test_member_cannot_manage_agents(cast: Cast, bob_api: APIClient) -> None:
    assert bob_api.post("/api/v1/agents/", VALID_AGENT, format="json").status_code == 403


def test_update_and_delete(cast: Cast, alice_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Old")

    response = alice_api.patch(f"/api/v1/agents/{agent.pk}/", {"name": "New", "max_steps": 5}, format="json")
    assert response.status_code == 200
    assert (response.json()["name"], response.json()["max_steps"]) == ("New", 5)

    assert alice_api.delete(f"/api/v1/agents/{agent.pk}/").status_code == 204
    assert not Agent.objects.filter(pk=agent.pk).exists()


@pytest.mark.parametrize(
    ("payload", "field", "message"),
    [
        ({"name": ""}, "name", "Name cannot be empty."),
        ({"name": "   "}, "name", "Name cannot be empty."),
        ({"name": "x", "model_provider": "gemini"}, "model_provider", '"gemini" is not a valid choice.'),
        (
            {"name": "x", "model_provider": "anthropic", "temperature": 1.5},
            "temperature",
            "Must be between 0.0 and 1.0 for anthropic.",
        ),
        (
            {"name": "x", "model_provider": "openai", "temperature": 2.5},
            "temperature",
            "Must be between 0.0 and 2.0 for openai.",
        ),
        ({"name": "x", "max_steps": 0}, "max_steps", "Must be between 1 and 100."),
        ({"name": "x", "max_steps": 101}, "max_steps", "Must be between 1 and 100."),
        ({"name": "x", "max_steps": "ten"}, "max_steps", "Must be an integer."),
        ({"name": "x", "max_steps": True}, "max_steps", "Must be an integer."),
        ({"name": 42}, "name", "Must be a string."),
        ({"name": "x", "is_active": "yes"}, "is_active", "Must be a boolean."),
        ({"name": "x", "colour": "blue"}, "colour", "Unknown field."),
        ({"name": "x", "id": "00000000-0000-0000-0000-000000000000"}, "id", "Unknown field."),
        ({"name": "n" * 101}, "name", "Ensure this field has no more than 100 characters."),
        (
            {"name": "x", "system_prompt": "p" * 100_001},
            "system_prompt",
            "Ensure this field has no more than 100000 characters.",
        ),
        ({}, "name", "This field is required."),
    ],
)
def test_bad_input_gets_400_with_field_messages(
    cast: Cast, alice_api: APIClient, payload: dict[str, object], field: str, message: str
) -> None:
    response = alice_api.post("/api/v1/agents/", payload, format="json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert error["fields"][field] == [message]
    assert Agent.objects.count() == 0


def test_duplicate_name_in_tenant_is_rejected_but_allowed_across_tenants(
    cast: Cast, alice_api: APIClient, carol_api: APIClient
) -> None:
    make_agent(tenant=cast.tenant_a, name="Twin")

    duplicate = alice_api.post("/api/v1/agents/", {"name": "Twin"}, format="json")
    other_tenant = carol_api.post("/api/v1/agents/", {"name": "Twin"}, format="json")

    assert duplicate.status_code == 400
    assert duplicate.json()["error"]["fields"] == {
        "name": ["An agent with this name already exists in this tenant."]
    }
    assert other_tenant.status_code == 201
    assert Agent.objects.filter(name="Twin").count() == 2


def test_renaming_onto_an_existing_name_is_rejected(cast: Cast, alice_api: APIClient) -> None:
    make_agent(tenant=cast.tenant_a, name="First")
    second = make_agent(tenant=cast.tenant_a, name="Second")

    response = alice_api.patch(f"/api/v1/agents/{second.pk}/", {"name": "First"}, format="json")

    assert response.status_code == 400
    assert Agent.objects.get(pk=second.pk).name == "Second"


@pytest.mark.parametrize("body", ['{"name": ', "[1, 2]", "null", "not json"])
def test_malformed_json_gets_400(alice_api: APIClient, body: str) -> None:
    response = alice_api.generic("POST", "/api/v1/agents/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] in {"parse_error", "invalid"}
    assert Agent.objects.count() == 0


def test_non_json_content_type_gets_415(alice_api: APIClient) -> None:
    response = alice_api.generic(
        "POST", "/api/v1/agents/", "name=x", content_type="application/x-www-form-urlencoded"
    )

    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


def test_malformed_json_error_body(alice_api: APIClient) -> None:
    response = alice_api.generic("POST", "/api/v1/agents/", '{"name": ', content_type="application/json")

    assert json.loads(response.content)["error"]["code"] == "parse_error"


def test_approval_tools_and_run_timeout_are_validated(cast: Cast, alice_api: APIClient) -> None:
    good = alice_api.post(
        "/api/v1/agents/",
        {"name": "careful", "approval_required_tools": ["calculator"], "run_timeout_seconds": 120},
        format="json",
    )
    bad = alice_api.post(
        "/api/v1/agents/",
        {"name": "bad", "approval_required_tools": ["no spaces!"], "run_timeout_seconds": 0},
        format="json",
    )

    assert good.status_code == 201
    created = good.json()
    assert (created["approval_required_tools"], created["run_timeout_seconds"]) == (["calculator"], 120)
    assert bad.status_code == 400
    assert bad.json()["error"]["fields"] == {
        "approval_required_tools": ["Must be a list of tool names (letters, digits, _ and -)."],
        "run_timeout_seconds": ["Must be between 1 and 86400."],
    }
