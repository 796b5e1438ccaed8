from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from tenants.email_addresses import email_address_clean
from tenants.limits import DEFAULT_LIMITS
from tenants.models import ApiKeyScope, Role

LIMIT_LABELS = {
    "max_agents": "Agents in this tenant",
    "run_timeout_seconds": "Default run timeout (seconds)",
    "messages_per_minute_per_user": "Messages per minute per person",
    "model_tokens_per_minute": "Model tokens per minute (tenant)",
    "active_runs_per_user": "Active runs per person",
}


class MemberAddForm(forms.Form):
    # Not an EmailField: its check runs before the address is normalised (a fullwidth spelling
    # is refused) and passes look-alike domains; tenants.email_addresses does both.
    email = forms.CharField(
        max_length=254,
        widget=forms.EmailInput,
        help_text="They get a link that works once to join with this role.",
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def clean_email(self) -> str:
        try:
            return email_address_clean(self.cleaned_data["email"])
        except ValidationError as error:
            raise ValidationError(error.message_dict["email"]) from error


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=100)
    scope = forms.ChoiceField(choices=ApiKeyScope.choices, initial=ApiKeyScope.WRITE)
    expires_in_days = forms.IntegerField(
        label="Expires in (days)", required=False, min_value=1, max_value=3650, help_text="Empty: never."
    )


class TenantLimitsForm(forms.Form):
    def __init__(self, *args: Any, current: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, default in DEFAULT_LIMITS.items():
            self.fields[name] = forms.IntegerField(
                label=LIMIT_LABELS.get(name, name),
                initial=current.get(name, default),
                help_text=f"Default {default:,}.",
            )
