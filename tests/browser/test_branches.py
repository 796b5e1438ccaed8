"""Conversation branches in the chat: regenerate an answer, edit a message and send it again, and
browse between the branches (n/m)."""

from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from sessions.models import Session
from tests.browser.conftest import (
    BROWSER_MARKS,
    expect_live,
    last_answer,
    open_chat,
    reload_chat,
    send,
    shoot,
    sign_in,
)
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, RecordedRequest, Turn

pytestmark = BROWSER_MARKS


def sent(request: RecordedRequest) -> list[tuple[str, str]]:
    """The conversation a model request carried: (role, text) of each message."""
    return [
        (message["role"], "".join(block.get("text", "") for block in message["content"]))
        for message in request.body["messages"]
    ]


def position_of(turn: Any) -> Any:
    return turn.locator("[data-branch-position]")


def ask_for_a_fact_then_regenerate(page: Page, cast: Cast, fake_model: FakeModelServer, again: Turn) -> None:
    """Bob asks for a fact, gets "Honey never spoils." and regenerates it: ``again`` answers."""
    agent = make_agent(
        tenant=cast.tenant_a, name="Facts", model_provider="anthropic", model_name="test-model"
    )
    fake_model.script(Turn(text="Honey never spoils."), again)
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)
    send(page, "Tell me a fact.")
    expect(last_answer(page).locator(".part-text")).to_have_text("Honey never spoils.")
    last_answer(page).get_by_role("button", name="Regenerate").click()


def test_regenerate_an_answer_and_browse_between_the_two(
    page: Page, cast: Cast, fake_model: FakeModelServer
) -> None:
    ask_for_a_fact_then_regenerate(page, cast, fake_model, Turn(text="Octopuses have three hearts."))

    expect(position_of(last_answer(page))).to_have_text("2/2")
    expect(last_answer(page).locator(".part-text")).to_have_text("Octopuses have three hearts.")
    expect(page.locator(".turn-assistant")).to_have_count(1)
    assert [sent(request) for request in fake_model.requests] == [[("user", "Tell me a fact.")]] * 2
    expect(last_answer(page).get_by_role("button", name="Next branch")).to_be_disabled()

    expect_live(page)
    last_answer(page).get_by_role("button", name="Previous branch").click()

    expect(position_of(last_answer(page))).to_have_text("1/2")
    expect(last_answer(page).locator(".part-text")).to_have_text("Honey never spoils.")
    reload_chat(page)
    expect(position_of(last_answer(page))).to_have_text("1/2")
    expect(last_answer(page).locator(".part-text")).to_have_text("Honey never spoils.")
    expect(last_answer(page).get_by_role("button", name="Previous branch")).to_be_disabled()
    last_answer(page).get_by_role("button", name="Next branch").click()
    expect(position_of(last_answer(page))).to_have_text("2/2")
    expect(last_answer(page).locator(".part-text")).to_have_text("Octopuses have three hearts.")


