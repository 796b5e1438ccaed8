"""Tool input schemas from tenants and MCP servers: regexes on RE2, references kept inside the schema.

The attack: ``"(a+)+$"`` against ``"aaa…a!"`` backtracks exponentially on Python's ``re``; each
more character roughly doubles the time, so the 40-character argument used here would hold a
process for hours. On RE2 it is checked in time linear in its length.
"""

import json
import subprocess
import sys
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from sessions.models import Message, Run, ToolApproval
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import ROOT
from tests.tools import LocalServer
from tools.models import AgentTool, Tool, ToolKind, ToolPolicy
from tools.provider import argument_errors

pytestmark = pytest.mark.django_db

CATASTROPHIC = "(a+)+$"
ATTACK = "a" * 40 + "!"
OUTSIDE = "points outside the schema: only references starting with # are allowed."
PATTERN_RULE = "Patterns use RE2 syntax: no backreferences and no lookahead or lookbehind."
CITY_BY_REFERENCE = {
    "type": "object",
    "$defs": {"city": {"type": "string", "minLength": 2}},
    "properties": {"city": {"$ref": "#/$defs/city"}},
    "required": ["city"],
}
HTTP_TOOL = {"name": "weather", "url_template": "https://weather.example/{city}"}


def object_schema(**keywords: Any) -> dict[str, Any]:
    return {"type": "object", **keywords}


def errors_in_a_child_process(cases: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[list[str]]:
    """``argument_errors`` for each (schema, arguments) in its own interpreter, so that a
    backtracking engine fails the test at the timeout instead of hanging it."""
    code = (
        "import json, sys, django\n"
        "django.setup()\n"
        "from tools.provider import argument_errors\n"
        "cases = json.loads(sys.stdin.read())\n"
        "print(json.dumps([argument_errors(schema, arguments) for schema, arguments in cases]))\n"
    )
    finished = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"DJANGO_SETTINGS_MODULE": "config.settings", "PATH": "/usr/bin:/bin"},
        timeout=20,
        check=True,
    )
    errors: list[list[str]] = json.loads(finished.stdout)
    return errors


def test_a_catastrophic_pattern_is_checked_without_backtracking() -> None:
    pattern = object_schema(properties={"city": {"type": "string", "pattern": CATASTROPHIC}})
    pattern_properties = object_schema(patternProperties={CATASTROPHIC: {"type": "integer"}})
    closed = object_schema(patternProperties={CATASTROPHIC: {}}, additionalProperties=False)
    property_names = object_schema(propertyNames={"pattern": CATASTROPHIC})

    errors = errors_in_a_child_process(
        [
            (pattern, {"city": ATTACK}),
            (pattern_properties, {ATTACK: "x", "aa": "y"}),
            (closed, {ATTACK: 1}),
            (property_names, {ATTACK: 1}),
        ]
    )

    assert errors == [
        [f"city: {ATTACK!r} does not match {CATASTROPHIC!r}"],
        ["aa: 'y' is not of type 'integer'"],
        [f"(arguments): {ATTACK!r} does not match any of the regexes: {CATASTROPHIC!r}"],
        [f"(arguments): {ATTACK!r} does not match {CATASTROPHIC!r}"],
    ]


