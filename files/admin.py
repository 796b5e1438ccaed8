"""Files and knowledge bases in the admin: read, and delete through the services.

Uploads, extraction and knowledge base edits go through the API and the Knowledge page,
where the checks on bytes, sizes and agents live.
"""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from core.admin import TenantScopedAdmin, admin_actor_for_tenant
from files.models import KnowledgeBase, StoredFile
from files.services import file_delete, knowledge_base_delete

FILE_FIELDS = (
    "name",
    "tenant",
    "purpose",
    "session",
    "uploaded_by",
    "content_type",
    "size",
    "sha256",
    "status",
    "status_reason",
    "page_count",
    "character_count",
    "chunk_count",
    "width",
    "height",
    "created_at",
    "processed_at",
)


@admin.register(StoredFile)
class StoredFileAdmin(TenantScopedAdmin):
    list_display = ["name", "purpose", "content_type", "size", "status", "created_at"]
    list_filter = ["purpose", "status", "tenant"]
    search_fields = ["name", "tenant__slug"]
    fields = FILE_FIELDS
    readonly_fields = FILE_FIELDS
    # Deleting a session deletes its attachments.
    is_deleted_with_parent = True

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: StoredFile) -> None:
        file_delete(actor=admin_actor_for_tenant(request, obj.tenant), stored=obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for stored in queryset.select_related("tenant"):
            self.delete_model(request, stored)


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(TenantScopedAdmin):
    list_display = ["name", "tenant", "created_at", "updated_at"]
    list_filter = ["tenant"]
    search_fields = ["name", "description", "tenant__slug"]
    fields = ("name", "tenant", "description", "agents", "created_by", "created_at", "updated_at")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: KnowledgeBase) -> None:
        knowledge_base_delete(actor=admin_actor_for_tenant(request, obj.tenant), knowledge_base=obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for knowledge_base in queryset.select_related("tenant"):
            self.delete_model(request, knowledge_base)
