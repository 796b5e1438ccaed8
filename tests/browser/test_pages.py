"""The web UI in Chromium (Playwright) against a live ASGI server, a django-q2 worker and the fake model.

The live stack, the browser and the shared steps are in ``tests/browser/conftest.py``.
"""

import re
import time
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Dialog, Page, expect

from agents.models import Agent
from billing.models import ModelPrice
from files.artifacts import store_artifacts
from files.models import FileStatus, KnowledgeBase, KnowledgeDocument, StoredFile
from memory.models import Memory, MemoryStatus
from sessions.models import Message, MessageRole, Run, Step
from tenants.models import ApiKey, Membership, ProviderKey, Role
from tenants.services import api_key_create
from tests.browser.conftest import (
    BROWSER_MARKS,
    PHONE,
    SLOW_TEXT,
    last_answer,
    open_chat,
    reload_chat,
    send,
    shoot,
    sign_in,
)
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.files.documents import png_bytes
from tests.live import LiveStack, wait_until
from tests.mcp.servers import DemoHttpServer
from tests.web.knowledge import HAY_SENTENCE, actor_of, estate_knowledge_base
from tools.builtins.base import ToolContext
from tools.builtins.code import code_run_unavailable_reason
from tools.models import Tool, ToolKind, ToolPolicy

pytestmark = BROWSER_MARKS


def test_sign_in_and_create_an_agent(page: Page, cast: Cast, screenshot_dir: Path) -> None:
    make_agent(tenant=cast.tenant_a, name="Helper", description="Answers questions about sums.")
    sign_in(page, "alice@a.test", "alice-password")
    expect(page.locator(".tenant-name")).to_have_text(f"Active tenant: {cast.tenant_a.name}")

    page.goto("/agents/new/")
    page.get_by_label("Name").fill("Helper")
    page.get_by_label("Description").fill("Plans trips and checks the arithmetic.")
    page.get_by_label("Goal").fill("Turn a rough idea into a day-by-day plan.")
    page.get_by_label("Provider").select_option("offline")
    page.get_by_label("Temperature").fill("0.4")
    page.get_by_label("Max steps").fill("8")
    page.get_by_label("Tool profile").select_option("messaging")
    expect(page.locator("#id_temperature_value")).to_have_text("0.4")
    expect(page.locator("#id_max_steps_value")).to_have_text("8")
    expect(page.locator("[data-offline-note]")).to_be_visible()
    page.get_by_role("button", name="Create agent").click()

    error = page.locator("#field-name .errors")
    expect(error).to_have_text("An agent with this name already exists in this tenant.")
    expect(page.get_by_label("Name")).to_have_attribute("aria-invalid", "true")
    page.get_by_label("Name").fill("Trip planner")
    page.locator("legend", has_text="Model").evaluate("legend => legend.scrollIntoView({block: 'start'})")
    page.evaluate("window.scrollBy(0, -80)")
    shoot(page, screenshot_dir, "agent-form")
    page.get_by_role("button", name="Create agent").click()

    expect(page.get_by_role("heading", name="Trip planner")).to_be_visible()
    expect(page.locator(".toast")).to_contain_text("Agent “Trip planner” created.")
    agent = Agent.objects.get(tenant=cast.tenant_a, name="Trip planner")
    assert (agent.max_steps, agent.temperature, agent.tool_policy.profile) == (8, 0.4, "messaging")

    page.goto("/agents/")
    page.get_by_label("Search").fill("trip")
    expect(page.locator(".agent-name")).to_have_text(["Trip planner"])
    page.get_by_label("Search").fill("")
    expect(page.locator(".agent-name")).to_have_text(["Helper", "Trip planner"])
    shoot(page, screenshot_dir, "agents")