def test_a_long_argument_against_the_catastrophic_pattern_is_checked_in_process() -> None:
    schema = object_schema(properties={"city": {"type": "string", "pattern": CATASTROPHIC}})

    assert argument_errors(schema, {"city": "a" * 100_000}) == []
    assert argument_errors(schema, {"city": "a" * 100_000 + "!"}) == [
        f"city: {'a' * 100_000 + '!'!r} does not match {CATASTROPHIC!r}"
    ]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            object_schema(properties={"city": {"type": "string", "pattern": r"(\w+) \1"}}),
            rf'The pattern "(\w+) \1" cannot be used: invalid escape sequence: \1. {PATTERN_RULE}',
        ),
        (
            object_schema(patternProperties={"(?=x)": {}}),
            f'The pattern "(?=x)" cannot be used: invalid perl operator: (?=. {PATTERN_RULE}',
        ),
        (
            object_schema(properties={"city": {"propertyNames": {"pattern": "(?<!a)b"}}}),
            f'The pattern "(?<!a)b" cannot be used: invalid perl operator: (?<!. {PATTERN_RULE}',
        ),
        (
            object_schema(properties={"city": {"$ref": "https://schemas.example/city.json"}}),
            "The reference 'https://schemas.example/city.json' points outside the schema: "
            "only references starting with # are allowed.",
        ),
        (
            object_schema(properties={"city": {"$ref": "#/$defs/missing"}}),
            "The reference '#/$defs/missing' points to nothing in the schema.",
        ),
        (
            object_schema(properties={"city": {"$schema": "https://json-schema.org/draft/2020-12/schema"}}),
            "$schema is only allowed at the top of the schema.",
        ),
        (
            {"$schema": ["not", "a", "dialect"], "type": "object"},
            "Unsupported $schema: use JSON Schema draft 6, 7, 2019-09 or 2020-12, or leave $schema out.",
        ),
        (
            {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"},
            "Unsupported $schema: use JSON Schema draft 6, 7, 2019-09 or 2020-12, or leave $schema out.",
        ),
        (
            object_schema(unevaluatedProperties=False, allOf=[{"patternProperties": {"^x": {}}}]),
            "unevaluatedProperties cannot be combined with patternProperties; use additionalProperties.",
        ),
    ],
    ids=[
        "backreference",
        "lookahead",
        "lookbehind",
        "remote reference",
        "missing reference",
        "nested $schema",
        "not a string",
        "draft 4",
        "unevaluatedProperties",
    ],
)
def test_a_schema_that_cannot_be_checked_safely_is_refused_at_save_time(
    cast: Cast, alice_api: APIClient, schema: dict[str, Any], message: str
) -> None:
    created = alice_api.post("/api/v1/tools/", {**HTTP_TOOL, "input_schema": schema}, format="json")
    tool = Tool.objects.create(tenant=cast.tenant_a, kind=ToolKind.HTTP, http_method="GET", **HTTP_TOOL)
    updated = alice_api.patch(f"/api/v1/tools/{tool.pk}/", {"input_schema": schema}, format="json")

    assert (created.status_code, created.json()["error"]["fields"]) == (400, {"input_schema": [message]})
    assert (updated.status_code, updated.json()["error"]["fields"]) == (400, {"input_schema": [message]})
    assert list(Tool.objects.filter(tenant=cast.tenant_a).values_list("name", "input_schema")) == [
        ("weather", {})
    ]


@pytest.mark.parametrize(
    "schema",
    [
        object_schema(properties={"city": {"type": "string", "pattern": CATASTROPHIC}}),
        CITY_BY_REFERENCE,
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "definitions": {"city": {"type": "string"}},
            "properties": {"city": {"$ref": "#/definitions/city"}},
        },
    ],
    ids=["the catastrophic pattern", "a $defs reference", "a draft-07 reference"],
)
def test_a_schema_re2_can_check_is_saved(alice_api: APIClient, schema: dict[str, Any]) -> None:
    response = alice_api.post("/api/v1/tools/", {**HTTP_TOOL, "input_schema": schema}, format="json")

    assert response.status_code == 201
    assert Tool.objects.get(name="weather").input_schema == schema


def test_the_web_form_refuses_a_pattern_re2_cannot_compile(cast: Cast) -> None:
    client = Client()
    client.force_login(cast.alice)
    schema = object_schema(properties={"city": {"type": "string", "pattern": r"(a)\1"}})

    response = client.post(
        "/tools/new/",
        {
            "name": "weather",
            "url_template": HTTP_TOOL["url_template"],
            "http_method": "GET",
            "timeout_seconds": "30",
            "input_schema": json.dumps(schema),
            "headers": "",
        },
    )

    assert response.status_code == 400
    assert (
        f"The pattern &quot;(a)\\1&quot; cannot be used: invalid escape sequence: \\1. {PATTERN_RULE}"
        in response.content.decode()
    )
    assert not Tool.objects.filter(tenant=cast.tenant_a).exists()


# Approving with edited arguments, for tools whose schema uses references


def waiting_run(cast: Cast, api: APIClient, fake_model: FakeModelServer, schema: dict[str, Any]) -> str:
    """A run of tenant A waiting for approval of a call to an HTTP tool with ``schema``.

    The tool row is written directly: a schema saved before the save-time checks existed.
    """
    tool = Tool.objects.create(
        tenant=cast.tenant_a,
        kind=ToolKind.HTTP,
        http_method="GET",
        requires_approval=True,
        input_schema=schema,
        **HTTP_TOOL,
    )
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    AgentTool.objects.create(agent=agent, tool=tool)
    ToolPolicy.objects.create(agent=agent, editable_arguments=["weather"])
    fake_model.script(Turn(tool_calls=[("weather", {"city": "Paris"})]), Turn(text="done"))
    session_id = api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()["id"]
    response = api.post(f"/api/v1/sessions/{session_id}/messages/", {"content": "Weather?"}, format="json")
    run_id: str = response.json()["run"]["id"]
    execute_run(run_id)
    assert Run.objects.get(pk=run_id).status == "awaiting_approval"
    return run_id


