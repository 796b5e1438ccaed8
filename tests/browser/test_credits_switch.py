"""An owner whose agent stops for a model without a price turns credits off in the settings page,
and the agent answers; then turns them on again (issue 50)."""

from pathlib import Path

from playwright.sync_api import Page, expect

from billing.models import CreditAccount
from billing.services import credits_grant
from tests.browser.conftest import (
    BROWSER_MARKS,
    expect_live,
    last_answer,
    open_chat,
    send,
    shoot,
    sign_in,
)
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn

pytestmark = BROWSER_MARKS


def test_an_owner_turns_credits_off_for_an_unpriced_model_and_on_again(
    page: Page, cast: Cast, fake_model: FakeModelServer, screenshot_dir: Path
) -> None:
    agent = make_agent(
        tenant=cast.tenant_a, name="Local", model_provider="anthropic", model_name="my-local-model"
    )
    credits_grant(tenant=cast.tenant_a, amount_micros=5_000_000)
    fake_model.script(Turn(text="Answered on the local model."))
    sign_in(page, "alice@a.test", "alice-password")
    open_chat(page, agent)

    send(page, "hello")
    expect(last_answer(page)).to_contain_text("no price for this model")
    expect(last_answer(page)).to_contain_text("No price for this model: anthropic:my-local-model")
    chat_url = page.url

    page.goto("/settings/#credits")
    page.get_by_role("button", name="Turn credits off").click()
    expect(page.locator("#credits-state")).to_contain_text("Credits are off")
    expect(page.locator("#credits-state")).to_contain_text("The balance of 5.000000 credits")
    shoot(page, screenshot_dir, "credits-off")
    assert CreditAccount.objects.get(tenant=cast.tenant_a).is_enabled is False

    page.goto(chat_url)
    expect_live(page)
    send(page, "hello again")
    expect(last_answer(page)).to_contain_text("Answered on the local model.")

    page.goto("/settings/#credits")
    page.get_by_role("button", name="Turn credits on").click()
    expect(page.get_by_role("button", name="Turn credits off")).to_be_visible()
    expect(page.locator("#credit-balance")).to_have_text("5.000000")
    assert CreditAccount.objects.get(tenant=cast.tenant_a).is_enabled is True
