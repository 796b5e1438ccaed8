"""Credit amounts take the ASCII digits 0-9 only, everywhere an amount is typed (issue 50)."""

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from billing.amounts import CREDITS_MESSAGE
from billing.models import Budget, CreditAccount, LedgerEntry
from billing.services import credits_grant
from tests.conftest import Cast
from tests.factories import make_agent

pytestmark = pytest.mark.django_db

# Arabic-Indic five, Extended Arabic-Indic ten, Devanagari one, full-width seven and a half: each
# a digit to Python's Decimal and to a regular expression's \d.
OTHER_SCRIPTS = ["\u0665", "\u06f1\u06f0", "\u0967", "\uff17.\uff15"]


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("amount", OTHER_SCRIPTS)
def test_the_api_refuses_a_grant_in_other_digits(cast: Cast, alice_api: APIClient, amount: str) -> None:
    response = alice_api.post("/api/v1/credits/grant/", {"amount": amount}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"amount": [CREDITS_MESSAGE]}
    assert not CreditAccount.objects.exists() and not LedgerEntry.objects.exists()


@pytest.mark.parametrize("amount", OTHER_SCRIPTS)
def test_the_api_refuses_a_budget_in_other_digits(cast: Cast, alice_api: APIClient, amount: str) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    budget = Budget.objects.create(
        tenant=cast.tenant_a, scope="member", user=cast.bob, monthly_limit_micros=2_000_000
    )

    created = alice_api.post(
        "/api/v1/budgets/", {"scope": "agent", "agent": str(agent.pk), "monthly_limit": amount}, format="json"
    )
    changed = alice_api.patch(f"/api/v1/budgets/{budget.pk}/", {"monthly_limit": amount}, format="json")

    assert (created.status_code, changed.status_code) == (400, 400)
    assert created.json()["error"]["fields"] == {"monthly_limit": [CREDITS_MESSAGE]}
    assert changed.json()["error"]["fields"] == {"monthly_limit": [CREDITS_MESSAGE]}
    assert list(Budget.objects.values_list("pk", "monthly_limit_micros")) == [(budget.pk, 2_000_000)]


@pytest.mark.parametrize("amount", OTHER_SCRIPTS)
def test_the_settings_page_refuses_grants_and_budgets_in_other_digits(cast: Cast, amount: str) -> None:
    client = signed_in(cast.alice)
    budget = Budget.objects.create(
        tenant=cast.tenant_a, scope="member", user=cast.bob, monthly_limit_micros=2_000_000
    )

    granted = client.post("/settings/credits/grant/", {"amount": amount, "note": ""})
    created = client.post(
        "/settings/budgets/", {"scope": "member", "user": str(cast.victor.pk), "monthly_limit": amount}
    )
    changed = client.post(f"/settings/budgets/{budget.pk}/limit/", {"monthly_limit": amount})

    assert (granted.status_code, created.status_code, changed.status_code) == (400, 400, 400)
    for response in (granted, created):
        assert CREDITS_MESSAGE in response.content.decode()
    assert f"Monthly limit: {CREDITS_MESSAGE}" in changed.content.decode()
    assert not LedgerEntry.objects.exists()
    assert list(Budget.objects.values_list("pk", "monthly_limit_micros")) == [(budget.pk, 2_000_000)]


@pytest.mark.parametrize("amount", OTHER_SCRIPTS)
def test_the_admin_refuses_grants_and_budgets_in_other_digits(
    cast: Cast, admin_client: Any, amount: str
) -> None:
    granted = admin_client.post(
        "/admin/billing/creditaccount/add/", {"tenant": str(cast.tenant_a.pk), "grant": amount, "note": ""}
    )
    created = admin_client.post(
        "/admin/billing/budget/add/",
        {
            "tenant": str(cast.tenant_a.pk),
            "scope": "member",
            "user": str(cast.bob.pk),
            "monthly_limit": amount,
        },
    )

    assert (granted.status_code, created.status_code) == (200, 200)  # the form again, with its errors
    assert granted.context["adminform"].form.errors == {"grant": [CREDITS_MESSAGE]}
    assert created.context["adminform"].form.errors == {"monthly_limit": [CREDITS_MESSAGE]}
    assert not CreditAccount.objects.exists() and not Budget.objects.exists()


def test_the_admin_still_takes_ascii_amounts_and_refuses_zero_on_the_field(
    cast: Cast, admin_client: Any
) -> None:
    zero = admin_client.post(
        "/admin/billing/creditaccount/add/", {"tenant": str(cast.tenant_a.pk), "grant": "0", "note": ""}
    )
    granted = admin_client.post(
        "/admin/billing/creditaccount/add/", {"tenant": str(cast.tenant_a.pk), "grant": "2.25", "note": ""}
    )
    budget = admin_client.post(
        "/admin/billing/budget/add/",
        {
            "tenant": str(cast.tenant_a.pk),
            "scope": "member",
            "user": str(cast.bob.pk),
            "monthly_limit": "1.5",
        },
    )

    assert zero.status_code == 200
    assert zero.context["adminform"].form.errors == {
        "grant": ["Enter an amount above 0 and at most 1,000,000,000."]
    }
    assert (granted.status_code, budget.status_code) == (302, 302)
    assert CreditAccount.objects.get().balance_micros == 2_250_000
    assert Budget.objects.get().monthly_limit_micros == 1_500_000


def test_the_command_refuses_other_digits(cast: Cast) -> None:
    credits_grant(tenant=cast.tenant_a, amount_micros=1_000_000)

    with pytest.raises(CommandError, match="digits 0-9"):
        call_command("grant_credits", "tenant-a", "\u0665", stdout=StringIO())

    assert CreditAccount.objects.get().balance_micros == 1_000_000
