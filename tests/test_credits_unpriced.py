"""Credits and models without a price (issue 50): a clear stop, priced defaults, a free demo
model, and an owner's switch to turn credits off and on again."""

import importlib
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from agents.models import DEFAULT_MODEL_NAMES, Agent, ModelProvider
from audit.models import AuditEntry
from billing.models import CreditAccount, LedgerEntry, ModelPrice
from billing.pricing import FREE, Price, price_for
from billing.services import credits_grant
from tenants.models import Membership, Role, Tenant
from tests.conftest import Cast, api_client_for
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.test_runs_api import post_message, run_to_end, start_session

pytestmark = pytest.mark.django_db

DEFAULT_PRICES = importlib.import_module("billing.migrations.0004_prices_of_the_default_models")


def run_once(api: APIClient, agent: Any, content: str = "hello") -> dict[str, Any]:
    return run_to_end(api, post_message(api, start_session(api, agent.pk), content)["run"]["id"])  # type: ignore[index]


def unpriced_agent(cast: Cast) -> Agent:
    return make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="my-local-model")


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def account_state(tenant: Tenant) -> tuple[bool, int]:
    account = CreditAccount.objects.get(tenant=tenant)
    return account.is_enabled, account.balance_micros


# --- A model without a price ------------------------------------------------------------


def test_a_run_on_a_model_without_a_price_stops_with_no_price_not_insufficient_credits(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    credits_grant(tenant=cast.tenant_a, amount_micros=5_000_000)

    run = run_once(bob_api, unpriced_agent(cast))

    assert (run["status"], run["stop_reason"]) == ("failed", "no_price")
    assert run["error"] == (
        "No price for this model: anthropic:my-local-model has no price on this installation, so its "
        "calls cannot be paid from credits or counted in a budget. An operator can add its price; an "
        "owner can turn credits off in Settings."
    )
    assert fake_model.requests == []
    assert account_state(cast.tenant_a) == (True, 5_000_000)
    footer = signed_in(cast.bob).get(f"/runs/{run['id']}/").content.decode()
    assert "no price for this model" in footer


def test_the_defaults_of_the_code_have_published_prices(cast: Cast) -> None:
    ModelPrice.objects.filter(model__in=list(DEFAULT_MODEL_NAMES.values())).delete()
    DEFAULT_PRICES.add_prices_of_the_default_models(apps, None)

    assert price_for(provider="anthropic", model=DEFAULT_MODEL_NAMES[ModelProvider.ANTHROPIC]) == Price(
        input=Decimal("3"), output=Decimal("15"), cache_read=Decimal("0.3"), cache_write=Decimal("3.75")
    )
    assert price_for(provider="openai", model=DEFAULT_MODEL_NAMES[ModelProvider.OPENAI]) == Price(
        input=Decimal("0.75"), output=Decimal("4.5"), cache_read=Decimal("0.075"), cache_write=Decimal("0")
    )
    assert price_for(provider="offline", model=DEFAULT_MODEL_NAMES[ModelProvider.OFFLINE]) == FREE


def test_the_migration_keeps_a_price_an_operator_set(cast: Cast) -> None:
    ModelPrice.objects.update_or_create(
        provider="anthropic",
        model="claude-sonnet-5",
        defaults={"input_per_million": 2, "output_per_million": 10, "as_of": "2026-06-01"},
    )

    DEFAULT_PRICES.add_prices_of_the_default_models(apps, None)

    assert ModelPrice.objects.get(provider="anthropic", model="claude-sonnet-5").input_per_million == 2


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_an_agent_on_its_providers_default_model_runs_and_pays_with_credits(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, provider: str
) -> None:
    ModelPrice.objects.filter(model__in=list(DEFAULT_MODEL_NAMES.values())).delete()
    DEFAULT_PRICES.add_prices_of_the_default_models(apps, None)
    agent = make_agent(tenant=cast.tenant_a, model_provider=provider, model_name="", max_tokens=100)
    credits_grant(tenant=cast.tenant_a, amount_micros=1_000_000)
    fake_model.script(Turn(text="ok", usage=(1000, 100, 0, 0)))

    run = run_once(bob_api, agent)

    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    cost = {"anthropic": 1000 * 3 + 100 * 15, "openai": 750 + 450}[provider]
    assert LedgerEntry.objects.get(tenant=cast.tenant_a, kind="settlement").amount_micros == -cost
    assert account_state(cast.tenant_a) == (True, 1_000_000 - cost)


def test_the_demo_agent_runs_for_a_tenant_with_credits_whatever_its_balance(cast: Cast) -> None:
    """The offline demo model costs nothing: no hold, no refusal, even at a balance below zero
    (as an overdraft left it) and without its row in the price table."""
    call_command("seed_demo", stdout=StringIO())
    demo = Tenant.objects.get(slug="demo")
    owner = Membership.objects.get(tenant=demo, role=Role.OWNER).user
    credits_grant(tenant=demo, amount_micros=50_000)
    CreditAccount.objects.filter(tenant=demo).update(balance_micros=-580_000)
    ModelPrice.objects.filter(provider="offline").delete()
    api = api_client_for(demo, owner)

    run = run_once(api, Agent.objects.get(tenant=demo), "What is 6*7?")

    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    assert list(LedgerEntry.objects.filter(tenant=demo).values_list("kind", flat=True)) == ["grant"]
    assert account_state(demo) == (True, -580_000)


# --- Turning credits off and on (API) ---------------------------------------------------


def test_an_owner_turns_credits_off_and_on_again_over_the_api(
    cast: Cast, alice_api: APIClient, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = unpriced_agent(cast)
    credits_grant(tenant=cast.tenant_a, amount_micros=5_000_000)
    fake_model.script(Turn(text="answered", usage=(10, 5, 0, 0)))

    off = alice_api.patch("/api/v1/credits/", {"is_metered": False}, format="json")
    answered = run_once(bob_api, agent)
    on = alice_api.patch("/api/v1/credits/", {"is_metered": True}, format="json")
    refused = run_once(bob_api, agent)

    assert (off.status_code, on.status_code) == (200, 200)
    assert off.json() == {"is_metered": False, "balance": "5.000000", "ledger_total": "5.000000"}
    assert on.json() == {"is_metered": True, "balance": "5.000000", "ledger_total": "5.000000"}
    assert (answered["status"], refused["stop_reason"]) == ("completed", "no_price")
    assert len(fake_model.requests) == 1
    assert list(LedgerEntry.objects.values_list("kind", flat=True)) == ["grant"]
    changes = list(
        AuditEntry.objects.filter(tenant=cast.tenant_a, object_type="credits", action="update")
        .order_by("created_at")
        .values_list("actor_label", "source", "changes")
    )
    assert changes == [
        ("alice@a.test", "api", {"is_enabled": [True, False]}),
        ("alice@a.test", "api", {"is_enabled": [False, True]}),
    ]


def test_a_grant_leaves_credits_off_when_an_owner_turned_them_off(cast: Cast, alice_api: APIClient) -> None:
    credits_grant(tenant=cast.tenant_a, amount_micros=1_000_000)
    alice_api.patch("/api/v1/credits/", {"is_metered": False}, format="json")

    credits_grant(tenant=cast.tenant_a, amount_micros=2_000_000)

    assert account_state(cast.tenant_a) == (False, 3_000_000)


@pytest.mark.parametrize("client_name", ["bob_api", "victor_api"])
def test_only_owners_turn_credits_off(cast: Cast, client_name: str, request: pytest.FixtureRequest) -> None:
    api: APIClient = request.getfixturevalue(client_name)
    credits_grant(tenant=cast.tenant_a, amount_micros=1_000_000)

    response = api.patch("/api/v1/credits/", {"is_metered": False}, format="json")

    assert response.status_code == 403
    assert account_state(cast.tenant_a) == (True, 1_000_000)
    assert not AuditEntry.objects.filter(object_type="credits", action="update").exists()


def test_another_tenants_owner_cannot_turn_these_credits_off(cast: Cast, carol_api: APIClient) -> None:
    credits_grant(tenant=cast.tenant_a, amount_micros=1_000_000)

    response = carol_api.patch("/api/v1/credits/", {"is_metered": False}, format="json")

    # Carol's own workspace has no credits: nothing to turn off there, and nothing changes here.
    assert response.status_code == 200
    assert response.json() == {"is_metered": False, "balance": "0.000000", "ledger_total": "0.000000"}
    assert account_state(cast.tenant_a) == (True, 1_000_000)
    assert not CreditAccount.objects.filter(tenant=cast.tenant_b).exists()
    assert not AuditEntry.objects.filter(object_type="credits", action="update").exists()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "This field is required."),
        ({"is_metered": "sometimes"}, "Must be a boolean."),
        ({"is_metered": True}, "This workspace has no credits yet: add some first."),
    ],
)
def test_bad_credit_settings_are_refused_with_their_field(
    cast: Cast, carol_api: APIClient, body: dict[str, Any], message: str
) -> None:
    response = carol_api.patch("/api/v1/credits/", body, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"is_metered": [message]}
    assert not CreditAccount.objects.exists()


