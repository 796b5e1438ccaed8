"""Tenant HTTP tools against a real local server: templating, secret headers, errors, SSRF guard."""

import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import pytest
from rest_framework.test import APIClient

from sessions.models import Step
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.test_runs_api import post_message, run_to_end, start_session
from tests.tools import LocalServer, RecordedRequest, Reply
from tools.builtins.base import ToolError
from tools.http_tools import fill_url_template, redact, run_http_tool
from tools.models import AgentTool, Tool, ToolKind

pytestmark = pytest.mark.django_db

SECRET = "sk-live-4f9a8b7c6d5e"


@pytest.fixture
def server() -> Iterator[LocalServer]:
    with LocalServer("127.0.0.1") as local:
        yield local


@pytest.fixture
def private_network_allowed(settings: Any) -> None:
    settings.ALLOW_PRIVATE_NETWORK_FETCH = True


def make_http_tool(cast: Cast, url_template: str, *, method: str = "GET", **fields: Any) -> Tool:
    tool = Tool.objects.create(
        tenant=cast.tenant_a,
        name=fields.pop("name", "crm"),
        kind=ToolKind.HTTP,
        http_method=method,
        url_template=url_template,
        headers=fields.pop("headers", {"X-Client": "agentry-test"}),
        secret_headers=fields.pop("secret_headers", {"X-Api-Key": SECRET}),
        input_schema={"type": "object"},
        timeout_seconds=fields.pop("timeout_seconds", 5.0),
        **fields,
    )
    return Tool.objects.get(pk=tool.pk)  # as the provider sees it: secrets decrypted from the column


def echo(request: RecordedRequest) -> Reply:
    payload = {
        "method": request.method,
        "path": request.path,
        "query": request.query,
        "api_key_seen": request.headers.get("x-api-key"),
        "body": request.body.decode(),
    }
    return Reply(200, json.dumps(payload), {"Content-Type": "application/json"})


def test_get_fills_the_template_and_sends_the_rest_as_query(
    cast: Cast, server: LocalServer, private_network_allowed: None
) -> None:
    server.routes["/users/a%20b%2Fc/items/7"] = Reply(200, "found")
    tool = make_http_tool(cast, server.url("/users/{user_id}/items/{item}?lang={lang}"))
    result = run_http_tool(
        tool, {"user_id": "a b/c", "item": 7, "lang": "fr", "limit": 5, "tags": ["x", "y"]}
    )
    assert result == "HTTP 200 OK\n\nfound"
    [request] = server.requests
    assert (request.method, request.path) == ("GET", "/users/a%20b%2Fc/items/7")
    assert parse_qs(request.query) == {"lang": ["fr"], "limit": ["5"], "tags": ["x", "y"]}
    assert (request.headers["x-client"], request.headers["x-api-key"]) == ("agentry-test", SECRET)


def test_post_sends_the_remaining_arguments_as_json(
    cast: Cast, server: LocalServer, private_network_allowed: None
) -> None:
    server.routes["/contacts/42/notes"] = echo
    tool = make_http_tool(cast, server.url("/contacts/{contact_id}/notes"), method="POST")
    result = run_http_tool(tool, {"contact_id": 42, "text": "Called back", "pinned": True})
    [request] = server.requests
    assert json.loads(request.body) == {"text": "Called back", "pinned": True}
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-api-key"] == SECRET
    status, body = result.split("\n\n", 1)
    assert status == "HTTP 200 OK"
    assert json.loads(body) == {
        "method": "POST",
        "path": "/contacts/42/notes",
        "query": "",
        "api_key_seen": "[redacted]",
        "body": '{"text": "Called back", "pinned": true}',
    }
    assert SECRET not in result


def test_an_echoed_bearer_token_is_redacted(
    cast: Cast, server: LocalServer, private_network_allowed: None
) -> None:
    server.routes["/whoami"] = lambda request: Reply(
        200, f"token={request.headers['authorization'].split()[1]}"
    )
    tool = make_http_tool(cast, server.url("/whoami"), secret_headers={"Authorization": f"Bearer {SECRET}"})
    assert run_http_tool(tool, {}) == "HTTP 200 OK\n\ntoken=[redacted]"


def test_error_statuses_raise_with_an_excerpt_and_no_secret(
    cast: Cast, server: LocalServer, private_network_allowed: None
) -> None:
    server.routes["/fail"] = Reply(500, f"boom: bad key {SECRET}\n\ntrace " + "x" * 1000)
    tool = make_http_tool(cast, server.url("/fail"), name="billing")
    with pytest.raises(ToolError) as failed:
        run_http_tool(tool, {})
    # The first 300 characters of the redacted body, whitespace collapsed.
    head = "boom: bad key [redacted]\n\ntrace "
    assert str(failed.value) == (
        "billing failed: HTTP 500 Internal Server Error: boom: bad key [redacted] trace "
        + "x" * (300 - len(head))
    )


def test_private_targets_are_refused_unless_allowed(cast: Cast, server: LocalServer, settings: Any) -> None:
    server.routes["/internal"] = Reply(200, "internal data")
    tool = make_http_tool(cast, server.url("/internal"))
    with pytest.raises(ToolError) as failed:
        run_http_tool(tool, {})
    assert str(failed.value) == "refused: 127.0.0.1 is a loopback address"
    assert server.requests == []
    settings.ALLOW_PRIVATE_NETWORK_FETCH = True
    assert run_http_tool(tool, {}) == "HTTP 200 OK\n\ninternal data"


