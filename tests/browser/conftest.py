"""Shared parts of the browser tests: a live stack, Debian's Chromium, and the steps people take.

Each test module under ``tests/browser/`` gets its own live server and worker (module scope).
Debian's Chromium at /usr/bin/chromium; never a browser download. Screenshots go to
``$AGENTRY_SCREENSHOTS`` when set (``docs/screenshots`` to refresh the README's), else to a
temporary directory.
"""

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from agents.models import Agent
from tests.conftest import Cast
from tests.fake_model_server import FakeModelServer
from tests.live import LiveStack

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
WAIT_MS = 20_000
SLOW_TEXT = "The quick brown fox jumps over the lazy dog. " * 12

# Each browser test module sets ``pytestmark = BROWSER_MARKS``.
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Chromium is not installed at /usr/bin/chromium"),
    pytest.mark.timeout(180),
]

# Records what the chat renders as it happens: each state of streaming text, each tool card state.
RECORD_CHAT = """
window.__chat = {texts: [], states: []};
new MutationObserver((records) => {
  for (const record of records) {
    const element = record.target.nodeType === 3 ? record.target.parentElement : record.target;
    if (!element || !element.closest) continue;
    const part = element.closest(".part-text.is-streaming");
    if (part) window.__chat.texts.push(part.textContent);
    if (record.type === "attributes" && element.matches(".tool-card")) {
      window.__chat.states.push(element.getAttribute("data-state"));
    }
  }
}).observe(document, {
  subtree: true, childList: true, characterData: true, attributes: true, attributeFilter: ["data-state"],
});
"""


# Each Content-Security-Policy violation the browser reports on a page (init scripts run whatever
# the policy says): ``window.__violations``.
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(event.violatedDirective + " " + (event.blockedURI || "inline"));
});
"""


expect.set_options(timeout=WAIT_MS)


@pytest.fixture(autouse=True)
def fast_password_hashing() -> None:
    """Passwords keep the default hasher here: the live server checks them with its own settings."""


@pytest.fixture(autouse=True)
def tenant_names(cast: Cast) -> None:
    """Names as people would choose them (they show in every screenshot)."""
    for tenant, name in ((cast.tenant_a, "Acme Travel"), (cast.tenant_b, "Globex")):
        tenant.name = name
        tenant.save(update_fields=["name"])


@pytest.fixture(scope="module", autouse=True)
def allow_orm_beside_playwright() -> Iterator[None]:
    """Playwright's sync API runs an event loop in this thread; the tests' ORM calls are still synchronous."""
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if previous is None:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: None,
    fake_model_server: FakeModelServer,
    files_root: Path,
) -> Iterator[LiveStack]:
    live = LiveStack(
        Path(tmp_path_factory.mktemp("browser")),
        # Uploads from the browser and from the tests' own services land in the same folder.
        FILES_ROOT=str(files_root),
        ANTHROPIC_API_KEY="test-anthropic-key",
        ANTHROPIC_BASE_URL=fake_model_server.url,
        OPENAI_API_KEY="test-openai-key",
        OPENAI_BASE_URL=fake_model_server.openai_base_url,
        # The demo MCP server and the fake model server listen here; the SSRF guard refuses it otherwise.
        MCP_ALLOWED_PRIVATE_HOSTS="127.0.0.1",
        PROVIDER_ALLOWED_PRIVATE_HOSTS="127.0.0.1",
    )
    live.start_server()
    live.start_worker(workers=2)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, stack: LiveStack) -> Iterator[Page]:
    context = browser.new_context(
        viewport=DESKTOP, base_url=stack.base_url, reduced_motion="reduce", color_scheme="light"
    )
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    opened.add_init_script(RECORD_CHAT)
    yield opened
    context.close()


@pytest.fixture(scope="module")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    configured = os.environ.get("AGENTRY_SCREENSHOTS")
    directory = Path(configured) if configured else Path(tmp_path_factory.mktemp("screenshots"))
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def shoot(page: Page, directory: Path, name: str) -> None:
    page.mouse.move(0, 0)
    page.screenshot(path=str(directory / f"{name}.png"), animations="disabled", caret="hide")


def sign_in(page: Page, email: str, password: str) -> None:
    page.goto("/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/")
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()


def open_chat(page: Page, agent: Agent) -> None:
    page.goto(f"/chat/?agent={agent.pk}")
    page.get_by_role("button", name="Start chat").click()
    page.wait_for_url("**/chat/*/")
    expect_live(page)


def expect_live(page: Page) -> None:
    """The chat's script has started and its socket is open. Its buttons (Edit, Regenerate, the
    branch arrows, a question's answer) do nothing until the script listens, so a test that clicks
    one on a page just loaded waits for this first, also on the page a branch action reloads."""
    expect(page.locator("[data-connection='live']")).to_be_visible()


def reload_chat(page: Page) -> None:
    page.reload()
    expect_live(page)


def send(page: Page, text: str) -> None:
    box = page.locator("#composer-input")
    box.fill(text)
    box.press("Enter")


def last_answer(page: Page) -> Any:
    return page.locator(".turn-assistant").last