def test_chat_streams_the_answer_and_completes_a_tool_card(
    page: Page, cast: Cast, fake_model: FakeModelServer, screenshot_dir: Path
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Demo assistant", description="The offline demo agent.")
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "What is 12*7?")

    expect(page.locator(".session-link[aria-current='page'] .session-title")).to_have_text("What is 12*7?")
    answer = last_answer(page)
    card = answer.locator(".tool-card")
    expect(card).to_have_attribute("data-state", "done")
    expect(card.locator(".tool-name")).to_have_text("calculator")
    expect(answer.locator(".run-footer")).to_contain_text("tokens")
    expect(answer.locator(".part-text").last).to_have_text("12*7 = 84.")
    expect(page.locator("[data-chat-status]")).to_have_text("idle")
    recorded = page.evaluate("window.__chat")
    assert recorded["states"][-3:] == ["pending", "running", "done"]
    answers = ("Let me calculate 12*7 with the calculator.", "12*7 = 84.")
    assert recorded["texts"] and all(
        any(full.startswith(text) for full in answers) for text in recorded["texts"]
    )

    card.locator("summary").click()
    expect(card.locator("[data-slot=result]")).to_have_text("84")
    expect(card.locator("[data-slot=arguments]")).to_contain_text('"expression": "12*7"')
    shoot(page, screenshot_dir, "chat-tool-card")

    page.reload()
    reloaded = last_answer(page).locator(".tool-card")
    expect(reloaded).to_have_attribute("data-state", "done")
    expect(page.locator(".turn-assistant")).to_have_count(1)

    last_answer(page).get_by_role("link", name="Timeline").click()
    expect(page.get_by_role("heading", name="Steps")).to_be_visible()
    expect(page.locator(".step")).to_have_count(3)
    expect(page.locator(".events")).to_contain_text("Tool calculator returned")
    shoot(page, screenshot_dir, "run-timeline")

    page.goto("/")
    expect(page.locator(".list-title").first).to_have_text("What is 12*7?")
    shoot(page, screenshot_dir, "dashboard")

    page.set_viewport_size(PHONE)
    page.goto("/chat/")
    page.locator(".session-link").first.click()
    expect(page.locator(".turn-assistant .tool-card")).to_be_visible()
    shoot(page, screenshot_dir, "chat-phone")


@pytest.mark.parametrize("planning_mode", ["plan", "auto"])
def test_each_executor_of_a_plan_shows_in_its_own_block_of_the_answer(
    page: Page, cast: Cast, screenshot_dir: Path, planning_mode: str
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Planner", planning_mode=planning_mode)
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "Please:\n1. what is 2+3?\n2. what is 4*5?")

    answer = last_answer(page)
    # In auto mode the model's own first call asked for the plan: its create_plan card is answered.
    plan_cards = answer.locator(':scope .turn-body > .tool-card:has(.tool-name:text-is("create_plan"))')
    expect(plan_cards).to_have_count(1 if planning_mode == "auto" else 0)
    blocks = answer.locator(".child-run")
    expect(blocks).to_have_count(2)
    expect(blocks.locator("[data-slot=kind]")).to_have_text(["Executor", "Executor"])
    expect(blocks.locator("[data-slot=title]")).to_have_text(["s1: what is 2+3?", "s2: what is 4*5?"])
    expect(blocks.nth(0)).to_have_attribute("data-status", "completed")
    expect(blocks.nth(1)).to_have_attribute("data-status", "completed")
    expect(answer.locator(":scope .turn-body > .run-footer")).to_contain_text("tokens")
    expect(page.locator("[data-chat-status]")).to_have_text("idle")
    expect(page.locator(".turn-assistant")).to_have_count(1)
    blocks.nth(0).locator(":scope > summary").click()
    expect(blocks.nth(0).locator(".part-text").last).to_have_text("2+3 = 5.")
    expect(blocks.nth(0).locator(".tool-card")).to_have_attribute("data-state", "done")
    if planning_mode == "auto":
        expect(plan_cards).to_have_attribute("data-state", "done")
    else:
        shoot(page, screenshot_dir, "chat-executors")

    page.reload()
    reloaded = last_answer(page).locator(".child-run")
    expect(reloaded).to_have_count(2)
    expect(reloaded.locator("[data-slot=title]")).to_have_text(["s1: what is 2+3?", "s2: what is 4*5?"])
    expect(reloaded.nth(1).locator(".part-text").last).to_have_text("4*5 = 20.")
    expect(page.locator(".turn-assistant")).to_have_count(1)


def test_a_sub_agent_shows_in_its_own_block_under_the_call_that_started_it(page: Page, cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Delegator")
    ToolPolicy.objects.create(agent=agent, profile="messaging")
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "delegate: what is 6*7?")

    answer = last_answer(page)
    expect(answer.locator(".part-text").last).to_have_text("The sub-agent answered: 6*7 = 42.")
    card = answer.locator(':scope .turn-body > .tool-card:has(.tool-name:text-is("spawn_subagent"))')
    expect(card).to_have_attribute("data-state", "done")
    block = card.locator("xpath=following-sibling::*[1]")
    expect(block).to_have_class("child-run")
    expect(block.locator("[data-slot=kind]")).to_have_text("Sub-agent")
    expect(block.locator("[data-slot=title]")).to_have_text("what is 6*7?")
    expect(block).to_have_attribute("data-status", "completed")
    expect(page.locator(".turn-assistant")).to_have_count(1)

    page.reload()
    reloaded = last_answer(page).locator(".child-run")
    expect(reloaded).to_have_count(1)
    expect(reloaded.locator(".part-text").last).to_have_text("6*7 = 42.")


