"""Granting and refunding credits, and setting budgets: the writes of people, not of runs."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import F

from agents.models import Agent
from billing.models import (
    MICROS_PER_CREDIT,
    Budget,
    BudgetScope,
    CreditAccount,
    LedgerEntry,
    LedgerKind,
)
from tenants.actors import Actor
from tenants.models import Membership, Role, Tenant

# The most one grant or budget may be: far beyond any real use, well inside a 64-bit count.
MAX_CREDITS = Decimal("1000000000")


def credits_to_micros(value: Any, *, field: str = "amount") -> int:
    """A credit amount ("12.5", 12.5) as micro-credits; refuses what is not a positive amount."""
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise ValidationError({field: ["Enter a number of credits, such as 10 or 2.50."]}) from None
    if not amount.is_finite() or amount <= 0 or amount > MAX_CREDITS:
        raise ValidationError({field: [f"Enter an amount above 0 and at most {MAX_CREDITS:,}."]})
    return int((amount * MICROS_PER_CREDIT).to_integral_value(rounding=ROUND_HALF_UP))


def credits_grant(
    *, tenant: Tenant, amount_micros: int, granted_by: Any | None = None, note: str = ""
) -> LedgerEntry:
    """Add credits to the tenant's balance (opening its account, which starts metering its runs)."""
    if amount_micros <= 0:
        raise ValidationError({"amount": ["Enter an amount above 0."]})
    with transaction.atomic():
        tenant_mark_metered(tenant=tenant)
        CreditAccount.objects.get_or_create(tenant=tenant)
        CreditAccount.objects.filter(tenant=tenant).update(balance_micros=F("balance_micros") + amount_micros)
        return LedgerEntry.objects.create(
            tenant=tenant,
            kind=LedgerKind.GRANT,
            amount_micros=amount_micros,
            actor=granted_by,
            note=note[:500],
        )


def credits_refund(
    *, tenant: Tenant, amount_micros: int, refunded_by: Any | None = None, run_id: Any = None, note: str = ""
) -> LedgerEntry:
    """Give credits back (a run that should not have cost them), linked to the run when there is one."""
    if amount_micros <= 0:
        raise ValidationError({"amount": ["Enter an amount above 0."]})
    with transaction.atomic():
        if not CreditAccount.objects.filter(tenant=tenant).update(
            balance_micros=F("balance_micros") + amount_micros
        ):
            raise ValidationError({"amount": ["This workspace has no credits to refund to."]})
        return LedgerEntry.objects.create(
            tenant=tenant,
            kind=LedgerKind.REFUND,
            amount_micros=amount_micros,
            actor=refunded_by,
            run_id=run_id,
            note=note[:500],
        )


def credits_grant_by_actor(*, actor: Actor, amount: Any, note: str = "") -> LedgerEntry:
    _require_owner(actor)
    return credits_grant(
        tenant=actor.tenant, amount_micros=credits_to_micros(amount), granted_by=actor.user, note=note
    )


def budget_create(
    *, actor: Actor, scope: str, monthly_limit: Any, user_id: Any = None, agent_id: Any = None
) -> Budget:
    _require_owner(actor)
    budget = Budget(tenant=actor.tenant, scope=scope)
    _assign_target(budget, actor=actor, user_id=user_id, agent_id=agent_id)
    budget.monthly_limit_micros = credits_to_micros(monthly_limit, field="monthly_limit")
    _refuse_duplicate(budget)
    with transaction.atomic():
        tenant_mark_metered(tenant=actor.tenant)
        budget.save()
    return budget


def budget_update(*, actor: Actor, budget: Budget, monthly_limit: Any) -> Budget:
    """Change the monthly limit; what a budget covers does not change (delete and add instead)."""
    _require_owner(actor)
    budget.monthly_limit_micros = credits_to_micros(monthly_limit, field="monthly_limit")
    budget.save(update_fields=["monthly_limit_micros", "updated_at"])
    return budget


def budget_delete(*, actor: Actor, budget: Budget) -> None:
    _require_owner(actor)
    budget.delete()


def _assign_target(budget: Budget, *, actor: Actor, user_id: Any, agent_id: Any) -> None:
    if budget.scope == BudgetScope.MEMBER:
        if agent_id is not None:
            raise ValidationError({"agent": ["A member budget names a member, not an agent."]})
        membership = (
            Membership.objects.filter(tenant=actor.tenant, user_id=user_id).first() if user_id else None
        )
        if membership is None:
            raise ValidationError({"user": ["Choose a member of this workspace."]})
        budget.user_id = membership.user_id
    elif budget.scope == BudgetScope.AGENT:
        if user_id is not None:
            raise ValidationError({"user": ["An agent budget names an agent, not a member."]})
        agent = Agent.objects.filter(tenant=actor.tenant, pk=agent_id).first() if agent_id else None
        if agent is None:
            raise ValidationError({"agent": ["Choose an agent of this workspace."]})
        budget.agent = agent
    else:
        raise ValidationError({"scope": ["Choose member or agent."]})


def _refuse_duplicate(budget: Budget) -> None:
    target_field = "user_id" if budget.scope == BudgetScope.MEMBER else "agent_id"
    existing = Budget.objects.filter(
        tenant_id=budget.tenant_id, scope=budget.scope, **{target_field: getattr(budget, target_field)}
    )
    if existing.exists():
        target = "user" if budget.scope == BudgetScope.MEMBER else "agent"
        raise ValidationError({target: ["This one already has a budget: change its limit instead."]})


def tenant_mark_metered(*, tenant: Tenant) -> None:
    """From now on the tenant's runs look for credits and budgets (``Tenant.is_metered``)."""
    if not tenant.is_metered:
        Tenant.objects.filter(pk=tenant.pk).update(is_metered=True)
        tenant.is_metered = True


def _require_owner(actor: Actor) -> None:
    if not actor.can(Role.OWNER):
        raise PermissionDenied("Only the workspace's owners manage credits and budgets.")
