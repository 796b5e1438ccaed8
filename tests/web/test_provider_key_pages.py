"""A tenant's provider keys on the settings page: add, replace, test, delete; never shown back."""

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from tenants.models import ProviderKey
from tenants.provider_keys.outbound import BASE_URL_REFUSED
from tests.fake_model_server import FakeModelServer
from tests.web.conftest import World

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]
SECRET = "page-secret-key-0123456789"
OTHER_SECRET = "page-replacement-key-9876543210"


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_an_admin_adds_and_replaces_a_key_that_is_never_shown(world: World, client_for: ClientFor) -> None:
    client = client_for(world.dave)

    added = client.post("/settings/provider-keys/", {"provider": "openai", "api_key": SECRET, "base_url": ""})
    page_after_add = client.get("/settings/").content.decode()
    replaced = client.post(
        "/settings/provider-keys/", {"provider": "openai", "api_key": f" {OTHER_SECRET} ", "base_url": ""}
    )
    page_after_replace = client.get("/settings/").content.decode()

    assert (added.status_code, added["Location"]) == (302, "/settings/#provider-keys")
    assert replaced.status_code == 302
    key = ProviderKey.objects.get()
    assert (key.tenant, key.provider, key.api_key, key.base_url) == (
        world.cast.tenant_a,
        "openai",
        OTHER_SECRET,
        "",
    )
    for body in (page_after_add, page_after_replace):
        assert SECRET not in body and OTHER_SECRET not in body
        assert '<tr id="provider-key-openai">' in body and "stored (hidden)" in body


def test_form_errors_show_inline_without_echoing_the_key(world: World, client_for: ClientFor) -> None:
    response = client_for(world.dave).post(
        "/settings/provider-keys/",
        {"provider": "anthropic", "api_key": SECRET, "base_url": "http://169.254.169.254/latest"},
    )
    body = response.content.decode()

    assert response.status_code == 400
    assert BASE_URL_REFUSED in body
    assert SECRET not in body
    assert not ProviderKey.objects.exists()


def test_testing_a_key_reports_the_outcome(
    world: World, client_for: ClientFor, fake_model: FakeModelServer
) -> None:
    client = client_for(world.dave)
    key = ProviderKey.objects.create(tenant=world.cast.tenant_a, provider="anthropic", api_key=SECRET)

    working = client.post(f"/settings/provider-keys/{key.pk}/test/", follow=True)
    fake_model.accept_api_keys("another-key")
    refused = client.post(f"/settings/provider-keys/{key.pk}/test/", follow=True)

    assert messages_of(working) == ["Anthropic key: The key works: the provider accepted it."]
    assert messages_of(refused) == ["Anthropic key: The provider refused this key."]
    assert 'class="toast toast-error"' in refused.content.decode()


def test_deleting_a_key(world: World, client_for: ClientFor) -> None:
    key = ProviderKey.objects.create(tenant=world.cast.tenant_a, provider="anthropic", api_key=SECRET)

    response = client_for(world.dave).post(f"/settings/provider-keys/{key.pk}/delete/", follow=True)

    assert messages_of(response) == ["Anthropic key deleted."]
    assert not ProviderKey.objects.exists()
    assert "No provider keys: agents use the platform's." in response.content.decode()


def test_members_cannot_manage_keys(world: World, client_for: ClientFor) -> None:
    key = ProviderKey.objects.create(tenant=world.cast.tenant_a, provider="anthropic", api_key=SECRET)
    client = client_for(world.cast.bob)

    responses = [
        client.post("/settings/provider-keys/", {"provider": "openai", "api_key": OTHER_SECRET}),
        client.post(f"/settings/provider-keys/{key.pk}/test/"),
        client.post(f"/settings/provider-keys/{key.pk}/delete/"),
    ]

    assert [response.status_code for response in responses] == [403, 403, 403]
    assert list(ProviderKey.objects.values_list("provider", "api_key")) == [("anthropic", SECRET)]


def test_another_tenants_key_is_404_and_unchanged(
    world: World, client_for: ClientFor, fake_model: FakeModelServer
) -> None:
    key = ProviderKey.objects.create(tenant=world.cast.tenant_a, provider="anthropic", api_key=SECRET)
    client = client_for(world.cast.carol)

    tested = client.post(f"/settings/provider-keys/{key.pk}/test/")
    deleted = client.post(f"/settings/provider-keys/{key.pk}/delete/")
    page = client.get("/settings/").content.decode()

    assert (tested.status_code, deleted.status_code) == (404, 404)
    assert list(ProviderKey.objects.values_list("tenant", "provider", "api_key")) == [
        (world.cast.tenant_a.pk, "anthropic", SECRET)
    ]
    assert fake_model.model_list_requests == []
    assert "provider-key-anthropic" not in page
