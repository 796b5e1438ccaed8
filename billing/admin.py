"""Prices (operators), credits, the ledger and budgets in the admin.

The price table is the platform's, so only superusers see it. Credits change only through
the grant service (a grant typed into the account's form) and the ledger is read-only.
"""

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from audit.services import audit_values
from billing.amounts import CREDITS_MAX_LENGTH, credits_input_validator
from billing.models import Budget, CreditAccount, LedgerEntry, ModelPrice
from billing.pricing import credits_text
from billing.services import (
    PRICE_FIELDS,
    budget_audit_values,
    budget_remove,
    budget_save,
    credits_grant,
    credits_to_micros,
    model_price_delete,
    model_price_save,
)
from core.admin import TenantScopedAdmin
from tenants.models import Role


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    list_display = tuple(PRICE_FIELDS)
    list_filter = ["provider"]
    search_fields = ["model"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def save_model(self, request: HttpRequest, obj: ModelPrice, form: Any, change: bool) -> None:
        stored = ModelPrice.objects.filter(pk=obj.pk).first() if change else None
        model_price_save(price=obj, before=audit_values(stored, PRICE_FIELDS) if stored else None)

    def delete_model(self, request: HttpRequest, obj: ModelPrice) -> None:
        model_price_delete(price=obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for price in queryset:
            model_price_delete(price=price)


def credits_form_field(**kwargs: Any) -> forms.CharField:
    """Credits typed in ASCII digits (``billing.amounts``); a DecimalField would take any script's."""
    return forms.CharField(
        max_length=CREDITS_MAX_LENGTH, validators=[credits_input_validator], strip=True, **kwargs
    )


def cleaned_micros(form: forms.BaseForm, field: str) -> int:
    """The form's credits field as micro-credits, its refusal shown on the field."""
    try:
        return credits_to_micros(form.cleaned_data[field], field=field)
    except ValidationError as error:
        raise ValidationError(error.message_dict[field]) from None


class CreditGrantForm(forms.ModelForm):
    grant = credits_form_field(help_text="Credits to add now.")
    note = forms.CharField(max_length=500, required=False)

    class Meta:
        model = CreditAccount
        fields = ["tenant"]

    def clean_grant(self) -> int:
        return cleaned_micros(self, "grant")


@admin.register(CreditAccount)
class CreditAccountAdmin(TenantScopedAdmin):
    form = CreditGrantForm
    view_role = Role.ADMIN
    write_role = Role.OWNER
    list_display = ["tenant", "balance", "created_at"]
    readonly_fields = ["balance", "created_at"]

    @admin.display(description="balance (credits)")
    def balance(self, account: CreditAccount) -> str:
        return credits_text(account.balance_micros)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [*self.readonly_fields, "tenant"] if obj is not None else self.readonly_fields

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: CreditAccount, form: Any, change: bool) -> None:
        credits_grant(
            tenant=obj.tenant,
            amount_micros=form.cleaned_data["grant"],
            granted_by=request.user,
            note=form.cleaned_data.get("note") or "granted in the admin",
        )
        obj.pk = CreditAccount.objects.get(tenant=obj.tenant).pk


@admin.register(LedgerEntry)
class LedgerEntryAdmin(TenantScopedAdmin):
    is_view_only = True
    view_role = Role.ADMIN
    list_display = ["id", "tenant", "kind", "amount", "run", "actor", "note", "created_at"]
    list_filter = ["kind"]
    raw_id_fields = ["run", "step"]

    @admin.display(description="amount (credits)")
    def amount(self, entry: LedgerEntry) -> str:
        return credits_text(entry.amount_micros)


class BudgetForm(forms.ModelForm):
    monthly_limit = credits_form_field()

    class Meta:
        model = Budget
        fields = ["tenant", "scope", "user", "agent"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.monthly_limit_micros is not None:
            self.fields["monthly_limit"].initial = credits_text(self.instance.monthly_limit_micros)

    def clean_monthly_limit(self) -> int:
        return cleaned_micros(self, "monthly_limit")

    def save(self, commit: bool = True) -> Budget:
        self.instance.monthly_limit_micros = self.cleaned_data["monthly_limit"]
        return super().save(commit=commit)


@admin.register(Budget)
class BudgetAdmin(TenantScopedAdmin):
    form = BudgetForm
    view_role = Role.ADMIN
    write_role = Role.OWNER
    list_display = ["tenant", "scope", "user", "agent", "limit", "updated_at"]
    list_filter = ["scope"]

    @admin.display(description="monthly limit (credits)")
    def limit(self, budget: Budget) -> str:
        return credits_text(budget.monthly_limit_micros)

    def save_model(self, request: HttpRequest, obj: Budget, form: Any, change: bool) -> None:
        stored = Budget.objects.select_related("user", "agent").filter(pk=obj.pk).first() if change else None
        budget_save(budget=obj, before=budget_audit_values(stored) if stored else None)

    def delete_model(self, request: HttpRequest, obj: Budget) -> None:
        budget_remove(budget=obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for budget in queryset:
            budget_remove(budget=budget)
