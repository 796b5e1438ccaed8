"""A tenant's own provider keys over the API: write-only, encrypted, owners and admins only, tested
against the fake model server, and used by the next run once replaced."""

import json
import logging
from typing import Any

import pytest
import yaml
from rest_framework.test import APIClient

from sessions.models import Run, RunEvent
from sessions.tasks import execute_run
from tenants.models import ProviderKey
from tenants.provider_keys.outbound import BASE_URL_REFUSED
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, RecordedRequest, Turn
from tests.live import free_port
from tests.test_encryption import raw_columns

pytestmark = pytest.mark.django_db

URL = "/api/v1/provider-keys/"
SECRET = "tenant-secret-key-0123456789"
OTHER_SECRET = "replacement-key-9876543210"


def add_key(api: APIClient, **fields: Any) -> Any:
    return api.post(URL, {"provider": "anthropic", "api_key": SECRET, **fields}, format="json")


def stored_key(cast: Cast, **fields: Any) -> ProviderKey:
    values = {"provider": "anthropic", "api_key": SECRET, **fields}
    return ProviderKey.objects.create(tenant=cast.tenant_a, **values)


def sent_key(request: RecordedRequest) -> str:
    """The key a request carried, in whichever header its SDK puts it."""
    return request.headers.get("x-api-key") or request.headers["authorization"].removeprefix("Bearer ")


def snapshot(key_id: object) -> dict[str, Any]:
    return dict(ProviderKey.objects.filter(pk=str(key_id)).values().get())


def raw_column(key_id: object) -> str:
    (column,) = raw_columns(ProviderKey, key_id, "api_key")
    return column


# Create, read, replace, delete


def test_adding_a_key_stores_it_encrypted_and_never_returns_it(cast: Cast, alice_api: APIClient) -> None:
    response = add_key(alice_api)

    assert response.status_code == 201
    body = response.json()
    key = ProviderKey.objects.get()
    assert body == {
        "id": str(key.pk),
        "provider": "anthropic",
        "base_url": "",
        "created_at": body["created_at"],
        "updated_at": body["updated_at"],
    }
    assert (key.tenant, key.provider, key.api_key, key.base_url) == (cast.tenant_a, "anthropic", SECRET, "")
    column = raw_column(key.pk)
    assert SECRET not in column
    assert column.startswith("gAAAA")  # a Fernet token


def test_the_key_is_in_no_response(cast: Cast, alice_api: APIClient, fake_model: FakeModelServer) -> None:
    created = add_key(alice_api, base_url="")
    key_id = created.json()["id"]

    responses = [
        created,
        alice_api.get(URL),
        alice_api.get(f"{URL}{key_id}/"),
        alice_api.patch(f"{URL}{key_id}/", {"api_key": OTHER_SECRET}, format="json"),
        alice_api.put(f"{URL}{key_id}/", {"api_key": SECRET, "base_url": ""}, format="json"),
        alice_api.post(f"{URL}{key_id}/test/"),
        alice_api.get("/api/v1/schema/"),
    ]

    assert [response.status_code for response in responses] == [201, 200, 200, 200, 200, 200, 200]
    for response in responses:
        assert SECRET not in response.content.decode()
        assert OTHER_SECRET not in response.content.decode()
        assert SECRET[-4:] not in response.content.decode()
    assert alice_api.get(URL).json()["results"] == [
        {
            "id": key_id,
            "provider": "anthropic",
            "base_url": "",
            "created_at": created.json()["created_at"],
            "updated_at": ProviderKey.objects.get().updated_at.isoformat().replace("+00:00", "Z"),
        }
    ]


def test_replacing_the_key_or_the_base_url_keeps_the_other(
    cast: Cast, alice_api: APIClient, settings: Any
) -> None:
    settings.PROVIDER_ALLOWED_PRIVATE_HOSTS = ["127.0.0.1"]
    key = stored_key(cast)

    replaced = alice_api.patch(f"{URL}{key.pk}/", {"api_key": f"  {OTHER_SECRET} "}, format="json")
    key.refresh_from_db()
    after_replace = (key.api_key, key.base_url)
    moved = alice_api.patch(f"{URL}{key.pk}/", {"base_url": "http://127.0.0.1:8000/v1"}, format="json")
    key.refresh_from_db()

    assert (replaced.status_code, moved.status_code) == (200, 200)
    assert after_replace == (OTHER_SECRET, "")
    assert (key.api_key, key.base_url) == (OTHER_SECRET, "http://127.0.0.1:8000/v1")
    assert moved.json()["base_url"] == "http://127.0.0.1:8000/v1"
    assert OTHER_SECRET not in raw_column(key.pk)