def approve(api: APIClient, run_id: str, arguments: Any) -> Any:
    call_id = ToolApproval.objects.get(run_id=run_id).tool_call_id
    body = {"tool_call_id": call_id, "decision": "approve", "arguments": arguments}
    return api.post(f"/api/v1/runs/{run_id}/approve/", body, format="json")


def assert_nothing_changed(run_id: str) -> None:
    approval = ToolApproval.objects.get(run_id=run_id)
    assert (approval.status, approval.edited_arguments) == ("pending", None)
    call = Message.objects.get(run_id=run_id, role="assistant").content[-1]
    assert call["arguments"] == {"city": "Paris"}
    assert Run.objects.get(pk=run_id).status == "awaiting_approval"


def test_edited_arguments_are_checked_against_a_schema_with_a_local_reference(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = waiting_run(cast, bob_api, fake_model, CITY_BY_REFERENCE)

    refused = approve(bob_api, run_id, {"city": 5})
    assert_nothing_changed(run_id)
    approved = approve(bob_api, run_id, {"city": "Lyon"})

    assert (refused.status_code, refused.json()["error"]["fields"]) == (
        400,
        {"arguments": ["city: 5 is not of type 'string'"]},
    )
    assert (approved.status_code, approved.json()["edited_arguments"]) == (200, {"city": "Lyon"})


@pytest.mark.parametrize(
    ("reference", "problem"),
    [
        ("#/$defs/missing", "The reference '#/$defs/missing' points to nothing in the schema."),
        (
            "city.json",
            f"The reference 'city.json' {OUTSIDE}",
        ),
    ],
    ids=["missing", "relative file"],
)
def test_a_stored_schema_with_a_reference_that_does_not_resolve_answers_400(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, reference: str, problem: str
) -> None:
    run_id = waiting_run(cast, bob_api, fake_model, object_schema(properties={"city": {"$ref": reference}}))

    response = approve(bob_api, run_id, {"city": "Lyon"})

    assert (response.status_code, response.json()["error"]["fields"]) == (
        400,
        {"arguments": [f"(schema): the tool's schema cannot be used: {problem}"]},
    )
    assert_nothing_changed(run_id)


def test_a_remote_reference_is_never_fetched(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    with LocalServer("127.0.0.1") as schemas:
        reference = schemas.url("/city.json")
        run_id = waiting_run(
            cast, bob_api, fake_model, object_schema(properties={"city": {"$ref": reference}})
        )

        response = approve(bob_api, run_id, {"city": "Lyon"})

        assert schemas.requests == []
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "arguments": [f"(schema): the tool's schema cannot be used: The reference {reference!r} {OUTSIDE}"]
    }
    assert_nothing_changed(run_id)


def test_the_chat_form_checks_edited_arguments_against_a_schema_with_references(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = waiting_run(cast, bob_api, fake_model, object_schema(properties={"city": {"$ref": "#/nowhere"}}))
    client = Client()
    client.force_login(cast.bob)
    fields = {
        "tool_call_id": ToolApproval.objects.get(run_id=run_id).tool_call_id,
        "decision": "approve",
        "arguments": '{"city": "Lyon"}',
    }

    response = client.post(f"/runs/{run_id}/approve/", fields, HTTP_ACCEPT="application/json")

    assert response.status_code == 400
    assert response.json() == {
        "ok": False,
        "message": "(schema): the tool's schema cannot be used: "
        "The reference '#/nowhere' points to nothing in the schema.",
    }
    assert_nothing_changed(run_id)


def test_the_catastrophic_pattern_in_edited_arguments_answers_400_at_once(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    schema = object_schema(properties={"city": {"type": "string", "pattern": CATASTROPHIC}})
    run_id = waiting_run(cast, bob_api, fake_model, schema)

    response = approve(bob_api, run_id, {"city": "a" * 50_000 + "!"})

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "arguments": [f"city: {'a' * 50_000 + '!'!r} does not match {CATASTROPHIC!r}"]
    }
    assert_nothing_changed(run_id)
