"""Long names without spaces fit every page that shows them; the agent form shows every error at once."""

from pprint import pformat

from playwright.sync_api import Page, expect

from agents.models import Agent
from files.models import KnowledgeBase
from sessions.models import Session
from tests.browser.conftest import BROWSER_MARKS, DESKTOP, PHONE, open_chat, send, sign_in
from tests.browser.test_every_page import OVERFLOW
from tests.conftest import Cast
from tests.factories import make_agent
from tools.models import Tool

pytestmark = BROWSER_MARKS

AGENT_NAME = "Itinerary" + "Planner" * 13  # 100 characters, no spaces
TOOL_NAME = "lookup_" + "x" * 57  # 64, the longest a tool name may be
KNOWLEDGE_NAME = "Handbook" + "Chapter" * 13 + "A"  # 100
QUESTION = "Whatis" + "1234567890" * 7 + "plus"  # the conversation's title (80 characters)

# Each text that shows a long name: its lines stay inside their box, or the box truncates it with
# an ellipsis and the full name is in a title on hover.
NAMES_FIT = """
(names) => {
  const describe = (element) =>
    element.tagName.toLowerCase() + [...element.classList].slice(0, 2).map((name) => "." + name).join("");
  const problems = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const name = names.find((candidate) => node.textContent.includes(candidate.slice(0, 24)));
    const element = node.parentElement;
    if (!name || element.closest("textarea, option, script")) continue;
    if (!element.checkVisibility({visibilityProperty: true})) continue;
    let clipped = element;
    while (clipped && getComputedStyle(clipped).clip === "auto") clipped = clipped.parentElement;
    if (clipped) continue;  // visually hidden text, read by screen readers only
    let box = element;
    const isInline = (node) => /^inline|^contents/.test(getComputedStyle(node).display);
    while (isInline(box)) box = box.parentElement;
    const bounds = box.getBoundingClientRect();
    const range = document.createRange();
    range.selectNodeContents(node);
    const lines = [...range.getClientRects()];
    if (!lines.some((line) => line.right > bounds.right + 1 || line.left < bounds.left - 1)) continue;
    let truncating = box;
    while (truncating && getComputedStyle(truncating).textOverflow !== "ellipsis") {
      truncating = truncating.parentElement;
    }
    const titled = element.closest("[title]");
    if (truncating && titled && titled.getAttribute("title").includes(name)) continue;
    problems.push(describe(element) + " in " + describe(box) + (truncating ? " (no title)" : ""));
  }
  return problems;
}
"""


def layout_problems(page: Page) -> list[str]:
    # Measured once the stylesheet is in: a layout read before it lands sees unstyled text.
    page.wait_for_load_state("load")
    names = [AGENT_NAME, TOOL_NAME, KNOWLEDGE_NAME, QUESTION]
    return [*page.evaluate(OVERFLOW), *page.evaluate(NAMES_FIT, names)]


