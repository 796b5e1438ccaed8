"""Tool schemas in the browser: the tool form refuses a pattern RE2 cannot compile, and the chat's
approval checks edited arguments against a schema that uses ``$ref`` and the catastrophic pattern."""

import json

from playwright.sync_api import Page, expect

from sessions.models import Run, ToolApproval
from tests.browser.conftest import BROWSER_MARKS, last_answer, open_chat, send, sign_in
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import wait_until
from tools.models import AgentTool, Tool, ToolKind, ToolPolicy

pytestmark = BROWSER_MARKS

CATASTROPHIC = "(a+)+$"
ATTACK = "a" * 40 + "!"
CITY_BY_REFERENCE = {
    "type": "object",
    "$defs": {"city": {"type": "string", "pattern": CATASTROPHIC}},
    "properties": {"city": {"$ref": "#/$defs/city"}},
}


def test_the_tool_form_refuses_a_pattern_re2_cannot_compile(page: Page, cast: Cast) -> None:
    sign_in(page, "alice@a.test", "alice-password")
    page.goto("/tools/new/")
    page.get_by_label("Name").fill("weather")
    page.get_by_label("URL template").fill("https://weather.example/{city}")
    schema = {"type": "object", "properties": {"city": {"type": "string", "pattern": r"(\w)\1"}}}
    page.get_by_label("Arguments (JSON Schema)").fill(json.dumps(schema))
    page.get_by_role("button", name="Create tool").click()

    summary = page.locator("[data-error-summary]")
    expect(summary).to_be_focused()
    expect(summary.locator("li")).to_have_text(
        [
            'Arguments (JSON Schema): The pattern "(\\w)\\1" cannot be used: invalid escape sequence: \\1. '
            "Patterns use RE2 syntax: no backreferences and no lookahead or lookbehind."
        ]
    )
    expect(page.get_by_label("Arguments (JSON Schema)")).to_have_attribute("aria-invalid", "true")
    assert not Tool.objects.filter(tenant=cast.tenant_a).exists()


def test_the_chat_checks_edited_arguments_against_a_referenced_catastrophic_pattern(
    page: Page, cast: Cast, fake_model: FakeModelServer
) -> None:
    tool = Tool.objects.create(
        tenant=cast.tenant_a,
        kind=ToolKind.HTTP,
        name="weather",
        http_method="GET",
        url_template="https://weather.example/{city}",
        input_schema=CITY_BY_REFERENCE,
        requires_approval=True,
    )
    agent = make_agent(tenant=cast.tenant_a, name="Forecaster", model_provider="anthropic")
    AgentTool.objects.create(agent=agent, tool=tool)
    ToolPolicy.objects.create(agent=agent, editable_arguments=["weather"])
    fake_model.script(Turn(tool_calls=[("weather", {"city": "aaa"})]))
    fake_model.script(Turn(text="Checked."), match="tool_result")
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "Weather in aaa?")
    card = last_answer(page).locator(".tool-card")
    expect(card).to_have_attribute("data-state", "awaiting")
    card.get_by_role("button", name="Edit arguments").click()
    editor = card.get_by_label("Arguments to run with (JSON)")
    editor.fill(json.dumps({"city": ATTACK}))
    card.get_by_role("button", name="Approve").click()

    expect(page.locator(".toast").last).to_have_text(
        f"arguments: city: {ATTACK!r} does not match {CATASTROPHIC!r}"
    )
    expect(card).to_have_attribute("data-state", "awaiting")
    assert ToolApproval.objects.get(run__session__agent=agent).status == "pending"
    editor.fill(json.dumps({"city": "aaaa"}))
    card.get_by_role("button", name="Approve").click()

    expect(card.locator("[data-slot=approval-note]")).to_have_text(
        "Approved by bob@a.test with edited arguments"
    )
    # The run goes on to the end before the test does: the tool's call fails (no such host here).
    expect(last_answer(page).locator(".part-text").last).to_have_text("Checked.")
    run = wait_until(lambda: Run.objects.filter(session__agent=agent, status="completed").first(), timeout=20)
    approval = ToolApproval.objects.get(run=run)
    assert (approval.status, approval.edited_arguments) == ("approved", {"city": "aaaa"})
