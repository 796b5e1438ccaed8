from django import forms

from tenants.models import KeyProvider
from tenants.provider_keys.services import MAX_API_KEY_LENGTH, MAX_BASE_URL_LENGTH


class ProviderKeyForm(forms.Form):
    """Add a tenant's key for a provider, or replace the one it has."""

    provider = forms.ChoiceField(choices=KeyProvider.choices, initial=KeyProvider.ANTHROPIC)
    # A password input is never filled in again, so a form shown with errors does not echo the key.
    api_key = forms.CharField(
        label="API key",
        max_length=MAX_API_KEY_LENGTH,
        widget=forms.PasswordInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
        help_text="Stored encrypted and never shown again. A provider that has a key gets this one instead.",
    )
    base_url = forms.CharField(
        label="Base URL",
        required=False,
        max_length=MAX_BASE_URL_LENGTH,
        widget=forms.TextInput(attrs={"placeholder": "https://…", "spellcheck": "false"}),
        help_text="Optional: an OpenAI-compatible server or a proxy. Empty: the platform's endpoint.",
    )
