"""Filters that refuse a value they cannot read (400) rather than ignore it and list everything."""

from typing import Any

from django import forms
from django.db import models
from django_filters import rest_framework as filters

BOOLEAN_VALUES = {"true": True, "True": True, "1": True, "false": False, "False": False, "0": False}


class StrictBooleanField(forms.NullBooleanField):
    """``true``/``false`` (or ``1``/``0``); empty means no filter; anything else is invalid."""

    def to_python(self, value: Any) -> bool | None:  # type: ignore[override]  # None: "no filter", as Django's
        if value is None or value == "":
            return None
        if isinstance(value, bool):
            return value
        if value not in BOOLEAN_VALUES:
            raise forms.ValidationError("Must be true or false.", code="invalid")
        return BOOLEAN_VALUES[value]


class StrictBooleanFilter(filters.BooleanFilter):
    field_class = StrictBooleanField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # A text input hands the raw value to the field; django-filter's boolean widgets read
        # what they do not know as "no filter".
        kwargs.setdefault("widget", forms.TextInput)
        super().__init__(*args, **kwargs)


class StrictFilterSet(filters.FilterSet):
    FILTER_DEFAULTS = {
        **filters.FilterSet.FILTER_DEFAULTS,
        models.BooleanField: {"filter_class": StrictBooleanFilter},
    }


class DjangoFilterBackend(filters.DjangoFilterBackend):
    """django-filter's backend; views' ``filterset_fields`` build a ``StrictFilterSet``."""

    filterset_base = StrictFilterSet
