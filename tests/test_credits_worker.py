"""Credits under concurrency: runs executed at once by a real worker process never overspend."""

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from django.db.models import Sum
from rest_framework.test import APIClient

from billing.models import CreditAccount, LedgerEntry, ModelPrice
from billing.services import credits_grant
from sessions.models import Run, RunStatus
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import LiveStack, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = 50
RUNS_PAID_FOR = 10
OUTPUT_TOKENS = 5
# Input is free and every answer uses its whole output allowance: a hold is exactly what the
# call then costs, so the balance pays for exactly RUNS_PAID_FOR runs.
OUTPUT_PRICE_PER_MILLION = Decimal("2000")
COST_OF_A_RUN = OUTPUT_TOKENS * 2000


@pytest.fixture
def worker(tmp_path: Path, fake_model: FakeModelServer) -> Iterator[LiveStack]:
    stack = LiveStack(tmp_path, ANTHROPIC_API_KEY="test-anthropic-key", ANTHROPIC_BASE_URL=fake_model.url)
    stack.start_worker(workers=1)
    yield stack
    stack.stop()


def test_fifty_runs_at_once_spend_no_more_than_the_balance(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, worker: LiveStack
) -> None:
    ModelPrice.objects.create(
        provider="anthropic",
        model="test-model",
        input_per_million=0,
        output_per_million=OUTPUT_PRICE_PER_MILLION,
        as_of="2026-11-01",
    )
    agent = make_agent(
        tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model", max_tokens=OUTPUT_TOKENS
    )
    credits_grant(tenant=cast.tenant_a, amount_micros=RUNS_PAID_FOR * COST_OF_A_RUN)
    limits = {"messages_per_minute_per_user": RUNS, "active_runs_per_user": RUNS}
    cast.tenant_a.settings = {**cast.tenant_a.settings, **limits}
    cast.tenant_a.save(update_fields=["settings"])
    # The model takes a moment, so the runs' calls overlap.
    fake_model.script(*[Turn(text="ok", usage=(10, OUTPUT_TOKENS, 0, 0), response_delay=0.5)] * RUNS)
    run_ids = []
    for _ in range(RUNS):
        session = bob_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()
        posted = bob_api.post(f"/api/v1/sessions/{session['id']}/messages/", {"content": "go"}, format="json")
        assert posted.status_code == 202, posted.content
        run_ids.append(posted.json()["run"]["id"])

    def all_ended() -> bool:
        return Run.objects.filter(pk__in=run_ids, status__in=["completed", "failed"]).count() == RUNS

    wait_until(all_ended, timeout=120, message=f"all {RUNS} runs to end\n{worker.logs()}")

    outcomes = list(Run.objects.filter(pk__in=run_ids).values_list("status", "stop_reason"))
    assert outcomes.count((RunStatus.COMPLETED, "end_turn")) == RUNS_PAID_FOR
    assert outcomes.count((RunStatus.FAILED, "insufficient_credits")) == RUNS - RUNS_PAID_FOR
    assert len(fake_model.requests) == RUNS_PAID_FOR
    balance = CreditAccount.objects.get(tenant=cast.tenant_a).balance_micros
    assert balance == 0
    ledger = LedgerEntry.objects.filter(tenant=cast.tenant_a).aggregate(total=Sum("amount_micros"))["total"]
    assert ledger == balance
