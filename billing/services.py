"""Granting and refunding credits, setting budgets and prices: the writes of people, not of runs.

Each records an audit entry in its transaction (``audit.services.audit_record``).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import F

from agents.models import Agent
from audit.models import AuditAction
from audit.services import audit_record, audit_values
from billing.amounts import CREDITS_MESSAGE, is_credits_text
from billing.models import (
    MICROS_PER_CREDIT,
    Budget,
    BudgetScope,
    CreditAccount,
    LedgerEntry,
    LedgerKind,
    ModelPrice,
)
from billing.pricing import credits_text
from tenants.actors import Actor
from tenants.models import Membership, Role, Tenant

# The most one grant or budget may be: far beyond any real use, well inside a 64-bit count.
MAX_CREDITS = Decimal("1000000000")


def credits_to_micros(value: str | Decimal | int, *, field: str = "amount") -> int:
    """A credit amount ("12.5", Decimal("12.5"), 12) as micro-credits; refuses what is not a
    positive amount written in ASCII digits (``billing.amounts``)."""
    text = str(value)
    if not is_credits_text(text):
        raise ValidationError({field: [CREDITS_MESSAGE]})
    amount = Decimal(text)
    if amount <= 0 or amount > MAX_CREDITS:
        raise ValidationError({field: [f"Enter an amount above 0 and at most {MAX_CREDITS:,}."]})
    return int((amount * MICROS_PER_CREDIT).to_integral_value(rounding=ROUND_HALF_UP))


def credits_grant(
    *, tenant: Tenant, amount_micros: int, granted_by: Any | None = None, note: str = ""
) -> LedgerEntry:
    """Add credits to the tenant's balance (opening its account, which starts metering its runs)."""
    _require_positive(amount_micros)
    with transaction.atomic():
        tenant_mark_metered(tenant=tenant)
        CreditAccount.objects.get_or_create(tenant=tenant)
        CreditAccount.objects.filter(tenant=tenant).update(balance_micros=F("balance_micros") + amount_micros)
        return _add_entry(tenant, LedgerKind.GRANT, amount_micros, actor=granted_by, note=note)


def credits_refund(
    *, tenant: Tenant, amount_micros: int, refunded_by: Any | None = None, run_id: Any = None, note: str = ""
) -> LedgerEntry:
    """Give credits back (a run that should not have cost them), linked to the run when there is one."""
    _require_positive(amount_micros)
    with transaction.atomic():
        if not CreditAccount.objects.filter(tenant=tenant).update(
            balance_micros=F("balance_micros") + amount_micros
        ):
            raise ValidationError({"amount": ["This workspace has no credits to refund to."]})
        return _add_entry(
            tenant, LedgerKind.REFUND, amount_micros, actor=refunded_by, note=note, run_id=run_id
        )


def _require_positive(amount_micros: int) -> None:
    if amount_micros <= 0:
        raise ValidationError({"amount": ["Enter an amount above 0."]})


def _add_entry(
    tenant: Tenant, kind: str, amount_micros: int, *, actor: Any | None, note: str, run_id: Any = None
) -> LedgerEntry:
    """A person's ledger entry with its audit entry (the caller moved the balance, in its transaction)."""
    entry = LedgerEntry.objects.create(
        tenant=tenant, kind=kind, amount_micros=amount_micros, actor=actor, run_id=run_id, note=note[:500]
    )
    _record_credits(entry)
    return entry


def _record_credits(entry: LedgerEntry) -> None:
    audit_record(
        tenant=entry.tenant,
        action=AuditAction.CREATE,
        object_type="credits",
        object_id=entry.pk,
        object_label=f"{entry.kind} of {credits_text(entry.amount_micros)} credits",
        after={"kind": entry.kind, "amount": credits_text(entry.amount_micros), "note": entry.note},
        user=entry.actor,
    )


