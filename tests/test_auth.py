from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from tenants.actors import actor_for_api_key
from tenants.authentication import authenticate_api_key
from tenants.models import ApiKey
from tenants.services import api_key_create, api_key_revoke
from tests.conftest import Cast
from tests.factories import field_values

pytestmark = pytest.mark.django_db


def test_no_credentials_get_401_with_error_body(cast: Cast) -> None:
    response = APIClient().get("/api/v1/agents/")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


@pytest.mark.parametrize("token", ["nonsense", "agt_abc_def", "agt__", "Basic abc"])
def test_invalid_keys_get_401(cast: Cast, token: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    response = client.get("/api/v1/agents/")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"


def test_revoked_and_expired_keys_get_401(cast: Cast) -> None:
    revoked = api_key_create(tenant=cast.tenant_a, created_by=cast.alice, name="revoked")
    api_key_revoke(api_key=revoked.api_key)
    expired = api_key_create(
        tenant=cast.tenant_a,
        created_by=cast.alice,
        name="expired",
        expires_at=timezone.now() - timedelta(seconds=1),
    )
    for created in (revoked, expired):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {created.plaintext}")
        assert client.get("/api/v1/agents/").status_code == 401


def test_key_of_a_removed_member_is_refused(cast: Cast) -> None:
    created = api_key_create(tenant=cast.tenant_a, created_by=cast.bob, name="bob's")
    cast.bob.memberships.all().delete()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {created.plaintext}")

    assert client.get("/api/v1/agents/").status_code == 403


def test_api_keys_are_stored_hashed(cast: Cast) -> None:
    created = api_key_create(tenant=cast.tenant_a, created_by=cast.alice, name="hashed")
    secret = created.plaintext.split("_", 2)[2]

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {ApiKey._meta.db_table}")  # noqa: S608 - a fixed table name
        raw_rows = [" ".join(str(value) for value in row) for row in cursor.fetchall()]

    assert len(raw_rows) == 1
    assert created.plaintext not in raw_rows[0]
    assert secret not in raw_rows[0]
    assert created.api_key.prefix in raw_rows[0]


def test_using_a_key_records_last_used(cast: Cast) -> None:
    created = api_key_create(tenant=cast.tenant_a, created_by=cast.alice, name="used")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {created.plaintext}")

    client.get("/api/v1/agents/")

    assert ApiKey.objects.get(pk=created.api_key.pk).last_used_at is not None


def test_browser_session_acts_in_the_users_tenant(cast: Cast) -> None:
    client = APIClient()
    assert client.login(username="carol@b.test", password="carol-password")

    response = client.get("/api/v1/agents/")

    assert response.status_code == 200
    assert response.json()["count"] == 0


def test_session_writes_need_csrf(cast: Cast) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.login(username="alice@a.test", password="alice-password")

    response = client.post("/api/v1/agents/", {"name": "x"}, format="json")

    assert response.status_code == 403


def test_key_lookup_loads_what_the_orm_loads(cast: Cast) -> None:
    """``authenticate_api_key`` loads the key with its tenant and creator."""
    created = api_key_create(tenant=cast.tenant_a, created_by=cast.alice, name="exact")
    cast.tenant_a.settings = {"messages_per_minute_per_user": 7}
    cast.tenant_a.save(update_fields=["settings"])

    api_key = authenticate_api_key(created.plaintext)

    assert api_key is not None
    expected = ApiKey.objects.select_related("tenant", "created_by").get(pk=created.api_key.pk)
    assert field_values(api_key) == field_values(expected)
    assert field_values(api_key.tenant) == field_values(expected.tenant)
    assert api_key.tenant.settings == {"messages_per_minute_per_user": 7}
    assert field_values(api_key.created_by) == field_values(expected.created_by)
    assert api_key._state.adding is False and api_key.tenant._state.db == "default"


def test_key_lookup_of_a_removed_member_has_no_role(cast: Cast) -> None:
    created = api_key_create(tenant=cast.tenant_a, created_by=cast.bob, name="bob's")
    cast.bob.memberships.all().delete()

    api_key = authenticate_api_key(created.plaintext)

    assert api_key is not None and actor_for_api_key(api_key) is None
    assert authenticate_api_key(created.plaintext.replace(created.api_key.prefix, "0" * 12)) is None