def check_at_both_widths(page: Page, paths: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for viewport in (DESKTOP, PHONE):
        page.set_viewport_size(viewport)
        for path in paths:
            page.goto(path)
            problems = layout_problems(page)
            if problems:
                found[f"{path} at {viewport['width']}"] = problems
    return found


def test_long_names_wrap_or_truncate_with_a_title_on_every_page(page: Page, cast: Cast) -> None:
    sign_in(page, "alice@a.test", "alice-password")
    page.goto("/agents/new/")
    page.get_by_label("Name").fill(AGENT_NAME)
    page.get_by_label("Provider").select_option("offline")
    page.get_by_role("button", name="Create agent").click()
    toast = page.locator(".toast")
    expect(toast).to_have_text(f"Agent “{AGENT_NAME}” created.")
    created_toast = layout_problems(page)
    agent = Agent.objects.get(tenant=cast.tenant_a, name=AGENT_NAME)

    page.goto("/tools/new/")
    page.get_by_label("Name").fill(TOOL_NAME)
    page.get_by_label("URL template").fill("https://lookup.example/{query}")
    page.get_by_role("button", name="Create tool").click()
    expect(page.locator(".toast")).to_contain_text(TOOL_NAME)
    tool = Tool.objects.get(tenant=cast.tenant_a, name=TOOL_NAME)

    page.goto("/knowledge/new/")
    page.get_by_label("Name").fill(KNOWLEDGE_NAME)
    page.get_by_label(AGENT_NAME).check()
    page.get_by_role("button", name="Create knowledge base").click()
    expect(page.get_by_role("heading", name=KNOWLEDGE_NAME)).to_be_visible()
    knowledge_base = KnowledgeBase.objects.get(tenant=cast.tenant_a, name=KNOWLEDGE_NAME)

    page.goto(f"/agents/{agent.pk}/tools/")
    page.get_by_label(TOOL_NAME).check()
    page.get_by_role("button", name="Save policy").click()
    expect(page.locator(".toast")).to_have_text(f"Tool policy of “{AGENT_NAME}” saved.")

    open_chat(page, agent)
    send(page, QUESTION)
    expect(page.locator(".session-link[aria-current='page'] .session-title")).to_have_text(QUESTION)
    session = Session.objects.get(agent=agent)

    page.set_viewport_size(PHONE)
    page.goto(f"/agents/{agent.pk}/edit/")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator(".toast")).to_have_text(f"Agent “{AGENT_NAME}” saved.")
    phone_toast = layout_problems(page)
    page.get_by_role("link", name="Delete").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(AGENT_NAME)
    phone_dialog = layout_problems(page)
    page.set_viewport_size(DESKTOP)
    phone_dialog += layout_problems(page)

    pages = [
        "/",
        "/agents/",
        f"/agents/{agent.pk}/",
        f"/agents/{agent.pk}/edit/",
        f"/agents/{agent.pk}/tools/",
        f"/agents/{agent.pk}/delete/",
        "/tools/",
        f"/tools/{tool.pk}/edit/",
        "/knowledge/",
        f"/knowledge/{knowledge_base.pk}/",
        f"/knowledge/{knowledge_base.pk}/edit/",
        "/memories/",
        f"/chat/?agent={agent.pk}",
        f"/chat/{session.pk}/",
        "/audit/",
        "/settings/",
    ]
    found = check_at_both_widths(page, pages)
    assert (created_toast, phone_toast, phone_dialog, found) == ([], [], [], {}), pformat(found, width=110)


def test_the_agent_form_shows_every_error_at_once_with_a_summary(page: Page, cast: Cast) -> None:
    make_agent(tenant=cast.tenant_a, name="Helper")
    sign_in(page, "alice@a.test", "alice-password")
    page.goto("/agents/new/")
    page.get_by_label("Name").fill("Helper")
    page.get_by_label("Provider").select_option("anthropic")
    page.locator("#id_temperature").evaluate("input => { input.max = 2; input.value = 1.5; }")
    page.locator("#id_max_steps").evaluate("input => { input.min = 0; input.value = 0; }")
    page.get_by_label("Max output tokens").fill("0")
    page.get_by_label("Run timeout (seconds)").fill("-5")
    page.get_by_role("button", name="Create agent").click()

    summary = page.locator("[data-error-summary]")
    expect(summary).to_be_focused()
    expect(summary.locator("li")).to_have_text(
        [
            "Name: An agent with this name already exists in this tenant.",
            "Temperature: Must be between 0.0 and 1.0 for anthropic.",
            "Max steps: Must be between 1 and 100.",
            "Max output tokens: Must be between 1 and 200000.",
            "Run timeout (seconds): Must be between 1 and 86400.",
        ]
    )
    described_by = {
        "name": "id_name_error",
        "temperature": "id_temperature_error",
        "max_steps": "id_max_steps_helptext id_max_steps_error",
        "max_tokens": "id_max_tokens_error",
        "run_timeout_seconds": "id_run_timeout_seconds_helptext id_run_timeout_seconds_error",
    }
    for name, ids in described_by.items():
        field = page.locator(f"#id_{name}")
        expect(field).to_have_attribute("aria-invalid", "true")
        expect(field).to_have_attribute("aria-describedby", ids)
    expect(page.locator("#id_description")).not_to_have_attribute("aria-invalid", "true")
    summary.get_by_role("link", name="Max steps: Must be between 1 and 100.").click()
    expect(page.locator("#id_max_steps")).to_be_focused()
    assert list(Agent.objects.filter(tenant=cast.tenant_a).values_list("name", flat=True)) == ["Helper"]
