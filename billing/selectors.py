"""Reading credits, budgets and the ledger, always within the actor's tenant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db.models import QuerySet, Sum
from django.http import Http404
from django.utils import timezone

from agents.models import Agent
from billing.models import Budget, BudgetPeriod, CreditAccount, LedgerEntry
from tenants.actors import Actor
from tenants.models import Membership


@dataclass(frozen=True)
class CreditSummary:
    is_metered: bool
    has_account: bool
    balance_micros: int
    ledger_total_micros: int


def credit_summary_for_actor(*, actor: Actor) -> CreditSummary:
    """The balance, and the ledger's sum (they agree: every change of the balance is an entry).
    ``is_metered``: runs pay from the balance (credits were granted and are not turned off)."""
    account = CreditAccount.objects.filter(tenant=actor.tenant).first()
    total = LedgerEntry.objects.filter(tenant=actor.tenant).aggregate(total=Sum("amount_micros"))["total"]
    return CreditSummary(
        is_metered=account is not None and account.is_enabled,
        has_account=account is not None,
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


@dataclass(frozen=True)
class BudgetRow:
    budget: Budget
    target: str
    used_micros: int


@dataclass(frozen=True)
class CreditsOverview:
    summary: CreditSummary
    recent_entries: list[LedgerEntry]
    budgets: list[BudgetRow]


def credits_overview_for_actor(*, actor: Actor, recent: int = 10) -> CreditsOverview:
    """The settings page's credits: the balance, the latest ledger entries and the budgets."""
    budgets = list(budget_list_for_actor(actor=actor))
    used = budget_used_this_month(budgets)
    return CreditsOverview(
        summary=credit_summary_for_actor(actor=actor),
        recent_entries=list(ledger_list_for_actor(actor=actor)[:recent]),
        budgets=[
            BudgetRow(
                budget=budget,
                target=budget.user.email
                if budget.user is not None
                else (budget.agent.name if budget.agent else ""),
                used_micros=used.get(budget.pk, 0),
            )
            for budget in budgets
        ],
    )


def budget_form_choices(*, actor: Actor) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(members, agents) of the actor's tenant, as (value, label) choices."""
    members = Membership.objects.filter(tenant=actor.tenant).select_related("user").order_by("user__email")
    agents = Agent.objects.filter(tenant=actor.tenant).order_by("name")
    return (
        [(str(membership.user_id), membership.user.email) for membership in members],
        [(str(agent.pk), agent.name) for agent in agents],
    )
