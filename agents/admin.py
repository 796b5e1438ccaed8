from django.contrib import admin

from agents.models import Agent
from core.admin import TenantScopedAdmin


@admin.register(Agent)
class AgentAdmin(TenantScopedAdmin):
    list_display = ["name", "tenant", "model_provider", "model_name", "is_active", "updated_at"]
    list_filter = ["tenant", "model_provider", "is_active"]
    search_fields = ["name", "description", "tenant__slug"]
    readonly_fields = ["created_at", "updated_at"]
