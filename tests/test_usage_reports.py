"""Cost of runs, steps and sessions, and the usage reports (issue 26): API, CSV, chat, timeline, dashboard."""

import csv
import io
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from billing.costs import Cost, cost_label, money_text
from billing.models import ModelPrice
from sessions.models import RunEvent
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer
from tests.test_runs_api import TOOL_ROUND_TRIP, post_message, start_session

pytestmark = pytest.mark.django_db

# Credits per million tokens: 0.001 credit per input token, and so on.
PRICES = {
    "input_per_million": Decimal("1000"),
    "output_per_million": Decimal("2000"),
    "cache_read_per_million": Decimal("100"),
    "cache_write_per_million": Decimal("1250"),
}
# TOOL_ROUND_TRIP's usage (input, output, cache read, cache write): (20, 10, 5, 0) and (40, 8, 0, 3).
FIRST_CALL_MICROS = 20 * 1000 + 10 * 2000 + 5 * 100 + 0 * 1250  # 40_500
SECOND_CALL_MICROS = 40 * 1000 + 8 * 2000 + 0 * 100 + 3 * 1250  # 59_750


def set_price(provider: str, model: str) -> None:
    ModelPrice.objects.create(provider=provider, model=model, as_of=date(2026, 11, 1), **PRICES)