def test_text_streams_in_and_a_dropped_connection_resumes_without_gaps_or_repeats(
    page: Page, cast: Cast, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Writer", model_provider="anthropic")
    fake_model.script(Turn(text=SLOW_TEXT, chunk_size=4, chunk_delay=0.02))
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "Tell me about the fox")
    streaming = page.locator(".part-text.is-streaming")
    expect(streaming).to_contain_text("The quick brown fox jumps")
    expect(page.locator("[data-run-steps]")).to_have_text(f"Step 1 of {agent.max_steps}")
    page.evaluate("window.agentryChat.dropConnection()")
    expect(page.locator("[data-connection='reconnecting']")).to_be_visible()
    expect(page.locator("[data-connection='live']")).to_be_visible()

    expect(page.locator("[data-chat-status]")).to_have_text("idle")
    assert last_answer(page).locator(".part-text").inner_text().strip() == SLOW_TEXT.strip()
    texts = page.evaluate("window.__chat.texts")
    assert len(texts) > 10
    assert all(SLOW_TEXT.startswith(text) for text in texts), (
        "a streamed state was not a prefix of the answer"
    )
    assert [len(text) for text in texts] == sorted(len(text) for text in texts)
    assert page.evaluate("window.agentryChat.state.connections") == 2


def test_cancel_a_slow_run_while_the_next_message_waits_in_the_queue(
    page: Page, cast: Cast, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Slow writer", model_provider="anthropic")
    fake_model.script(Turn(text="slow " * 400, chunk_size=5, chunk_delay=0.02))
    fake_model.set_default(Turn(text="Second answer."))
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "Write slowly")
    expect(page.locator(".part-text.is-streaming")).to_contain_text("slow slow")
    send(page, "And then this")
    queued = page.locator(".turn-user").last
    expect(queued.locator("[data-queued]")).to_have_text("queued")
    expect(page.locator("[data-run-queue]")).to_have_text("1 queued")
    page.get_by_role("button", name="Stop").click()

    first = page.locator(".turn-assistant").first
    expect(first.locator(".run-footer .badge")).to_have_text("cancelled")
    expect(first.get_by_role("button", name="Retry")).to_be_visible()
    expect(page.locator(".turn-assistant").last.locator(".part-text")).to_have_text("Second answer.")
    expect(queued.locator("[data-queued]")).to_have_count(0)
    expect(page.locator("[data-chat-status]")).to_have_text("idle")
    runs = Run.objects.filter(session__agent=agent).order_by("created_at")
    wait_until(
        lambda: runs.filter(status="completed").exists(), timeout=10, message="the queued run to finish"
    )
    assert list(runs.values_list("status", "stop_reason")) == [
        ("cancelled", "cancelled"),
        ("completed", "end_turn"),
    ]


def test_approve_a_tool_call(page: Page, cast: Cast, screenshot_dir: Path) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Careful", approval_required_tools=["calculator"])
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "What is 12*7?")
    card = last_answer(page).locator(".tool-card")
    expect(card).to_have_attribute("data-state", "awaiting")
    expect(page.locator("[data-chat-status]")).to_have_text("awaiting approval")
    expect(page.locator("[data-run-label]")).to_have_text("Waiting for approval: calculator")
    shoot(page, screenshot_dir, "chat-approval")
    card.get_by_role("button", name="Approve").click()

    expect(card).to_have_attribute("data-state", "done")
    expect(card.locator("[data-slot=approval-note]")).to_have_text("Approved by bob@a.test")
    expect(last_answer(page).locator(".part-text").last).to_have_text("12*7 = 84.")
    run = wait_until(lambda: Run.objects.filter(session__agent=agent, status="completed").first(), timeout=10)
    assert list(run.approvals.values_list("status", "decided_by__email")) == [("approved", "bob@a.test")]


def test_another_tenants_agent_is_404(page: Page, cast: Cast) -> None:
    theirs = make_agent(tenant=cast.tenant_a, name="Alice's private agent")
    sign_in(page, "carol@b.test", "carol-password")

    response = page.goto(f"/agents/{theirs.pk}/")

    assert response is not None and response.status == 404
    expect(page.get_by_role("heading", name="We could not find that")).to_be_visible()
    expect(page.locator("body")).not_to_contain_text("Alice's private agent")


def test_the_tenant_switcher_changes_the_active_tenant(page: Page, cast: Cast) -> None:
    make_agent(tenant=cast.tenant_b, name="Globex agent")
    Membership.objects.create(tenant=cast.tenant_b, user=cast.bob, role=Role.VIEWER)
    sign_in(page, "bob@a.test", "bob-password")

    page.get_by_label("Active tenant").select_option(label="Globex (viewer)")

    expect(page.locator(".toast")).to_have_text("Switched to Globex.")
    expect(page.get_by_label("Active tenant")).to_have_value(str(cast.tenant_b.pk))
    page.goto("/agents/")
    expect(page.locator(".agent-name")).to_have_text(["Globex agent"])