def test_the_provider_of_a_key_does_not_change(cast: Cast, alice_api: APIClient) -> None:
    key = stored_key(cast)
    before = snapshot(key.pk)

    response = alice_api.patch(f"{URL}{key.pk}/", {"provider": "openai"}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"provider": ["Unknown field."]}
    assert snapshot(key.pk) == before


def test_deleting_a_key(cast: Cast, alice_api: APIClient) -> None:
    key = stored_key(cast)

    response = alice_api.delete(f"{URL}{key.pk}/")

    assert response.status_code == 204
    assert not ProviderKey.objects.exists()


def test_one_key_per_provider_and_tenant(cast: Cast, alice_api: APIClient, carol_api: APIClient) -> None:
    stored_key(cast)

    duplicate = add_key(alice_api, api_key=OTHER_SECRET)
    other_provider = add_key(alice_api, provider="openai")
    other_tenant = add_key(carol_api)

    assert duplicate.status_code == 400
    assert duplicate.json()["error"]["fields"] == {
        "provider": ["This tenant already has a key for this provider: replace it or delete it first."]
    }
    assert (other_provider.status_code, other_tenant.status_code) == (201, 201)
    assert ProviderKey.objects.get(tenant=cast.tenant_a, provider="anthropic").api_key == SECRET


@pytest.mark.parametrize(
    ("payload", "field", "message"),
    [
        ({"provider": "anthropic"}, "api_key", "This field is required."),
        ({"provider": "anthropic", "api_key": ""}, "api_key", "This field may not be blank."),
        (
            {"provider": "anthropic", "api_key": "two words"},
            "api_key",
            "Must not contain spaces or control characters.",
        ),
        (
            {"provider": "anthropic", "api_key": "sk-\u00e9t\u00e9-key"},
            "api_key",
            "Must contain only ASCII letters, digits and symbols.",
        ),
        ({"provider": "offline", "api_key": SECRET}, "provider", '"offline" is not a valid choice.'),
        ({"provider": "anthropic", "api_key": 42}, "api_key", "Must be a string."),
        ({"provider": "anthropic", "api_key": SECRET, "owner": "x"}, "owner", "Unknown field."),
        (
            {"provider": "anthropic", "api_key": SECRET, "base_url": "ftp://x.example"},
            "base_url",
            "Must be an https:// URL with a host.",
        ),
        (
            {"provider": "anthropic", "api_key": SECRET, "base_url": "https://user:pw@api.example.com"},
            "base_url",
            "Put the key in the API key field, not in the URL (the URL is not stored encrypted).",
        ),
        (
            {"provider": "anthropic", "api_key": SECRET, "base_url": "https://api.example.com:99999"},
            "base_url",
            "Not a valid URL.",
        ),
    ],
)
def test_bad_input_gets_400_with_field_messages(
    cast: Cast, alice_api: APIClient, payload: dict[str, object], field: str, message: str
) -> None:
    response = alice_api.post(URL, payload, format="json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert error["fields"] == {field: [message]}
    assert not ProviderKey.objects.exists()


# The base URL passes the SSRF guard


@pytest.mark.parametrize(
    "base_url",
    [
        "http://127.0.0.1:8000/v1",
        "https://[::1]/v1",
        "http://169.254.169.254/latest/meta-data",
        "https://10.1.2.3/v1",
        "https://192.168.0.10/",
        "https://internal.example/v1",  # resolves to a private address
        "https://no-such-name.invalid/v1",  # does not resolve
        "http://api.example.com/v1",  # public, but the key would cross the internet in clear text
    ],
)
def test_a_base_url_outside_the_public_internet_is_refused_with_one_message(
    cast: Cast, alice_api: APIClient, monkeypatch: pytest.MonkeyPatch, base_url: str
) -> None:
    names = {"internal.example": ["10.0.0.7"], "api.example.com": ["93.184.216.34"]}

    def resolver(host: str, port: int) -> list[str]:
        if host not in names:
            from core.ssrf import OutboundHttpError

            raise OutboundHttpError(f"could not resolve {host}", is_retryable=False)
        return names[host]

    monkeypatch.setattr("tenants.provider_keys.outbound.system_resolver", resolver)

    response = add_key(alice_api, base_url=base_url)

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"base_url": [BASE_URL_REFUSED]}
    assert not ProviderKey.objects.exists()