def login(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def usage(api: APIClient, **params: str) -> Any:
    return api.get("/api/v1/usage/", params)


def priced_tool_run(cast: Cast, bob_api: APIClient, fake_model: FakeModelServer) -> tuple[str, str]:
    agent = make_agent(tenant=cast.tenant_a, name="Calc", model_provider="anthropic", model_name="test-model")
    set_price("anthropic", "test-model")
    fake_model.script(*TOOL_ROUND_TRIP)
    session_id = start_session(bob_api, agent.pk)
    run_id = str(post_message(bob_api, session_id, "What is 6*7?")["run"]["id"])  # type: ignore[index]
    execute_run(run_id)
    return session_id, run_id


def test_a_priced_tool_runs_cost_is_its_tokens_times_the_prices_everywhere(
    cast: Cast, bob_api: APIClient, alice_api: APIClient, fake_model: FakeModelServer
) -> None:
    session_id, run_id = priced_tool_run(cast, bob_api, fake_model)
    assert FIRST_CALL_MICROS + SECOND_CALL_MICROS == 100_250

    run = bob_api.get(f"/api/v1/runs/{run_id}/").json()
    assert (run["status"], run["cost"], run["unpriced_model_calls"]) == ("completed", "0.100250", 0)
    assert (run["tree_cost"], run["tree_unpriced_model_calls"]) == (None, None)
    assert [(step["kind"], step["cost"]) for step in run["steps"]] == [
        ("model_call", "0.040500"),
        ("tool_call", None),
        ("model_call", "0.059750"),
    ]
    assert bob_api.get(f"/api/v1/sessions/{session_id}/").json()["cost"] == "0.100250"
    assert bob_api.get(f"/api/v1/sessions/{session_id}/").json()["unpriced_model_calls"] == 0
    completed = RunEvent.objects.get(run_id=run_id, type="run.completed").data
    assert (completed["cost"], completed["unpriced_model_calls"]) == ("0.100250", 0)

    today = datetime.now(UTC).date().isoformat()
    report = usage(alice_api, group_by="model", since=today, until=today).json()
    assert report == {
        "group_by": "model",
        "since": today,
        "until": today,
        "results": [
            {
                "key": "anthropic:test-model",
                "label": "anthropic:test-model",
                "runs": 1,
                "model_calls": 2,
                "input_tokens": 60,
                "output_tokens": 18,
                "cache_read_tokens": 5,
                "cache_write_tokens": 3,
                "cost": "0.100250",
                "unpriced_model_calls": 0,
            }
        ],
    }
    exported = usage(alice_api, group_by="model", since=today, until=today, format="csv")
    assert exported["Content-Type"] == "text/csv; charset=utf-8"
    assert exported["Content-Disposition"] == f'attachment; filename="usage-model-{today}-{today}.csv"'
    assert list(csv.reader(io.StringIO(exported.content.decode()))) == [
        [
            "key",
            "label",
            "runs",
            "model_calls",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "cost",
            "unpriced_model_calls",
        ],
        ["anthropic:test-model", "anthropic:test-model", "1", "2", "60", "18", "5", "3", "0.100250", "0"],
    ]

    # $0.10025 shown with four places, rounded half up.
    chat = login(cast.bob).get(f"/chat/{session_id}/").content.decode()
    assert '<span class="small muted" data-slot="cost">$0.1003</span>' in chat
    timeline = login(cast.bob).get(f"/runs/{run_id}/").content.decode()
    assert '<p class="stat-value stat-small" data-run-cost>$0.1003</p>' in timeline
    assert timeline.count("data-step-cost>$0.0405<") == 1
    assert timeline.count("data-step-cost>$0.0598<") == 1  # 0.05975
    dashboard = login(cast.alice).get("/").content.decode()
    assert "<strong data-usage-total>$0.1003</strong>" in dashboard
    assert '<td class="num">$0.1003</td>' in dashboard  # the recent run
    assert '<th scope="row">Calc</th><td>$0.1003</td>' in dashboard  # cost per agent


def test_an_unknown_price_shows_price_unknown_never_zero(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="unpriced-model")
    fake_model.script(*TOOL_ROUND_TRIP)
    session_id = start_session(bob_api, agent.pk)
    run_id = str(post_message(bob_api, session_id, "What is 6*7?")["run"]["id"])  # type: ignore[index]
    execute_run(run_id)

    run = bob_api.get(f"/api/v1/runs/{run_id}/").json()
    assert (run["cost"], run["unpriced_model_calls"], run["model_calls"]) == (None, 2, 2)
    assert [step["cost"] for step in run["steps"]] == [None, None, None]
    assert bob_api.get(f"/api/v1/sessions/{session_id}/").json()["cost"] is None
    completed = RunEvent.objects.get(run_id=run_id, type="run.completed").data
    assert (completed["cost"], completed["unpriced_model_calls"]) == (None, 2)
    chat = login(cast.bob).get(f"/chat/{session_id}/").content.decode()
    assert '<span class="small muted" data-slot="cost">price unknown</span>' in chat
    timeline = login(cast.bob).get(f"/runs/{run_id}/").content.decode()
    assert '<p class="stat-value stat-small" data-run-cost>price unknown</p>' in timeline
    assert timeline.count("data-step-cost>price unknown<") == 2
    assert "$0.0000" not in chat + timeline


@pytest.mark.parametrize(
    ("cost", "label"),
    [
        (Cost(micros=4200, priced_calls=1), "$0.0042"),
        (Cost(micros=0, priced_calls=1), "$0.0000"),
        (Cost(), "$0.0000"),  # no model call at all
        (Cost(micros=12_500_000, priced_calls=3), "$12.50"),
        (Cost(micros=1_234_567_890, priced_calls=3), "$1,234.57"),
        (Cost(micros=999_940, priced_calls=1), "$0.9999"),
        (Cost(micros=20, priced_calls=1), "< $0.0001"),
        (Cost(unpriced_calls=2), "price unknown"),
        (Cost(micros=4200, priced_calls=1, unpriced_calls=1), "≥ $0.0042 (1 call without a price)"),
        (Cost(micros=4200, priced_calls=2, unpriced_calls=3), "≥ $0.0042 (3 calls without a price)"),
    ],
)
def test_cost_labels(cost: Cost, label: str) -> None:
    assert cost_label(cost) == label


def test_money_text_rounds_half_up_to_four_places_below_one_credit_and_two_above() -> None:
    assert (money_text(42_050), money_text(1_005_000), money_text(999_999)) == ("$0.0421", "$1.01", "$1.00")
