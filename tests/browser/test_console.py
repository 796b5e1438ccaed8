"""The console in Chromium: a plan run's waterfall, executors' tokens in the chat, the dashboard's charts."""

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone
from playwright.sync_api import Page, expect

from billing.costs import cost_label, run_total_cost
from sessions.models import Run, RunStatus, Session, Step
from tests.browser.conftest import (
    BROWSER_MARKS,
    DESKTOP,
    PHONE,
    last_answer,
    open_chat,
    send,
    shoot,
    sign_in,
)
from tests.conftest import Cast
from tests.factories import make_agent
from tests.live import wait_until
from tools.models import ToolPolicy

pytestmark = BROWSER_MARKS

TITLES = ["s1: what is 2+3?", "s2: what is 4*5?"]


def assert_no_page_overflow(page: Page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth") is True


def child_usage_text(child: Run) -> str:
    return f"{child.input_tokens + child.output_tokens} tokens · {cost_label(run_total_cost(child))}"


def finished_plan(page: Page, cast: Cast) -> tuple[Run, list[Run]]:
    """A plan of two executors on the offline model, answered in the chat."""
    agent = make_agent(tenant=cast.tenant_a, name="Planner", planning_mode="plan")
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)
    send(page, "Please:\n1. what is 2+3?\n2. what is 4*5?")
    blocks = last_answer(page).locator(".child-run")
    expect(blocks).to_have_count(2)
    expect(page.locator("[data-chat-status]")).to_have_text("idle")
    parent = Run.objects.get(agent=agent, parent_run__isnull=True)
    wait_until(lambda: Run.objects.get(pk=parent.pk).status == RunStatus.COMPLETED)
    parent.refresh_from_db()
    return parent, list(Run.objects.filter(parent_run=parent).order_by("title"))


def test_a_plans_executors_show_their_tokens_and_the_waterfall_links_to_them(
    page: Page, cast: Cast, screenshot_dir: Path
) -> None:
    parent, children = finished_plan(page, cast)
    blocks = last_answer(page).locator(".child-run")
    expected_usage = [child_usage_text(child) for child in children]
    total = parent.tree_usage["total_tokens"]
    assert total == sum(run.input_tokens + run.output_tokens for run in [parent, *children])

    expect(blocks.locator(":scope > summary [data-slot=usage]")).to_have_text(expected_usage)
    footer = last_answer(page).locator(":scope .turn-body > .run-footer")
    expect(footer.locator("[data-slot=usage]")).to_have_text(f"{total} tokens")
    page.reload()
    reloaded = last_answer(page).locator(".child-run")
    expect(reloaded.locator(":scope > summary [data-slot=usage]")).to_have_text(expected_usage)
    expect(footer.locator("[data-slot=usage]")).to_have_text(f"{total} tokens")
    reloaded.nth(0).locator(":scope > summary").click()
    expect(reloaded.nth(0).get_by_role("link", name="Timeline")).to_have_attribute(
        "href", f"/runs/{children[0].pk}/"
    )

    footer.get_by_role("link", name="Timeline").click()
    page.wait_for_url(f"**/runs/{parent.pk}/")
    rows = page.locator(".waterfall-row")
    model_calls = Step.objects.filter(run=parent, kind="model_call").count()
    expect(page.locator('.waterfall-row[data-kind="model_call"]')).to_have_count(model_calls)
    # Bars go in the order their runs started: the two executors start at once, in either order.
    started_in_order = sorted(children, key=lambda child: (child.started_at, child.title))
    expect(page.locator('.waterfall-row[data-kind="child_run"] .waterfall-label a')).to_have_text(
        [f"Executor: {child.title}" for child in started_in_order]
    )
    expect(rows.locator("rect")).to_have_count(model_calls + 2)
    for width in rows.locator("rect").evaluate_all("rects => rects.map(r => r.getBBox().width)"):
        assert width > 0
    expect(page.locator("[data-run-tokens]")).to_have_text(str(total))
    assert_no_page_overflow(page)
    shoot(page, screenshot_dir, "plan-waterfall")

    page.set_viewport_size(PHONE)
    page.locator("#waterfall-title").scroll_into_view_if_needed()
    expect(page.locator('.waterfall-row[data-kind="child_run"]').first).to_be_visible()
    assert_no_page_overflow(page)
    shoot(page, screenshot_dir, "timeline-phone")

    # The waterfall's bar (the page's list of executors links there too).
    page.locator(".waterfall").get_by_role("link", name=f"Executor: {TITLES[1]}").click()
    page.wait_for_url(f"**/runs/{children[1].pk}/")
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Run {str(children[1].pk)[:8]}")
    expect(page.locator(".waterfall-row").first).to_be_visible()
    assert_no_page_overflow(page)

    # The executors' summaries, with their tokens and cost, fit a phone's width in the chat too.
    page.goto(f"/chat/{parent.session_id}/")
    expect(last_answer(page).locator(".child-run [data-slot=usage]").first).to_have_text(expected_usage[0])
    assert_no_page_overflow(page)


