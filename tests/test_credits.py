"""Credits: holds before every model call, settlements after, budgets, and the ledger."""

from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import Sum
from django.test import Client
from rest_framework.test import APIClient

from audit.models import AuditEntry
from billing.models import Budget, BudgetScope, CreditAccount, LedgerEntry, ModelPrice
from billing.services import credits_grant, tenant_mark_metered
from sessions.models import Run, Step
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.test_runs_api import TOOL_ROUND_TRIP, post_message, run_to_end, start_session

pytestmark = pytest.mark.django_db

# Credits per million tokens, i.e. micro-credits per token.
PRICE = {
    "input": Decimal("3"),
    "output": Decimal("15"),
    "cache_read": Decimal("0.3"),
    "cache_write": Decimal("3.75"),
}


def set_price(*, provider: str = "anthropic", model: str = "test-model", **prices: Decimal) -> ModelPrice:
    values = {**PRICE, **prices}
    return ModelPrice.objects.create(
        provider=provider,
        model=model,
        input_per_million=values["input"],
        output_per_million=values["output"],
        cache_read_per_million=values["cache_read"],
        cache_write_per_million=values["cache_write"],
        as_of="2026-11-01",
    )


def balance_of(tenant: Any) -> int:
    return CreditAccount.objects.get(tenant=tenant).balance_micros


def ledger_sum(tenant: Any) -> int:
    return LedgerEntry.objects.filter(tenant=tenant).aggregate(total=Sum("amount_micros"))["total"] or 0


