"""An answer stopped while it streams keeps the text people saw and the tokens it used: in the
stored message, the messages API, the export, the chat page and the run's usage and cost."""

import json
import math
import threading
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from billing.models import ModelPrice
from sessions.models import Message, Run, RunEvent, Step
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import wait_until

FULL_TEXT = "slow " * 400
SLOW_TEXT = Turn(text=FULL_TEXT, chunk_size=5, chunk_delay=0.02, usage=(10, 500, 0, 0))


def price_test_model() -> None:
    """$3 per million input tokens, $15 per million output tokens: 3 and 15 micros a token."""
    ModelPrice.objects.create(
        provider="anthropic",
        model="test-model",
        input_per_million=Decimal("3"),
        output_per_million=Decimal("15"),
        cache_read_per_million=Decimal("0.3"),
        cache_write_per_million=Decimal("3.75"),
        as_of="2026-11-01",
    )


def run_in_thread(run_id: str) -> threading.Thread:
    def target() -> None:
        try:
            execute_run(run_id)
        finally:
            connection.close()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def streamed_text(run_id: str) -> str:
    deltas = RunEvent.objects.filter(run_id=run_id, type="text.delta").order_by("seq")
    return "".join(event.data["text"] for event in deltas)


def stop_mid_answer(api: APIClient, fake_model: FakeModelServer, cast: Cast) -> tuple[str, str]:
    """A session whose answer is cancelled after some text streamed: (session id, run id)."""
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model")
    fake_model.script(SLOW_TEXT)
    session_id = api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()["id"]
    posted = api.post(f"/api/v1/sessions/{session_id}/messages/", {"content": "a long story"}, format="json")
    run_id = posted.json()["run"]["id"]
    worker = run_in_thread(run_id)
    wait_until(lambda: len(streamed_text(run_id)) >= 50, timeout=10, message="the answer to stream")
    assert api.post(f"/api/v1/runs/{run_id}/cancel/").status_code == 202
    worker.join(timeout=10)
    assert Run.objects.get(pk=run_id).status == "cancelled"
    return str(session_id), str(run_id)


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_answer_keeps_its_streamed_text_marked_stopped_and_its_tokens(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    price_test_model()
    session_id, run_id = stop_mid_answer(bob_api, fake_model, cast)
    text = streamed_text(run_id)
    # The provider reported 10 input tokens and 1 output token before it was stopped; the
    # output counts at least the streamed text's estimate, four characters a token.
    output_tokens = math.ceil(len(text) / 4)

    messages = bob_api.get(f"/api/v1/sessions/{session_id}/messages/").json()["results"]
    run = bob_api.get(f"/api/v1/runs/{run_id}/").json()

    assert 50 <= len(text) < len(FULL_TEXT) and FULL_TEXT.startswith(text)
    answer = messages[-1]
    assert (answer["role"], answer["text"], answer["is_stopped"], answer["run"]) == (
        "assistant",
        text,
        True,
        run_id,
    )
    assert answer["content"] == [{"type": "text", "text": text}]
    assert (answer["input_tokens"], answer["output_tokens"]) == (10, output_tokens)
    assert [message["is_stopped"] for message in messages] == [False, True]
    assert (run["usage"]["input_tokens"], run["usage"]["output_tokens"]) == (10, output_tokens)
    assert run["cost"] == f"{Decimal(10 * 3 + output_tokens * 15) / 1_000_000:.6f}"
    assert run["unpriced_model_calls"] == 0
    step = Step.objects.get(run_id=run_id, kind="model_call")
    assert (step.status, step.input_tokens, step.output_tokens) == ("failed", 10, output_tokens)
    browser = Client()
    browser.force_login(cast.bob)
    run_page = browser.get(f"/runs/{run_id}/").content.decode()
    # The run page's model call step: failed (stopped), with its tokens and its cost (a fraction of a cent).
    assert f'<span class="small muted">10 in · {output_tokens} out</span>' in run_page
    assert '<span class="small muted" data-step-cost>$0.000' in run_page
    completed = RunEvent.objects.get(run_id=run_id, type="message.completed")
    assert (completed.data["content"], completed.data["is_stopped"]) == (
        [{"type": "text", "text": text}],
        True,
    )


@pytest.mark.django_db(transaction=True)
def test_the_export_keeps_a_cancelled_answer_marked_stopped(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    session_id, run_id = stop_mid_answer(bob_api, fake_model, cast)
    text = streamed_text(run_id)

    as_json = json.loads(bob_api.get(f"/api/v1/sessions/{session_id}/export/", {"as": "json"}).content)
    as_markdown = bob_api.get(f"/api/v1/sessions/{session_id}/export/").content.decode()

    assert [(m["role"], m["text"], m["is_stopped"]) for m in as_json["messages"]] == [
        ("user", "a long story", False),
        ("assistant", text, True),
    ]
    assert as_markdown.endswith(f"\n\n{text.strip()}\n\n*(stopped)*\n")


@pytest.mark.django_db(transaction=True)
def test_the_chat_page_shows_a_cancelled_answer_with_a_stopped_note(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    session_id, run_id = stop_mid_answer(bob_api, fake_model, cast)
    text = streamed_text(run_id)
    browser = Client()
    browser.force_login(cast.bob)

    page = browser.get(f"/chat/{session_id}/").content.decode()

    answer = page[page.index(f'id="run-{run_id}"') :]
    assert f'<div class="part-text md" data-markdown>{text}</div>' in answer
    assert answer.index(text) < answer.index("data-stopped-note>Stopped: the answer ends here.</p>")


@pytest.mark.django_db(transaction=True)
def test_the_next_message_follows_the_stopped_answer_in_the_models_context(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    session_id, run_id = stop_mid_answer(bob_api, fake_model, cast)
    text = streamed_text(run_id)
    fake_model.script(Turn(text="next answer"))

    posted = bob_api.post(f"/api/v1/sessions/{session_id}/messages/", {"content": "go on"}, format="json")
    execute_run(posted.json()["run"]["id"])

    roles_and_texts = [
        (message["role"], [block["text"] for block in message["content"]])
        for message in fake_model.requests[-1].body["messages"]
    ]
    assert roles_and_texts == [
        ("user", ["a long story"]),
        ("assistant", [text]),
        ("user", ["go on"]),
    ]
    assert Message.objects.filter(session_id=session_id, is_stopped=True).count() == 1
