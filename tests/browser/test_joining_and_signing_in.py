"""Joining by invitation and signing in, in Chromium.

The invitation link's page must post its form as a browser really does.
Django's test client sends no Origin header; Chromium sends one on every form post, and sends
``Origin: null`` from a page whose Referrer-Policy is ``no-referrer``, which Django's CSRF check
refuses. Only a real browser shows whether a person can join.
"""

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tenants.models import Invitation, Membership
from tenants.sign_in_throttle import sign_in_failures_clear
from tests.browser.conftest import BROWSER_MARKS, DESKTOP, WAIT_MS, sign_in
from tests.conftest import Cast
from tests.live import LIVE_SIGN_IN_FAILURE_LIMIT, LiveStack

pytestmark = BROWSER_MARKS

NEW_PASSWORD = "kettle-orbit-57"


@pytest.fixture
def fresh_context(browser: Browser, stack: LiveStack) -> Iterator[BrowserContext]:
    """Another person's browser: no cookies shared with the inviter's."""
    context = browser.new_context(viewport=DESKTOP, base_url=stack.base_url, reduced_motion="reduce")
    context.set_default_timeout(WAIT_MS)
    yield context
    context.close()


def invite(page: Page, email: str, role: str) -> str:
    """Alice invites ``email`` from the settings page; the link the page shows once."""
    sign_in(page, "alice@a.test", "alice-password")
    page.goto("/settings/")
    page.locator("#id_email").fill(email)
    page.locator("#id_role").select_option(role)
    page.get_by_role("button", name="Invite").click()
    expect(page.get_by_role("heading", name="Invitation created")).to_be_visible()
    link = page.locator("#new-invitation").input_value()
    assert link.startswith(f"{page.url.split('/settings/')[0]}/invitations/")
    return link


def expect_joined(page: Page, tenant_name: str, role: str) -> None:
    page.wait_for_url("**/")
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
    expect(page.locator(".toast")).to_contain_text(f"Welcome to {tenant_name}: you joined as {role}.")


def test_a_new_person_joins_from_their_own_browser_and_lands_signed_in(
    page: Page, fresh_context: BrowserContext, cast: Cast
) -> None:
    link = invite(page, "newhire@a.example", "member")

    newcomer = fresh_context.new_page()
    opened = newcomer.goto(link)
    expect(newcomer.get_by_role("heading", name="Join Acme Travel")).to_be_visible()
    newcomer.get_by_label("Choose a password").fill(NEW_PASSWORD)
    newcomer.get_by_label("Repeat the password").fill(NEW_PASSWORD)
    newcomer.get_by_role("button", name="Create account and join").click()

    expect_joined(newcomer, "Acme Travel", "member")
    expect(newcomer.locator(".tenant-name")).to_have_text("Active tenant: Acme Travel")
    # Other sites never see the link's token in a Referer.
    assert opened is not None and opened.headers["referrer-policy"] == "same-origin"
    membership = Membership.objects.get(tenant=cast.tenant_a, user__username="newhire@a.example")
    assert membership.role == "member"
    assert membership.user.check_password(NEW_PASSWORD)
    assert Invitation.objects.get(email="newhire@a.example").accepted_by == membership.user


def test_an_existing_account_signs_in_from_the_link_and_joins(
    page: Page, fresh_context: BrowserContext, cast: Cast
) -> None:
    link = invite(page, "carol@b.test", "viewer")

    carol = fresh_context.new_page()
    carol.goto(link)
    carol.get_by_role("link", name="Sign in to accept").click()
    carol.get_by_label("Email").fill("carol@b.test")
    carol.get_by_label("Password").fill("carol-password")
    carol.get_by_role("button", name="Sign in").click()
    # Signed in, back on the invitation's page.
    carol.wait_for_url(link)
    carol.get_by_role("button", name="Join Acme Travel").click()

    expect_joined(carol, "Acme Travel", "viewer")
    # Carol is in two tenants now; the one she joined is the active one.
    expect(carol.get_by_label("Active tenant")).to_have_value(str(cast.tenant_a.pk))
    assert Membership.objects.get(tenant=cast.tenant_a, user=cast.carol).role == "viewer"
    assert Invitation.objects.get(email="carol@b.test").accepted_by == cast.carol


@pytest.fixture
def failures_forgotten() -> Iterator[None]:
    """The live server counts in the cache this process shares: start from no failures (other tests
    sign in from this address too), and leave no lockout to later tests."""
    sign_in_failures_clear(address="127.0.0.1", username="alice@a.test")
    yield
    sign_in_failures_clear(address="127.0.0.1", username="alice@a.test")


def test_wrong_passwords_past_the_limit_show_the_lockout_and_refuse_the_right_one(
    page: Page, cast: Cast, failures_forgotten: None
) -> None:
    page.goto("/login/")
    for attempt in range(LIVE_SIGN_IN_FAILURE_LIMIT):
        page.get_by_label("Email").fill("alice@a.test")
        page.get_by_label("Password").fill(f"guess-{attempt}")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_have_text(
            "That email and password do not match an account. Check them and try again."
        )

    page.get_by_label("Email").fill("alice@a.test")
    page.get_by_label("Password").fill("alice-password")
    with page.expect_response("**/login/") as answer:
        page.get_by_role("button", name="Sign in").click()

    expect(page.get_by_role("alert")).to_have_text(
        re.compile(r"^Too many failed sign-ins\. Wait \d+ minutes?, then try again\.$")
    )
    assert answer.value.status == 429
    page.goto("/")
    page.wait_for_url("**/login/?next=/")
