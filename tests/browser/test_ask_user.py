"""ask_user in the chat: the agent's question, answered with a choice or in words, live and after a
reload; and an approval whose arguments the approver edits first."""

from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from sessions.models import Run, ToolApproval, UserQuestion
from tests.browser.conftest import BROWSER_MARKS, last_answer, open_chat, reload_chat, send, shoot, sign_in
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import wait_until
from tools.models import ToolPolicy

pytestmark = BROWSER_MARKS

QUESTION = "Which city should I book?"


def script_question(fake_model: FakeModelServer, arguments: dict[str, Any], answer: str) -> None:
    """The model asks, then (once the request carries the tool's result) answers with ``answer``."""
    fake_model.script(Turn(tool_calls=[("ask_user", arguments)]))
    fake_model.script(Turn(text=answer), match="tool_result")


def tool_result_the_model_received(fake_model: FakeModelServer) -> Any:
    return fake_model.requests[-1].body["messages"][-1]["content"][0]["content"]


def test_the_user_picks_a_choice_and_the_run_goes_on_with_it(
    page: Page, cast: Cast, fake_model: FakeModelServer, screenshot_dir: Path
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Travel desk", model_provider="anthropic")
    script_question(
        fake_model, {"question": QUESTION, "choices": ["Lisbon", "Porto"]}, "Booked Porto for you."
    )
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "Book me a city trip")
    card = last_answer(page).locator(".tool-card")
    expect(card).to_have_attribute("data-state", "awaiting")
    expect(card.locator("[data-slot=question-text]")).to_have_text(QUESTION)
    expect(card.locator("[data-choice]")).to_have_text(["Lisbon", "Porto"])
    expect(card.locator("[data-slot=question-form]")).to_be_hidden()
    expect(page.locator("[data-chat-status]")).to_have_text("waiting for your answer")
    expect(page.locator("[data-run-label]")).to_have_text("Waiting for your answer")
    shoot(page, screenshot_dir, "chat-ask-user")
    card.get_by_role("button", name="Porto").click()

    expect(card.locator("[data-slot=question-note]")).to_have_text("Answered by bob@a.test: Porto")
    expect(card.locator("[data-choice]")).to_have_count(0)
    expect(last_answer(page).locator(".part-text").last).to_have_text("Booked Porto for you.")
    expect(page.locator("[data-chat-status]")).to_have_text("idle")
    assert tool_result_the_model_received(fake_model) == "Porto"
    run = Run.objects.get(session__agent=agent)
    assert (run.status, run.stop_reason) == ("completed", "end_turn")
    assert list(run.questions.values_list("status", "answer", "answered_by__email")) == [
        ("answered", "Porto", "bob@a.test")
    ]

    page.reload()
    reloaded = last_answer(page).locator(".tool-card")
    expect(reloaded.locator("[data-slot=question-text]")).to_have_text(QUESTION)
    expect(reloaded.locator("[data-slot=question-note]")).to_have_text("Answered by bob@a.test: Porto")
    expect(reloaded.locator("[data-choice]")).to_have_count(0)


def test_a_question_is_still_answerable_after_a_reload(
    page: Page, cast: Cast, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Travel desk", model_provider="anthropic")
    script_question(fake_model, {"question": "What is your budget?"}, "Noted: I will stay within it.")
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)
    send(page, "Plan my holiday")
    expect(last_answer(page).locator("[data-slot=question-text]")).to_have_text("What is your budget?")
    wait_until(lambda: Run.objects.filter(session__agent=agent, status="awaiting_input").exists(), timeout=10)

    reload_chat(page)
    card = last_answer(page).locator(".tool-card")
    expect(card.locator("[data-slot=question-text]")).to_have_text("What is your budget?")
    expect(page.locator("[data-run-label]")).to_have_text("Waiting for your answer")
    card.get_by_label("Your answer").fill("About 2000 euros")
    card.get_by_role("button", name="Send").click()

    expect(card.locator("[data-slot=question-note]")).to_have_text("Answered by bob@a.test: About 2000 euros")
    expect(last_answer(page).locator(".part-text").last).to_have_text("Noted: I will stay within it.")
    assert tool_result_the_model_received(fake_model) == "About 2000 euros"
    assert UserQuestion.objects.get(run__session__agent=agent).status == "answered"


def test_a_viewer_sees_the_question_but_cannot_answer(
    page: Page, cast: Cast, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Travel desk", model_provider="anthropic")
    script_question(fake_model, {"question": QUESTION, "choices": ["Lisbon", "Porto"]}, "Booked.")
    sign_in(page, "alice@a.test", "alice-password")
    open_chat(page, agent)
    send(page, "Book me a city trip")
    expect(last_answer(page).locator("[data-slot=question-text]")).to_have_text(QUESTION)
    session_url = page.url

    page.context.clear_cookies()
    sign_in(page, "victor@a.test", "victor-password")
    page.goto(session_url)

    card = last_answer(page).locator(".tool-card")
    expect(card.locator("[data-slot=question-text]")).to_have_text(QUESTION)
    expect(card.locator("[data-slot=question-note]")).to_have_text(
        "Waiting for the conversation's owner or an admin to answer."
    )
    expect(card.get_by_role("button", name="Porto")).to_have_count(0)
    assert UserQuestion.objects.get(run__session__agent=agent).status == "pending"


def test_an_approver_edits_the_arguments_before_approving(
    page: Page, cast: Cast, fake_model: FakeModelServer, screenshot_dir: Path
) -> None:
    agent = make_agent(
        tenant=cast.tenant_a,
        name="Careful",
        model_provider="anthropic",
        approval_required_tools=["calculator"],
    )
    ToolPolicy.objects.create(agent=agent, editable_arguments=["calculator"])
    fake_model.script(Turn(tool_calls=[("calculator", {"expression": "6*7"})]))
    fake_model.script(Turn(text="6*8 = 48."), match="tool_result")
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "What is 6*7?")
    card = last_answer(page).locator(".tool-card")
    expect(card).to_have_attribute("data-state", "awaiting")
    card.get_by_role("button", name="Edit arguments").click()
    editor = card.get_by_label("Arguments to run with (JSON)")
    expect(editor).to_have_value('{\n  "expression": "6*7"\n}')
    editor.fill('{"expression": "6*8"}')
    shoot(page, screenshot_dir, "chat-approval-edit-arguments")
    card.get_by_role("button", name="Approve").click()

    expect(card.locator("[data-slot=approval-note]")).to_have_text(
        "Approved by bob@a.test with edited arguments"
    )
    expect(card.locator("[data-slot=result]")).to_have_text("48")
    expect(card.locator("[data-slot=arguments]")).to_have_text('{\n  "expression": "6*8"\n}')
    expect(last_answer(page).locator(".part-text").last).to_have_text("6*8 = 48.")
    call = fake_model.requests[-1].body["messages"][-2]["content"][-1]
    assert call["input"] == {"expression": "6*8"}
    approval = ToolApproval.objects.get(run__session__agent=agent)
    assert (approval.status, approval.edited_arguments) == ("approved", {"expression": "6*8"})
