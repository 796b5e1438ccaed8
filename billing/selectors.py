"""Reading credits, budgets and the ledger, always within the actor's tenant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db.models import QuerySet, Sum
from django.http import Http404
from django.utils import timezone

from billing.models import Budget, BudgetPeriod, CreditAccount, LedgerEntry
from tenants.actors import Actor


@dataclass(frozen=True)
class CreditSummary:
    is_metered: bool
    balance_micros: int
    ledger_total_micros: int


def credit_summary_for_actor(*, actor: Actor) -> CreditSummary:
    """The balance, and the ledger's sum (they agree: every change of the balance is an entry)."""
    account = CreditAccount.objects.filter(tenant=actor.tenant).first()
    total = LedgerEntry.objects.filter(tenant=actor.tenant).aggregate(total=Sum("amount_micros"))["total"]
    return CreditSummary(
        is_metered=account is not None,
        balance_micros=account.balance_micros if account else 0,
        ledger_total_micros=total or 0,
    )


def ledger_list_for_actor(*, actor: Actor) -> QuerySet[LedgerEntry]:
    return LedgerEntry.objects.filter(tenant=actor.tenant).select_related("actor")


def budget_list_for_actor(*, actor: Actor) -> QuerySet[Budget]:
    return Budget.objects.filter(tenant=actor.tenant).select_related("user", "agent")


def budget_get_for_actor(*, actor: Actor, budget_id: UUID | str) -> Budget:
    try:
        return budget_list_for_actor(actor=actor).get(pk=budget_id)
    except (Budget.DoesNotExist, ValueError, TypeError):
        raise Http404("No such budget.") from None


def budget_used_this_month(budgets: Any) -> dict[Any, int]:
    """Each budget's use this month (settled costs and the holds of calls in flight), by budget id."""
    month = timezone.now().date().replace(day=1)
    periods = BudgetPeriod.objects.filter(budget__in=list(budgets), month=month)
    return {period.budget_id: period.used_micros for period in periods}


def credit_balance_micros(tenant: Any) -> int:
    balance = CreditAccount.objects.filter(tenant=tenant).values_list("balance_micros", flat=True).first()
    return balance or 0
