from django.urls import path

from web.views import (
    account,
    agents,
    audit,
    auth,
    chat,
    credits,
    dashboard,
    invitations,
    mcp,
    memories,
    provider_keys,
    runs,
    settings,
    tools,
)

app_name = "web"

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    path("login/", auth.SignInView.as_view(), name="login"),
    path("logout/", auth.SignOutView.as_view(), name="logout"),
    path("tenant/", auth.tenant_switch, name="tenant-switch"),
    path("invitations/<str:token>/", invitations.invitation_view, name="invitation"),
    # Account
    path("account/", account.account_page, name="account"),
    path("account/password/", account.account_password_view, name="account-password"),
    path(
        "account/sessions/sign-out-others/",
        account.account_sign_out_others_view,
        name="account-sign-out-others",
    ),
    path("account/api-keys/", account.account_api_key_create_view, name="account-api-key-create"),
    path(
        "account/api-keys/<str:api_key_id>/revoke/",
        account.account_api_key_revoke_view,
        name="account-api-key-revoke",
    ),
    # Agents
    path("agents/", agents.agent_list, name="agents"),
    path("agents/new/", agents.agent_create, name="agent-create"),
    path("agents/<str:agent_id>/", agents.agent_detail, name="agent-detail"),
    path("agents/<str:agent_id>/edit/", agents.agent_edit, name="agent-edit"),
    path("agents/<str:agent_id>/delete/", agents.agent_delete_view, name="agent-delete"),
    path("agents/<str:agent_id>/tools/", tools.agent_tools, name="agent-tools"),
    # Chat and runs
    path("chat/", chat.chat_home, name="chat"),
    path("chat/new/", chat.chat_new, name="chat-new"),
    path("chat/sessions/", chat.chat_sessions_fragment, name="chat-sessions"),
    path("chat/<str:session_id>/", chat.chat_session, name="chat-session"),
    path("chat/<str:session_id>/send/", chat.chat_send, name="chat-send"),
    path("chat/<str:session_id>/delete/", chat.chat_session_delete, name="chat-delete"),
    path(
        "chat/<str:session_id>/messages/<str:message_id>/",
        chat.chat_message_fragment,
        name="chat-message",
    ),
    path("runs/<str:run_id>/", runs.run_detail, name="run-detail"),
    path("runs/<str:run_id>/cancel/", runs.run_cancel_view, name="run-cancel"),
    path("runs/<str:run_id>/retry/", runs.run_retry_view, name="run-retry"),
    path("runs/<str:run_id>/approve/", runs.run_approve_view, name="run-approve"),
    # Tools and MCP servers
    path("tools/", tools.tool_list, name="tools"),
    path("tools/new/", tools.http_tool_create_view, name="tool-create"),
    path("tools/<str:tool_id>/edit/", tools.http_tool_edit, name="tool-edit"),
    path("tools/<str:tool_id>/delete/", tools.http_tool_delete, name="tool-delete"),
    path("mcp/", mcp.mcp_list, name="mcp"),
    path("mcp/new/", mcp.mcp_create, name="mcp-create"),
    path("mcp/<str:server_id>/", mcp.mcp_detail, name="mcp-detail"),
    path("mcp/<str:server_id>/edit/", mcp.mcp_edit, name="mcp-edit"),
    path("mcp/<str:server_id>/check/", mcp.mcp_check, name="mcp-check"),
    path("mcp/<str:server_id>/delete/", mcp.mcp_delete, name="mcp-delete"),
    # Memories
    path("memories/", memories.memory_list, name="memories"),
    path("memories/new/", memories.memory_create_view, name="memory-create"),
    path("memories/<str:memory_id>/edit/", memories.memory_edit, name="memory-edit"),
    path("memories/<str:memory_id>/approve/", memories.memory_approve_view, name="memory-approve"),
    path("memories/<str:memory_id>/reject/", memories.memory_reject_view, name="memory-reject"),
    path("memories/<str:memory_id>/delete/", memories.memory_delete_view, name="memory-delete"),
    # Settings
    path("settings/", settings.settings_page, name="settings"),
    path("settings/members/", settings.member_add_view, name="member-add"),
    path("settings/members/<str:membership_id>/role/", settings.member_role_view, name="member-role"),
    path("settings/members/<str:membership_id>/remove/", settings.member_remove_view, name="member-remove"),
    path(
        "settings/invitations/<str:invitation_id>/revoke/",
        settings.invitation_revoke_view,
        name="invitation-revoke",
    ),
    path("settings/api-keys/", settings.api_key_create_view, name="api-key-create"),
    path("settings/api-keys/<str:api_key_id>/revoke/", settings.api_key_revoke_view, name="api-key-revoke"),
    path("settings/limits/", settings.limits_view, name="limits"),
    # Audit log
    path("audit/", audit.audit_list, name="audit"),
    path("settings/provider-keys/", provider_keys.provider_key_save_view, name="provider-key-save"),
    path("settings/credits/grant/", credits.credits_grant_view, name="credits-grant"),
    path("settings/budgets/", credits.budget_create_view, name="budget-create"),
    path("settings/budgets/<str:budget_id>/limit/", credits.budget_update_view, name="budget-update"),
    path("settings/budgets/<str:budget_id>/delete/", credits.budget_delete_view, name="budget-delete"),
    path(
        "settings/provider-keys/<str:provider_key_id>/test/",
        provider_keys.provider_key_test_view,
        name="provider-key-test",
    ),
    path(
        "settings/provider-keys/<str:provider_key_id>/delete/",
        provider_keys.provider_key_delete_view,
        name="provider-key-delete",
    ),
]
