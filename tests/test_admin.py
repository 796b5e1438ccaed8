import pytest
from django.test import Client

from tenants.models import ApiKey
from tenants.services import api_key_create
from tests.conftest import Cast
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def signed_in(email: str, password: str) -> Client:
    client = Client()
    assert client.login(username=email, password=password)
    return client


def test_admin_shows_only_the_users_tenants(cast: Cast) -> None:
    make_agent(tenant=cast.tenant_a, name="Alpha agent")
    make_agent(tenant=cast.tenant_b, name="Beta agent")

    page = signed_in("alice@a.test", "alice-password").get("/admin/agents/agent/")

    assert page.status_code == 200
    assert b"Alpha agent" in page.content
    assert b"Beta agent" not in page.content


def test_admin_object_of_another_tenant_is_not_reachable(cast: Cast) -> None:
    other = make_agent(tenant=cast.tenant_b, name="Beta agent")
    client = signed_in("alice@a.test", "alice-password")

    page = client.get(f"/admin/agents/agent/{other.pk}/change/")
    post = client.post(f"/admin/agents/agent/{other.pk}/delete/", {"post": "yes"})

    assert page.status_code == 302  # the admin redirects a missing object to its index
    assert post.status_code == 302
    assert other.__class__.objects.filter(pk=other.pk).exists()


def test_viewer_may_look_but_not_change(cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Alpha agent")
    client = signed_in("victor@a.test", "victor-password")

    view = client.get(f"/admin/agents/agent/{agent.pk}/change/")
    delete = client.post(f"/admin/agents/agent/{agent.pk}/delete/", {"post": "yes"})

    assert view.status_code == 200
    assert b'name="_save"' not in view.content
    assert delete.status_code == 403
    assert agent.__class__.objects.filter(pk=agent.pk).exists()


def test_api_key_admin_never_shows_the_secret_and_can_revoke(cast: Cast) -> None:
    created = api_key_create(tenant=cast.tenant_a, created_by=cast.alice, name="ci key")
    client = signed_in("alice@a.test", "alice-password")

    page = client.get(f"/admin/tenants/apikey/{created.api_key.pk}/change/")
    client.post(
        "/admin/tenants/apikey/", {"action": "revoke_keys", "_selected_action": [str(created.api_key.pk)]}
    )

    assert page.status_code == 200
    assert created.api_key.secret_hash.encode() not in page.content
    assert created.plaintext.encode() not in page.content
    assert ApiKey.objects.get(pk=created.api_key.pk).revoked_at is not None
