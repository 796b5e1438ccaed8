"""A member removed while their chat is open: the chat's socket closes within seconds and the page
says so, instead of the conversation going on streaming to someone who may no longer read it."""

from playwright.sync_api import Page, expect

from tenants.models import Membership
from tenants.services import membership_delete
from tests.browser.conftest import BROWSER_MARKS, open_chat, sign_in
from tests.conftest import Cast
from tests.factories import make_agent

pytestmark = BROWSER_MARKS


def test_removing_a_member_closes_their_open_chat(page: Page, cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Travel desk")
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    membership_delete(membership=Membership.objects.get(tenant=cast.tenant_a, user=cast.bob))

    connection = page.locator("[data-connection]")
    expect(connection).to_have_attribute("data-connection", "offline")
    expect(page.locator("[data-connection-label]")).to_have_text(
        "Signed out: reload the page to sign in again."
    )