@pytest.mark.parametrize(
    ("allowed", "base_url"),
    [
        (["127.0.0.1"], "http://127.0.0.1:11434/v1"),
        (["10.0.0.0/8"], "http://10.1.2.3/v1"),
        (["ollama.internal"], "http://ollama.internal:11434/v1"),
    ],
)
def test_the_operator_can_allow_private_base_urls(
    cast: Cast,
    alice_api: APIClient,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    allowed: list[str],
    base_url: str,
) -> None:
    settings.PROVIDER_ALLOWED_PRIVATE_HOSTS = allowed
    monkeypatch.setattr("tenants.provider_keys.outbound.system_resolver", lambda host, port: ["10.0.0.9"])

    response = add_key(alice_api, provider="openai", base_url=base_url)

    assert response.status_code == 201, response.json()
    assert ProviderKey.objects.get().base_url == base_url


# Who may manage keys


@pytest.mark.parametrize("client_name", ["bob_api", "victor_api"])
def test_members_and_viewers_cannot_read_or_manage_keys(
    cast: Cast, client_name: str, request: pytest.FixtureRequest
) -> None:
    api: APIClient = request.getfixturevalue(client_name)
    key = stored_key(cast)
    before = snapshot(key.pk)

    responses = [
        api.get(URL),
        api.get(f"{URL}{key.pk}/"),
        api.post(URL, {"provider": "openai", "api_key": OTHER_SECRET}, format="json"),
        api.patch(f"{URL}{key.pk}/", {"api_key": OTHER_SECRET}, format="json"),
        api.delete(f"{URL}{key.pk}/"),
        api.post(f"{URL}{key.pk}/test/"),
    ]

    assert [response.status_code for response in responses] == [403] * 6
    assert {response.json()["error"]["code"] for response in responses} == {"permission_denied"}
    assert list(ProviderKey.objects.values_list("pk", flat=True)) == [key.pk]
    assert snapshot(key.pk) == before


@pytest.mark.parametrize(
    ("method", "suffix", "payload"),
    [
        ("get", "", None),
        ("patch", "", {"api_key": OTHER_SECRET}),
        ("put", "", {"api_key": OTHER_SECRET, "base_url": ""}),
        ("delete", "", None),
        ("post", "test/", None),
    ],
)
def test_another_tenants_key_is_not_found_and_unchanged(
    cast: Cast,
    carol_api: APIClient,
    fake_model: FakeModelServer,
    method: str,
    suffix: str,
    payload: dict[str, str] | None,
) -> None:
    key = stored_key(cast)
    before = snapshot(key.pk)

    response = getattr(carol_api, method)(f"{URL}{key.pk}/{suffix}", payload, format="json")

    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "Not found.", "fields": {}}}
    assert snapshot(key.pk) == before
    assert carol_api.get(URL).json()["results"] == []
    assert fake_model.model_list_requests == []


# Testing a key


@pytest.mark.parametrize(("provider", "base_url_of"), [("anthropic", "url"), ("openai", "openai_base_url")])
def test_testing_a_working_key_makes_one_call_with_it(
    cast: Cast,
    alice_api: APIClient,
    fake_model: FakeModelServer,
    settings: Any,
    provider: str,
    base_url_of: str,
) -> None:
    settings.PROVIDER_ALLOWED_PRIVATE_HOSTS = ["127.0.0.1"]
    fake_model.accept_api_keys(SECRET)
    key_id = add_key(alice_api, provider=provider, base_url=getattr(fake_model, base_url_of)).json()["id"]

    response = alice_api.post(f"{URL}{key_id}/test/")

    assert response.status_code == 200
    assert response.json() == {"is_working": True, "message": "The key works: the provider accepted it."}
    (call,) = fake_model.model_list_requests
    assert (call.path.split("?")[0], sent_key(call)) == ("/v1/models", SECRET)
    assert fake_model.requests == []  # no tokens spent