def test_each_model_call_costs_its_tokens_at_the_model_price(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    set_price()
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model")
    fake_model.script(*TOOL_ROUND_TRIP)

    run = run_to_end(bob_api, post_message(bob_api, start_session(bob_api, agent.pk), "6*7?")["run"]["id"])  # type: ignore[index]

    steps = Step.objects.filter(run_id=run["id"]).order_by("index")
    # (20 in, 10 out, 5 cache read) = 60 + 150 + 1.5; (40 in, 8 out, 3 cache write) = 120 + 120 + 11.25
    assert [step.cost_micros for step in steps] == [212, None, 252]
    stored = Run.objects.get(pk=run["id"])
    assert (stored.cost_micros, stored.unpriced_model_calls) == (464, 0)
    assert not LedgerEntry.objects.exists()  # a tenant without credits is not metered


def test_a_model_without_a_price_costs_unknown_not_zero(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="unpriced-model")
    fake_model.script(Turn(text="hi"))

    run = run_to_end(bob_api, post_message(bob_api, start_session(bob_api, agent.pk), "hello")["run"]["id"])  # type: ignore[index]

    assert list(Step.objects.filter(run_id=run["id"]).values_list("cost_micros", flat=True)) == [None]
    stored = Run.objects.get(pk=run["id"])
    assert (stored.cost_micros, stored.unpriced_model_calls) == (0, 1)


def hold_of_one_run(api: APIClient, agent: Any, fake_model: FakeModelServer, content: str) -> int:
    """Run one message and return the hold its model call took (the same for the same request)."""
    fake_model.script(Turn(text="ok", usage=(10, 5, 0, 0)))
    run = run_to_end(api, post_message(api, start_session(api, agent.pk), content)["run"]["id"])  # type: ignore[index]
    assert run["status"] == "completed"
    return -LedgerEntry.objects.get(run_id=run["id"], kind="reservation").amount_micros


def test_a_tenant_with_credits_for_two_runs_gets_the_third_refused_before_the_model_is_called(
    cast: Cast, bob_api: APIClient, carol_api: APIClient, fake_model: FakeModelServer
) -> None:
    set_price()
    # The same agent configuration in tenant B measures what one run holds.
    probe_agent = make_agent(
        tenant=cast.tenant_b, model_provider="anthropic", model_name="test-model", max_tokens=100
    )
    credits_grant(tenant=cast.tenant_b, amount_micros=10_000_000)
    hold = hold_of_one_run(carol_api, probe_agent, fake_model, "what is new?")
    cost = 10 * 3 + 5 * 15  # (10 in, 5 out)
    agent = make_agent(
        tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model", max_tokens=100
    )
    # Enough to hold and pay two runs, not a third hold.
    credits_grant(tenant=cast.tenant_a, amount_micros=hold + cost + cost // 2)
    fake_model.reset()
    fake_model.script(*[Turn(text="ok", usage=(10, 5, 0, 0))] * 3)

    runs = [
        run_to_end(
            bob_api, post_message(bob_api, start_session(bob_api, agent.pk), "what is new?")["run"]["id"]
        )  # type: ignore[index]
        for _ in range(3)
    ]

    assert [(run["status"], run["stop_reason"]) for run in runs] == [
        ("completed", "end_turn"),
        ("completed", "end_turn"),
        ("failed", "insufficient_credits"),
    ]
    assert str(runs[2]["error"]).startswith("Insufficient credits: this model call may cost up to ")
    assert len(fake_model.requests) == 2
    assert balance_of(cast.tenant_a) == hold + cost + cost // 2 - 2 * cost
    assert ledger_sum(cast.tenant_a) == balance_of(cast.tenant_a)
    kinds = list(
        LedgerEntry.objects.filter(tenant=cast.tenant_a).order_by("id").values_list("kind", "amount_micros")
    )
    assert kinds == [
        ("grant", hold + cost + cost // 2),
        ("reservation", -hold),
        ("release", hold),
        ("settlement", -cost),
        ("reservation", -hold),
        ("release", hold),
        ("settlement", -cost),
    ]
    settled = LedgerEntry.objects.filter(tenant=cast.tenant_a, kind="settlement").first()
    assert settled is not None and settled.step is not None and settled.step.kind == "model_call"


def test_a_model_without_a_price_is_refused_for_a_tenant_with_credits(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="unpriced-model")
    credits_grant(tenant=cast.tenant_a, amount_micros=1_000_000)

    run = run_to_end(bob_api, post_message(bob_api, start_session(bob_api, agent.pk), "hello")["run"]["id"])  # type: ignore[index]

    assert (run["status"], run["stop_reason"]) == ("failed", "no_price")
    assert str(run["error"]).startswith("No price for this model: anthropic:unpriced-model has no price")
    assert fake_model.requests == []
    assert balance_of(cast.tenant_a) == 1_000_000


def test_a_member_budget_refuses_a_call_that_would_pass_it(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    set_price()
    agent = make_agent(
        tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model", max_tokens=100
    )
    Budget.objects.create(
        tenant=cast.tenant_a, scope=BudgetScope.MEMBER, user=cast.bob, monthly_limit_micros=1000
    )
    tenant_mark_metered(tenant=cast.tenant_a)

    run = run_to_end(bob_api, post_message(bob_api, start_session(bob_api, agent.pk), "hello")["run"]["id"])  # type: ignore[index]

    assert (run["status"], run["stop_reason"]) == ("failed", "insufficient_credits")
    assert "more than is left of your monthly budget of 0.001000" in str(run["error"])
    assert fake_model.requests == []


def test_an_agent_budget_counts_what_its_runs_spent(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    set_price()
    agent = make_agent(
        tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model", max_tokens=100
    )
    budget = Budget.objects.create(
        tenant=cast.tenant_a, scope=BudgetScope.AGENT, agent=agent, monthly_limit_micros=1_000_000
    )
    tenant_mark_metered(tenant=cast.tenant_a)
    fake_model.script(Turn(text="ok", usage=(10, 5, 0, 0)))

    run = run_to_end(bob_api, post_message(bob_api, start_session(bob_api, agent.pk), "hello")["run"]["id"])  # type: ignore[index]

    assert run["status"] == "completed"
    assert list(budget.periods.values_list("used_micros", flat=True)) == [105]
    assert not LedgerEntry.objects.exists()  # budgets without credits: no balance to move


# --- API --------------------------------------------------------------------------------


def test_owners_grant_credits_and_everyone_reads_the_balance(
    cast: Cast, alice_api: APIClient, victor_api: APIClient
) -> None:
    granted = alice_api.post("/api/v1/credits/grant/", {"amount": "12.5", "note": "pilot"}, format="json")

    assert granted.status_code == 201, granted.content
    assert (granted.json()["kind"], granted.json()["amount"], granted.json()["actor"]) == (
        "grant",
        "12.500000",
        "alice@a.test",
    )
    assert victor_api.get("/api/v1/credits/").json() == {
        "is_metered": True,
        "balance": "12.500000",
        "ledger_total": "12.500000",
    }


@pytest.mark.parametrize("client_name", ["bob_api", "victor_api"])
def test_only_owners_grant_credits(cast: Cast, client_name: str, request: pytest.FixtureRequest) -> None:
    api: APIClient = request.getfixturevalue(client_name)

    response = api.post("/api/v1/credits/grant/", {"amount": "5"}, format="json")

    assert response.status_code == 403
    assert not CreditAccount.objects.exists() and not LedgerEntry.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"amount": "-1"}, "amount"),
        ({"amount": "0"}, "amount"),
        ({"amount": "abc"}, "amount"),
        ({}, "amount"),
    ],
)
def test_a_bad_grant_is_refused_with_its_field(
    cast: Cast, alice_api: APIClient, body: dict[str, Any], field: str
) -> None:
    response = alice_api.post("/api/v1/credits/grant/", body, format="json")

    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert not LedgerEntry.objects.exists()


def test_the_ledger_and_budgets_stay_within_their_tenant(
    cast: Cast, alice_api: APIClient, carol_api: APIClient
) -> None:
    entry = credits_grant(tenant=cast.tenant_a, amount_micros=5_000_000)
    agent = make_agent(tenant=cast.tenant_a)
    created = alice_api.post(
        "/api/v1/budgets/", {"scope": "agent", "agent": str(agent.pk), "monthly_limit": "3"}, format="json"
    )
    assert created.status_code == 201, created.content
    budget_id = created.json()["id"]

    assert carol_api.get("/api/v1/credits/ledger/").json()["results"] == []
    assert carol_api.get(f"/api/v1/credits/ledger/{entry.pk}/").status_code == 404
    assert carol_api.get("/api/v1/budgets/").json()["results"] == []
    assert carol_api.get(f"/api/v1/budgets/{budget_id}/").status_code == 404
    assert (
        carol_api.patch(f"/api/v1/budgets/{budget_id}/", {"monthly_limit": "99"}, format="json").status_code
        == 404
    )
    assert carol_api.delete(f"/api/v1/budgets/{budget_id}/").status_code == 404
    assert carol_api.get("/api/v1/credits/").json() == {
        "is_metered": False,
        "balance": "0.000000",
        "ledger_total": "0.000000",
    }
    assert Budget.objects.get(pk=budget_id).monthly_limit_micros == 3_000_000
    assert balance_of(cast.tenant_a) == 5_000_000


def test_budgets_are_set_by_owners_for_their_own_members_and_agents(
    cast: Cast, alice_api: APIClient, bob_api: APIClient
) -> None:
    other_agent = make_agent(tenant=cast.tenant_b)

    member = alice_api.post(
        "/api/v1/budgets/", {"scope": "member", "user": cast.bob.pk, "monthly_limit": "2.5"}, format="json"
    )
    assert member.status_code == 201, member.content
    assert (member.json()["monthly_limit"], member.json()["used_this_month"]) == ("2.500000", "0.000000")
    again = alice_api.post(
        "/api/v1/budgets/", {"scope": "member", "user": cast.bob.pk, "monthly_limit": "1"}, format="json"
    )
    assert again.status_code == 400 and "user" in again.json()["error"]["fields"]
    foreign = alice_api.post(
        "/api/v1/budgets/",
        {"scope": "agent", "agent": str(other_agent.pk), "monthly_limit": "1"},
        format="json",
    )
    assert foreign.status_code == 400 and "agent" in foreign.json()["error"]["fields"]
    outsider = alice_api.post(
        "/api/v1/budgets/", {"scope": "member", "user": cast.carol.pk, "monthly_limit": "1"}, format="json"
    )
    assert outsider.status_code == 400 and "user" in outsider.json()["error"]["fields"]
    by_member = bob_api.post(
        "/api/v1/budgets/", {"scope": "member", "user": cast.bob.pk, "monthly_limit": "100"}, format="json"
    )
    assert by_member.status_code == 403
    changed = alice_api.patch(
        f"/api/v1/budgets/{member.json()['id']}/", {"monthly_limit": "4"}, format="json"
    )
    assert changed.status_code == 200 and changed.json()["monthly_limit"] == "4.000000"
    assert Budget.objects.count() == 1


def test_operators_grant_and_refund_credits_with_a_command(cast: Cast) -> None:
    output = StringIO()

    call_command("grant_credits", "tenant-a", "7.25", "--note", "trial", stdout=output)
    call_command("grant_credits", "tenant-a", "0.25", "--refund", stdout=output)

    assert output.getvalue().splitlines() == [
        "tenant-a: balance 7.250000 credits",
        "tenant-a: balance 7.500000 credits",
    ]
    assert list(LedgerEntry.objects.order_by("id").values_list("kind", "amount_micros", "note")) == [
        ("grant", 7_250_000, "trial"),
        ("refund", 250_000, ""),
    ]


# --- Admin ------------------------------------------------------------------------------


def test_operators_edit_prices_and_grant_credits_in_the_admin(cast: Cast, admin_client: Any) -> None:
    price = set_price()

    edited = admin_client.post(
        f"/admin/billing/modelprice/{price.pk}/change/",
        {
            "provider": "anthropic",
            "model": "test-model",
            "input_per_million": "2.5",
            "output_per_million": "10",
            "cache_read_per_million": "0.25",
            "cache_write_per_million": "3",
            "as_of": "2026-11-27",
        },
    )
    granted = admin_client.post(
        "/admin/billing/creditaccount/add/",
        {"tenant": str(cast.tenant_a.pk), "grant": "3.5", "note": "trial"},
    )

    assert (edited.status_code, granted.status_code) == (302, 302)
    price.refresh_from_db()
    assert (price.input_per_million, price.output_per_million) == (Decimal("2.5"), Decimal("10"))
    assert balance_of(cast.tenant_a) == 3_500_000
    entry = LedgerEntry.objects.get()
    assert (entry.kind, entry.amount_micros, entry.note, entry.actor.is_superuser) == (
        "grant",
        3_500_000,
        "trial",
        True,
    )  # type: ignore[union-attr]


def test_tenant_owners_do_not_see_the_platform_price_table(cast: Cast) -> None:
    client = Client()
    client.force_login(cast.alice)

    assert client.get("/admin/billing/modelprice/").status_code == 403


def test_a_planned_run_without_credits_for_its_planner_ends_insufficient_credits(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    set_price()
    agent = make_agent(
        tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model", planning_mode="plan"
    )
    credits_grant(tenant=cast.tenant_a, amount_micros=1)

    run = run_to_end(
        bob_api, post_message(bob_api, start_session(bob_api, agent.pk), "1. a\n2. b")["run"]["id"]
    )  # type: ignore[index]

    assert (run["status"], run["stop_reason"]) == ("failed", "insufficient_credits")
    assert str(run["error"]).startswith("Insufficient credits: this model call may cost up to ")
    assert fake_model.requests == []


# --- Audit ------------------------------------------------------------------------------


def test_grants_budgets_and_prices_leave_audit_entries(
    cast: Cast, alice_api: APIClient, admin_client: Any
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Helper")
    price = set_price()

    alice_api.post("/api/v1/credits/grant/", {"amount": "5", "note": "pilot"}, format="json")
    budget_id = alice_api.post(
        "/api/v1/budgets/", {"scope": "agent", "agent": str(agent.pk), "monthly_limit": "2"}, format="json"
    ).json()["id"]
    alice_api.patch(f"/api/v1/budgets/{budget_id}/", {"monthly_limit": "3"}, format="json")
    alice_api.delete(f"/api/v1/budgets/{budget_id}/")
    admin_client.post(
        f"/admin/billing/modelprice/{price.pk}/change/",
        {
            "provider": "anthropic",
            "model": "test-model",
            "input_per_million": "4",
            "output_per_million": "15",
            "cache_read_per_million": "0.3",
            "cache_write_per_million": "3.75",
            "as_of": "2026-11-01",
        },
    )

    tenant_entries = list(
        AuditEntry.objects.filter(tenant=cast.tenant_a, object_type__in=["credits", "budget"])
        .order_by("created_at")
        .values_list("object_type", "action", "actor_label", "source", "changes")
    )
    assert tenant_entries == [
        (
            "credits",
            "create",
            "alice@a.test",
            "api",
            {"kind": [None, "grant"], "amount": [None, "5.000000"], "note": [None, "pilot"]},
        ),
        (
            "budget",
            "create",
            "alice@a.test",
            "api",
            {
                "scope": [None, "agent"],
                "agent": [None, "Helper"],
                "monthly_limit": [None, "2.000000"],
            },
        ),
        ("budget", "update", "alice@a.test", "api", {"monthly_limit": ["2.000000", "3.000000"]}),
        (
            "budget",
            "delete",
            "alice@a.test",
            "api",
            {
                "scope": ["agent", None],
                "agent": ["Helper", None],
                "monthly_limit": ["3.000000", None],
            },
        ),
    ]
    price_entry = AuditEntry.objects.get(object_type="price")
    assert (price_entry.tenant_id, price_entry.source, price_entry.action, price_entry.changes) == (
        None,
        "admin",
        "update",
        {"input_per_million": ["3.000000", "4.000000"]},
    )


def test_a_free_models_calls_leave_no_ledger_rows(cast: Cast, bob_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a)  # the offline model, priced at 0
    credits_grant(tenant=cast.tenant_a, amount_micros=1_000_000)

    run = run_to_end(bob_api, post_message(bob_api, start_session(bob_api, agent.pk), "hello")["run"]["id"])  # type: ignore[index]

    assert run["status"] == "completed"
    assert list(LedgerEntry.objects.values_list("kind", "amount_micros")) == [("grant", 1_000_000)]
    assert balance_of(cast.tenant_a) == 1_000_000
