"""Every page a member, an owner and a visitor can reach: axe-core finds nothing, the browser reports
no Content-Security-Policy violation, and it fits a phone.

One seeded tenant, one live stack; each page is loaded once at 390 by 844 px and checked for
horizontal overflow, then axe-core (default rules) runs in the light and the dark scheme.
"""

from datetime import date
from pathlib import Path
from pprint import pformat
from typing import Any

from playwright.sync_api import Browser, Page, expect

from agents.models import Agent
from billing.models import ModelPrice
from billing.services import budget_create, credits_grant_by_actor
from mcp_servers.models import McpServer
from memory.models import Memory, MemoryStatus
from sessions.models import Run, Session
from tenants.invitations import invitation_create
from tenants.provider_keys.services import provider_key_save
from tenants.services import api_key_create
from tests.browser.conftest import (
    BROWSER_MARKS,
    PHONE,
    RECORD_VIOLATIONS,
    WAIT_MS,
    last_answer,
    open_chat,
    send,
    sign_in,
)
from tests.conftest import Cast
from tests.factories import make_agent
from tests.live import LiveStack, wait_until
from tests.web.knowledge import actor_of, estate_knowledge_base
from tools.models import Tool, ToolKind
from tools.services import http_tool_create

pytestmark = BROWSER_MARKS

AXE = Path(__file__).parent / "vendor" / "axe.min.js"

# Anything sticking out of the viewport that is not inside a box made to hold it; hidden things do not count.
OVERFLOW = """
() => {
  const width = window.innerWidth;
  // A box that scrolls, truncates with an ellipsis, or is clipped away (visually hidden text).
  const contains = (node) => {
    const style = getComputedStyle(node);
    if (["auto", "scroll"].includes(style.overflowX)) return true;
    if (style.overflowX !== "visible" && style.textOverflow === "ellipsis") return true;
    return style.clip !== "auto";
  };
  const scrolls = (element) => {
    for (let node = element.parentElement; node && node !== document.body; node = node.parentElement) {
      if (contains(node)) return true;
    }
    return false;
  };
  const describe = (element) => {
    const classes = [...element.classList].slice(0, 2).map((name) => "." + name).join("");
    return element.tagName.toLowerCase() + (element.id ? "#" + element.id : "") + classes;
  };
  const outside = [];
  for (const element of document.body.querySelectorAll("*")) {
    if (!element.checkVisibility({visibilityProperty: true, opacityProperty: false})) continue;
    const box = element.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) continue;
    if ((box.right > width + 1 || box.left < -1) && !scrolls(element)) outside.push(describe(element));
  }
  const scrollWidth = document.documentElement.scrollWidth;
  return (scrollWidth > width ? ["document " + scrollWidth] : []).concat(outside.slice(0, 8));
}
"""

# A short word broken across lines ("Age / nt") reads as two words; visually hidden text does not count.
BROKEN_WORDS = """
() => {
  const broken = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = node.textContent.trim();
    const parent = node.parentElement;
    // Hyphens and slashes are fair places to break ("2026-11-" / "27"); letters and digits are not.
    if (!/^[\\w.]{1,24}$/.test(text) || !parent) continue;
    if (!parent.checkVisibility({visibilityProperty: true})) continue;
    if (getComputedStyle(parent).clip !== "auto") continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    const rects = [...range.getClientRects()].filter((rect) => rect.width > 1);
    if (new Set(rects.map((rect) => Math.round(rect.top))).size > 1) broken.push(text);
  }
  return broken.slice(0, 8);
}
"""

RUN_AXE = """
async () => {
  const results = await axe.run(document, {resultTypes: ["violations"]});
  return results.violations.map((violation) =>
    violation.id + ": " + violation.nodes.slice(0, 3).map((node) => node.target.join(" ")).join(" | "));
}
"""


# Pages that finish drawing after the load event: what shows when they are done.
READY = {"/api/v1/docs/": ".swagger-ui .info .title"}