def test_a_key_without_base_url_is_tested_against_the_platforms_endpoint(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer
) -> None:
    key = stored_key(cast)

    response = alice_api.post(f"{URL}{key.pk}/test/")

    assert response.json() == {"is_working": True, "message": "The key works: the provider accepted it."}
    assert sent_key(fake_model.model_list_requests[0]) == SECRET


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_testing_a_wrong_key_fails_cleanly(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer, provider: str
) -> None:
    fake_model.accept_api_keys("the-right-key")
    key = stored_key(cast, provider=provider)

    response = alice_api.post(f"{URL}{key.pk}/test/")

    assert response.status_code == 200
    assert response.json() == {"is_working": False, "message": "The provider refused this key."}
    assert "fake model server" not in response.content.decode()  # the provider's answer is not echoed
    assert len(fake_model.model_list_requests) == 1  # no retries


def test_testing_against_an_unreachable_server_fails_cleanly(
    cast: Cast, alice_api: APIClient, settings: Any
) -> None:
    settings.PROVIDER_ALLOWED_PRIVATE_HOSTS = ["127.0.0.1"]
    key = stored_key(cast, base_url=f"http://127.0.0.1:{free_port()}")

    response = alice_api.post(f"{URL}{key.pk}/test/")

    assert response.status_code == 200
    assert response.json() == {"is_working": False, "message": "Could not reach the provider."}


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_testing_a_stored_key_an_http_header_cannot_carry_fails_cleanly(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer, provider: str
) -> None:
    """Stored before keys were checked for ASCII: its check says so instead of a 500."""
    key = stored_key(cast, provider=provider, api_key="sk-\u00c9t\u00e9")

    response = alice_api.post(f"{URL}{key.pk}/test/")

    assert (response.status_code, response.json()) == (
        200,
        {
            "is_working": False,
            "message": f"The tenant's {provider} key has characters an HTTP header cannot carry: replace it.",
        },
    )
    assert fake_model.model_list_requests == []


