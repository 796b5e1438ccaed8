"""Memories in the admin: read, correct and archive.

Memories are created through the API, the agent's tools or extraction, where the
validation and the tenant checks live: here only what a memory says, and its status, change.
"""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from core.admin import TenantScopedAdmin
from memory.models import Memory, MemoryStatus
from memory.services import embedding_fields


@admin.register(Memory)
class MemoryAdmin(TenantScopedAdmin):
    list_display = [
        "content_preview",
        "agent",
        "type",
        "status",
        "source",
        "importance",
        "access_count",
        "updated_at",
    ]
    list_filter = ["status", "type", "source", "tenant"]
    search_fields = ["content", "agent__name", "tenant__slug"]
    list_select_related = ["agent"]
    fields = [
        "tenant",
        "agent",
        "subject_user",
        "type",
        "content",
        "importance",
        "status",
        "source",
        "source_session",
        "created_by",
        "reviewed_by",
        "reviewed_at",
        "access_count",
        "last_accessed_at",
        "embedding_model",
        "created_at",
        "updated_at",
    ]
    readonly_fields = [
        "tenant",
        "agent",
        "subject_user",
        "source",
        "source_session",
        "created_by",
        "reviewed_by",
        "reviewed_at",
        "access_count",
        "last_accessed_at",
        "embedding_model",
        "created_at",
        "updated_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="content")
    def content_preview(self, memory: Memory) -> str:
        return memory.content if len(memory.content) <= 80 else memory.content[:79] + "…"

    def save_model(self, request: HttpRequest, obj: Memory, form: Any, change: bool) -> None:
        if "content" in form.changed_data:
            for name, value in embedding_fields(obj.content).items():
                setattr(obj, name, value)
        if "status" in form.changed_data and form.initial.get("status") == MemoryStatus.SUGGESTED:
            obj.reviewed_by_id = request.user.pk
            obj.reviewed_at = timezone.now()
        super().save_model(request, obj, form, change)
