"""Holding and paying for model calls in credits and budgets (``agents.runtime.metering``).

A hold takes the call's worst case off the tenant's balance and adds it to the month of every
budget the call falls under, each with a conditional update, in one transaction: two runs
cannot both spend the last credits. The worst case bounds the input by the request's bytes
(``request_tokens_bound``) and the output by ``max_tokens``. Settling gives the hold back and
takes the real cost, never more than the hold: a provider that reports more than the bound
cannot take a balance or a budget past zero (the settlement's note records the whole cost, and
the step keeps it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from uuid import UUID

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.runtime.metering import CreditsRefused, MeteredModelClient, ModelUnpriced
from agents.runtime.tokens import request_tokens_bound
from agents.runtime.types import ModelClient, ModelRequest, Usage
from billing.models import Budget, BudgetPeriod, BudgetScope, CreditAccount, LedgerEntry, LedgerKind
from billing.pricing import Price, cost_micros, credits_text, price_for, worst_case_micros
from sessions.models import Run, Session
from tenants.models import Tenant


@dataclass
class Hold:
    amount_micros: int
    step_id: str | None
    period_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Payer:
    """Who pays for a model call: the tenant, the member and agent its budgets are for, and the
    run it belongs to (none for a session's compaction or memory extraction)."""

    tenant: Tenant
    user_id: int | None
    agent_id: UUID | None
    provider: str
    model: str
    run_id: UUID | None = None


def payer_for_run(run: Run) -> Payer:
    config = run.agent_config
    return Payer(
        tenant=run.tenant,
        user_id=run.created_by_id,
        agent_id=run.agent_id,
        provider=config.get("model_provider", ""),
        model=config.get("model_name", ""),
        run_id=run.pk,
    )


def payer_for_session(session: Session, *, user_id: int | None) -> Payer:
    """A session's model call outside a run (compaction, memory extraction), paid as its agent's."""
    agent = session.agent
    return Payer(
        tenant=session.tenant,
        user_id=user_id,
        agent_id=agent.pk,
        provider=agent.model_provider,
        model=agent.effective_model_name,
    )


def credit_meter_for(
    payer: Payer, *, price: Price | None, current_step_id: Callable[[], str | None] = lambda: None
) -> CreditMeterForPayer | None:
    """The meter of a payer whose tenant has credits turned on or whose member or agent has a
    budget, else None; None too for a free model (the offline demo), which has nothing to hold.

    ``current_step_id`` returns the id of the model call step being made (the ledger links to it).
    """
    if not payer.tenant.is_metered or (price is not None and price.is_free):
        return None
    has_account = CreditAccount.objects.filter(tenant=payer.tenant, is_enabled=True).exists()
    applies = Q(scope=BudgetScope.MEMBER, user_id=payer.user_id) | Q(
        scope=BudgetScope.AGENT, agent_id=payer.agent_id
    )
    budgets = list(Budget.objects.filter(applies, tenant=payer.tenant))
    if not has_account and not budgets:
        return None
    return CreditMeterForPayer(
        payer, price=price, has_account=has_account, budgets=budgets, current_step_id=current_step_id
    )


def metered(model: ModelClient, payer: Payer) -> ModelClient:
    """``model``, its calls paid by ``payer`` when the tenant meters them (for calls outside a run)."""
    meter = credit_meter_for(payer, price=price_for(provider=payer.provider, model=payer.model))
    return MeteredModelClient(model, meter) if meter is not None else model


class CreditMeterForPayer:
    def __init__(
        self,
        payer: Payer,
        *,
        price: Price | None,
        has_account: bool,
        budgets: list[Budget],
        current_step_id: Callable[[], str | None],
    ) -> None:
        self.payer = payer
        self.price = price
        self.has_account = has_account
        self.budgets = budgets
        self._current_step_id = current_step_id

    def reserve(self, request: ModelRequest) -> Hold:
        if self.price is None:
            remedy = "turn credits off" if self.has_account else "remove the budgets that apply"
            raise ModelUnpriced(
                f"No price for this model: {self.payer.provider}:{self.payer.model} has no price on this "
                "installation, so its calls cannot be paid from credits or counted in a budget. "
                f"An operator can add its price; an owner can {remedy} in Settings."
            )
        amount = worst_case_micros(
            self.price, input_tokens=request_tokens_bound(request), max_output_tokens=request.max_tokens
        )
        step_id = self._current_step_id()
        hold = Hold(amount_micros=amount, step_id=step_id)
        with transaction.atomic():
            if self.has_account:
                self._take_from_balance(amount)
            month = timezone.now().date().replace(day=1)
            for budget in self.budgets:
                hold.period_ids.append(_take_from_budget(budget, month, amount))
            if self.has_account:
                self._write(LedgerKind.RESERVATION, -amount, step_id)
        return hold

    def settle(self, hold: object, usage: Usage) -> None:
        if not isinstance(hold, Hold) or self.price is None:
            raise TypeError("settle takes a hold this meter made")
        cost = cost_micros(self.price, usage)
        charged = min(cost, hold.amount_micros)
        note = (
            f"cost {credits_text(cost)} passed this call's hold; charged the hold"
            if cost > hold.amount_micros
            else ""
        )
        with transaction.atomic():
            if self.has_account:
                CreditAccount.objects.filter(tenant_id=self.payer.tenant.pk).update(
                    balance_micros=F("balance_micros") + hold.amount_micros - charged
                )
                self._write(LedgerKind.RELEASE, hold.amount_micros, hold.step_id)
                self._write(LedgerKind.SETTLEMENT, -charged, hold.step_id, note=note)
            if hold.period_ids:
                BudgetPeriod.objects.filter(pk__in=hold.period_ids).update(
                    used_micros=F("used_micros") + charged - hold.amount_micros
                )

    def _take_from_balance(self, amount: int) -> None:
        taken = CreditAccount.objects.filter(
            tenant_id=self.payer.tenant.pk, balance_micros__gte=amount
        ).update(balance_micros=F("balance_micros") - amount)
        if not taken:
            balance = (
                CreditAccount.objects.filter(tenant_id=self.payer.tenant.pk)
                .values_list("balance_micros", flat=True)
                .first()
            )
            raise CreditsRefused(
                f"Insufficient credits: this model call may cost up to {credits_text(amount)} credits "
                f"and the balance is {credits_text(balance or 0)}. An owner can add credits in Settings."
            )

    def _write(self, kind: str, amount: int, step_id: str | None, *, note: str = "") -> None:
        if not amount:
            return  # a free model's call moves no credits: the ledger lists movements only
        LedgerEntry.objects.create(
            tenant_id=self.payer.tenant.pk,
            kind=kind,
            amount_micros=amount,
            run_id=self.payer.run_id,
            step_id=step_id,
            note=note,
        )


def _take_from_budget(budget: Budget, month: date, amount: int) -> int:
    """Add the hold to the budget's month; refuses when it would pass the limit. Returns the period id."""
    period = _period(budget, month)
    taken = BudgetPeriod.objects.filter(
        pk=period.pk, used_micros__lte=budget.monthly_limit_micros - amount
    ).update(used_micros=F("used_micros") + amount)
    if not taken:
        whose = "your" if budget.scope == BudgetScope.MEMBER else "this agent's"
        raise CreditsRefused(
            f"Insufficient credits: this model call may cost up to {credits_text(amount)} credits, "
            f"more than is left of {whose} monthly budget of {credits_text(budget.monthly_limit_micros)}."
        )
    return period.pk


def _period(budget: Budget, month: date) -> BudgetPeriod:
    try:
        with transaction.atomic():
            period, _ = BudgetPeriod.objects.get_or_create(budget=budget, month=month)
    except IntegrityError:  # another run created this month's row at the same moment
        period = BudgetPeriod.objects.get(budget=budget, month=month)
    return period