def test_a_server_error_is_reported_by_its_status_only(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agents.runtime.providers.anthropic_client import AnthropicModelClient
    from agents.runtime.providers.common import model_error

    def fail(self: AnthropicModelClient) -> None:
        raise model_error("internal details from the provider", kind="server", status_code=503)

    monkeypatch.setattr(AnthropicModelClient, "check_access", fail)
    key = stored_key(cast)

    response = alice_api.post(f"{URL}{key.pk}/test/")

    assert response.json() == {
        "is_working": False,
        "message": "The provider answered with an error (HTTP 503).",
    }


def test_a_base_url_that_became_private_is_refused_when_tested_and_used(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer, settings: Any
) -> None:
    # Stored while the operator allowed the host; the guard checks again at each use.
    key = stored_key(cast, base_url=fake_model.url)
    settings.PROVIDER_ALLOWED_PRIVATE_HOSTS = []
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    session = alice_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
    run_id = alice_api.post(
        f"/api/v1/sessions/{session['id']}/messages/", {"content": "hi"}, format="json"
    ).json()["run"]["id"]

    tested = alice_api.post(f"{URL}{key.pk}/test/").json()
    execute_run(run_id)
    run = Run.objects.get(pk=run_id)

    message = f"The tenant's anthropic key: {BASE_URL_REFUSED}"
    assert tested == {"is_working": False, "message": message}
    assert (run.status, run.stop_reason, run.error) == ("failed", "llm_error", message)
    assert fake_model.model_list_requests == [] and fake_model.requests == []


def test_connections_go_to_the_checked_address_of_the_base_url(
    cast: Cast,
    alice_api: APIClient,
    fake_model: FakeModelServer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A name that resolves nowhere, checked with a resolver that resolves it to the fake server:
    # only connections pinned to the checked address can reach it.
    port = int(fake_model.url.rsplit(":", 1)[1])
    settings.PROVIDER_ALLOWED_PRIVATE_HOSTS = ["models.invalid"]
    resolved: list[tuple[str, int]] = []

    def resolver(host: str, port: int) -> list[str]:
        resolved.append((host, port))
        return ["127.0.0.1"]

    monkeypatch.setattr("tenants.provider_keys.outbound.system_resolver", resolver)
    fake_model.set_default(Turn(text="pinned"))
    key_id = add_key(alice_api, base_url=f"http://models.invalid:{port}").json()["id"]
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")

    tested = alice_api.post(f"{URL}{key_id}/test/").json()
    run = run_once(alice_api, agent.pk, "hello")

    assert tested == {"is_working": True, "message": "The key works: the provider accepted it."}
    assert run.status == "completed"
    assert fake_model.model_list_requests[0].headers["host"] == f"models.invalid:{port}"
    assert fake_model.requests[0].headers["host"] == f"models.invalid:{port}"
    assert resolved == [("models.invalid", port)] * 3  # stored, tested, used


# The runtime uses the tenant's key, and a replaced one from the next run on


def run_once(api: APIClient, agent_id: object, text: str) -> Run:
    session = api.post("/api/v1/sessions/", {"agent": str(agent_id)}, format="json").json()
    run_id = api.post(f"/api/v1/sessions/{session['id']}/messages/", {"content": text}, format="json").json()[
        "run"
    ]["id"]
    execute_run(run_id)
    return Run.objects.get(pk=run_id)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_replaced_key_is_used_by_the_next_run(
    cast: Cast,
    alice_api: APIClient,
    fake_model: FakeModelServer,
    caplog: pytest.LogCaptureFixture,
    provider: str,
) -> None:
    fake_model.set_default(Turn(text="hello"))
    agent = make_agent(tenant=cast.tenant_a, model_provider=provider)

    with caplog.at_level(logging.DEBUG):
        key_id = add_key(alice_api, provider=provider).json()["id"]
        first = run_once(alice_api, agent.pk, "first")
        alice_api.patch(f"{URL}{key_id}/", {"api_key": OTHER_SECRET}, format="json")
        second = run_once(alice_api, agent.pk, "second")
        alice_api.post(f"{URL}{key_id}/test/")

    assert (first.status, second.status) == ("completed", "completed")
    assert [sent_key(request) for request in fake_model.requests] == [SECRET, OTHER_SECRET]
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "provider key" in logged
    assert SECRET not in logged and OTHER_SECRET not in logged
    events = json.dumps(list(RunEvent.objects.values_list("data", flat=True)))
    assert SECRET not in events and OTHER_SECRET not in events


def test_the_schema_documents_the_endpoints_and_a_write_only_key(cast: Cast) -> None:
    schema = yaml.safe_load(APIClient().get("/api/v1/schema/").content)

    assert {
        "/api/v1/provider-keys/",
        "/api/v1/provider-keys/{id}/",
        "/api/v1/provider-keys/{id}/test/",
    } <= set(schema["paths"])
    components = schema["components"]["schemas"]
    assert components["ProviderKeyRequest"]["properties"]["api_key"]["writeOnly"] is True
    assert components["ProviderKeyRequest"]["required"] == ["api_key", "provider"]
    assert list(components["ProviderKey"]["properties"]) == [
        "id",
        "provider",
        "base_url",
        "created_at",
        "updated_at",
    ]
    assert list(components["ProviderKeyCheck"]["properties"]) == ["is_working", "message"]
    update = schema["paths"]["/api/v1/provider-keys/{id}/"]["patch"]
    assert update["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/PatchedProviderKeyUpdateRequest"
    }
    assert update["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ProviderKey"
    }
    assert schema["paths"]["/api/v1/provider-keys/{id}/test/"]["post"]["responses"]["200"]["content"][
        "application/json"
    ]["schema"] == {"$ref": "#/components/schemas/ProviderKeyCheck"}
