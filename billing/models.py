"""Prices, credits and budgets.

Money is counted in micro-credits (``*_micros``, millionths of a credit) as whole numbers, so
sums are exact on both databases; one credit buys one US dollar of model use at the prices of
``ModelPrice``.
"""

import uuid

from django.conf import settings
from django.db import models

from agents.models import Agent, ModelProvider
from tenants.models import Tenant

MICROS_PER_CREDIT = 1_000_000


class ModelPrice(models.Model):
    """What a model costs, in credits (US dollars) per million tokens. A model without a row has
    an unknown price: its calls cost nothing known, and a tenant with credits cannot use it."""

    provider = models.CharField(max_length=20, choices=ModelProvider.choices)
    model = models.CharField(max_length=200, help_text="The model name exactly as agents use it.")
    input_per_million = models.DecimalField(max_digits=14, decimal_places=6)
    output_per_million = models.DecimalField(max_digits=14, decimal_places=6)
    cache_read_per_million = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    cache_write_per_million = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    as_of = models.DateField(help_text="The day these prices were read from the provider's price list.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["provider", "model"]
        constraints = [models.UniqueConstraint(fields=["provider", "model"], name="modelprice_unique_model")]

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}"


class CreditAccount(models.Model):
    """A tenant's credits. A tenant without an account is not metered: credits start when an
    operator or owner first grants some, and an owner can turn them off and on again."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="credit_account")
    # What is left to spend: grants minus settled costs minus the holds of calls in flight.
    balance_micros = models.BigIntegerField(default=0)
    # Off: runs no longer pay from the balance (which is kept, as is the ledger). A grant leaves it as it is.
    is_enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"credits of {self.tenant_id}"


class BudgetScope(models.TextChoices):
    MEMBER = "member", "Member"
    AGENT = "agent", "Agent"


class Budget(models.Model):
    """The most one member's runs, or one agent's, may spend in a calendar month (UTC)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    scope = models.CharField(max_length=10, choices=BudgetScope.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, null=True, blank=True)
    monthly_limit_micros = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["scope", "created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "user"], condition=models.Q(scope="member"), name="budget_unique_member"
            ),
            models.UniqueConstraint(
                fields=["tenant", "agent"], condition=models.Q(scope="agent"), name="budget_unique_agent"
            ),
            models.CheckConstraint(
                condition=(models.Q(scope="member", user__isnull=False, agent__isnull=True))
                | models.Q(scope="agent", agent__isnull=False, user__isnull=True),
                name="budget_scope_target",
            ),
            models.CheckConstraint(
                condition=models.Q(monthly_limit_micros__gte=0), name="budget_limit_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope} budget {self.pk}"


class BudgetPeriod(models.Model):
    """What a budget's month has used: settled costs plus the holds of calls in flight."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="periods")
    month = models.DateField(help_text="The first day of the month.")
    used_micros = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["budget", "month"], name="budgetperiod_unique_month")]

    def __str__(self) -> str:
        return f"{self.budget_id} {self.month:%Y-%m}"


class LedgerKind(models.TextChoices):
    GRANT = "grant", "Grant"
    RESERVATION = "reservation", "Reservation"
    RELEASE = "release", "Release"
    SETTLEMENT = "settlement", "Settlement"
    REFUND = "refund", "Refund"


class LedgerEntry(models.Model):
    """One movement of a tenant's credits; the account's balance is the sum of its entries.

    Append-only: nothing updates or deletes an entry (a mistake is corrected by a new one).
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20, choices=LedgerKind.choices)
    amount_micros = models.BigIntegerField()
    run = models.ForeignKey(
        "agent_sessions.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    step = models.ForeignKey(
        "agent_sessions.Step", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # A grant's or refund's author (none for a run's own entries).
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    note = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "ledger entries"
        indexes = [models.Index(fields=["tenant", "-id"], name="ledger_tenant_recent")]

    def __str__(self) -> str:
        return f"{self.kind} {self.amount_micros}"
