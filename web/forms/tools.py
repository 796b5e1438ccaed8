import json
from typing import Any

from django import forms

from tools.models import Tool, ToolPolicy, ToolProfile
from tools.services import HTTP_METHODS
from web.forms.common import join_names, join_pairs, parse_json_object, parse_pairs, split_names

EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class HttpToolForm(forms.Form):
    """An HTTP tool. Secret header values are write-only: blank keeps the stored ones."""

    name = forms.CharField(max_length=64, help_text="What the model calls it: letters, digits, _ and -.")
    description = forms.CharField(
        max_length=4000,
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Tell the model when to use the tool and what it returns.",
    )
    group = forms.CharField(max_length=64, required=False, initial="http")
    http_method = forms.ChoiceField(label="Method", choices=[(m, m) for m in HTTP_METHODS], initial="GET")
    url_template = forms.CharField(
        label="URL template",
        max_length=2000,
        help_text="Arguments fill {placeholders}, e.g. https://api.example.com/items/{id}.",
    )
    input_schema = forms.CharField(
        label="Arguments (JSON Schema)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "class": "mono", "spellcheck": "false"}),
    )
    headers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "mono", "placeholder": "Accept: application/json"}),
        help_text='One "Name: value" per line.',
    )
    secret_headers = forms.CharField(
        required=False,
        widget=forms.Textarea(
            attrs={
                "rows": 2,
                "class": "mono",
                "placeholder": "Authorization: Bearer …",
                "autocomplete": "off",
            }
        ),
        help_text="Stored encrypted and never shown again. Leave empty to keep the current ones.",
    )
    clear_secret_headers = forms.BooleanField(label="Remove the stored secret headers", required=False)
    timeout_seconds = forms.FloatField(label="Timeout (seconds)", initial=30.0)
    is_read_only = forms.BooleanField(label="Read-only (changes nothing)", required=False)
    requires_approval = forms.BooleanField(
        label="Calls need a person's approval",
        required=False,
        help_text="For every agent. To ask for one agent only, list the tool on that agent's "
        "tool policy page.",
    )
    owner_only = forms.BooleanField(label="Only in runs started by an owner", required=False)
    is_enabled = forms.BooleanField(label="Enabled", required=False, initial=True)

    @classmethod
    def initial_for(cls, tool: Tool) -> dict[str, Any]:
        return {
            "name": tool.name,
            "description": tool.description,
            "group": tool.group,
            "http_method": tool.http_method,
            "url_template": tool.url_template,
            "input_schema": json.dumps(tool.input_schema, indent=2),
            "headers": join_pairs(tool.headers, separator=":"),
            "timeout_seconds": tool.timeout_seconds,
            "is_read_only": tool.is_read_only,
            "requires_approval": tool.requires_approval,
            "owner_only": tool.owner_only,
            "is_enabled": tool.is_enabled,
        }

    def clean_input_schema(self) -> dict[str, Any]:
        return parse_json_object(self.cleaned_data["input_schema"], default=EMPTY_SCHEMA)

    def clean_headers(self) -> dict[str, str]:
        return parse_pairs(self.cleaned_data["headers"], separator=":", field_label="header")

    def clean_secret_headers(self) -> dict[str, str]:
        return parse_pairs(self.cleaned_data["secret_headers"], separator=":", field_label="header")

    def tool_fields(self) -> dict[str, Any]:
        data = dict(self.cleaned_data)
        secret_headers = data.pop("secret_headers")
        clear = data.pop("clear_secret_headers")
        data["group"] = data["group"].strip() or "http"
        if secret_headers or clear:
            data["secret_headers"] = secret_headers
        return data


class AgentPolicyForm(forms.Form):
    profile = forms.ChoiceField(label="Tool profile", choices=ToolProfile.choices)
    allow = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "mono"}),
        help_text="If set, only matching tools: names, group:<name> or * wildcards.",
    )
    deny = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "mono"}),
        help_text="Never these; deny wins over allow.",
    )
    require_approval = forms.CharField(
        label="Need approval",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "mono"}),
        help_text="Calls of matching tools wait for a person's decision.",
    )
    editable_arguments = forms.CharField(
        label="Arguments editable at approval",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "mono"}),
        help_text="Of the tools that need approval, those whose arguments the approver may edit first.",
    )
    max_calls_per_turn = forms.IntegerField(label="Max tool calls per model turn")
    max_calls_per_run = forms.IntegerField(label="Max tool calls per run")
    assigned_tools = forms.ModelMultipleChoiceField(
        label="Assigned tenant tools",
        queryset=Tool.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(self, *args: Any, assignable_tools: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["assigned_tools"]
        assert isinstance(field, forms.ModelMultipleChoiceField)
        field.queryset = assignable_tools

    @classmethod
    def initial_for(cls, policy: ToolPolicy, assigned: list[Any]) -> dict[str, Any]:
        return {
            "profile": policy.profile,
            "allow": join_names(policy.allow),
            "deny": join_names(policy.deny),
            "require_approval": join_names(policy.require_approval),
            "editable_arguments": join_names(policy.editable_arguments),
            "max_calls_per_turn": policy.max_calls_per_turn,
            "max_calls_per_run": policy.max_calls_per_run,
            "assigned_tools": assigned,
        }

    def policy_fields(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "profile": data["profile"],
            "allow": split_names(data["allow"]),
            "deny": split_names(data["deny"]),
            "require_approval": split_names(data["require_approval"]),
            "editable_arguments": split_names(data["editable_arguments"]),
            "max_calls_per_turn": data["max_calls_per_turn"],
            "max_calls_per_run": data["max_calls_per_run"],
        }