def test_approve_a_suggested_memory(page: Page, cast: Cast, screenshot_dir: Path) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Helper")
    Memory.objects.create(
        tenant=cast.tenant_a, agent=agent, content="Bob prefers answers in metric units.", importance=0.7
    )
    suggestion = Memory.objects.create(
        tenant=cast.tenant_a,
        agent=agent,
        content="Bob is planning a trip to Lisbon in May.",
        status=MemoryStatus.SUGGESTED,
        source="extracted",
    )
    sign_in(page, "alice@a.test", "alice-password")

    page.goto("/memories/")
    expect(page.locator(".alert-warn")).to_contain_text("1 suggested memory")
    shoot(page, screenshot_dir, "memories")
    row = page.locator(f"#memory-{suggestion.pk}")
    row.get_by_role("button", name="Approve").click()

    expect(row.locator(".badge").first).to_have_text("active")
    expect(page.locator(".toast").last).to_have_text("Memory approved.")
    suggestion.refresh_from_db()
    assert (suggestion.status, suggestion.reviewed_by_id) == ("active", cast.alice.pk)


def test_add_the_test_mcp_server_and_see_it_healthy_with_its_tools(
    page: Page, cast: Cast, screenshot_dir: Path
) -> None:
    sign_in(page, "alice@a.test", "alice-password")
    with DemoHttpServer() as demo:
        page.goto("/mcp/new/")
        page.get_by_label("Name").fill("demo")
        page.get_by_label("Transport").select_option("streamable_http")
        page.get_by_label("URL").fill(demo.url)
        page.get_by_label("Bearer token").fill(demo.token)
        page.get_by_role("button", name="Add and check").click()

        expect(page.locator("h1 [data-health]")).to_have_text("healthy")
        expect(page.locator(".tool-list strong")).to_have_text(
            ["demo__add", "demo__fail", "demo__shout", "demo__wait"]
        )
        expect(page.locator("body")).not_to_contain_text(demo.token)
        shoot(page, screenshot_dir, "mcp-server")

        page.goto("/mcp/")
        page.get_by_role("button", name="Check now").click()
        expect(page.locator(".toast").last).to_contain_text(": 4 tools.")


def test_tools_and_settings_pages(page: Page, cast: Cast, screenshot_dir: Path) -> None:
    make_agent(tenant=cast.tenant_a, name="Helper", approval_required_tools=["calculator"])
    Tool.objects.create(
        tenant=cast.tenant_a,
        name="weather",
        kind=ToolKind.HTTP,
        group="http",
        http_method="GET",
        url_template="https://weather.example/{city}",
        description="Today's weather for a city.",
        is_read_only=True,
    )
    sign_in(page, "alice@a.test", "alice-password")

    page.goto("/tools/")
    expect(page.get_by_role("heading", name="Built-in tools")).to_be_visible()
    shoot(page, screenshot_dir, "tools")

    page.goto("/settings/")
    page.locator("#id_name").fill("CI pipeline")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_role("heading", name="Your new API key")).to_be_visible()
    key = page.locator("#new-key").input_value()
    assert key.startswith("agt_")
    page.goto("/settings/")
    expect(page.locator("body")).not_to_contain_text(key)
    expect(page.locator("#api-keys tbody tr")).to_have_count(1)
    shoot(page, screenshot_dir, "settings")


def test_an_owner_adds_a_provider_key_and_tests_it_against_the_fake_model_server(
    page: Page, cast: Cast, fake_model_server: FakeModelServer
) -> None:
    secret = "browser-provider-key-0123456789"
    fake_model_server.reset()
    fake_model_server.accept_api_keys(secret)
    try:
        sign_in(page, "alice@a.test", "alice-password")
        page.goto("/settings/")
        keys = page.locator("#provider-keys")
        keys.get_by_label("Provider").select_option("anthropic")
        keys.get_by_label("API key").fill(secret)
        keys.get_by_label("Base URL").fill(fake_model_server.url)
        keys.get_by_role("button", name="Save key").click()

        expect(page.locator(".toast").last).to_have_text("Anthropic key saved.")
        row = page.locator("#provider-key-anthropic")
        expect(row).to_contain_text("stored (hidden)")
        expect(row).to_contain_text(fake_model_server.url)
        expect(page.locator("body")).not_to_contain_text(secret)
        assert secret not in page.content()

        row.get_by_role("button", name="Test the Anthropic key").click()
        expect(page.locator(".toast").last).to_have_text(
            "Anthropic key: The key works: the provider accepted it."
        )
        (call,) = fake_model_server.model_list_requests
        assert call.headers.get("x-api-key", call.headers.get("authorization")) in {
            secret,
            f"Bearer {secret}",
        }

        fake_model_server.accept_api_keys("a-key-the-provider-knows")
        page.locator("#provider-key-anthropic").get_by_role("button", name="Test the Anthropic key").click()
        expect(page.locator(".toast").last).to_have_text("Anthropic key: The provider refused this key.")
    finally:
        fake_model_server.reset()
    stored = ProviderKey.objects.get(tenant=cast.tenant_a)
    assert (stored.provider, stored.api_key, stored.base_url) == ("anthropic", secret, fake_model_server.url)


