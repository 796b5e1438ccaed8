"""The web pages when the server's threads for outside waits are all taken (``core.outside_waits``):
a message says what was not done, and nothing is checked."""

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from core.api.errors import ServerBusy
from mcp_servers.models import McpHealth, McpServer
from tenants.models import ProviderKey
from tests.fake_model_server import FakeModelServer
from tests.web.conftest import World
from web.responses import TOAST_EVENT

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("outside_waits_taken")]

ClientFor = Callable[[Any], Client]


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_saving_a_server_keeps_it_and_says_it_is_not_checked_yet(world: World, client_for: ClientFor) -> None:
    response = client_for(world.dave).post(
        "/mcp/new/",
        {
            "name": "docs",
            "transport": "streamable_http",
            "url": "https://mcp.example.com/mcp",
            "token": "",
            "headers": "",
            "connect_timeout_seconds": "10",
            "call_timeout_seconds": "30",
            "is_enabled": "on",
        },
        follow=True,
    )

    server = McpServer.objects.get(tenant=world.cast.tenant_a, name="docs")
    assert response.redirect_chain == [(f"/mcp/{server.pk}/", 302)]
    assert messages_of(response) == [f"MCP server “docs” saved, not checked yet: {ServerBusy.default_detail}"]
    assert (server.health_status, server.last_checked_at) == (McpHealth.UNKNOWN, None)


@pytest.mark.parametrize("is_htmx", [False, True], ids=["form", "htmx"])
def test_check_now_says_the_server_was_not_checked(
    world: World, client_for: ClientFor, is_htmx: bool
) -> None:
    server = McpServer.objects.create(
        tenant=world.cast.tenant_a,
        name="docs",
        transport="streamable_http",
        url="https://mcp.example.com/mcp",
    )
    client = client_for(world.dave)

    if is_htmx:
        response = client.post(f"/mcp/{server.pk}/check/", HTTP_HX_REQUEST="true")
        toast = json.loads(response["HX-Trigger"])
    else:
        response = client.post(f"/mcp/{server.pk}/check/", follow=True)

    expected = f"docs was not checked: {ServerBusy.default_detail}"
    if is_htmx:
        assert response.status_code == 200
        assert toast == {TOAST_EVENT: {"message": expected, "level": "error"}}
    else:
        assert response.redirect_chain == [(f"/mcp/{server.pk}/", 302)]
        assert messages_of(response) == [expected]
    server.refresh_from_db()
    assert (server.health_status, server.last_checked_at) == (McpHealth.UNKNOWN, None)


def test_testing_a_key_says_it_was_not_tested_and_calls_no_provider(
    world: World, client_for: ClientFor, fake_model: FakeModelServer
) -> None:
    key = ProviderKey.objects.create(
        tenant=world.cast.tenant_a, provider="anthropic", api_key="page-key-0123456789"
    )

    response = client_for(world.dave).post(f"/settings/provider-keys/{key.pk}/test/", follow=True)

    assert messages_of(response) == [f"Anthropic key not tested: {ServerBusy.default_detail}"]
    assert fake_model.model_list_requests == []


def test_saving_a_key_with_a_base_url_keeps_the_form_and_stores_nothing(
    world: World, client_for: ClientFor
) -> None:
    response = client_for(world.dave).post(
        "/settings/provider-keys/",
        {"provider": "openai", "api_key": "page-key-0123456789", "base_url": "https://llm.example.com/v1"},
    )

    assert response.status_code == 503
    assert response.context["provider_key_form"].non_field_errors() == [
        f"Not saved: {ServerBusy.default_detail}"
    ]
    assert ProviderKey.objects.count() == 0
