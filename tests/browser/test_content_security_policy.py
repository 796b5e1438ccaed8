"""The Content-Security-Policy in Chromium: an answer's images never reach another site, and the
pages that carry the policy (the app, the admin, the API docs) still work under it."""

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, Request, expect

from sessions.models import Run, RunStatus, Session
from tests.browser.conftest import (
    BROWSER_MARKS,
    RECORD_VIOLATIONS,
    last_answer,
    open_chat,
    reload_chat,
    send,
    sign_in,
)
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import LiveStack
from tests.web.conftest import finished_conversation

pytestmark = BROWSER_MARKS

# What a prompt-injected answer would write to send the conversation to another site: a
# backslash and a tab after the first slash both resolve to //evil.example/…
INJECTED_IMAGES = (
    "Here is the chart.\n\n"
    "![backslash](/\\evil.example/backslash.png)\n\n"
    '<img alt="tab" src="/&#9;/evil.example/tab.png">\n\n'
    '<img alt="raw backslash" src="/\\evil.example/raw.png">\n\n'
    "![protocol relative](//evil.example/relative.png)\n\n"
    "![own](/static/img/favicon.svg)\n"
)
# Markdown's own image syntax percent-encodes the backslash, which keeps that one on this site.
KEPT_IMAGES = ["/%5Cevil.example/backslash.png", "/static/img/favicon.svg"]


@pytest.fixture
def foreign_requests(page: Page, stack: LiveStack) -> Iterator[list[str]]:
    """Every request the page makes to an origin other than the live server's."""
    own = urlsplit(stack.base_url).netloc
    seen: list[str] = []

    def note(request: Request) -> None:
        if urlsplit(request.url).netloc != own:
            seen.append(request.url)

    page.on("request", note)
    yield seen


def image_sources(page: Page) -> list[str]:
    sources: list[str] = (
        last_answer(page)
        .locator(".part-text img")
        .evaluate_all("images => images.map((image) => image.getAttribute('src'))")
    )
    return sources


def violations(page: Page) -> list[str]:
    found: list[str] = page.evaluate("window.__violations")
    return found


def test_an_answers_images_from_another_site_are_never_fetched(
    page: Page, cast: Cast, fake_model: FakeModelServer, foreign_requests: list[str]
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Charts", model_provider="anthropic")
    fake_model.script(Turn(text=INJECTED_IMAGES))
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "Draw the chart")
    expect(page.locator("[data-chat-status]")).to_have_text("idle")
    expect(last_answer(page).locator(".part-text img")).to_have_count(len(KEPT_IMAGES))
    kept_live = image_sources(page)
    reload_chat(page)
    expect(last_answer(page).locator(".part-text img")).to_have_count(len(KEPT_IMAGES))
    expect(last_answer(page).locator(".part-text")).to_contain_text("raw backslash")

    assert kept_live == KEPT_IMAGES
    assert image_sources(page) == KEPT_IMAGES

    assert foreign_requests == []


def test_every_page_of_the_app_answers_with_the_policy(page: Page, stack: LiveStack) -> None:
    response = page.goto("/login/")

    assert response is not None
    policy = response.headers["content-security-policy"]
    assert "img-src 'self' data: blob:;" in policy
    assert "script-src 'self';" in policy
    assert f"connect-src 'self' ws://{urlsplit(stack.base_url).netloc};" in policy


def test_the_chat_runs_under_the_policy_with_no_violation(
    page: Page, cast: Cast, fake_model: FakeModelServer
) -> None:
    page.add_init_script(RECORD_VIOLATIONS)
    agent = make_agent(tenant=cast.tenant_a, name="Writer", model_provider="anthropic")
    fake_model.script(Turn(text="A **bold** answer with `code`."))
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "Hello")
    expect(last_answer(page).locator(".part-text strong")).to_have_text("bold")

    assert violations(page) == []


def test_an_active_runs_page_still_refreshes_itself_while_seen(page: Page, cast: Cast) -> None:
    page.add_init_script(RECORD_VIOLATIONS)
    agent = make_agent(tenant=cast.tenant_a, name="Worker")
    session = Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.bob)
    run = finished_conversation(session, question="Hi", answer="Hello")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.EXECUTING, finished_at=None)
    sign_in(page, "bob@a.test", "bob-password")

    page.goto(f"/runs/{run.pk}/")
    badge = page.locator("#run-timeline h1 .badge")
    expect(badge).to_have_text("executing")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    expect(badge).to_have_text("completed")
    expect(page.locator("#run-timeline[hx-get]")).to_have_count(0)

    assert violations(page) == []


def test_the_admin_and_the_api_docs_work_under_the_policy(page: Page, cast: Cast) -> None:
    page.add_init_script(RECORD_VIOLATIONS)
    get_user_model().objects.create_superuser("root@platform.test", "root@platform.test", "root-password")
    seen: dict[str, list[str]] = {}

    page.goto("/admin/login/")
    page.locator("#id_username").fill("root@platform.test")
    page.locator("#id_password").fill("root-password")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Site administration")).to_be_visible()
    seen["admin index"] = violations(page)
    page.goto("/admin/tenants/tenant/")
    page.get_by_role("link", name="tenant-a", exact=True).click()
    expect(page.locator("#id_name")).to_have_value("Acme Travel")
    seen["admin change form"] = violations(page)
    page.goto("/admin/auth/user/add/")
    expect(page.locator("#id_password1")).to_be_visible()
    seen["admin add form"] = violations(page)
    page.goto("/api/v1/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Agentry API")
    page.locator(".opblock-summary").first.click()
    expect(page.locator(".opblock-body").first).to_be_visible()
    seen["api docs"] = violations(page)

    assert seen == {"admin index": [], "admin change form": [], "admin add form": [], "api docs": []}
