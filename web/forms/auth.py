from django import forms
from django.contrib.auth.forms import AuthenticationForm

from tenants.email_addresses import email_address_normalize
from tenants.sign_in_throttle import ThrottledAuthenticationForm


class EmailAuthenticationForm(ThrottledAuthenticationForm):
    """People sign in with their e-mail, which is also their username."""

    username = forms.CharField(
        label="Email",
        max_length=254,
        widget=forms.EmailInput(attrs={"autofocus": True, "autocomplete": "username", "inputmode": "email"}),
    )

    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "That email and password do not match an account. Check them and try again.",
    }

    def clean_username(self) -> str:
        # Spelled as accounts are kept (tenants.email_addresses), however it was typed.
        typed = str(self.cleaned_data["username"]).strip().lower()
        try:
            return email_address_normalize(typed)
        except ValueError:
            return typed
