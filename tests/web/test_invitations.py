"""Members join by invitation: nobody chooses another person's password, links work once and expire."""

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.test import Client
from django.utils import timezone

from audit.models import AuditEntry
from tenants.api_keys import hash_secret
from tenants.models import Invitation, Membership
from tests.web.conftest import World

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]
LINK = re.compile(
    r'id="new-invitation" class="mono" type="text" readonly value="(http://testserver/invitations/[^"]+/)"'
)
NEW_PASSWORD = "kettle-orbit-57"


def invite(client: Client, email: str, role: str = "member", **extra: str) -> tuple[Any, str]:
    """Post the member form; the answer and the invitation link it shows."""
    response = client.post("/settings/members/", {"email": email, "role": role, **extra})
    found = LINK.search(response.content.decode())
    return response, found.group(1) if found else ""


def path_of(link: str) -> str:
    return link.removeprefix("http://testserver")


def accept_with_password(link: str, password: str = NEW_PASSWORD) -> tuple[Client, Any]:
    client = Client()
    response = client.post(path_of(link), {"new_password1": password, "new_password2": password})
    return client, response


def can_sign_in(email: str, password: str) -> bool:
    return Client().login(username=email, password=password)


def test_an_admin_of_another_tenant_cannot_take_over_a_new_hire(world: World, client_for: ClientFor) -> None:
    """The pre-hijack: B's admin adds A's new hire first, with a password of their choosing."""
    by_carol, carols_link = invite(
        client_for(world.cast.carol), "newhire@a.example", password="carols-choice-1"
    )
    by_alice, alices_link = invite(client_for(world.cast.alice), "NewHire@A.example")

    assert (by_carol.status_code, by_alice.status_code) == (200, 200)
    assert not User.objects.filter(username="newhire@a.example").exists()
    assert not can_sign_in("newhire@a.example", "carols-choice-1")

    newhire, accepted = accept_with_password(alices_link)

    assert accepted.status_code == 302 and accepted["Location"] == "/"
    assert newhire.get("/account/").status_code == 200
    assert not can_sign_in("newhire@a.example", "carols-choice-1")
    assert can_sign_in("newhire@a.example", NEW_PASSWORD)
    # Carol's own link now needs the account's password: it sets none.
    carols_page = Client().get(path_of(carols_link)).content.decode()
    carols_try = Client().post(
        path_of(carols_link), {"new_password1": "carols-choice-1", "new_password2": "carols-choice-1"}
    )
    assert "Sign in to accept" in carols_page and "new_password1" not in carols_page
    assert carols_try.status_code == 400
    assert not can_sign_in("newhire@a.example", "carols-choice-1")
    memberships = Membership.objects.filter(user__username="newhire@a.example")
    assert list(memberships.values_list("tenant__slug", "role")) == [("tenant-a", "member")]


def test_the_member_form_answers_the_same_for_known_and_unknown_emails(
    world: World, client_for: ClientFor
) -> None:
    client = client_for(world.cast.alice)
    carol_password = world.cast.carol.password

    known, known_link = invite(client, "carol@b.test")
    unknown, unknown_link = invite(client, "nobody@b.test")

    def normalized(response: Any, email: str, link: str) -> str:
        # The pending list grows by one, and CSRF tokens and times differ between any two answers.
        body = re.sub(
            r"<tr>\s*<td>(nobody|carol)@b\.test</td>.*?</tr>", "", response.content.decode(), flags=re.S
        )
        body = body.replace(link, "LINK").replace(email, "EMAIL")
        body = re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "", body)
        body = re.sub(r'"X-CSRFToken": "[^"]+"', "", body)
        body = re.sub(r"<time[^>]*>[^<]*</time>", "", body)
        return re.sub(r"\s+", " ", body)

    assert (known.status_code, unknown.status_code) == (200, 200)
    assert known["Cache-Control"] == unknown["Cache-Control"] == "no-store"
    assert normalized(known, "carol@b.test", known_link) == normalized(unknown, "nobody@b.test", unknown_link)
    assert "Invitation created" in known.content.decode()
    assert not User.objects.filter(username="nobody@b.test").exists()
    world.cast.carol.refresh_from_db()
    assert world.cast.carol.password == carol_password
    assert not Membership.objects.filter(tenant=world.cast.tenant_a, user=world.cast.carol).exists()
    assert sorted(Invitation.objects.values_list("tenant__slug", "email", "role")) == [
        ("tenant-a", "carol@b.test", "member"),
        ("tenant-a", "nobody@b.test", "member"),
    ]


