from datetime import date
from typing import Any

from django import forms


class AuditFilterForm(forms.Form):
    """The audit page's filters (a GET form): empty fields filter nothing."""

    actor = forms.CharField(
        label="Who", required=False, max_length=254, widget=forms.TextInput(attrs={"placeholder": "E-mail"})
    )
    object_type = forms.ChoiceField(label="Object", required=False)
    since = forms.DateField(label="From", required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(label="To", required=False, widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, *args: Any, object_types: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["object_type"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [("", "Any object"), *((name, name.replace("_", " ")) for name in object_types)]

    def clean(self) -> dict[str, Any]:
        cleaned_data: dict[str, Any] = super().clean() or {}
        since: date | None = cleaned_data.get("since")
        until: date | None = cleaned_data.get("until")
        if since is not None and until is not None and until < since:
            self.add_error("until", "Must be on or after the first day.")
        return cleaned_data
