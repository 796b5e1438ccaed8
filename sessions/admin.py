"""Sessions, runs, steps, run events, approvals and questions in the admin: view-only.

They are written by one store (``sessions.store``) through the one transition table, so
nobody edits them here, superusers included; deleting the agent they belong to still
removes them, as it does in the app. Approvals and questions are decided and answered on the
run (the chat, the API, the socket), where the run resumes.
"""

import json
from typing import Any

from django.contrib import admin

from core.admin import TenantScopedAdmin
from core.redaction import redact_secrets
from sessions.models import Run, RunEvent, Session, Step, ToolApproval, UserQuestion


class HistoryAdmin(TenantScopedAdmin):
    is_view_only = True
    is_deleted_with_parent = True
    show_full_result_count = False


@admin.register(Session)
class SessionAdmin(HistoryAdmin):
    list_display = ["__str__", "agent", "created_by", "last_event_seq", "updated_at"]
    list_filter = ["agent", "tenant"]
    search_fields = ["title", "agent__name"]
    list_select_related = ["agent", "created_by"]
    date_hierarchy = "updated_at"


@admin.register(Run)
class RunAdmin(HistoryAdmin):
    list_display = [
        "__str__",
        "agent",
        "session",
        "status",
        "stop_reason",
        "model_calls",
        "created_at",
        "finished_at",
    ]
    list_filter = ["status", "stop_reason", "agent", "tenant"]
    search_fields = ["title", "error", "agent__name", "session__title"]
    list_select_related = ["agent", "session"]
    exclude = ["lease_owner"]
    date_hierarchy = "created_at"


@admin.register(Step)
class StepAdmin(HistoryAdmin):
    tenant_path = "run__tenant"
    list_display = ["__str__", "run", "kind", "status", "tool_call_id", "started_at", "finished_at"]
    list_filter = ["kind", "status"]
    search_fields = ["tool_call_id", "error"]
    list_select_related = ["run"]
    ordering = ["-started_at"]


@admin.register(RunEvent)
class RunEventAdmin(HistoryAdmin):
    tenant_path = "session__tenant"
    list_display = ["__str__", "session", "run", "type", "created_at"]
    list_filter = ["type"]
    search_fields = ["type"]
    list_select_related = ["session", "run"]
    ordering = ["-id"]


def _masked_json(value: Any) -> str:
    """A tool call's arguments as JSON, fields named like secrets masked (stored as the tool runs them)."""
    return json.dumps(redact_secrets(value), indent=2, ensure_ascii=False) if value is not None else "-"


@admin.register(ToolApproval)
class ToolApprovalAdmin(HistoryAdmin):
    list_display = ["__str__", "run", "tool_name", "status", "decided_by", "created_at", "decided_at"]
    list_filter = ["status", "decision"]
    search_fields = ["tool_name", "tool_call_id", "reason"]
    list_select_related = ["run", "decided_by"]
    exclude = ["arguments", "edited_arguments"]
    readonly_fields = ["call_arguments", "approved_arguments"]
    ordering = ["-created_at"]

    @admin.display(description="arguments")
    def call_arguments(self, approval: ToolApproval) -> str:
        return _masked_json(approval.arguments)

    @admin.display(description="edited arguments")
    def approved_arguments(self, approval: ToolApproval) -> str:
        return _masked_json(approval.edited_arguments)


@admin.register(UserQuestion)
class UserQuestionAdmin(HistoryAdmin):
    list_display = ["__str__", "run", "status", "answered_by", "created_at", "answered_at"]
    list_filter = ["status"]
    search_fields = ["question", "answer", "tool_call_id"]
    list_select_related = ["run", "answered_by"]
    ordering = ["-created_at"]
