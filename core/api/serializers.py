"""Serializer base that treats JSON input strictly: unknown fields and wrong types are errors."""

import copy
from typing import Any

from django.core.validators import RegexValidator
from rest_framework import serializers

STRICT_TYPES: dict[type[serializers.Field], tuple[type, ...]] = {
    serializers.CharField: (str,),
    serializers.ChoiceField: (str,),
    serializers.BooleanField: (bool,),
    serializers.IntegerField: (int,),
    serializers.FloatField: (int, float),
    serializers.DecimalField: (int, float, str),
    serializers.UUIDField: (str,),
    serializers.DateTimeField: (str,),
    serializers.DictField: (dict,),
    serializers.JSONField: (dict, list, str, int, float, bool),
    serializers.ListField: (list,),
}


def not_blank(message: str) -> RegexValidator:
    """Refuses text with nothing but whitespace; the schema states it as the pattern ``\\S``."""
    return RegexValidator(r"\S", message=message)


def _expected_types(field: serializers.Field) -> tuple[type, ...] | None:
    for field_class, types in STRICT_TYPES.items():
        if isinstance(field, field_class):
            return types
    if isinstance(field, serializers.PrimaryKeyRelatedField | serializers.SlugRelatedField):
        return (str,)
    return None


def _type_name(types: tuple[type, ...]) -> str:
    names = {
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        dict: "an object",
        list: "a list",
    }
    return " or ".join(names.get(kind, kind.__name__) for kind in types)


def _is_of_types(value: Any, types: tuple[type, ...]) -> bool:
    is_bool_for_number = isinstance(value, bool) and bool not in types
    return isinstance(value, types) and not is_bool_for_number


def _type_error(field: serializers.Field, value: Any) -> str | None:
    """What is wrong with the value's JSON type, down into a list's items and an object's values."""
    types = _expected_types(field)
    if types and not _is_of_types(value, types):
        return f"Must be {_type_name(types)}."
    children: list[Any] = []
    if isinstance(field, serializers.ListField) and isinstance(value, list):
        children = value
    elif isinstance(field, serializers.DictField) and isinstance(value, dict):
        children = list(value.values())
    child_types = (
        _expected_types(field.child)
        if isinstance(field, serializers.ListField | serializers.DictField)
        else None
    )
    if child_types and any(item is not None and not _is_of_types(item, child_types) for item in children):
        kind = "items" if isinstance(field, serializers.ListField) else "values"
        return f"Its {kind} must each be {_type_name(child_types)}."
    return None


class StrictSerializer(serializers.Serializer):
    """Rejects fields the endpoint does not know and values of the wrong JSON type."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        errors: dict[str, list[str]] = {}
        writable = {name for name, field in self.fields.items() if not field.read_only}
        for name in data:
            if name not in writable:
                errors[name] = ["Unknown field."]
        for name, value in data.items():
            field = self.fields.get(name)
            if field is None or field.read_only or value is None:
                continue
            error = _type_error(field, value)
            if error:
                errors[name] = [error]
        if errors:
            raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


class StrictModelSerializer(StrictSerializer, serializers.ModelSerializer):
    pass


class FieldsBuiltOnce:
    """For a read-only ModelSerializer whose fields depend on its class alone: the fields are
    built once per class and copied for each instance, the way DRF copies declared fields, and
    representing an object uses no copy at all.

    DRF builds a ModelSerializer's fields from the model's metadata for every instance; for a
    run that was most of the time a post's 202 answer took (0.45 ms of 0.64 on this project's
    machine). Copying the built fields still cost 0.21 of a run's 0.36 ms, so objects are
    represented by one serializer per class (``to_representation``). Not for serializers whose
    ``get_fields`` reads the request or the instance, nor whose fields or methods read ``context``.
    """

    def to_representation(self, instance: Any) -> dict[str, Any]:
        """DRF's own representation, by the bound fields of one serializer kept for the class:
        these fields keep nothing between calls, so one set serves every instance and thread."""
        representing: Any = type(self).__dict__.get("_representing_serializer")
        if representing is None:
            representing = type(self)()  # a mixin of a Serializer: what the call below needs
            type(self)._representing_serializer = representing  # type: ignore[attr-defined]  # a race makes two, alike
        representation: dict[str, Any] = serializers.Serializer.to_representation(representing, instance)
        return representation

    def get_fields(self) -> dict[str, serializers.Field]:
        built: dict[str, serializers.Field] | None = type(self).__dict__.get("_fields_built_once")
        if built is None:
            built = super().get_fields()  # type: ignore[misc]
            type(self)._fields_built_once = built  # type: ignore[attr-defined]  # a race builds it twice, alike
        return copy.deepcopy(built)