def page_problems(page: Page, path: str) -> dict[str, list[str]]:
    """Overflow at the phone width and axe-core's violations in both schemes, for one page."""
    page.emulate_media(color_scheme="light")
    page.goto(path)
    if path in READY:
        expect(page.locator(READY[path])).to_be_visible()
    return current_problems(page)


def current_problems(page: Page) -> dict[str, list[str]]:
    page.emulate_media(color_scheme="light")
    problems = {"overflow": page.evaluate(OVERFLOW), "broken words": page.evaluate(BROKEN_WORDS)}
    problems["content security policy"] = page.evaluate("window.__violations")
    if not page.evaluate("typeof axe !== 'undefined'"):
        # Evaluated, not added as a <script>: the page's Content-Security-Policy refuses inline scripts.
        page.evaluate(AXE.read_text())
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
        problems[f"axe {scheme}"] = page.evaluate(RUN_AXE)
    return {check: found for check, found in problems.items() if found}


def check_pages(page: Page, paths: list[str]) -> dict[str, dict[str, list[str]]]:
    found = {path: page_problems(page, path) for path in paths}
    return {path: problems for path, problems in found.items() if problems}


def phone_page(browser: Browser, stack: LiveStack) -> Page:
    context = browser.new_context(viewport=PHONE, base_url=stack.base_url, reduced_motion="reduce")
    context.set_default_timeout(WAIT_MS)
    context.add_init_script(RECORD_VIOLATIONS)
    return context.new_page()


def seed_chats(page: Page, cast: Cast) -> tuple[Session, Session, Run]:
    """Through the chat: one answered question with a tool card, one call waiting for approval."""
    helper = Agent.objects.get(tenant=cast.tenant_a, name="Helper")
    careful = Agent.objects.get(tenant=cast.tenant_a, name="Careful")
    open_chat(page, helper)
    send(page, "What is 12*7?")
    expect(last_answer(page).locator(".tool-card")).to_have_attribute("data-state", "done")
    answered = Session.objects.get(agent=helper)
    open_chat(page, careful)
    send(page, "What is 6*7?")
    expect(last_answer(page).locator(".tool-card")).to_have_attribute("data-state", "awaiting")
    waiting = Session.objects.get(agent=careful)
    run = wait_until(lambda: Run.objects.filter(session=answered, status="completed").first(), timeout=10)
    return answered, waiting, run


def seed_tenant(cast: Cast) -> dict[str, Any]:
    """Realistic data for every page, made through the services an owner would use."""
    owner = actor_of(cast.alice, cast.tenant_a)
    helper = make_agent(
        tenant=cast.tenant_a, name="Helper", description="Answers questions about sums and dates."
    )
    make_agent(tenant=cast.tenant_a, name="Careful", approval_required_tools=["calculator"])
    make_agent(tenant=cast.tenant_a, name="Archived helper", is_active=False)
    weather = http_tool_create(
        actor=owner,
        name="weather",
        url_template="https://weather.example/{city}",
        description="Today's weather for a city.",
        is_read_only=True,
        requires_approval=True,
    )
    server = McpServer.objects.create(
        tenant=cast.tenant_a,
        name="files",
        transport="streamable_http",
        url="https://files.example/mcp",
        health_status="down",
        last_error="connection refused",
    )
    Tool.objects.create(
        tenant=cast.tenant_a,
        name="files__read",
        kind=ToolKind.MCP,
        group="mcp:files",
        mcp_server=server,
        mcp_tool_name="read",
        description="Read a file from the shared drive.",
    )
    Memory.objects.create(tenant=cast.tenant_a, agent=helper, content="Bob prefers metric units.")
    suggested = Memory.objects.create(
        tenant=cast.tenant_a,
        agent=helper,
        content="Bob is planning a trip to Lisbon in May.",
        status=MemoryStatus.SUGGESTED,
        source="extracted",
    )
    knowledge_base = estate_knowledge_base(owner, agents=[helper])
    # A tenant with credits pays for every call: the demo model's price of 0 (a data migration's
    # row, which an earlier transactional test's flush removes) lets the chats below still run.
    ModelPrice.objects.update_or_create(
        provider="offline",
        model="offline-demo",
        defaults={"input_per_million": 0, "output_per_million": 0, "as_of": date(2026, 1, 1)},
    )
    credits_grant_by_actor(actor=owner, amount="25", note="Pilot")
    budget_create(actor=owner, scope="agent", monthly_limit="10", agent_id=helper.pk)
    budget_create(actor=owner, scope="member", monthly_limit="5", user_id=cast.bob.pk)
    provider_key_save(actor=owner, provider="anthropic", api_key="sk-ant-test-0123456789")
    api_key_create(tenant=cast.tenant_a, created_by=cast.alice, name="Deploy bot")
    invited = invitation_create(
        actor=owner, email="new.hire@a.test", role="member", link_for=lambda token: f"/invitations/{token}/"
    )
    return {
        "agent": helper,
        "tool": weather,
        "server": server,
        "memory": suggested,
        "knowledge_base": knowledge_base,
        "invitation": invited.link,
    }