def test_metadata_address_is_refused(cast: Cast) -> None:
    tool = make_http_tool(cast, "http://169.254.169.254/latest/meta-data/{path}")
    with pytest.raises(ToolError) as failed:
        run_http_tool(tool, {"path": "iam"})
    assert str(failed.value) == "refused: 169.254.169.254 is a link-local address (cloud metadata service)"


def test_secret_headers_are_not_forwarded_to_another_origin(
    cast: Cast, server: LocalServer, private_network_allowed: None
) -> None:
    # localhost and 127.0.0.1 are the same server but different origins.
    server.routes["/start"] = Reply(307, headers={"Location": f"http://localhost:{server.port}/landing"})
    server.routes["/landing"] = Reply(200, "landed")
    tool = make_http_tool(cast, server.url("/start"), method="PUT")
    assert run_http_tool(tool, {"value": 1}) == "HTTP 200 OK\n\nlanded"
    assert [(r.method, r.path, r.headers.get("x-api-key"), r.body) for r in server.requests] == [
        ("PUT", "/start", SECRET, b'{"value": 1}'),
        ("PUT", "/landing", None, b'{"value": 1}'),
    ]


def test_a_slow_service_times_out(cast: Cast, server: LocalServer, private_network_allowed: None) -> None:
    release = threading.Event()

    def slow(request: RecordedRequest) -> Reply:
        release.wait(5)
        return Reply(200, "late")

    server.routes["/slow"] = slow
    tool = make_http_tool(cast, server.url("/slow"), timeout_seconds=0.3)
    try:
        with pytest.raises(ToolError) as failed:
            run_http_tool(tool, {})
    finally:
        release.set()
    assert str(failed.value) == "127.0.0.1 did not answer in time"


def test_long_responses_are_truncated(
    cast: Cast, server: LocalServer, private_network_allowed: None, settings: Any
) -> None:
    settings.HTTP_TOOL_MAX_RESPONSE_CHARS = 5
    server.routes["/long"] = Reply(200, "abcdefghij")
    tool = make_http_tool(cast, server.url("/long"))
    assert run_http_tool(tool, {}) == "HTTP 200 OK\n\nabcde\n[truncated: 5 more characters]"


def test_a_missing_template_argument_is_an_error() -> None:
    with pytest.raises(ToolError) as failed:
        fill_url_template("https://api.example/{org}/repos/{repo}", {"org": "acme"})
    assert str(failed.value) == "missing argument 'repo', which the URL needs"


def test_structured_values_cannot_go_into_the_url() -> None:
    with pytest.raises(ToolError) as failed:
        fill_url_template("https://api.example/{org}", {"org": {"name": "acme"}})
    assert str(failed.value) == "argument 'org' goes into the URL, so it must be a string, number or boolean"


HEADER_X_API_KEY = "header 'X-Api-Key' of this tool"


@pytest.mark.parametrize(
    ("secret_headers", "message"),
    [
        ({"X-Api-Key": f"{SECRET}\r\nX-Evil: 1"}, f"{HEADER_X_API_KEY} contains control characters"),
        ({"X-Api-Key": f"{SECRET}\u00e9"}, f"{HEADER_X_API_KEY} contains non-ASCII characters"),
        ({f"X-{SECRET}:": "1"}, "a header name of this tool is not a valid HTTP header name"),
    ],
)
def test_a_header_http_cannot_carry_is_refused_without_quoting_it(
    cast: Cast, secret_headers: dict[str, str], message: str
) -> None:
    """Saved before tools.services checked headers: the call is refused, nothing of the value shown."""
    tool = make_http_tool(cast, "https://api.example/", secret_headers=secret_headers)
    with pytest.raises(ToolError) as failed:
        run_http_tool(tool, {})
    assert str(failed.value) == f"{message}; fix the tool"


def test_redact_masks_whole_values_and_bearer_tokens() -> None:
    assert redact("a Bearer t0k3n b t0k3n c", ["Bearer t0k3n"]) == "a [redacted] b [redacted] c"
    assert redact("nothing here", [""]) == "nothing here"


def test_a_response_holding_a_null_character_is_stored_with_it_replaced_and_the_run_completes(
    cast: Cast,
    bob_api: APIClient,
    fake_model: FakeModelServer,
    server: LocalServer,
    private_network_allowed: None,
) -> None:
    """PostgreSQL stores no NUL in jsonb: the result keeps a replacement character instead, and
    the run ends as it does on SQLite."""
    server.routes["/note"] = Reply(200, "before\x00after")
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model")
    AgentTool.objects.create(agent=agent, tool=make_http_tool(cast, server.url("/note")))
    fake_model.script(Turn(tool_calls=[("crm", {})]), Turn(text="Done."))
    session_id = start_session(bob_api, agent.pk)

    run = run_to_end(bob_api, post_message(bob_api, session_id, "Read the note.")["run"]["id"])  # type: ignore[index]

    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    tool_step = Step.objects.get(run_id=run["id"], kind="tool_call")
    assert tool_step.output == {"content": "HTTP 200 OK\n\nbefore\ufffdafter", "is_error": False}