# --- Turning credits off and on (settings page) -----------------------------------------


def test_an_owner_turns_credits_off_and_on_again_on_the_settings_page(cast: Cast) -> None:
    credits_grant(tenant=cast.tenant_a, amount_micros=5_000_000)
    client = signed_in(cast.alice)
    assert "Turn credits off" in client.get("/settings/").content.decode()

    off = client.post("/settings/credits/state/", {"state": "off"})
    page_when_off = client.get("/settings/").content.decode()
    on = client.post("/settings/credits/state/", {"state": "on"})

    assert (off.status_code, on.status_code) == (302, 302)
    assert "<strong>Credits are off</strong>" in page_when_off
    assert "The balance of 5.000000 credits and the ledger are kept." in page_when_off
    assert "Turn credits on" in page_when_off
    assert account_state(cast.tenant_a) == (True, 5_000_000)
    sources = list(
        AuditEntry.objects.filter(object_type="credits", action="update")
        .order_by("created_at")
        .values_list("source", "changes")
    )
    assert sources == [("ui", {"is_enabled": [True, False]}), ("ui", {"is_enabled": [False, True]})]


def test_members_cannot_turn_credits_off_on_the_settings_page(cast: Cast) -> None:
    credits_grant(tenant=cast.tenant_a, amount_micros=1_000_000)

    response = signed_in(cast.bob).post("/settings/credits/state/", {"state": "off"})

    assert response.status_code == 403
    assert account_state(cast.tenant_a) == (True, 1_000_000)


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ("maybe", "Choose whether credits are on or off."),
        ("on", "This workspace has no credits yet: add some first."),
    ],
)
def test_a_bad_credit_setting_on_the_settings_page_is_400(cast: Cast, state: str, message: str) -> None:
    response = signed_in(cast.carol).post("/settings/credits/state/", {"state": state})

    assert response.status_code == 400
    assert message in response.content.decode()
    assert not CreditAccount.objects.exists()
