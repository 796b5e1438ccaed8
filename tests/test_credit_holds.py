"""A credit hold bounds what its model call can cost, and a call never takes more than its hold (issue 50)."""

from typing import Any

import pytest
from django.db.models import Sum
from rest_framework.test import APIClient

from billing.models import Budget, BudgetScope, CreditAccount, LedgerEntry
from billing.services import credits_grant
from sessions.models import Step
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.test_credits import set_price
from tests.test_runs_api import post_message, run_to_end, start_session

pytestmark = pytest.mark.django_db


def run_once(api: APIClient, agent: Any, content: str) -> dict[str, Any]:
    return run_to_end(api, post_message(api, start_session(api, agent.pk), content)["run"]["id"])  # type: ignore[index]


def entries(tenant: Any, kind: str) -> list[tuple[int, str]]:
    return list(
        LedgerEntry.objects.filter(tenant=tenant, kind=kind)
        .order_by("id")
        .values_list("amount_micros", "note")
    )


def test_a_call_reported_dearer_than_its_hold_takes_the_hold_and_no_more(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    """The report's case: a grant of 0.05 and a call the provider reports at 0.63 ended at -0.58."""
    set_price()  # 3 in, 15 out per million
    agent = make_agent(
        tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model", max_tokens=1000
    )
    credits_grant(tenant=cast.tenant_a, amount_micros=50_000)
    # 40,000 in and 34,000 out: 0.12 + 0.51 = 0.63 credits, far past what the request can be billed.
    fake_model.script(Turn(text="ok", usage=(40_000, 34_000, 0, 0)))

    run = run_once(bob_api, agent, "hello")

    assert run["status"] == "completed"
    [(reserved, _)] = entries(cast.tenant_a, "reservation")
    hold = -reserved
    assert 0 < hold < 50_000
    assert entries(cast.tenant_a, "settlement") == [
        (-hold, "cost 0.630000 passed this call's hold; charged the hold")
    ]
    balance = CreditAccount.objects.get(tenant=cast.tenant_a).balance_micros
    assert balance == 50_000 - hold
    assert balance >= 0
    ledger_total = LedgerEntry.objects.filter(tenant=cast.tenant_a).aggregate(total=Sum("amount_micros"))[
        "total"
    ]
    assert ledger_total == balance
    # The step keeps what the provider reported: usage reports show the real cost.
    assert Step.objects.get(run_id=run["id"], kind="model_call").cost_micros == 630_000


def test_a_budget_counts_no_more_than_the_hold_either(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    set_price()
    agent = make_agent(
        tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model", max_tokens=1000
    )
    budget = Budget.objects.create(
        tenant=cast.tenant_a, scope=BudgetScope.AGENT, agent=agent, monthly_limit_micros=50_000
    )
    credits_grant(tenant=cast.tenant_a, amount_micros=50_000)
    fake_model.script(Turn(text="ok", usage=(40_000, 34_000, 0, 0)))

    run_once(bob_api, agent, "hello")

    [(reserved, _)] = entries(cast.tenant_a, "reservation")
    assert list(budget.periods.values_list("used_micros", flat=True)) == [-reserved]


def test_the_hold_covers_a_request_billed_one_token_per_byte(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    """Text outside ASCII takes more tokens than a quarter of its characters: the hold must cover it."""
    set_price()
    agent = make_agent(
        tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model", max_tokens=100
    )
    credits_grant(tenant=cast.tenant_a, amount_micros=10_000_000)
    text = "\u6f22" * 2000  # 2,000 characters, 6,000 bytes of UTF-8
    fake_model.script(Turn(text="ok", usage=(len(text.encode()), 100, 0, 0)))

    run_once(bob_api, agent, text)

    cost = 6000 * 3 + 100 * 15
    [(reserved, _)] = entries(cast.tenant_a, "reservation")
    assert -reserved >= cost
    assert entries(cast.tenant_a, "settlement") == [(-cost, "")]
    assert CreditAccount.objects.get(tenant=cast.tenant_a).balance_micros == 10_000_000 - cost
