import pytest
from django.db import connection
from rest_framework.test import APIClient

from tests.conftest import Cast
from tests.factories import make_agent
from tools.models import AgentTool, Tool, ToolPolicy

pytestmark = pytest.mark.django_db

HTTP_TOOL = {
    "name": "crm_lookup",
    "description": "Find a customer",
    "url_template": "https://crm.example.com/customers/{customer_id}",
    "input_schema": {
        "type": "object",
        "properties": {"customer_id": {"type": "string"}},
        "required": ["customer_id"],
        "additionalProperties": False,
    },
    "headers": {"Accept": "application/json"},
    "secret_headers": {"Authorization": "Bearer sk-crm-very-secret"},
}


def create_tool(api: APIClient, **overrides: object) -> dict[str, object]:
    response = api.post("/api/v1/tools/", {**HTTP_TOOL, **overrides}, format="json")
    assert response.status_code == 201, response.content
    body: dict[str, object] = response.json()
    return body


def test_builtins_are_listed_and_read_only(cast: Cast, alice_api: APIClient) -> None:
    tools = {tool["name"]: tool for tool in alice_api.get("/api/v1/tools/?page_size=200").json()["results"]}
    calculator = tools["calculator"]

    assert (calculator["kind"], calculator["group"], calculator["is_builtin"]) == ("builtin", "math", True)
    assert (
        alice_api.patch(
            f"/api/v1/tools/{calculator['id']}/", {"is_enabled": False}, format="json"
        ).status_code
        == 403
    )
    assert alice_api.delete(f"/api/v1/tools/{calculator['id']}/").status_code == 403
    assert Tool.objects.get(pk=calculator["id"]).is_enabled is True


def test_http_tool_secrets_are_write_only_and_encrypted(cast: Cast, alice_api: APIClient) -> None:
    body = create_tool(alice_api)

    assert body["secret_header_names"] == ["Authorization"]
    assert "sk-crm-very-secret" not in str(body)
    assert "sk-crm-very-secret" not in str(alice_api.get(f"/api/v1/tools/{body['id']}/").json())
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT secret_headers FROM {Tool._meta.db_table} WHERE name = 'crm_lookup'")  # noqa: S608
        raw = cursor.fetchone()[0]
    assert "sk-crm-very-secret" not in raw
    assert Tool.objects.get(pk=body["id"]).secret_headers == {"Authorization": "Bearer sk-crm-very-secret"}


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"name": "bad name"}, "name", "Use 1-64 letters, digits, _ or -."),
        ({"name": "a__b"}, "name", "'__' is reserved for MCP tools (<server>__<tool>)."),
        ({"input_schema": {"type": "nonsense"}}, "input_schema", None),
        (
            {"input_schema": {"type": "string"}},
            "input_schema",
            "The arguments schema must describe an object.",
        ),
        (
            {"input_schema": {"type": "object", "description": "a\x00b"}},
            "input_schema",
            "Must not contain null characters or unpaired surrogates.",
        ),
        ({"url_template": "ftp://x"}, "url_template", "Must be an http:// or https:// URL template."),
        ({"timeout_seconds": 0}, "timeout_seconds", "Must be between 1 and 300."),
        ({"http_method": "TRACE"}, "http_method", '"TRACE" is not a valid choice.'),
        ({"kind": "builtin"}, "kind", "Unknown field."),
        (
            {"secret_headers": {"Authorization": "Bearer cl\u00e9"}},
            "secret_headers",
            "Header values must not contain non-ASCII characters.",
        ),
        ({"headers": {"X-Note": "a\r\nb"}}, "headers", "Header values must not contain control characters."),
        (
            {"headers": {"X:Note": "a"}},
            "headers",
            "Header names may hold only letters, digits and !#$%&'*+.^_`|~-.",
        ),
    ],
)
def test_bad_http_tools_get_field_errors(
    cast: Cast, alice_api: APIClient, overrides: dict[str, object], field: str, message: str | None
) -> None:
    response = alice_api.post("/api/v1/tools/", {**HTTP_TOOL, **overrides}, format="json")

    assert response.status_code == 400
    errors = response.json()["error"]["fields"][field]
    if message is None:
        assert errors[0].startswith("Not a valid JSON Schema:")
    else:
        assert errors == [message]
    assert Tool.objects.filter(tenant=cast.tenant_a).count() == 0


def test_member_cannot_create_tools(cast: Cast, bob_api: APIClient) -> None:
    assert bob_api.post("/api/v1/tools/", HTTP_TOOL, format="json").status_code == 403


@pytest.mark.parametrize("method", ["get", "patch", "delete"])
def test_another_tenants_tool_is_404_and_unchanged(
    cast: Cast, alice_api: APIClient, carol_api: APIClient, method: str
) -> None:
    tool_id = create_tool(alice_api)["id"]

    response = getattr(carol_api, method)(f"/api/v1/tools/{tool_id}/", {"description": "mine"}, format="json")

    assert response.status_code == 404
    assert Tool.objects.get(pk=tool_id).description == "Find a customer"


def test_agent_tools_policy_and_assignment(cast: Cast, alice_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    tool_id = create_tool(alice_api)["id"]

    response = alice_api.patch(
        f"/api/v1/agents/{agent.pk}/tools/",
        {"profile": "coding", "deny": ["web_fetch"], "assigned_tools": [tool_id], "max_calls_per_turn": 2},
        format="json",
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["policy"]["profile"] == "coding"
    assert body["assigned_tools"] == [tool_id]
    verdicts = {tool["name"]: (tool["is_allowed"], tool["reason"]) for tool in body["tools"]}
    assert verdicts["crm_lookup"] == (True, "allowed")
    assert verdicts["calculator"] == (True, "allowed")
    assert verdicts["web_fetch"] == (False, "tool web_fetch is denied by the policy entry 'web_fetch'")
    assert ToolPolicy.objects.get(agent=agent).max_calls_per_turn == 2


def test_assigning_another_tenants_tool_is_404(
    cast: Cast, alice_api: APIClient, carol_api: APIClient
) -> None:
    carols_agent = make_agent(tenant=cast.tenant_b)
    alices_tool = create_tool(alice_api)["id"]

    response = carol_api.patch(
        f"/api/v1/agents/{carols_agent.pk}/tools/", {"assigned_tools": [alices_tool]}, format="json"
    )

    assert response.status_code == 404
    assert AgentTool.objects.count() == 0


def test_another_tenants_agent_tools_are_404(cast: Cast, carol_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a)

    assert carol_api.get(f"/api/v1/agents/{agent.pk}/tools/").status_code == 404
    assert (
        carol_api.patch(f"/api/v1/agents/{agent.pk}/tools/", {"profile": "full"}, format="json").status_code
        == 404
    )
    assert not ToolPolicy.objects.filter(agent=agent).exists()


def test_bad_policy_entries_are_400(cast: Cast, alice_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a)

    response = alice_api.patch(
        f"/api/v1/agents/{agent.pk}/tools/",
        {"allow": ["no spaces please"], "max_calls_per_turn": 0},
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "allow": ["Must be a list of tool names, group:<name> entries or * wildcards."],
        "max_calls_per_turn": ["Must be between 1 and 100."],
    }