def test_keyboard_users_can_reach_the_chat_and_send(page: Page, cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Demo assistant")
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    page.locator("body").press("/")
    expect(page.get_by_label("Message Demo assistant")).to_be_focused()
    page.keyboard.type("What time is it?")
    page.keyboard.press("Enter")

    expect(last_answer(page).locator(".tool-card .tool-name")).to_have_text("current_time")
    expect(page.locator("[data-chat-status]")).to_have_text("idle")
    wait_until(lambda: Run.objects.filter(session__agent=agent, status="completed").exists(), timeout=10)


def test_a_member_changes_their_password_and_creates_an_api_key_on_the_account_page(
    page: Page, cast: Cast, screenshot_dir: Path
) -> None:
    sign_in(page, "bob@a.test", "bob-password")

    page.get_by_role("link", name="Account").click()
    expect(page.get_by_role("heading", name="Account", exact=True)).to_be_visible()
    expect(page.locator("#tenants tbody tr td").nth(1)).to_have_text("member")
    page.get_by_label("Current password").fill("bob-password")
    page.locator("#id_new_password1").fill("violet-canyon-42")
    page.get_by_label("New password confirmation").fill("violet-canyon-42")
    page.get_by_role("button", name="Change password").click()
    expect(page.locator(".toast")).to_contain_text("Password changed.")

    page.get_by_label("Name").fill("Laptop")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_role("heading", name="Your new API key")).to_be_visible()
    key = page.locator("#new-key").input_value()
    assert key.startswith("agt_")
    shoot(page, screenshot_dir, "account")
    page.goto("/account/")
    expect(page.locator("body")).not_to_contain_text(key)
    expect(page.locator("#api-keys tbody tr")).to_have_count(1)
    stored = ApiKey.objects.get(tenant=cast.tenant_a, created_by=cast.bob)
    assert (stored.name, stored.revoked_at) == ("Laptop", None)

    page.get_by_role("button", name="Sign out", exact=True).click()
    sign_in(page, "bob@a.test", "violet-canyon-42")


def test_an_owner_reads_the_audit_log_and_opens_a_diff_on_a_phone(page: Page, cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Helper", system_prompt="Be brief.")
    sign_in(page, "alice@a.test", "alice-password")
    page.goto(f"/agents/{agent.pk}/edit/")
    page.get_by_label("System prompt").fill("Be brief. " + "Always cite the booking reference. " * 8)
    page.get_by_role("button", name="Save changes").click()
    page.wait_for_url(f"**/agents/{agent.pk}/")

    page.set_viewport_size(PHONE)
    page.goto("/audit/")
    entry = page.locator("tbody tr").first
    expect(entry).to_contain_text("alice@a.test")
    entry.get_by_text("1 field").click()
    expect(entry.locator(".audit-diff dt")).to_have_text("system_prompt")
    overflow = page.evaluate("document.scrollingElement.scrollWidth - document.scrollingElement.clientWidth")
    assert overflow == 0


def test_an_answer_shows_its_cost_live_and_after_a_reload_and_the_usage_charts_fit_a_phone(
    page: Page, cast: Cast, fake_model: FakeModelServer, screenshot_dir: Path
) -> None:
    ModelPrice.objects.create(
        provider="anthropic",
        model="test-model",
        input_per_million=1000,
        output_per_million=2000,
        cache_read_per_million=100,
        cache_write_per_million=1250,
        as_of=date(2026, 11, 1),
    )
    agent = make_agent(
        tenant=cast.tenant_a, name="Priced", model_provider="anthropic", model_name="test-model"
    )
    fake_model.script(
        Turn(
            text="Let me calculate.", tool_calls=[("calculator", {"expression": "6*7"})], usage=(20, 10, 5, 0)
        ),
        Turn(text="6*7 is 42.", usage=(40, 8, 0, 3)),
    )
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "What is 6*7?")

    # 0.040500 + 0.059750 credits, from run.completed as the answer ends
    expect(last_answer(page).locator(".run-footer [data-slot=cost]")).to_have_text("$0.1003")
    page.reload()
    expect(last_answer(page).locator(".run-footer [data-slot=cost]")).to_have_text("$0.1003")

    page.set_viewport_size(PHONE)
    page.goto("/")
    chart = page.get_by_role("img", name="Cost per agent")
    expect(chart).to_be_visible()
    expect(chart).to_have_accessible_description(re.compile(r"the highest is Priced with \$0\.1003\."))
    expect(page.get_by_role("link", name="Download CSV of cost per agent")).to_have_attribute(
        "href", re.compile(r"^/api/v1/usage/\?group_by=agent&since=.*&format=csv$")
    )
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow == 0
    shoot(page, screenshot_dir, "dashboard-usage-phone")