def test_an_existing_account_accepts_by_signing_in_and_only_that_account(
    world: World, client_for: ClientFor
) -> None:
    _, link = invite(client_for(world.cast.alice), "carol@b.test", role="viewer")
    carol_password = world.cast.carol.password

    anonymous_page = Client().get(path_of(link)).content.decode()
    anonymous_post = Client().post(
        path_of(link), {"new_password1": "x-pass-123", "new_password2": "x-pass-123"}
    )
    as_bob_page = client_for(world.cast.bob).get(path_of(link)).content.decode()
    as_bob = client_for(world.cast.bob).post(path_of(link))

    world.cast.carol.refresh_from_db()
    assert f'href="/login/?next={path_of(link)}"' in anonymous_page
    assert anonymous_post.status_code == 400 and world.cast.carol.password == carol_password
    assert "You are signed in as bob@a.test. This invitation is for carol@b.test" in as_bob_page
    assert as_bob.status_code == 403
    assert not Membership.objects.filter(tenant=world.cast.tenant_a, user=world.cast.carol).exists()
    assert Invitation.objects.get().accepted_at is None

    carol = Client()
    assert carol.login(username="carol@b.test", password="carol-password")
    joined = carol.post(path_of(link))

    assert joined.status_code == 302 and joined["Location"] == "/"
    assert Membership.objects.get(tenant=world.cast.tenant_a, user=world.cast.carol).role == "viewer"
    assert carol.session["active_tenant_id"] == str(world.cast.tenant_a.pk)
    invitation = Invitation.objects.get()
    assert (invitation.accepted_by, invitation.accepted_at is not None) == (world.cast.carol, True)


def test_an_invitation_works_once(world: World, client_for: ClientFor) -> None:
    _, link = invite(client_for(world.cast.alice), "once@a.test")

    _, first = accept_with_password(link)
    again_page = Client().get(path_of(link))
    _, again = accept_with_password(link, "another-pass-88")

    assert first.status_code == 302
    assert (
        again_page.status_code == 404 and "This invitation link is not valid" in again_page.content.decode()
    )
    assert again.status_code == 404
    assert can_sign_in("once@a.test", NEW_PASSWORD) and not can_sign_in("once@a.test", "another-pass-88")
    assert Membership.objects.filter(user__username="once@a.test").count() == 1


