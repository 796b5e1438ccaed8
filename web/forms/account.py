"""The account page's forms and the invitation's set-password form, on Django's own."""

from typing import Any

from django import forms
from django.contrib.auth.forms import PasswordChangeForm, SetPasswordForm
from django.contrib.auth.password_validation import password_validators_help_texts


def _plain_password_help(form: forms.Form) -> None:
    # Django's help text for new passwords is an HTML list; the field template shows one line.
    form.fields["new_password1"].help_text = " ".join(password_validators_help_texts())


class AccountPasswordForm(PasswordChangeForm):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["old_password"].label = "Current password"
        self.fields["old_password"].widget.attrs.pop("autofocus", None)
        _plain_password_help(self)


class InvitationPasswordForm(SetPasswordForm):
    """The invitee chooses the password of their new account."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["new_password1"].label = "Choose a password"
        self.fields["new_password2"].label = "Repeat the password"
        _plain_password_help(self)


class SignOutOthersForm(forms.Form):
    password = forms.CharField(
        label="Confirm with your password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
        help_text="Every other browser signed in as you is signed out; this one stays signed in.",
    )