def test_edit_a_message_and_send_it_again_then_switch_branches_across_a_reload(
    page: Page, cast: Cast, fake_model: FakeModelServer, screenshot_dir: Path
) -> None:
    agent = make_agent(
        tenant=cast.tenant_a, name="Trips", model_provider="anthropic", model_name="test-model"
    )
    fake_model.script(
        Turn(text="Where to?"), Turn(text="Rome is lovely in May."), Turn(text="Paris is lovely in June.")
    )
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)
    send(page, "Plan a trip.")
    expect(last_answer(page).locator(".part-text")).to_have_text("Where to?")
    send(page, "Rome, please.")
    expect(last_answer(page).locator(".part-text")).to_have_text("Rome is lovely in May.")
    reload_chat(page)
    question = page.locator(".turn-user").nth(1)

    question.get_by_role("button", name="Edit").click()
    editor = question.get_by_label("Edit your message")
    expect(editor).to_be_focused()
    expect(editor).to_have_value("Rome, please.")
    editor.press("Escape")
    expect(editor).to_have_count(0)
    expect(question.locator(".bubble")).to_have_text("Rome, please.")
    question.get_by_role("button", name="Edit").click()
    question.get_by_label("Edit your message").fill("Paris, please.")
    shoot(page, screenshot_dir, "chat-edit-message")
    question.get_by_role("button", name="Save & send").click()

    expect(position_of(page.locator(".turn-user").nth(1))).to_have_text("2/2")
    expect(page.locator(".turn-user .bubble")).to_have_text(["Plan a trip.", "Paris, please."])
    expect(last_answer(page).locator(".part-text")).to_have_text("Paris is lovely in June.")
    shoot(page, screenshot_dir, "chat-branches")
    assert sent(fake_model.requests[-1]) == [
        ("user", "Plan a trip."),
        ("assistant", "Where to?"),
        ("user", "Paris, please."),
    ]

    expect_live(page)
    page.locator(".turn-user").nth(1).get_by_role("button", name="Previous branch").click()

    expect(position_of(page.locator(".turn-user").nth(1))).to_have_text("1/2")
    expect(page.locator(".turn-user .bubble")).to_have_text(["Plan a trip.", "Rome, please."])
    expect(last_answer(page).locator(".part-text")).to_have_text("Rome is lovely in May.")
    reload_chat(page)
    expect(position_of(page.locator(".turn-user").nth(1))).to_have_text("1/2")
    expect(page.locator(".turn-user .bubble")).to_have_text(["Plan a trip.", "Rome, please."])
    expect(page.locator(".turn-assistant .part-text")).to_have_text(["Where to?", "Rome is lovely in May."])
    session = Session.objects.get(agent=agent)
    assert session.shown_message is not None and session.shown_message.text == "Rome, please."
    page.locator(".turn-user").nth(1).get_by_role("button", name="Next branch").click()
    expect(position_of(page.locator(".turn-user").nth(1))).to_have_text("2/2")
    expect(last_answer(page).locator(".part-text")).to_have_text("Paris is lovely in June.")


def test_messages_sent_on_the_page_can_be_edited_without_a_reload(
    page: Page, cast: Cast, fake_model: FakeModelServer
) -> None:
    """A message's Edit shows once its run starts (``run.started`` names the message it follows),
    also for one sent while the answer before it was still coming, which then follows that answer."""
    agent = make_agent(
        tenant=cast.tenant_a, name="Trips", model_provider="anthropic", model_name="test-model"
    )
    fake_model.script(
        Turn(text="Where to?", response_delay=1.5),
        Turn(text="Rome is lovely in May."),
        Turn(text="Paris is lovely in June."),
    )
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)
    send(page, "Plan a trip.")
    first = page.locator(".turn-user").nth(0)
    expect(first.get_by_role("button", name="Edit")).to_be_visible()
    send(page, "Rome, please.")  # while the first answer is still coming: it queues behind it
    expect(last_answer(page).locator(".part-text")).to_have_text("Rome is lovely in May.")
    question = page.locator(".turn-user").nth(1)

    question.get_by_role("button", name="Edit").click()
    question.get_by_label("Edit your message").fill("Paris, please.")
    question.get_by_role("button", name="Save & send").click()

    expect(position_of(page.locator(".turn-user").nth(1))).to_have_text("2/2")
    expect(last_answer(page).locator(".part-text")).to_have_text("Paris is lovely in June.")
    assert sent(fake_model.requests[-1]) == [
        ("user", "Plan a trip."),
        ("assistant", "Where to?"),
        ("user", "Paris, please."),
    ]


def test_switch_back_while_the_regenerated_answer_is_still_coming_and_forth_again(
    page: Page, cast: Cast, fake_model: FakeModelServer
) -> None:
    # Streamed slowly: the regenerated answer is still coming while Bob switches back to the first.
    slowly = Turn(text="Octopuses have three hearts.", chunk_size=4, chunk_delay=0.6)
    ask_for_a_fact_then_regenerate(page, cast, fake_model, slowly)
    expect(position_of(last_answer(page))).to_have_text("2/2")
    expect(last_answer(page).locator(".part-text")).to_contain_text("Octo")

    expect_live(page)
    last_answer(page).get_by_role("button", name="Previous branch").click()

    expect(position_of(last_answer(page))).to_have_text("1/2")
    expect(last_answer(page).locator(".part-text")).to_have_text("Honey never spoils.")
    expect(page.locator(".turn-assistant")).to_have_count(1)
    expect_live(page)
    last_answer(page).get_by_role("button", name="Next branch").click()
    expect(position_of(last_answer(page))).to_have_text("2/2")
    expect(last_answer(page).locator(".part-text")).to_have_text("Octopuses have three hearts.")
    expect(page.locator(".turn-assistant")).to_have_count(1)
