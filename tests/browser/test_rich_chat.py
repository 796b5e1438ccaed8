"""Rich answers in the browser: Markdown while it streams and after a reload, copy buttons, no
script from a model's answer, conversations searched and renamed, and a message sent offline."""

import re
from pathlib import Path

from playwright.sync_api import Locator, Page, expect

from sessions.models import Message, MessageRole, Session
from tests.browser.conftest import BROWSER_MARKS, last_answer, open_chat, send, shoot, sign_in
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import LiveStack
from tests.web.conftest import finished_conversation

pytestmark = BROWSER_MARKS

CODE = 'def greet(name):\n    return f"Hello, {name}!"'
TAIL = "Those are the facts. " * 40
RICH_ANSWER = (
    "Here is a table:\n\n"
    "| Fruit | Colour |\n|---|---|\n| Banana | yellow |\n| Cherry | red |\n\n"
    f"And the code:\n\n```python\n{CODE}\n```\n\n{TAIL}"
)

# What every streamed state of an answer looked like: whether it held a table, highlighted code,
# or raw Markdown (a pipe or a fence) on its way to being formatted.
RECORD_RICH = """
window.__rich = {tables: 0, highlighted: 0, raw: []};
new MutationObserver(() => {
  const part = document.querySelector(".part-text.is-streaming");
  if (!part) return;
  if (part.querySelector("table td")) window.__rich.tables += 1;
  if (part.querySelector("pre code.hljs .hljs-keyword")) window.__rich.highlighted += 1;
  if (/[|`]/.test(part.textContent)) window.__rich.raw.push(part.textContent);
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


def test_a_streamed_table_and_code_render_live_after_completion_and_after_a_reload(
    page: Page, stack: LiveStack, cast: Cast, fake_model: FakeModelServer, screenshot_dir: Path
) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.base_url)
    page.add_init_script(RECORD_RICH)
    agent = make_agent(tenant=cast.tenant_a, name="Writer", model_provider="anthropic")
    fake_model.script(Turn(text=RICH_ANSWER, chunk_size=6, chunk_delay=0.02))
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "Fruit and code, please")
    streaming = page.locator(".part-text.is-streaming")
    expect(streaming.locator("table td").first).to_have_text("Banana")
    expect(streaming.locator("pre code.hljs .hljs-keyword").first).to_have_text("def")
    expect(page.locator("[data-chat-status]")).to_have_text("idle")

    rich = page.evaluate("window.__rich")
    assert rich["tables"] > 0 and rich["highlighted"] > 0
    assert rich["raw"] == [], "raw Markdown showed while streaming"
    expect_table_and_code(last_answer(page))
    expect_table_and_code(reloaded_answer(page))

    copy = last_answer(page).get_by_role("button", name="Copy code")
    copy.focus()
    page.keyboard.press("Enter")
    expect(last_answer(page).locator(".code-copy")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == CODE

    last_answer(page).get_by_role("button", name="Copy answer").click()
    expect(last_answer(page).locator(".message-copy")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == RICH_ANSWER
    page.locator(".turn-user").last.get_by_role("button", name="Copy message").click()
    expect(page.locator(".turn-user").last.locator(".message-copy")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "Fruit and code, please"
    shoot(page, screenshot_dir, "chat-rich-answer")


def expect_table_and_code(answer: Locator) -> None:
    expect(answer.locator(".part-text table tbody tr")).to_have_count(2)
    expect(answer.locator(".part-text table td")).to_have_text(["Banana", "yellow", "Cherry", "red"])
    code = answer.locator(".code-block pre code")
    expect(code).to_have_class(re.compile(r"^(?=.*\blanguage-python\b)(?=.*\bhljs\b)"))
    expect(code).to_have_text(CODE)
    expect(answer.locator(".code-language")).to_have_text("python")


def reloaded_answer(page: Page) -> Locator:
    page.reload()
    expect(page.locator("[data-connection='live']")).to_be_visible()
    return last_answer(page)


XSS_ANSWER = (
    'An image <img src=x onerror="window.__xss=1"> and [a link](javascript:alert(1)) '
    "and <script>window.__xss=2</script> and [a fine link](https://example.com/docs).\n\n"
    '<iframe src="https://example.com"></iframe><form action="/x"><button>Go</button></form>'
)


def test_script_in_an_answer_never_runs_live_or_after_a_reload(
    page: Page, cast: Cast, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Writer", model_provider="anthropic")
    fake_model.script(Turn(text=XSS_ANSWER, chunk_size=8, chunk_delay=0.01))
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    send(page, "Say something dangerous")
    expect(page.locator("[data-chat-status]")).to_have_text("idle")
    expect_no_script(page, last_answer(page))
    expect_no_script(page, reloaded_answer(page))


def expect_no_script(page: Page, answer: Locator) -> None:
    text = answer.locator(".part-text")
    expect(text).to_contain_text("An image")
    expect(text.locator("a")).to_have_count(2)
    expect(text.get_by_role("link", name="a fine link")).to_have_attribute("rel", "noopener noreferrer")
    expect(text.locator("img, script, iframe, form, button, [onerror]")).to_have_count(0)
    assert page.evaluate("window.__xss") is None
    assert page.evaluate("document.querySelectorAll('[href^=\"javascript:\" i]').length") == 0


def test_search_finds_conversations_by_text_and_title_and_rename_survives_a_reload(
    page: Page, cast: Cast, screenshot_dir: Path
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Gardener")
    garden = Session.objects.create(
        tenant=cast.tenant_a, agent=agent, created_by=cast.bob, title="Garden plans"
    )
    finished_conversation(garden, question="What grows in shade?", answer="Lettuce; tomatoes need sun.")
    sums = Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.bob, title="Sums")
    finished_conversation(sums, question="2+2?", answer="4.")
    carols_agent = make_agent(tenant=cast.tenant_b, name="Carol's")
    carols = Session.objects.create(
        tenant=cast.tenant_b, agent=carols_agent, created_by=cast.carol, title="Tomatoes"
    )
    finished_conversation(carols, question="Tomatoes?", answer="Garden tomatoes.")
    sign_in(page, "bob@a.test", "bob-password")
    page.goto(f"/chat/{sums.pk}/")
    expect(page.locator("[data-connection='live']")).to_be_visible()
    titles = page.locator("#session-list .session-title")
    expect(titles).to_have_text(["Sums", "Garden plans"])

    search = page.get_by_label("Search conversations")
    search.fill("tomatoes")  # only in an answer (and in carol's title, in the other tenant)
    expect(titles).to_have_text(["Garden plans"])
    shoot(page, screenshot_dir, "chat-search")
    search.fill("SUMS")
    expect(titles).to_have_text(["Sums"])
    search.fill("nothing like this")
    expect(page.locator("[data-no-sessions]")).to_have_text("No conversations match “nothing like this”.")
    search.fill("")
    expect(titles).to_have_text(["Sums", "Garden plans"])

    page.get_by_role("button", name="Rename the conversation").click()
    box = page.get_by_label("Conversation title")
    expect(box).to_be_focused()
    box.fill("   ")
    box.press("Enter")
    expect(page.locator("[data-rename-error]")).to_have_text("Give the conversation a title.")
    shoot(page, screenshot_dir, "chat-rename")
    box.fill("Arithmetic")
    box.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_have_text("Arithmetic")
    expect(page.get_by_role("button", name="Rename the conversation")).to_be_focused()
    page.reload()
    expect(page.get_by_role("heading", level=1)).to_have_text("Arithmetic")
    expect(titles.first).to_have_text("Arithmetic")
    assert Session.objects.get(pk=sums.pk).title == "Arithmetic"
    assert Session.objects.get(pk=carols.pk).title == "Tomatoes"


def test_the_chat_opens_on_the_agent_last_used(page: Page, cast: Cast) -> None:
    make_agent(tenant=cast.tenant_a, name="Aardvark")
    zebra = make_agent(tenant=cast.tenant_a, name="Zebra")
    Session.objects.create(tenant=cast.tenant_a, agent=zebra, created_by=cast.bob, title="Stripes")
    sign_in(page, "bob@a.test", "bob-password")

    page.goto("/chat/")

    expect(page.get_by_role("radio", name="Zebra")).to_be_checked()
    expect(page.get_by_role("radio", name="Aardvark")).not_to_be_checked()


def test_a_message_sent_offline_is_marked_and_retried_once_back_online(
    page: Page, cast: Cast, fake_model: FakeModelServer, screenshot_dir: Path
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Writer", model_provider="anthropic")
    fake_model.set_default(Turn(text="Back online, **answered**."))
    sign_in(page, "bob@a.test", "bob-password")
    open_chat(page, agent)

    page.context.set_offline(True)
    expect(page.locator("[data-connection='offline']")).to_be_visible()
    send(page, "Are you there?")
    turn = page.locator(".turn-user").last
    expect(turn.locator("[data-queued]")).to_have_text("not sent")
    toasts = page.locator("#toasts .toast")
    expect(toasts).to_have_text(
        ["You are offline: your message was not sent. Retry it when the connection is back."]
    )
    shoot(page, screenshot_dir, "chat-offline")
    assert Message.objects.filter(session__agent=agent, role=MessageRole.USER).count() == 0

    page.context.set_offline(False)
    expect(page.locator("[data-connection='live']")).to_be_visible()
    turn.get_by_role("button", name="Retry").click()
    expect(last_answer(page).locator(".part-text")).to_have_text("Back online, answered.")
    expect(last_answer(page).locator(".part-text strong")).to_have_text("answered")
    expect(page.locator(".turn-user")).to_have_count(1)
    expect(page.locator(".turn-user [data-queued]")).to_have_count(0)
    assert list(
        Message.objects.filter(session__agent=agent, role=MessageRole.USER).values_list("content", flat=True)
    ) == [[{"type": "text", "text": "Are you there?"}]]
