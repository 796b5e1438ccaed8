"""How the chat and the run pages show what a run did, in Chromium: a stopped answer after a reload."""

import math

from playwright.sync_api import Page, expect

from sessions.models import Message, Run, RunStatus, Session
from tests.browser.conftest import BROWSER_MARKS, last_answer, open_chat, reload_chat, send, sign_in
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import wait_until

pytestmark = BROWSER_MARKS

STOPPED_NOTE = "Stopped: the answer ends here."


def test_a_stopped_answer_keeps_its_text_marked_stopped_after_a_reload(
    page: Page, cast: Cast, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Slow writer", model_provider="anthropic")
    fake_model.script(Turn(text="slow " * 400, chunk_size=5, chunk_delay=0.02))
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "Write slowly")
    expect(page.locator(".part-text.is-streaming")).to_contain_text("slow slow slow")
    page.get_by_role("button", name="Stop").click()
    expect(last_answer(page).locator(".run-footer .badge")).to_have_text("cancelled")
    expect(last_answer(page).locator("[data-stopped-note]")).to_have_text(STOPPED_NOTE)
    run = wait_until(lambda: Run.objects.filter(session__agent=agent, status="cancelled").first(), timeout=10)
    stored = Message.objects.get(run=run, role="assistant")
    live_text = last_answer(page).locator(".part-text").inner_text()
    reload_chat(page)

    answer = last_answer(page)
    expect(answer.locator(".part-text")).to_have_text(stored.text.strip())
    expect(answer.locator("[data-stopped-note]")).to_have_text(STOPPED_NOTE)
    expect(answer.locator(".run-footer .badge")).to_have_text("cancelled")
    assert stored.is_stopped
    assert stored.text.strip() == live_text.strip()
    assert stored.text.startswith("slow slow slow")
    assert (stored.input_tokens, stored.output_tokens) == (10, math.ceil(len(stored.text) / 4))


def test_a_failed_tool_call_reads_error_in_the_chat_and_on_the_run_page(
    page: Page, cast: Cast, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Divider", model_provider="anthropic")
    fake_model.script(Turn(tool_calls=[("calculator", {"expression": "1/0"})]), Turn(text="That failed."))
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "Divide by zero")
    card = last_answer(page).locator(".tool-card")
    expect(card).to_have_attribute("data-state", "error")
    expect(card.locator("[data-slot=state]")).to_have_text("error")
    expect(last_answer(page).locator(".run-footer")).to_contain_text("Timeline")
    last_answer(page).get_by_role("link", name="Timeline").click()

    expect(page.locator(".step", has_text="Tool: calculator").locator("[data-step-status]")).to_have_text(
        "error"
    )
    bar = page.locator(".waterfall-row[data-kind=tool_call]")
    expect(bar.locator(".badge")).to_have_text("error")
    expect(bar.locator(".badge")).to_have_class("badge tone-error")


def test_from_a_plans_page_to_its_executor_and_back(page: Page, cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Planner")
    session = Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.bob, title="Plan")
    plan = Run.objects.create(
        tenant=cast.tenant_a, session=session, agent=agent, created_by=cast.bob, status=RunStatus.COMPLETED
    )
    executor = Run.objects.create(
        tenant=cast.tenant_a,
        session=session,
        agent=agent,
        created_by=cast.bob,
        parent_run=plan,
        title="s1: What is 6*7?",
        status=RunStatus.COMPLETED,
    )
    sign_in(page, "bob@a.test", "bob-password")

    page.goto(f"/runs/{plan.pk}/")
    page.locator("[data-child-runs]").get_by_role("link", name="Executor: s1: What is 6*7?").click()
    page.wait_for_url(f"**/runs/{executor.pk}/")
    expect(page.locator("[data-parent-run]")).to_contain_text("Executor “s1: What is 6*7?” of run")
    page.locator("[data-parent-run]").get_by_role("link", name=str(plan.pk)[:8]).click()

    page.wait_for_url(f"**/runs/{plan.pk}/")
    expect(page.locator("[data-child-runs] li")).to_have_count(1)


def plan_answer_items(page: Page) -> list[str]:
    """The inner HTML of each list item of the plan's final answer (not of its executors' blocks)."""
    answer = last_answer(page).locator(":scope > .turn-body > .part-text").last
    expect(answer.locator("li")).to_have_count(2)
    return answer.locator("li").evaluate_all("items => items.map(item => item.innerHTML)")


def test_the_readme_plan_demo_renders_the_persons_words_as_written(page: Page, cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Demo assistant", planning_mode="auto")
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "1. What is 6*7?\n2. What time is it?")
    expect(last_answer(page).locator(".child-run")).to_have_count(2)
    expect(page.locator("[data-chat-status]")).to_have_text("idle")
    live = plan_answer_items(page)
    reload_chat(page)
    reloaded = plan_answer_items(page)

    for items in (live, reloaded):
        assert items[0] == "What is 6*7? [s1]: 6*7 = 42."
        assert items[1].startswith("What time is it? [s2]: The current time is ")
    assert last_answer(page).locator(":scope > .turn-body > .part-text em").count() == 0