def test_every_page_passes_axe_in_both_schemes_and_fits_a_phone(
    browser: Browser, stack: LiveStack, cast: Cast
) -> None:
    seeded = seed_tenant(cast)
    agent, knowledge_base = seeded["agent"], seeded["knowledge_base"]
    shared = [
        "/",
        "/chat/",
        f"/agents/{agent.pk}/",
        "/agents/",
        "/tools/",
        "/mcp/",
        f"/mcp/{seeded['server'].pk}/",
        "/memories/",
        "/knowledge/",
        f"/knowledge/{knowledge_base.pk}/",
        "/account/",
        "/api/v1/docs/",
        # The project's 404 page (an unknown address shows Django's debug page on the live server).
        "/agents/00000000-0000-0000-0000-000000000000/",
    ]
    owner_only = [
        "/agents/new/",
        f"/agents/{agent.pk}/edit/",
        f"/agents/{agent.pk}/tools/",
        f"/agents/{agent.pk}/delete/",
        "/tools/new/",
        f"/tools/{seeded['tool'].pk}/edit/",
        "/mcp/new/",
        f"/mcp/{seeded['server'].pk}/edit/",
        "/memories/new/",
        f"/memories/{seeded['memory'].pk}/edit/",
        "/knowledge/new/",
        f"/knowledge/{knowledge_base.pk}/edit/",
        "/settings/",
        "/audit/",
        seeded["invitation"],
    ]

    member = phone_page(browser, stack)
    sign_in(member, "bob@a.test", "bob-password")
    answered, waiting, run = seed_chats(member, cast)
    chats = [f"/chat/{answered.pk}/", f"/chat/{waiting.pk}/", f"/runs/{run.pk}/"]
    member_problems = check_pages(member, shared + chats)
    member.goto("/")
    menu_link = member.locator("#sidenav").get_by_role("link", name="Agents")
    expect(menu_link).to_be_hidden()
    member.get_by_role("button", name="Menu").click()
    expect(menu_link).to_be_visible()
    if opened_menu := current_problems(member):
        member_problems["/ with the menu open"] = opened_menu
    member.context.close()

    owner = phone_page(browser, stack)
    sign_in(owner, "alice@a.test", "alice-password")
    owner_problems = check_pages(owner, [*owner_only, "/", "/agents/"])
    owner.context.close()

    visitor = phone_page(browser, stack)
    visitor_problems = check_pages(visitor, ["/login/", seeded["invitation"], "/invitations/not-a-token/"])
    visitor.context.close()

    found = {"member": member_problems, "owner": owner_problems, "visitor": visitor_problems}
    assert found == {"member": {}, "owner": {}, "visitor": {}}, pformat(found, width=110)
