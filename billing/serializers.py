from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.amounts import CREDITS_MAX_LENGTH, credits_input_validator
from billing.models import Budget, BudgetScope, LedgerEntry, LedgerKind
from billing.pricing import credits_text
from core.api.serializers import StrictSerializer


def credits_input(help_text: str) -> serializers.CharField:
    """Credits typed in: a decimal string with up to six places (exact, unlike a JSON number)."""
    return serializers.CharField(
        max_length=CREDITS_MAX_LENGTH, validators=[credits_input_validator], help_text=help_text
    )


CREDITS_HELP = "Credits as a decimal string with six places; one credit buys one US dollar of model use."


@extend_schema_field({"type": "string", "format": "decimal", "example": "12.500000"})
class CreditsField(serializers.Field):
    """Micro-credits out as a decimal string ("12.500000")."""

    def to_representation(self, value: int) -> str:
        return credits_text(value)


class CreditSummarySerializer(serializers.Serializer):
    is_metered = serializers.BooleanField(
        help_text="Whether this workspace's runs pay in credits: true once credits were first granted, "
        "false while an owner has turned them off."
    )
    balance = CreditsField(source="balance_micros", help_text=f"What is left to spend. {CREDITS_HELP}")
    ledger_total = CreditsField(
        source="ledger_total_micros", help_text="The sum of every ledger entry; equal to the balance."
    )


class CreditSettingSerializer(StrictSerializer):
    is_metered = serializers.BooleanField(
        help_text="false turns credits off: runs stop paying from the balance, which is kept with the "
        "ledger; true turns them on again (the workspace must have been granted credits)."
    )


class CreditGrantSerializer(StrictSerializer):
    amount = credits_input('Credits to add, above 0 ("10", "2.5").')
    note = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class LedgerEntrySerializer(serializers.ModelSerializer):
    kind = serializers.ChoiceField(choices=LedgerKind.choices, read_only=True)
    amount = CreditsField(source="amount_micros", help_text=f"Positive adds, negative takes. {CREDITS_HELP}")
    actor = serializers.SerializerMethodField()

    class Meta:
        model = LedgerEntry
        fields = ["id", "kind", "amount", "run", "step", "actor", "note", "created_at"]
        read_only_fields = fields

    def get_actor(self, entry: LedgerEntry) -> str | None:
        return entry.actor.email if entry.actor is not None else None


class BudgetSerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    scope = serializers.ChoiceField(choices=BudgetScope.choices, read_only=True)
    user = serializers.IntegerField(source="user_id", read_only=True, allow_null=True)
    agent = serializers.UUIDField(source="agent_id", read_only=True, allow_null=True)
    monthly_limit = CreditsField(
        source="monthly_limit_micros",
        help_text=f"The most this member or agent may spend in a calendar month (UTC). {CREDITS_HELP}",
    )
    used_this_month = serializers.SerializerMethodField(
        help_text="Spent this month, with the holds of model calls in flight."
    )
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)

    def get_used_this_month(self, budget: Budget) -> str:
        return credits_text(self.context.get("used", {}).get(budget.pk, 0))


class BudgetCreateSerializer(StrictSerializer):
    scope = serializers.ChoiceField(choices=BudgetScope.choices)
    user = serializers.IntegerField(
        required=False, allow_null=True, help_text="The member (user id), for a member budget."
    )
    agent = serializers.UUIDField(
        required=False, allow_null=True, help_text="The agent, for an agent budget."
    )
    monthly_limit = credits_input("Credits per calendar month (UTC), above 0.")


class BudgetUpdateSerializer(StrictSerializer):
    monthly_limit = credits_input("Credits per calendar month (UTC), above 0.")
