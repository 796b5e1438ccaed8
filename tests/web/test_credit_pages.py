"""Credits and budgets on the settings page: owners act, admins look, other tenants cannot reach."""

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from billing.amounts import CREDITS_MESSAGE
from billing.models import Budget, BudgetScope, CreditAccount, LedgerEntry, ModelPrice
from billing.services import credits_grant
from sessions.services import session_create, session_post_message
from sessions.tasks import execute_run
from tenants.actors import actor_for_user
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer
from tests.web.conftest import World

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]


def test_an_owner_adds_credits_and_sees_the_balance_and_the_ledger(
    world: World, client_for: ClientFor
) -> None:
    client = client_for(world.cast.alice)

    response = client.post("/settings/credits/grant/", {"amount": "20.5", "note": "pilot budget"})

    assert response.status_code == 302 and response["Location"] == "/settings/#credits"
    page = client.get("/settings/").content.decode()
    assert '<span id="credit-balance">20.500000</span>' in page
    assert "pilot budget" in page
    assert CreditAccount.objects.get(tenant=world.cast.tenant_a).balance_micros == 20_500_000


def test_a_bad_amount_is_shown_on_the_form_and_nothing_is_granted(
    world: World, client_for: ClientFor
) -> None:
    response = client_for(world.cast.alice).post("/settings/credits/grant/", {"amount": "-3"})

    assert response.status_code == 400
    assert CREDITS_MESSAGE in response.content.decode()
    assert not LedgerEntry.objects.exists()


def test_an_admin_sees_credits_but_cannot_grant(world: World, client_for: ClientFor) -> None:
    credits_grant(tenant=world.cast.tenant_a, amount_micros=1_000_000)
    client = client_for(world.dave)

    page = client.get("/settings/").content.decode()
    response = client.post("/settings/credits/grant/", {"amount": "5"})

    assert '<span id="credit-balance">1.000000</span>' in page
    assert "Add credits" not in page
    assert response.status_code == 403
    assert CreditAccount.objects.get(tenant=world.cast.tenant_a).balance_micros == 1_000_000


def test_an_owner_sets_changes_and_removes_a_budget(world: World, client_for: ClientFor) -> None:
    client = client_for(world.cast.alice)

    created = client.post(
        "/settings/budgets/",
        {"scope": "member", "user": str(world.cast.bob.pk), "agent": "", "monthly_limit": "3"},
    )
    budget = Budget.objects.get()
    changed = client.post(f"/settings/budgets/{budget.pk}/limit/", {"monthly_limit": "4.5"})
    page = client.get("/settings/").content.decode()
    removed = client.post(f"/settings/budgets/{budget.pk}/delete/")

    assert (created.status_code, changed.status_code, removed.status_code) == (302, 302, 302)
    assert "Member: bob@a.test" in page and "4.500000" in page
    assert not Budget.objects.exists()


def test_a_budget_for_another_tenants_agent_is_refused(world: World, client_for: ClientFor) -> None:
    response = client_for(world.cast.alice).post(
        "/settings/budgets/",
        {"scope": "agent", "user": "", "agent": str(world.agent_b.pk), "monthly_limit": "3"},
    )

    assert response.status_code == 400
    assert not Budget.objects.exists()


def test_another_tenants_budget_cannot_be_changed_or_removed(world: World, client_for: ClientFor) -> None:
    budget = Budget.objects.create(
        tenant=world.cast.tenant_a,
        scope=BudgetScope.AGENT,
        agent=world.agent_a,
        monthly_limit_micros=2_000_000,
    )
    carol = client_for(world.cast.carol)

    changed = carol.post(f"/settings/budgets/{budget.pk}/limit/", {"monthly_limit": "99"})
    removed = carol.post(f"/settings/budgets/{budget.pk}/delete/")

    assert (changed.status_code, removed.status_code) == (404, 404)
    assert Budget.objects.get(pk=budget.pk).monthly_limit_micros == 2_000_000
    assert "Agent: " + world.agent_a.name not in carol.get("/settings/").content.decode()


def test_members_do_not_reach_credits(world: World, client_for: ClientFor) -> None:
    bob = client_for(world.cast.bob)

    assert bob.get("/settings/").status_code == 403
    assert bob.post("/settings/credits/grant/", {"amount": "5"}).status_code == 403
    assert not CreditAccount.objects.exists()


def test_the_chat_says_why_a_run_ran_out_of_credits(
    world: World, client_for: ClientFor, fake_model: FakeModelServer
) -> None:
    ModelPrice.objects.create(
        provider="anthropic",
        model="test-model",
        input_per_million=3,
        output_per_million=15,
        as_of="2026-11-01",
    )
    agent = make_agent(tenant=world.cast.tenant_a, model_provider="anthropic", model_name="test-model")
    credits_grant(tenant=world.cast.tenant_a, amount_micros=1)
    actor = actor_for_user(world.cast.bob, preferred_tenant_id=None)
    assert actor is not None
    session = session_create(actor=actor, agent=agent, title="short of credits")
    run = session_post_message(actor=actor, session=session, content="hello").run
    execute_run(str(run.pk))

    page = client_for(world.cast.bob).get(f"/chat/{session.pk}/").content.decode()

    assert "Insufficient credits: this model call may cost up to " in page
    assert fake_model.requests == []
