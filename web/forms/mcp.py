from typing import Any

from django import forms
from django.conf import settings

from mcp_servers.models import McpServer, McpTransport
from web.forms.common import join_names, parse_pairs


class McpServerForm(forms.Form):
    """Credentials (token, headers, environment) are write-only: blank keeps what is stored."""

    name = forms.CharField(
        max_length=40, help_text='Tools appear to models as "<name>__<tool>": letters, digits, _ and -.'
    )
    transport = forms.ChoiceField(choices=McpTransport.choices, initial=McpTransport.STREAMABLE_HTTP)
    url = forms.CharField(
        label="URL",
        max_length=2000,
        required=False,
        help_text="For HTTP transports, e.g. https://mcp.example.com/mcp",
    )
    token = forms.CharField(
        label="Bearer token",
        required=False,
        max_length=4000,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text="Sent as Authorization: Bearer …",
    )
    clear_token = forms.BooleanField(label="Remove the stored token", required=False)
    headers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "mono", "autocomplete": "off"}),
        help_text='Extra headers, one "Name: value" per line; they replace the stored ones.',
    )
    clear_headers = forms.BooleanField(label="Remove the stored headers", required=False)
    command = forms.CharField(max_length=500, required=False, help_text="For stdio: the program to start.")
    args = forms.CharField(
        label="Arguments",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "mono"}),
        help_text="For stdio: one argument per line.",
    )
    env = forms.CharField(
        label="Environment",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "mono", "autocomplete": "off"}),
        help_text="For stdio: NAME=value lines; they replace the stored ones.",
    )
    clear_env = forms.BooleanField(label="Remove the stored environment", required=False)
    connect_timeout_seconds = forms.FloatField(label="Connect timeout (seconds)", initial=10.0)
    call_timeout_seconds = forms.FloatField(label="Tool call timeout (seconds)", initial=60.0)
    is_enabled = forms.BooleanField(label="Enabled", required=False, initial=True)

    def __init__(self, *args: Any, stored_transport: str = "", **kwargs: Any) -> None:
        """stdio is offered only where the installation allows it, or to keep a stored stdio server."""
        super().__init__(*args, **kwargs)
        self.offers_stdio = bool(settings.MCP_ALLOW_STDIO) or stored_transport == McpTransport.STDIO
        if not self.offers_stdio:
            transport = self.fields["transport"]
            assert isinstance(transport, forms.ChoiceField)
            transport.choices = [
                (value, label) for value, label in McpTransport.choices if value != McpTransport.STDIO
            ]

    @classmethod
    def initial_for(cls, server: McpServer) -> dict[str, Any]:
        return {
            "name": server.name,
            "transport": server.transport,
            "url": server.url,
            "command": server.command,
            "args": join_names(server.args) if isinstance(server.args, list) else "",
            "connect_timeout_seconds": server.connect_timeout_seconds,
            "call_timeout_seconds": server.call_timeout_seconds,
            "is_enabled": server.is_enabled,
        }

    def clean_headers(self) -> dict[str, str]:
        return parse_pairs(self.cleaned_data["headers"], separator=":", field_label="header")

    def clean_env(self) -> dict[str, str]:
        return parse_pairs(self.cleaned_data["env"], separator="=", field_label="variable")

    def server_fields(self, *, is_new: bool) -> dict[str, Any]:
        data = self.cleaned_data
        fields: dict[str, Any] = {
            "name": data["name"],
            "transport": data["transport"],
            "url": data["url"],
            "connect_timeout_seconds": data["connect_timeout_seconds"],
            "call_timeout_seconds": data["call_timeout_seconds"],
            "is_enabled": data["is_enabled"],
        }
        if data["transport"] == McpTransport.STDIO:
            fields["command"] = data["command"]
            fields["args"] = [line for line in (data["args"] or "").splitlines() if line.strip()]
        for name, clear in (("token", "clear_token"), ("headers", "clear_headers"), ("env", "clear_env")):
            if data[clear]:
                fields[name] = None
            elif data[name] or is_new:
                fields[name] = data[name] or None
        return fields
