"""What the schema promises, the server does: limits stated, unknown fields refused, one answer
for another tenant's id and a missing one, no 500 for OPTIONS."""

import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from sessions.models import Session
from tests.conftest import Cast
from tests.factories import make_agent

pytestmark = pytest.mark.django_db

EMPTY_PAGE: dict[str, Any] = {"count": 0, "next": None, "previous": None, "results": []}


@pytest.fixture
def openapi(client: Any) -> dict[str, Any]:
    schema: dict[str, Any] = client.get("/api/v1/schema/", {"format": "json"}).json()
    return schema


def test_listing_sessions_by_another_tenants_agent_answers_as_for_a_missing_one(
    cast: Cast, alice_api: APIClient
) -> None:
    carols_agent = make_agent(tenant=cast.tenant_b)
    Session.objects.create(tenant=cast.tenant_b, agent=carols_agent, created_by=cast.carol)

    others = alice_api.get("/api/v1/sessions/", {"agent": str(carols_agent.pk)})
    missing = alice_api.get("/api/v1/sessions/", {"agent": str(uuid.uuid4())})

    assert (others.status_code, others.json()) == (200, EMPTY_PAGE)
    assert (missing.status_code, missing.json()) == (others.status_code, others.json())


def test_listing_sessions_by_an_agent_id_that_is_no_uuid_answers_400(alice_api: APIClient) -> None:
    response = alice_api.get("/api/v1/sessions/", {"agent": "nope"})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert list(response.json()["error"]["fields"]) == ["agent"]


def test_listing_sessions_by_an_agent_lists_its_sessions(cast: Cast, alice_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    session = Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.alice)
    Session.objects.create(
        tenant=cast.tenant_a, agent=make_agent(tenant=cast.tenant_a), created_by=cast.alice
    )

    response = alice_api.get("/api/v1/sessions/", {"agent": str(agent.pk)})

    assert [item["id"] for item in response.json()["results"]] == [str(session.pk)]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"is_active": "maybe"}, "is_active"),
        ({"page_size": "0"}, "page_size"),
        ({"page_size": "201"}, "page_size"),
    ],
)
def test_a_query_parameter_the_server_cannot_read_answers_400(
    alice_api: APIClient, query: dict[str, str], field: str
) -> None:
    response = alice_api.get("/api/v1/agents/", query)

    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == [field]


@pytest.mark.parametrize(
    "path", ["/api/v1/agents/{agent}/tools/", "/api/v1/sessions/{session}/extract-memories/"]
)
def test_options_answers_405_with_the_envelope(cast: Cast, alice_api: APIClient, path: str) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    session = Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.alice)

    response = alice_api.options(path.format(agent=agent.pk, session=session.pk))

    assert (response.status_code, response.json()) == (
        405,
        {"error": {"code": "method_not_allowed", "message": 'Method "OPTIONS" not allowed.', "fields": {}}},
    )


def test_a_list_item_of_the_wrong_json_type_is_refused(alice_api: APIClient) -> None:
    response = alice_api.post(
        "/api/v1/agents/", {"name": "typed", "approval_required_tools": [0]}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "approval_required_tools": ["Its items must each be a string."]
    }


def test_the_schema_states_the_limits_the_server_enforces(openapi: dict[str, Any]) -> None:
    components = openapi["components"]["schemas"]
    agent = components["AgentRequest"]["properties"]
    events = openapi["paths"]["/api/v1/sessions/{id}/events/"]["get"]["parameters"]

    assert (agent["max_steps"]["minimum"], agent["max_steps"]["maximum"]) == (1, 100)
    assert agent["name"]["pattern"] == r"\S"
    assert next(p for p in events if p["name"] == "after")["schema"] == {"type": "integer", "minimum": 0}
    requests = {name: body for name, body in components.items() if name.endswith("Request")}
    assert requests
    assert {name: body.get("additionalProperties") for name, body in requests.items()} == dict.fromkeys(
        requests, False
    )


def test_the_schema_says_what_runs_and_memories_send(openapi: dict[str, Any]) -> None:
    components = openapi["components"]["schemas"]
    run = components["Run"]["properties"]
    memory = components["Memory"]["properties"]

    assert components["BlankEnum"] == {"enum": [""]}
    assert {"$ref": "#/components/schemas/BlankEnum"} in run["stop_reason"]["oneOf"]
    assert {"$ref": "#/components/schemas/BlankEnum"} in run["route"]["oneOf"]
    assert [memory[name].get("nullable") for name in ("subject_user_email", "created_by", "reviewed_by")] == [
        True,
        True,
        True,
    ]


def test_the_schema_says_the_first_model_call_decides_in_auto_planning(openapi: dict[str, Any]) -> None:
    planning_mode = openapi["components"]["schemas"]["AgentRequest"]["properties"]["planning_mode"]

    assert planning_mode["description"] == (
        "Auto: the agent's own first model call decides whether to answer, use tools or call "
        "create_plan, which has a request of several independent parts planned and carried out by "
        "read-only executors. Direct: the normal loop, without create_plan. Plan: every message is planned."
        "\n\n* `direct` - Direct\n* `auto` - Auto\n* `plan` - Plan"
    )


def test_the_schema_documents_compacts_409(openapi: dict[str, Any]) -> None:
    responses = openapi["paths"]["/api/v1/sessions/{id}/compact/"]["post"]["responses"]

    assert responses["409"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


def test_every_path_id_in_the_schema_says_its_type(openapi: dict[str, Any]) -> None:
    """A client generated from the schema sends UUIDs (the credit ledger's integers), not any string."""
    types = {
        (path, parameter["name"]): (parameter["schema"]["type"], parameter["schema"].get("format"))
        for path, operations in openapi["paths"].items()
        for operation in operations.values()
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "path"
    }

    untyped = {key: kind for key, kind in types.items() if kind != ("string", "uuid")}
    assert untyped == {("/api/v1/credits/ledger/{id}/", "id"): ("integer", None)}
    assert len(types) == 36


def test_the_credit_fields_are_decimal_strings(openapi: dict[str, Any]) -> None:
    balance = openapi["components"]["schemas"]["CreditSummary"]["properties"]["balance"]

    assert (balance["type"], balance["format"]) == ("string", "decimal")
