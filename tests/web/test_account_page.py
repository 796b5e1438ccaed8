"""The account page: password, tenants, one's own API keys, signing out other browsers."""

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from tenants.api_keys import hash_secret
from tenants.models import ApiKey
from tenants.services import api_key_create, membership_set
from tests.web.conftest import World

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]
NEW_KEY = re.compile(r'id="new-key" class="mono" type="text" readonly value="([^"]+)"')


def signed_in(email: str, password: str) -> Client:
    client = Client()
    assert client.login(username=email, password=password)
    return client


def is_signed_in(client: Client) -> bool:
    return client.get("/account/").status_code == 200


def test_every_member_sees_their_tenants_and_roles(world: World, client_for: ClientFor) -> None:
    membership_set(tenant=world.cast.tenant_b, user=world.cast.victor, role="admin")

    page = client_for(world.cast.victor).get("/account/")
    body = page.content.decode()

    assert page.status_code == 200
    rows = re.findall(
        r"<td>([^<]+?)(?: <span class=\"muted small\">\(current\)</span>)?</td>\s*<td>(\w+)</td>", body
    )
    assert rows == [(world.cast.tenant_a.name, "viewer"), (world.cast.tenant_b.name, "admin")]
    assert 'href="/account/" aria-current="page"' in body


def test_changing_the_password_keeps_this_browser_and_signs_out_the_others(world: World) -> None:
    here = signed_in("bob@a.test", "bob-password")
    elsewhere = signed_in("bob@a.test", "bob-password")

    wrong_old = here.post(
        "/account/password/",
        {"old_password": "nope", "new_password1": "violet-canyon-42", "new_password2": "violet-canyon-42"},
    )
    too_common = here.post(
        "/account/password/",
        {"old_password": "bob-password", "new_password1": "password", "new_password2": "password"},
    )
    both_sessions_after_refusals = (is_signed_in(here), is_signed_in(elsewhere))
    changed = here.post(
        "/account/password/",
        {
            "old_password": "bob-password",
            "new_password1": "violet-canyon-42",
            "new_password2": "violet-canyon-42",
        },
    )

    assert wrong_old.status_code == 400
    assert "Your old password was entered incorrectly. Please enter it again." in wrong_old.content.decode()
    assert too_common.status_code == 400 and "This password is too common." in too_common.content.decode()
    assert both_sessions_after_refusals == (True, True)
    assert changed.status_code == 302 and changed["Location"] == "/account/"
    assert (is_signed_in(here), is_signed_in(elsewhere)) == (True, False)
    assert not Client().login(username="bob@a.test", password="bob-password")
    assert Client().login(username="bob@a.test", password="violet-canyon-42")


def test_signing_out_other_sessions_needs_the_password_and_keeps_this_one(world: World) -> None:
    here = signed_in("bob@a.test", "bob-password")
    elsewhere = signed_in("bob@a.test", "bob-password")
    alice = signed_in("alice@a.test", "alice-password")

    refused = here.post("/account/sessions/sign-out-others/", {"password": "guess"})
    still_in = is_signed_in(elsewhere)
    done = here.post("/account/sessions/sign-out-others/", {"password": "bob-password"})

    assert refused.status_code == 400 and "That is not your current password." in refused.content.decode()
    assert still_in
    assert done.status_code == 302
    assert (is_signed_in(here), is_signed_in(elsewhere), is_signed_in(alice)) == (True, False, True)
    assert Client().login(username="bob@a.test", password="bob-password")


def test_a_member_creates_an_api_key_shown_once_that_acts_with_their_role(
    world: World, client_for: ClientFor
) -> None:
    client = client_for(world.cast.victor)

    created = client.post("/account/api-keys/", {"name": "laptop", "scope": "write", "expires_in_days": "7"})
    plaintext = NEW_KEY.search(created.content.decode()).group(1)  # type: ignore[union-attr]
    key = ApiKey.objects.get(name="laptop")
    later = client.get("/account/").content.decode()
    api = Client(HTTP_AUTHORIZATION=f"Bearer {plaintext}")

    assert created.status_code == 200 and created["Cache-Control"] == "no-store"
    assert (key.tenant, key.created_by, key.scope, key.expires_at is not None) == (
        world.cast.tenant_a,
        world.cast.victor,
        "write",
        True,
    )
    assert key.secret_hash == hash_secret(plaintext.split("_", 2)[2])
    assert plaintext not in later and f"agt_{key.prefix}_…" in later
    # Victor is a viewer in tenant A: his key reads, and writes nothing.
    assert api.get("/api/v1/agents/").status_code == 200
    assert api.post("/api/v1/agents/", {"name": "x"}, content_type="application/json").status_code == 403


def test_the_account_page_lists_only_ones_own_keys_in_the_current_tenant(
    world: World, client_for: ClientFor
) -> None:
    api_key_create(tenant=world.cast.tenant_a, created_by=world.cast.bob, name="bob's own")
    api_key_create(tenant=world.cast.tenant_a, created_by=world.cast.alice, name="alice's key")
    api_key_create(tenant=world.cast.tenant_b, created_by=world.cast.carol, name="carol's key")

    body = client_for(world.cast.bob).get("/account/").content.decode()

    assert re.findall(r"<tr>\s*<td>([^<]+)</td>\s*<td class=\"mono small\">", body) == ["bob&#x27;s own"]


def test_revoking_ones_own_key(world: World, client_for: ClientFor) -> None:
    key = api_key_create(tenant=world.cast.tenant_a, created_by=world.cast.bob, name="old").api_key

    revoked = client_for(world.cast.bob).post(f"/account/api-keys/{key.pk}/revoke/")

    key.refresh_from_db()
    assert revoked.status_code == 302 and key.revoked_at is not None


def test_nobody_revokes_another_persons_key_from_the_account_page(
    world: World, client_for: ClientFor
) -> None:
    alices = api_key_create(tenant=world.cast.tenant_a, created_by=world.cast.alice, name="alice's").api_key
    carols = api_key_create(tenant=world.cast.tenant_b, created_by=world.cast.carol, name="carol's").api_key
    bob = client_for(world.cast.bob)

    statuses = [
        bob.post(f"/account/api-keys/{alices.pk}/revoke/").status_code,
        bob.post(f"/account/api-keys/{carols.pk}/revoke/").status_code,
        bob.post("/account/api-keys/not-a-uuid/revoke/").status_code,
    ]

    assert statuses == [404, 404, 404]
    assert list(ApiKey.objects.filter(revoked_at__isnull=False)) == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "", "scope": "write"}, "This field is required."),
        ({"name": "k", "scope": "root"}, "Select a valid choice. root is not one of the available choices."),
        (
            {"name": "k", "scope": "read", "expires_in_days": "0"},
            "Ensure this value is greater than or equal to 1.",
        ),
        ({"name": "k" * 101, "scope": "read"}, "Ensure this value has at most 100 characters (it has 101)."),
    ],
)
def test_a_bad_key_form_answers_400_and_creates_nothing(
    world: World, client_for: ClientFor, data: dict[str, str], message: str
) -> None:
    response = client_for(world.cast.bob).post("/account/api-keys/", data)

    assert response.status_code == 400 and message in response.content.decode()
    assert not ApiKey.objects.exists()


def test_the_account_page_needs_a_signed_in_person(db: None) -> None:
    page = Client().get("/account/")
    create = Client().post("/account/api-keys/", {"name": "k", "scope": "read"})

    assert (page.status_code, page["Location"]) == (302, "/login/?next=/account/")
    assert create.status_code == 302 and not ApiKey.objects.exists()