def test_a_sub_agent_shows_its_tokens_and_links_to_its_run_live_and_after_a_reload(
    page: Page, cast: Cast
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Delegator")
    ToolPolicy.objects.create(agent=agent, profile="messaging")
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "delegate: what is 6*7?")

    block = last_answer(page).locator(".child-run")
    expect(block).to_have_attribute("data-status", "completed")
    child = wait_until(lambda: Run.objects.filter(agent=agent, parent_tool_call_id__gt="").first())
    wait_until(lambda: Run.objects.get(pk=child.pk).status == RunStatus.COMPLETED)
    child.refresh_from_db()
    expect(block.locator(":scope > summary [data-slot=usage]")).to_have_text(child_usage_text(child))
    page.reload()
    reloaded = last_answer(page).locator(".child-run")
    expect(reloaded.locator(":scope > summary [data-slot=usage]")).to_have_text(child_usage_text(child))
    reloaded.locator(":scope > summary").click()
    reloaded.get_by_role("link", name="Timeline").click()
    page.wait_for_url(f"**/runs/{child.pk}/")
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Run {str(child.pk)[:8]}")


def seeded_run(agent: Any, *, user: Any, created_at: datetime, status: str, **fields: Any) -> Run:
    session = fields.pop("session", None) or Session.objects.create(
        tenant=agent.tenant, agent=agent, created_by=user, title="Seeded"
    )
    run = Run.objects.create(
        tenant=agent.tenant, session=session, agent=agent, created_by=user, status=status, **fields
    )
    Run.objects.filter(pk=run.pk).update(created_at=created_at)
    return run


def test_the_dashboard_charts_runs_errors_and_tokens_and_folds_executors(
    page: Page, cast: Cast, screenshot_dir: Path
) -> None:
    now = timezone.now()
    helper = make_agent(tenant=cast.tenant_a, name="Helper")
    writer = make_agent(tenant=cast.tenant_a, name="Writer")
    helper_runs = [
        seeded_run(helper, user=cast.bob, created_at=now, status=status)
        for status in (RunStatus.COMPLETED, RunStatus.COMPLETED, RunStatus.FAILED)
    ]
    yesterday = now - timedelta(days=1)
    parent = seeded_run(writer, user=cast.alice, created_at=yesterday, status=RunStatus.COMPLETED)
    for number in (1, 2):
        seeded_run(
            writer,
            user=cast.alice,
            created_at=yesterday,
            status=RunStatus.COMPLETED,
            session=parent.session,
            parent_run=parent,
            title=f"s{number}: leg",
        )
    for run, tokens in ((parent, 900), (helper_runs[0], 300)):
        Step.objects.create(
            run=run,
            tenant_id=run.tenant_id,
            index=0,
            kind="model_call",
            status="completed",
            input_tokens=tokens,
            output_tokens=0,
            finished_at=now,
        )
        Run.objects.filter(pk=run.pk).update(
            input_tokens=tokens
        )  # a run's totals, as its model calls add them
    sign_in(page, "alice@a.test", "alice-password")

    expect(page.locator(".stat-note").first).to_have_text("3 completed · 1 failed")
    expect(page.locator(".stat-value[title='1200 tokens']")).to_be_visible()
    runs_chart = page.get_by_role("img", name="Runs per day")
    expect(runs_chart).to_have_accessible_description(re.compile(r": 4 in all\.$"))
    runs_bars = page.locator('[data-chart="runs-per-day"] rect.chart-bar')
    expect(runs_bars).to_have_count(30)
    expect(runs_bars.nth(29)).to_have_attribute("height", "160.0")
    expect(runs_bars.nth(28)).to_have_attribute("height", "53.33")
    expect(runs_bars.nth(27)).to_have_attribute("height", "0.0")
    error_bars = page.locator('[data-chart="errors-per-day"] rect.chart-bar')
    expect(error_bars.nth(29)).to_have_attribute("height", "160.0")
    expect(error_bars.nth(28)).to_have_attribute("height", "0.0")
    expect(page.get_by_role("img", name="Runs per agent")).to_have_accessible_description(
        re.compile(r": 4 in all, 1 failed; the most is Helper with 3\.$")
    )
    expect(page.get_by_role("img", name="Runs per member")).to_have_accessible_description(
        re.compile(r"the most is bob@a\.test with 3\.$")
    )
    expect(page.get_by_role("img", name="Tokens per agent")).to_have_accessible_description(
        re.compile(r"1200 in all; the most is Writer with 900\.$")
    )
    token_bars = page.locator(".usage-chart:has(#tokens-per-agent-title) rect.chart-bar")
    expect(token_bars).to_have_count(2)
    expect(token_bars.nth(0)).to_have_attribute("width", "600.0")
    expect(token_bars.nth(1)).to_have_attribute("width", "200.0")

    assert_no_page_overflow(page)
    page.locator("#usage-title").scroll_into_view_if_needed()
    shoot(page, screenshot_dir, "dashboard-charts")

    folded = page.locator(f'tr[data-run-row="{parent.pk}"] details.run-children')
    expect(folded.locator("summary")).to_have_text("2 executors or sub-agents")
    expect(page.locator("tr[data-run-row]")).to_have_count(4)
    folded.locator("summary").click()
    expect(folded.get_by_role("link")).to_have_text(["s1: leg", "s2: leg"])
    assert_no_page_overflow(page)

    page.set_viewport_size(PHONE)
    expect(runs_chart).to_be_visible()
    assert_no_page_overflow(page)
    shoot(page, screenshot_dir, "dashboard-phone")
    page.set_viewport_size(DESKTOP)