def credits_set_enabled(*, actor: Actor, is_enabled: bool) -> CreditAccount | None:
    """Turn the workspace's credits off (runs stop paying from the balance, which is kept) or on
    again. A workspace that never had credits has nothing to turn on: it gets a grant first."""
    _require_owner(actor)
    with transaction.atomic():
        account = CreditAccount.objects.select_for_update().filter(tenant=actor.tenant).first()
        if account is None:
            if is_enabled:
                raise ValidationError({"is_metered": ["This workspace has no credits yet: add some first."]})
            return None
        if account.is_enabled != is_enabled:
            CreditAccount.objects.filter(pk=account.pk).update(is_enabled=is_enabled)
            audit_record(
                tenant=actor.tenant,
                action=AuditAction.UPDATE,
                object_type="credits",
                object_id=account.pk,
                object_label="credits turned " + ("on" if is_enabled else "off"),
                before={"is_enabled": account.is_enabled},
                after={"is_enabled": is_enabled},
                user=actor.user,
            )
            account.is_enabled = is_enabled
    return account


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
    return budget_save(budget=budget, before=None)


def budget_update(*, actor: Actor, budget: Budget, monthly_limit: Any) -> Budget:
    """Change the monthly limit; what a budget covers does not change (delete and add instead)."""
    _require_owner(actor)
    before = budget_audit_values(budget)
    budget.monthly_limit_micros = credits_to_micros(monthly_limit, field="monthly_limit")
    return budget_save(budget=budget, before=before)


def budget_save(*, budget: Budget, before: dict[str, Any] | None) -> Budget:
    """Store a checked budget (``before``: its audited values, None for a new one)."""
    with transaction.atomic():
        tenant_mark_metered(tenant=budget.tenant)
        budget.save()
        _record_budget(budget, AuditAction.CREATE if before is None else AuditAction.UPDATE, before=before)
    return budget


def budget_delete(*, actor: Actor, budget: Budget) -> None:
    _require_owner(actor)
    budget_remove(budget=budget)


def budget_remove(*, budget: Budget) -> None:
    with transaction.atomic():
        _record_budget(budget, AuditAction.DELETE, before=budget_audit_values(budget))
        budget.delete()


def budget_audit_values(budget: Budget) -> dict[str, Any]:
    return {
        "scope": budget.scope,
        "user": budget.user.email if budget.user is not None else None,
        "agent": budget.agent.name if budget.agent is not None else None,
        "monthly_limit": credits_text(budget.monthly_limit_micros),
    }


def _record_budget(budget: Budget, action: str, *, before: dict[str, Any] | None) -> None:
    values = budget_audit_values(budget)
    audit_record(
        tenant=budget.tenant,
        action=action,
        object_type="budget",
        object_id=budget.pk,
        object_label=f"{budget.get_scope_display()} budget: {values['user'] or values['agent']}",
        before=before,
        after=None if action == AuditAction.DELETE else values,
    )


PRICE_FIELDS = [
    "provider",
    "model",
    "input_per_million",
    "output_per_million",
    "cache_read_per_million",
    "cache_write_per_million",
    "as_of",
]


def model_price_save(*, price: ModelPrice, before: dict[str, Any] | None) -> ModelPrice:
    """Store an operator's price (``before``: its values, None for a new one); a platform-wide change."""
    with transaction.atomic():
        price.save()
        price.refresh_from_db()  # the values as stored (decimals at their places), as ``before`` was read
        audit_record(
            tenant=None,
            action=AuditAction.CREATE if before is None else AuditAction.UPDATE,
            object_type="price",
            object_id=price.pk,
            object_label=str(price),
            before=before,
            after=audit_values(price, PRICE_FIELDS),
        )
    return price


def model_price_delete(*, price: ModelPrice) -> None:
    with transaction.atomic():
        audit_record(
            tenant=None,
            action=AuditAction.DELETE,
            object_type="price",
            object_id=price.pk,
            object_label=str(price),
            before=audit_values(price, PRICE_FIELDS),
        )
        price.delete()


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
