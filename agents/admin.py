"""Agents in the admin, checked by the same rules as the app and the API (agents.services),
and saved and deleted through them, so each change is in the audit log."""

import copy
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db.models import QuerySet
from django.forms.models import construct_instance
from django.http import HttpRequest

from agents.models import Agent
from agents.services import EDITABLE_FIELDS, agent_check, agent_delete, agent_save_checked
from core.admin import TenantScopedAdmin


class AgentAdminForm(forms.ModelForm):
    class Meta:
        model = Agent
        fields = ["tenant", *EDITABLE_FIELDS, "created_by"]

    def clean(self) -> dict[str, Any]:
        cleaned_data: dict[str, Any] = super().clean() or {}
        if self.errors:
            return cleaned_data
        candidate = construct_instance(self, copy.copy(self.instance))
        try:
            agent_check(agent=candidate)
        except ValidationError as error:
            for field, messages in error.message_dict.items():
                known = field in self.fields and field != NON_FIELD_ERRORS
                self.add_error(field if known else None, messages)
        return cleaned_data


@admin.register(Agent)
class AgentAdmin(TenantScopedAdmin):
    form = AgentAdminForm
    list_display = ["name", "tenant", "model_provider", "model_name", "is_active", "updated_at"]
    list_filter = ["tenant", "model_provider", "is_active"]
    search_fields = ["name", "description", "tenant__slug"]
    readonly_fields = ["created_at", "updated_at"]

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        agent_save_checked(agent=obj)

    def delete_model(self, request: HttpRequest, obj: Agent) -> None:
        agent_delete(agent=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        for agent in queryset:
            agent_delete(agent=agent)