def test_an_invitation_expires_after_the_configured_hours(
    world: World, client_for: ClientFor, settings: Any
) -> None:
    settings.INVITATION_TTL_HOURS = 5
    _, link = invite(client_for(world.cast.alice), "late@a.test")
    invitation = Invitation.objects.get()
    lifetime = invitation.expires_at - invitation.created_at

    Invitation.objects.filter(pk=invitation.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    page = Client().get(path_of(link))
    _, accepted = accept_with_password(link)
    settings_page = client_for(world.cast.alice).get("/settings/").content.decode()

    assert round(lifetime.total_seconds() / 3600) == 5
    assert page.status_code == 404 and accepted.status_code == 404
    assert not User.objects.filter(username="late@a.test").exists()
    assert "late@a.test" not in settings_page


@pytest.mark.parametrize("token", ["not-a-token", "x" * 43, "%00"])
def test_an_unknown_token_answers_the_same_404(db: None, token: str) -> None:
    response = Client().get(f"/invitations/{token}/")

    assert response.status_code == 404
    assert "This invitation link is not valid" in response.content.decode()
    assert response["Cache-Control"] == "no-store"


def test_the_new_password_follows_the_password_rules(world: World, client_for: ClientFor) -> None:
    _, link = invite(client_for(world.cast.alice), "weak@a.test")

    _, common = accept_with_password(link, "password")
    mismatch = Client().post(
        path_of(link), {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD + "x"}
    )
    empty = Client().post(path_of(link), {})

    assert common.status_code == 400
    assert "This password is too common." in common.content.decode()
    assert mismatch.status_code == 400
    assert "The two password fields didn\u2019t match." in mismatch.content.decode()
    assert empty.status_code == 400 and "This field is required." in empty.content.decode()
    assert not User.objects.filter(username="weak@a.test").exists()
    assert Invitation.objects.get().accepted_at is None


def test_a_new_member_joins_with_the_invited_role_and_is_signed_in(
    world: World, client_for: ClientFor
) -> None:
    _, link = invite(client_for(world.dave), "new.admin@a.test", role="admin")

    client, accepted = accept_with_password(link)
    dashboard = client.get("/")

    user = User.objects.get(username="new.admin@a.test")
    assert accepted.status_code == 302
    assert (user.email, user.check_password(NEW_PASSWORD)) == ("new.admin@a.test", True)
    assert Membership.objects.get(user=user).role == "admin"
    assert dashboard.status_code == 200
    assert f"Welcome to {world.cast.tenant_a.name}: you joined as admin." in dashboard.content.decode()


def test_pending_invitations_are_listed_and_can_be_revoked(world: World, client_for: ClientFor) -> None:
    client = client_for(world.cast.alice)
    _, link = invite(client, "pending@a.test", role="viewer")
    invitation = Invitation.objects.get()

    listed = client.get("/settings/").content.decode()
    revoked = client.post(f"/settings/invitations/{invitation.pk}/revoke/")
    after = client.get("/settings/").content.decode()
    _, accepted = accept_with_password(link)

    assert "<td>pending@a.test</td>" in listed and f"/settings/invitations/{invitation.pk}/revoke/" in listed
    assert revoked.status_code == 302
    invitation.refresh_from_db()
    assert invitation.revoked_at is not None
    assert "<td>pending@a.test</td>" not in after
    assert accepted.status_code == 404 and not User.objects.filter(username="pending@a.test").exists()


def test_inviting_again_replaces_the_pending_link(world: World, client_for: ClientFor) -> None:
    client = client_for(world.cast.alice)
    _, first_link = invite(client, "twice@a.test")
    _, second_link = invite(client, "twice@a.test", role="admin")

    _, with_first = accept_with_password(first_link)
    _, with_second = accept_with_password(second_link)

    assert with_first.status_code == 404 and with_second.status_code == 302
    assert Membership.objects.get(user__username="twice@a.test").role == "admin"


def test_invitations_are_for_admins_and_owner_invitations_for_owners(
    world: World, client_for: ClientFor
) -> None:
    by_member, _ = invite(client_for(world.cast.bob), "x@a.test")
    by_admin_for_owner, _ = invite(client_for(world.dave), "boss@a.test", role="owner")
    _, owner_link = invite(client_for(world.cast.alice), "boss@a.test", role="owner")
    owner_invitation = Invitation.objects.get()
    admin_revokes_owner = client_for(world.dave).post(f"/settings/invitations/{owner_invitation.pk}/revoke/")
    member_revokes = client_for(world.cast.bob).post(f"/settings/invitations/{owner_invitation.pk}/revoke/")

    assert (by_member.status_code, by_admin_for_owner.status_code) == (403, 403)
    assert (admin_revokes_owner.status_code, member_revokes.status_code) == (403, 403)
    assert list(Invitation.objects.values_list("email", "role", "revoked_at")) == [
        ("boss@a.test", "owner", None)
    ]
    assert owner_link


@pytest.mark.parametrize(
    ("data", "field_error"),
    [
        ({"email": "not-an-email", "role": "member"}, "Enter a valid email address."),
        (
            {"email": "bob@a.test", "role": "member"},
            "This person is already a member; change their role instead.",
        ),
        (
            {"email": "x@a.test", "role": "emperor"},
            "Select a valid choice. emperor is not one of the available choices.",
        ),
        ({}, "This field is required."),
    ],
)
def test_the_member_form_refuses_bad_input(
    world: World, client_for: ClientFor, data: dict[str, str], field_error: str
) -> None:
    response = client_for(world.cast.alice).post("/settings/members/", data)

    assert response.status_code == 400 and field_error in response.content.decode()
    assert not Invitation.objects.exists()


def test_another_tenant_cannot_see_or_revoke_an_invitation(world: World, client_for: ClientFor) -> None:
    invite(client_for(world.cast.alice), "secret.hire@a.test")
    invitation = Invitation.objects.get()
    before = list(Invitation.objects.values())
    carol = client_for(world.cast.carol)

    revoke = carol.post(f"/settings/invitations/{invitation.pk}/revoke/")
    garbage = carol.post("/settings/invitations/not-a-uuid/revoke/")
    carols_settings = carol.get("/settings/").content.decode()

    assert (revoke.status_code, garbage.status_code) == (404, 404)
    assert "secret.hire@a.test" not in carols_settings
    assert list(Invitation.objects.values()) == before


def test_a_member_of_another_tenant_cannot_accept_someone_elses_invitation(
    world: World, client_for: ClientFor
) -> None:
    _, link = invite(client_for(world.cast.alice), "newhire@a.example")
    before = list(Invitation.objects.values())

    by_carol = client_for(world.cast.carol).post(
        path_of(link), {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}
    )

    assert by_carol.status_code == 403
    assert list(Invitation.objects.values()) == before
    assert not User.objects.filter(username="newhire@a.example").exists()
    assert not Membership.objects.filter(tenant=world.cast.tenant_a, user=world.cast.carol).exists()


def test_the_invitation_is_emailed_with_its_link(
    world: World, client_for: ClientFor, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        _, link = invite(client_for(world.cast.alice), "mailed@a.test", role="viewer")

    [message] = mail.outbox
    assert (message.subject, message.to) == (f"Join {world.cast.tenant_a.name} on Agentry", ["mailed@a.test"])
    assert f"Accept the invitation: {link}\n" in message.body
    assert "alice@a.test invited you to join" in message.body


def test_a_mail_server_that_refuses_leaves_the_invitation_valid_and_logs_no_link(
    world: World,
    client_for: ClientFor,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 1, 2

    with django_capture_on_commit_callbacks(execute=True):
        response, link = invite(client_for(world.cast.alice), "unmailed@a.test")

    invitation = Invitation.objects.get()
    token = link.rstrip("/").rsplit("/", 1)[1]
    assert response.status_code == 200
    assert [record.getMessage() for record in caplog.records if record.name == "tenants.invitations"] == [
        f"Could not e-mail invitation {invitation.pk}"
    ]
    assert token not in caplog.text
    assert invitation.token_hash == hash_secret(token)
    assert token not in str(list(Invitation.objects.values()))
    _, accepted = accept_with_password(link)
    assert accepted.status_code == 302


# Escapes, so that the test reads as what it is: each look-alike letter is named.
CYRILLIC_A = "\u0430"  # looks like Latin "a"
CYRILLIC_APPLE = "\u0430\u0440\u0440\u04cf\u0435"  # "apple" in Cyrillic look-alikes
LOOK_ALIKE = (
    "This address has letters of another script that look like the ones you may mean (such as a "
    "Cyrillic letter that looks like a Latin one); type it again in one script."
)


@pytest.mark.parametrize(
    "email",
    [
        f"newhire@{CYRILLIC_A}cme.example",  # one Cyrillic letter in a Latin domain
        f"newhire@{CYRILLIC_APPLE}.com",  # a whole label of look-alikes
        "newhire@xn--80ak6aa92e.com",  # the same, typed in its ASCII form
        f"new{CYRILLIC_A}hire@acme.example",  # in the local part
    ],
)
def test_a_look_alike_address_is_refused_with_a_field_message_and_changes_nothing(
    world: World, client_for: ClientFor, email: str
) -> None:
    audit_before = AuditEntry.objects.count()

    response, link = invite(client_for(world.cast.alice), email)

    assert response.status_code == 400 and not link
    assert LOOK_ALIKE in response.content.decode().replace("&#x27;", "'")
    assert 'aria-invalid="true"' in response.content.decode()
    assert not Invitation.objects.exists()
    assert AuditEntry.objects.count() == audit_before
    assert mail.outbox == []


def test_an_address_is_kept_in_one_spelling_and_its_owner_signs_in_with_any(
    world: World, client_for: ClientFor
) -> None:
    fullwidth = "\uff2e\uff45\uff57\uff28\uff49\uff52\uff45"  # "NewHire" in fullwidth letters
    response, link = invite(client_for(world.cast.alice), f"  {fullwidth}@B\u00dcCHER.Example ")
    _, accepted = accept_with_password(link)
    signed_in = Client().post(
        "/login/", {"username": "NEWHIRE@xn--bcher-kva.example", "password": NEW_PASSWORD}
    )

    assert (response.status_code, accepted.status_code, signed_in.status_code) == (200, 302, 302)
    assert Invitation.objects.get().email == "newhire@b\u00fccher.example"
    assert User.objects.get(username="newhire@b\u00fccher.example").email == "newhire@b\u00fccher.example"
