from django import forms

from billing.amounts import CREDITS_MAX_LENGTH, credits_input_validator
from billing.models import BudgetScope


def credits_field(label: str, help_text: str) -> forms.CharField:
    return forms.CharField(
        label=label,
        max_length=CREDITS_MAX_LENGTH,
        validators=[credits_input_validator],
        help_text=help_text,
        widget=forms.TextInput(attrs={"inputmode": "decimal", "autocomplete": "off"}),
    )


class CreditSettingForm(forms.Form):
    """Turn credits on or off (the settings page's button sends the state it asks for)."""

    state = forms.ChoiceField(choices=[("on", "On"), ("off", "Off")])


class CreditGrantForm(forms.Form):
    amount = credits_field("Credits to add", "One credit buys one US dollar of model use at list prices.")
    note = forms.CharField(max_length=500, required=False, help_text="Why (kept in the ledger).")


class BudgetForm(forms.Form):
    """A monthly budget for one member or one agent."""

    scope = forms.ChoiceField(label="Budget for", choices=BudgetScope.choices)
    user: forms.ChoiceField = forms.ChoiceField(label="Member", required=False)
    agent: forms.ChoiceField = forms.ChoiceField(label="Agent", required=False)
    monthly_limit = credits_field("Monthly limit", "Credits per calendar month (UTC).")

    def __init__(
        self, *args: object, members: list[tuple[str, str]], agents: list[tuple[str, str]], **kwargs: object
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        for name, choices in (("user", members), ("agent", agents)):
            field = self.fields[name]
            if isinstance(field, forms.ChoiceField):
                field.choices = [("", "—"), *choices]


class BudgetLimitForm(forms.Form):
    monthly_limit = credits_field("Monthly limit", "Credits per calendar month (UTC).")