DROP_FILE = """
([name, text]) => {
  const data = new DataTransfer();
  data.items.add(new File([text], name, {type: "text/plain"}));
  const composer = document.querySelector("[data-composer]");
  const fire = (type) => composer.dispatchEvent(
    new DragEvent(type, {bubbles: true, cancelable: true, dataTransfer: data})
  );
  fire("dragenter");
  fire("dragover");
  window.__dropOverlayShown = !document.querySelector("[data-drop-overlay]").hidden;
  fire("drop");
}
"""


def run_route_handlers_until(page: Page, condition: Any, *, timeout: float = 10.0) -> None:
    # The sync API runs a route handler only while the test waits on the browser, and the page can show
    # an upload's progress before its request has reached the handler, so wait on the browser until it has.
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        page.wait_for_timeout(20)


def test_files_dropped_or_picked_upload_with_progress_and_go_with_the_message(
    page: Page, cast: Cast, tmp_path: Path, screenshot_dir: Path
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Reader")
    photo = tmp_path / "photo.png"
    photo.write_bytes(png_bytes(32, 24))
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    page.evaluate(DROP_FILE, ["notes.txt", "The roses are watered on Tuesdays.\n"])
    assert page.evaluate("window.__dropOverlayShown") is True
    notes_chip = page.locator(".upload-chip", has_text="notes.txt")
    expect(notes_chip).to_have_attribute("data-state", "ready")
    expect(notes_chip.locator("[data-slot=size]")).to_have_text("35\u00a0bytes")

    held: list[Any] = []
    page.route("**/api/v1/files/", lambda route: held.append(route))
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach files").click()
    chooser.value.set_files(str(photo))
    progress = page.get_by_role("progressbar", name="Uploading photo.png")
    expect(progress).to_be_visible()
    expect(progress).to_have_attribute("aria-valuenow", re.compile(r"^\d{1,3}$"))
    photo_chip = page.locator(".upload-chip", has_text="photo.png")
    expect(photo_chip).to_have_attribute("data-state", "uploading")
    run_route_handlers_until(page, lambda: len(held) == 1)
    assert len(held) == 1
    held[0].continue_()
    page.unroute("**/api/v1/files/")
    expect(photo_chip).to_have_attribute("data-state", "ready")
    expect(progress).to_be_hidden()
    expect(photo_chip.locator(".upload-thumb img")).to_have_attribute(
        "src", re.compile(r"^/api/v1/files/.+/download/$")
    )

    shoot(page, screenshot_dir, "chat-uploads")

    send(page, "What do these say?")

    question = page.locator(".turn-user").last
    expect(question.get_by_role("img", name="photo.png")).to_be_visible()
    expect(question.locator(".attachment-file")).to_have_text("notes.txt35\u00a0bytes")
    expect(page.locator(".upload-chip")).to_have_count(0)
    message = wait_until(
        lambda: Message.objects.filter(session__agent=agent, role=MessageRole.USER).first(), message="message"
    )
    names = [block["name"] for block in message.content if block["type"] == "attachment"]
    assert sorted(names) == ["notes.txt", "photo.png"]

    page.reload()
    reloaded = page.locator(".turn-user").last
    expect(reloaded.get_by_role("img", name="photo.png")).to_be_visible()
    expect(reloaded.locator(".attachment-file")).to_have_text("notes.txt35\u00a0bytes")
    assert reloaded.get_by_role("img", name="photo.png").evaluate("image => image.naturalWidth") == 32
    shoot(page, screenshot_dir, "chat-attachments")


def test_an_unreadable_file_shows_the_apis_reason_in_its_chip(page: Page, cast: Cast, tmp_path: Path) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Reader")
    program = tmp_path / "tool.exe"
    program.write_bytes(b"MZ\x90\x00" + bytes(200))
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach files").click()
    chooser.value.set_files(str(program))

    chip = page.locator(".upload-chip", has_text="tool.exe")
    expect(chip).to_have_attribute("data-state", "failed")
    expect(chip.get_by_role("alert")).to_contain_text("tool.exe: ")
    chip.get_by_role("button", name="Remove tool.exe").click()
    expect(page.locator(".upload-chip")).to_have_count(0)
    assert not StoredFile.objects.filter(tenant=cast.tenant_a).exists()


def wait_for_the_handbook(knowledge_base: KnowledgeBase) -> None:
    """The worker may claim the handbook before the test's own process: wait for whichever reads it."""
    handbook = KnowledgeDocument.objects.get(knowledge_base=knowledge_base).file
    wait_until(
        lambda: StoredFile.objects.filter(pk=handbook.pk, status=FileStatus.READY).exists(),
        message="handbook",
    )


def test_an_answer_cites_the_handbook_and_its_source_opens_the_passage(
    page: Page, cast: Cast, fake_model: FakeModelServer, screenshot_dir: Path
) -> None:
    agent = make_agent(
        tenant=cast.tenant_a, name="Estate guide", model_provider="anthropic", model_name="test-model"
    )
    knowledge_base = estate_knowledge_base(actor_of(cast.alice, cast.tenant_a), agents=[agent])
    wait_for_the_handbook(knowledge_base)
    fake_model.script(
        Turn(tool_calls=[("file_search", {"query": "how much hay do the capybaras eat"})]),
        Turn(text="They eat forty kilograms of hay a week [1]."),
    )
    sign_in(page, "alice@a.test", "alice-password")
    open_chat(page, agent)

    send(page, "How much hay do the capybaras eat?")

    chip = last_answer(page).get_by_role("button", name="[1] estate-handbook.pdf · p. 2")
    expect(chip).to_be_visible()
    chip.click()
    dialog = page.get_by_role("dialog", name="estate-handbook.pdf")
    expect(dialog).to_be_visible()
    expect(dialog.locator("[data-slot=location]")).to_have_text("Page 2")
    expect(dialog.locator("[data-slot=passage]")).to_contain_text("forty kilograms of hay")
    shoot(page, screenshot_dir, "chat-citation")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()

    reload_chat(page)
    chip = last_answer(page).get_by_role("button", name="[1] estate-handbook.pdf · p. 2")
    chip.focus()
    page.keyboard.press("Enter")
    expect(dialog).to_be_visible()
    passage = " ".join(dialog.locator("[data-slot=passage]").inner_text().split())
    assert HAY_SENTENCE in passage
    expect(dialog.get_by_role("button", name="Close")).to_be_focused()
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()


def test_the_knowledge_pages_fit_a_phone(page: Page, cast: Cast, screenshot_dir: Path) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Estate guide with a rather long name")
    knowledge_base = estate_knowledge_base(actor_of(cast.alice, cast.tenant_a), agents=[agent])
    wait_for_the_handbook(knowledge_base)
    sign_in(page, "alice@a.test", "alice-password")
    page.set_viewport_size(PHONE)

    for path in ("/knowledge/", f"/knowledge/{knowledge_base.pk}/?q=capybaras+hay"):
        page.goto(path)
        expect(page.locator("h1")).to_be_visible()
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow == 0, path
    expect(page.locator(".passage-source").first).to_have_text("estate-handbook.pdf · p. 2")
    expect(page.locator("[data-file-status]")).to_have_text("ready")
    shoot(page, screenshot_dir, "knowledge-phone")
    page.emulate_media(color_scheme="dark")
    shoot(page, screenshot_dir, "knowledge-phone-dark")


VISITORS_CSV = "city,visitors\n" + "".join(f"Town {number},{number * 100}\n" for number in range(1, 31))


def test_a_runs_files_show_as_cards_with_previews_live_and_after_a_reload_and_download(
    page: Page, cast: Cast, fake_model: FakeModelServer, tmp_path: Path, screenshot_dir: Path
) -> None:
    agent = make_agent(
        tenant=cast.tenant_a, name="Analyst", model_provider="anthropic", model_name="test-model"
    )
    ToolPolicy.objects.create(agent=agent, profile="coding")
    fake_model.script(
        Turn(tool_calls=[("file_write", {"path": "visitors.csv", "content": VISITORS_CSV})]),
        Turn(text="The table is ready."),
    )
    sign_in(page, "alice@a.test", "alice-password")
    open_chat(page, agent)

    send(page, "Tabulate the visitors.")

    table_card = last_answer(page).locator(".artifact-card", has_text="visitors.csv")
    expect(table_card.locator(".artifact-table tr")).to_have_count(10)
    expect(table_card.locator(".artifact-table tr").nth(1)).to_have_text("Town 1100")
    expect(table_card.locator(".artifact-details")).to_have_text("text/csv · 386\u00a0bytes")
    expect(last_answer(page).locator(".part-text").last).to_have_text("The table is ready.")
    run = wait_until(
        lambda: Run.objects.filter(session__agent=agent, status="completed").first(), message="run"
    )
    chart = tmp_path / "chart.png"
    chart.write_bytes(png_bytes(120, 80))
    store_artifacts(
        ToolContext(
            tenant_id=run.tenant_id,
            agent_id=run.agent_id,
            session_id=run.session_id,
            run_id=run.pk,
            user_id=run.created_by_id,
            user_role="owner",
            tool_call_id="call_chart",
        ),
        [("chart.png", chart)],
    )

    page.reload()
    answer = last_answer(page)
    image = answer.get_by_role("img", name="chart.png")
    expect(image).to_be_visible()
    wait_until(lambda: image.evaluate("image => image.naturalWidth") == 120, message="chart decoded")
    expect(
        answer.locator(".artifact-card", has_text="visitors.csv").locator(".artifact-table tr")
    ).to_have_count(10)
    shoot(page, screenshot_dir, "chat-artifacts")
    downloads = {}
    for name in ("visitors.csv", "chart.png"):
        with page.expect_download() as download:
            answer.get_by_role("link", name=f"Download {name}").click()
        downloads[download.value.suggested_filename] = Path(download.value.path()).read_bytes()
    assert downloads == {"visitors.csv": VISITORS_CSV.encode(), "chart.png": png_bytes(120, 80)}


CHART_FROM_ATTACHMENT = """
import pandas, matplotlib.pyplot as plt
sales = pandas.read_csv("attachments/sales.csv")
sales.plot(x="month", y="total").get_figure().savefig("output/sales.png")
print("total", sales["total"].sum())
"""


def test_code_run_charts_an_attached_csv_and_the_chart_shows_inline_and_downloads(
    page: Page, cast: Cast, fake_model: FakeModelServer, tmp_path: Path, screenshot_dir: Path
) -> None:
    reason = code_run_unavailable_reason()
    if reason:
        pytest.skip(f"code_run cannot run here: {reason}")
    agent = make_agent(
        tenant=cast.tenant_a, name="Analyst", model_provider="anthropic", model_name="test-model"
    )
    ToolPolicy.objects.create(agent=agent, profile="coding")
    fake_model.script(
        Turn(tool_calls=[("code_run", {"language": "python", "code": CHART_FROM_ATTACHMENT})]),
        Turn(text="The total is 40; the chart is below."),
    )
    sales = tmp_path / "sales.csv"
    sales.write_text("month,total\n1,10\n2,30\n")
    sign_in(page, "alice@a.test", "alice-password")
    open_chat(page, agent)
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach files").click()
    chooser.value.set_files(str(sales))
    expect(page.locator(".upload-chip", has_text="sales.csv")).to_have_attribute("data-state", "ready")

    send(page, "Chart the sales.")

    answer = last_answer(page)
    chart = answer.get_by_role("img", name="sales.png")
    expect(chart).to_be_visible(timeout=30_000)
    wait_until(lambda: chart.evaluate("image => image.naturalWidth") > 0, message="chart decoded")
    expect(answer.locator(".part-text").last).to_have_text("The total is 40; the chart is below.")
    shoot(page, screenshot_dir, "chat-code-chart")
    with page.expect_download() as download:
        answer.get_by_role("link", name="Download sales.png").click()
    assert Path(download.value.path()).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    step = Step.objects.get(run__session__agent=agent, kind="tool_call")
    assert step.output["content"].startswith("exit code: 0\n\nstdout:\ntotal 40\n")


def test_the_api_docs_render_with_the_network_blocked(page: Page, cast: Cast, stack: LiveStack) -> None:
    outside: list[str] = []

    def local_only(route: Any) -> None:
        if route.request.url.startswith(stack.base_url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", local_only)
    sign_in(page, "alice@a.test", "alice-password")

    page.goto("/api/v1/docs/")

    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Agentry API")
    for tag in ("agents", "sessions", "files", "knowledge"):
        expect(page.locator(f"#operations-tag-{tag}")).to_be_visible()
    assert outside == []


def test_confirmations_ask_in_a_styled_dialog_never_the_browsers(page: Page, cast: Cast) -> None:
    native: list[str] = []

    def refuse(dialog: Dialog) -> None:
        native.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", refuse)
    api_key_create(tenant=cast.tenant_a, created_by=cast.alice, name="Deploy bot")
    key = ApiKey.objects.get(name="Deploy bot")
    sign_in(page, "alice@a.test", "alice-password")
    page.goto("/account/")
    revoke = page.get_by_role("button", name="Revoke Deploy bot")
    dialog = page.get_by_role("dialog", name="Revoke “Deploy bot”? Clients using it stop working at once.")

    revoke.click()
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    key.refresh_from_db()
    kept = key.revoked_at
    revoke.click()
    dialog.get_by_role("button", name="Yes, go ahead").click()
    wait_until(lambda: ApiKey.objects.get(pk=key.pk).revoked_at is not None, message="the key revoked")

    assert kept is None
    assert native == []


def test_a_conversation_exports_as_markdown_from_the_chat(page: Page, cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Reader")
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)
    send(page, "What is 2+2?")
    wait_until(
        lambda: Run.objects.filter(session__agent=agent, status="completed").exists(), message="answer"
    )

    with page.expect_download() as download:
        page.get_by_role("link", name="Export the conversation as Markdown").click()

    text = Path(download.value.path()).read_text()
    assert text.startswith("# What is 2+2?\n\nWith Reader.\n\n## You\n\nWhat is 2+2?\n\n## Reader\n\n")
